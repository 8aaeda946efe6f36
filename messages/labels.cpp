// The one rule for a machine label (messages/labels.hpp).

#include "messages/labels.hpp"

#include <algorithm>
#include <cctype>

#include "messages/error.hpp"

namespace astraeus {

namespace {

/// Whether `s` is 1..`max` characters, each a letter, a digit, '-', '_',
/// '.', or '/' where `slash` allows it.
bool well_formed(const std::string& s, size_t max, bool slash) {
  return !s.empty() && s.size() <= max
         && std::all_of(s.begin(), s.end(), [slash](unsigned char c) {
              return std::isalnum(c) || c == '-' || c == '_' || c == '.' || (slash && c == '/');
            });
}

} // namespace

caf::error check_label(const std::string& key, const std::string& value) {
  if (!well_formed(key, max_label_key, true))
    return caf::make_error(ec::invalid_request,
                           "label key '" + key
                             + "': use letters, digits, '-', '_', '.' and '/' (at most 253)");
  if (!well_formed(value, max_label_value, false))
    return caf::make_error(ec::invalid_request,
                           "label " + key + "='" + value
                             + "': use 1-63 letters, digits, '-', '_' and '.'");
  return caf::none;
}

caf::error check_api_token_name(const std::string& name) {
  if (well_formed(name, max_label_value, false))
    return caf::none;
  return caf::make_error(ec::invalid_request,
                         "API token name '" + name + "': 1-63 letters, digits, '-', '_' or '.'");
}

caf::error check_workspace_name(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 63
            && std::isalnum(static_cast<unsigned char>(name[0]))
            && std::all_of(name.begin(), name.end(), [](char c) {
                 return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
               });
  if (ok)
    return {};
  return caf::make_error(ec::invalid_request,
                         "workspace name '" + name
                           + "': use 1-63 letters, digits and '-', starting with a letter "
                             "or digit");
}

std::string normal_grant_path(const std::string& path) {
  if (path.empty() || path.front() != '/' || path.size() > 4096)
    return {};
  std::string out;
  size_t i = 0;
  while (i < path.size()) {
    auto next = path.find('/', i);
    if (next == std::string::npos)
      next = path.size();
    std::string part = path.substr(i, next - i);
    i = next + 1;
    if (part.empty() || part == ".")
      continue;
    if (part == "..")
      return {};
    for (char c : part)
      if (static_cast<unsigned char>(c) < 0x20)
        return {};
    out += "/" + part;
  }
  return out;
}

std::string one_line_text(std::string_view text, size_t most_bytes) {
  size_t cut = std::min(text.size(), most_bytes);
  while (cut > 0 && cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
    --cut;  // not inside a UTF-8 character
  std::string out;
  out.reserve(cut + 3);
  for (unsigned char c : text.substr(0, cut)) {
    if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
      continue;
    }
    static const char hex[] = "0123456789abcdef";
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return cut < text.size() ? out + "..." : out;
}

} // namespace astraeus
