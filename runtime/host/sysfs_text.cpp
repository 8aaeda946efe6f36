#include "runtime/host/sysfs_text.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace astraeus {

namespace {

// The whole of `text` as an integer of type T in `base`; no trimming.
template <typename T>
std::optional<T> whole_integer(std::string_view text, int base = 10) {
  T value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size())
    return std::nullopt;
  return value;
}

} // namespace

std::string_view trim(std::string_view text) {
  auto first = text.find_first_not_of(text_whitespace);
  if (first == std::string_view::npos)
    return {};
  auto last = text.find_last_not_of(text_whitespace);
  return text.substr(first, last - first + 1);
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

bool all_digits(std::string_view text) {
  return !text.empty()
         && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string ascii_lower(std::string_view text) {
  std::string out{text};
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  while (true) {
    auto end = text.find(sep);
    parts.push_back(text.substr(0, end));
    if (end == std::string_view::npos)
      break;
    text.remove_prefix(end + 1);
  }
  return parts;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  auto lines = split(text, '\n');
  if (lines.back().empty())
    lines.pop_back();  // after a final '\n', or the empty text
  return lines;
}

std::vector<std::string_view> nonblank_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  for (auto line : split_lines(text)) {
    line = trim(line);
    if (!line.empty())
      lines.push_back(line);
  }
  return lines;
}

std::optional<uint64_t> parse_u64(std::string_view text) {
  return whole_integer<uint64_t>(trim(text));
}

std::optional<int64_t> parse_i64(std::string_view text) {
  return whole_integer<int64_t>(trim(text));
}

std::optional<uint32_t> parse_hex_u32(std::string_view text) {
  text = trim(text);
  if (starts_with(text, "0x") || starts_with(text, "0X"))
    text.remove_prefix(2);
  return whole_integer<uint32_t>(text, 16);
}

std::optional<double> parse_double(std::string_view text) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value,
                                   std::chars_format::general);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()
      || !std::isfinite(value))
    return std::nullopt;
  return value;
}

small_file read_small_file(const std::string& path, std::size_t max_bytes) {
  small_file result;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    result.error = errno;
    return result;
  }
  result.opened = true;
  char buf[8192];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      result.error = errno;
      result.text.clear();
      break;
    }
    if (n == 0)
      break;
    result.text.append(buf, static_cast<std::size_t>(n));
    if (result.text.size() > max_bytes) {
      result.too_large = true;
      result.text.resize(max_bytes);
      break;
    }
  }
  ::close(fd);
  return result;
}

std::string root_prefix(std::string_view root) {
  while (!root.empty() && root.back() == '/')
    root.remove_suffix(1);
  return std::string{root};
}

std::string to_valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    auto byte = static_cast<unsigned char>(text[i]);
    // Length and smallest code point of the sequence this byte starts.
    size_t length = byte < 0x80 ? 1 : (byte & 0xe0) == 0xc0 ? 2 : (byte & 0xf0) == 0xe0 ? 3
                                    : (byte & 0xf8) == 0xf0 ? 4 : 0;
    uint32_t code = length == 1 ? byte : length == 2 ? byte & 0x1f : length == 3 ? byte & 0x0f
                                                                              : byte & 0x07;
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xc0) == 0x80;
      code = (code << 6) | (next & 0x3f);
    }
    // Reject overlong forms, surrogates and code points past U+10FFFF.
    static constexpr uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (valid && (code < smallest[length] || (code >= 0xd800 && code <= 0xdfff) || code > 0x10ffff))
      valid = false;
    if (valid) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD, then resynchronise on the next byte
      ++i;
    }
  }
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string show_number(double x) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, x);
    if (std::strchr(buf, 'e') == nullptr && std::strtod(buf, nullptr) == x)
      return buf;
  }
  std::snprintf(buf, sizeof(buf), "%.17g", x);
  return buf;
}

} // namespace astraeus
