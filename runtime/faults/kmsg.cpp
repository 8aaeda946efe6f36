#include "runtime/faults/kmsg.hpp"
#include "runtime/faults/kmsg_assembler.hpp"
#include "runtime/host/sysfs_text.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <charconv>
#include <climits>
#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

// Deliberately free of the rest of the runtime (no CAF, no protobuf, no
// logging) so the fuzz target builds this file alone.

namespace astraeus {

namespace {

constexpr size_t max_text_bytes = 512;
constexpr size_t max_line_bytes = 64 * 1024;
constexpr size_t read_buffer_bytes = 16 * 1024;  // > the kernel's largest record (8 KiB)
constexpr int first_retry_ms = 1000;
constexpr int last_retry_ms = 30000;
/// How often a regular file's end is checked for growth.
constexpr int follow_check_ms = 100;

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_alnum(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

char to_lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string_view trim_left(std::string_view text) {
  auto first = text.find_first_not_of(text_whitespace);
  return first == std::string_view::npos ? std::string_view{} : text.substr(first);
}

bool starts_with_nocase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size())
    return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (to_lower(text[i]) != to_lower(prefix[i]))
      return false;
  return true;
}

bool contains_nocase(std::string_view text, std::string_view part) {
  for (size_t i = 0; i + part.size() <= text.size(); ++i)
    if (starts_with_nocase(text.substr(i), part))
      return true;
  return false;
}

/// The whole of `text` as a decimal number; nullopt when empty, not all
/// digits, or too large for T.
template <typename T>
std::optional<T> to_number(std::string_view text) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), is_digit))
    return std::nullopt;
  T value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size())
    return std::nullopt;
  return value;
}

/// Length of the run of decimal digits at the start of `text`.
size_t digit_run(std::string_view text) {
  size_t n = 0;
  while (n < text.size() && is_digit(text[n]))
    ++n;
  return n;
}

bool is_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/// 1-12 for "Jan".."Dec" (as logged: the first letter upper case); 0 for
/// anything else.
int month_number(std::string_view name) {
  static constexpr std::string_view names[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                               "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  for (int i = 0; i < 12; ++i)
    if (name == names[i])
      return i + 1;
  return 0;
}

/// Takes a decimal number of `min_digits` to `max_digits` digits from the
/// start of `text` into `out`; false (nothing taken) when there is none.
bool take_number(std::string_view& text, size_t min_digits, size_t max_digits, int& out) {
  size_t n = digit_run(text.substr(0, max_digits + 1));
  if (n < min_digits || n > max_digits)
    return false;
  out = 0;
  for (size_t i = 0; i < n; ++i)
    out = out * 10 + (text[i] - '0');
  text.remove_prefix(n);
  return true;
}

/// Takes `c` from the start of `text`; false when it is not there.
bool take_char(std::string_view& text, char c) {
  if (text.empty() || text[0] != c)
    return false;
  text.remove_prefix(1);
  return true;
}

/// Takes "hh:mm:ss" from the start of `text` into `t`.
bool take_clock(std::string_view& text, log_wall_time& t) {
  return take_number(text, 2, 2, t.hour) && take_char(text, ':')
         && take_number(text, 2, 2, t.minute) && take_char(text, ':')
         && take_number(text, 2, 2, t.second);
}

/// Takes "Dec  6 22:00:00" or "Dec 06 22:00:00" from the start of `text`.
std::optional<log_wall_time> take_month_day_clock(std::string_view& text) {
  log_wall_time t;
  t.month = month_number(text.substr(0, 3));
  if (t.month == 0 || text.size() < 4 || text[3] != ' ')
    return std::nullopt;
  text.remove_prefix(text.size() > 4 && text[4] == ' ' ? 5 : 4);
  if (!take_number(text, 1, 2, t.day) || !take_char(text, ' ') || !take_clock(text, t))
    return std::nullopt;
  return t;
}

/// "2026-12-06T22:00:00[.123456](Z|+01:00)" at the start of `text`.
std::optional<log_wall_time> rfc3339_time(std::string_view text) {
  log_wall_time t;
  if (!take_number(text, 4, 4, t.year) || !take_char(text, '-')
      || !take_number(text, 2, 2, t.month) || !take_char(text, '-')
      || !take_number(text, 2, 2, t.day) || !take_char(text, 'T') || !take_clock(text, t))
    return std::nullopt;
  if (take_char(text, '.')) {
    size_t n = digit_run(text);
    if (n == 0)
      return std::nullopt;
    text.remove_prefix(n);
  }
  if (take_char(text, 'Z')) {
    t.utc_offset_s = 0;
    return t;
  }
  if (text.empty() || (text[0] != '+' && text[0] != '-'))
    return std::nullopt;
  const int sign = text[0] == '-' ? -1 : 1;
  text.remove_prefix(1);
  int hours = 0, minutes = 0;
  if (!take_number(text, 2, 2, hours) || !take_char(text, ':') || !take_number(text, 2, 2, minutes)
      || hours > 23 || minutes > 59)
    return std::nullopt;
  t.utc_offset_s = sign * (hours * 3600 + minutes * 60);
  return t;
}

/// The time of a `dmesg -T` stamp's inside, "Sun Dec  6 22:00:00 2026".
std::optional<log_wall_time> human_stamp_time(std::string_view inside) {
  if (inside.size() < 4)
    return std::nullopt;
  inside.remove_prefix(4);  // the weekday
  auto t = take_month_day_clock(inside);
  if (!t || !take_char(inside, ' ') || !take_number(inside, 4, 4, t->year) || !inside.empty())
    return std::nullopt;
  return t;
}

/// The plain dmesg line inside a line of a syslog file: "Dec  6 22:00:00
/// host kernel: [  700.123456] NVRM: ..." (/var/log/kern.log, rsyslog's
/// traditional format; `journalctl -k`: "Dec 06 ..."), or
/// "2026-12-06T22:00:00.123456+00:00 host kernel: ..." (rsyslog's RFC 3339
/// one): what follows the first " kernel: " in the first 160 bytes, when the
/// line starts with a month's three letters and a space, or with a date's
/// four digits and '-'. Any other line as it is. The prefix's time, where
/// it reads as one, goes to `wall`.
std::string_view without_syslog_prefix(std::string_view line,
                                       std::optional<log_wall_time>& wall) {
  auto at = line.substr(0, 160).find(" kernel: ");
  if (at == std::string_view::npos)
    return line;
  bool month = line.size() > 4 && is_letter(line[0]) && is_letter(line[1])
               && is_letter(line[2]) && line[3] == ' ';
  bool date = digit_run(line) == 4 && line.size() > 4 && line[4] == '-';
  if (!month && !date)
    return line;
  if (month) {
    auto prefix = line.substr(0, at);
    wall = take_month_day_clock(prefix);
  } else {
    wall = rfc3339_time(line.substr(0, at));
  }
  return line.substr(at + 9);
}

/// The length of a `dmesg -T` timestamp at the start of `line` ("[Sun Dec  6
/// 22:00:00 2026]", its ']' included; 0 when it is not one): a weekday and a
/// month of three letters, and a time with two ':', within 40 bytes. A
/// bracket that is not one ("[drm:amdgpu_job_timedout [amdgpu]]") is 0.
size_t human_stamp_length(std::string_view line) {
  if (line.size() < 10 || line[0] != '[')
    return 0;
  auto close = line.substr(0, 40).find(']');
  if (close == std::string_view::npos)
    return 0;
  auto inside = line.substr(1, close - 1);
  if (inside.size() < 19 || !is_letter(inside[0]) || !is_letter(inside[1])
      || !is_letter(inside[2]) || inside[3] != ' ' || !is_letter(inside[4])
      || !is_letter(inside[5]) || !is_letter(inside[6]) || inside[7] != ' ')
    return 0;
  return std::count(inside.begin(), inside.end(), ':') == 2 ? close + 1 : 0;
}


/// The event text: trimmed, valid UTF-8, at most max_text_bytes, cut at a
/// character boundary.
std::string event_text(std::string_view message) {
  std::string text = to_valid_utf8(trim(message));
  if (text.size() > max_text_bytes) {
    size_t cut = max_text_bytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80)
      --cut;
    text.resize(cut);
    text.resize(trim(text).size());  // nothing to trim on the left: it was trimmed
  }
  return text;
}

/// A PCI address at the start of `text`: "dddd:bb:dd[.f]" (domain 4 to 8
/// hex digits, bus 2, device 2 and at most 0x1f, function 0 to 7), any
/// case. On success returns the address as "dddd:bb:dd.f" in lower case
/// (function 0 when absent) and sets `*used` to the characters consumed.
std::optional<std::string> parse_pci(std::string_view text, bool need_function, size_t* used) {
  size_t i = 0;
  while (i < text.size() && i <= 8 && hex_value(text[i]) >= 0)
    ++i;
  size_t domain_digits = i;
  if (domain_digits < 4 || domain_digits > 8)
    return std::nullopt;
  auto hex2 = [&](size_t at) {
    return at + 2 <= text.size() && hex_value(text[at]) >= 0 && hex_value(text[at + 1]) >= 0;
  };
  if (i >= text.size() || text[i] != ':' || !hex2(i + 1))
    return std::nullopt;
  size_t bus = i + 1;
  i = bus + 2;
  if (i >= text.size() || text[i] != ':' || !hex2(i + 1))
    return std::nullopt;
  size_t device = i + 1;
  i = device + 2;
  if (hex_value(text[device]) * 16 + hex_value(text[device + 1]) > 0x1f)
    return std::nullopt;
  // A third hex digit would make this something else ("0000:3b:001").
  if (i < text.size() && hex_value(text[i]) >= 0)
    return std::nullopt;
  char function = '0';
  if (i + 1 < text.size() && text[i] == '.' && text[i + 1] >= '0' && text[i + 1] <= '7'
      && (i + 2 >= text.size() || !is_alnum(text[i + 2]))) {
    function = text[i + 1];
    i += 2;
  } else if (need_function) {
    return std::nullopt;
  }
  std::string out;
  out.reserve(domain_digits + 10);
  for (size_t k = 0; k < domain_digits; ++k)
    out += to_lower(text[k]);
  out += ':';
  out += to_lower(text[bus]);
  out += to_lower(text[bus + 1]);
  out += ':';
  out += to_lower(text[device]);
  out += to_lower(text[device + 1]);
  out += '.';
  out += function;
  *used = i;
  return out;
}

/// The first PCI address in free text: a full "dddd:bb:dd.f", or
/// "PCI:dddd:bb:dd" as NVRM writes it; "" when there is none.
std::string find_pci(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (i > 0 && is_alnum(text[i - 1]))
      continue;
    bool after_pci_tag = i >= 4 && starts_with_nocase(text.substr(i - 4), "PCI:");
    size_t used = 0;
    if (auto pci = parse_pci(text.substr(i), !after_pci_tag, &used))
      if (i + used >= text.size() || !is_alnum(text[i + used]))
        return *pci;
  }
  return {};
}

/// "NVRM: Xid (PCI:0000:3b:00): 79, ..." after "NVRM: ": the event, or
/// nullopt when the line does not parse.
std::optional<gpu_event> parse_xid(std::string_view body) {
  body.remove_prefix(3);  // "Xid"
  body = trim_left(body);
  if (body.empty() || body.front() != '(')
    return std::nullopt;
  body.remove_prefix(1);
  if (starts_with_nocase(body, "PCI:"))
    body.remove_prefix(4);
  size_t used = 0;
  auto pci = parse_pci(body, false, &used);
  if (!pci)
    return std::nullopt;
  body.remove_prefix(used);
  if (!starts_with(body, "):"))
    return std::nullopt;
  body = trim_left(body.substr(2));
  size_t digits = digit_run(body);
  auto number = to_number<uint32_t>(body.substr(0, digits));
  if (!number)
    return std::nullopt;
  if (digits < body.size() && body[digits] != ',' && body[digits] != ' ' && body[digits] != '\t')
    return std::nullopt;
  gpu_event event;
  event.kind = gpu_event_kind::xid;
  event.pci_address = std::move(*pci);
  event.xid = *number;
  return event;
}

/// A "[drm:function [module]] " tag at the start of `text` (the module part
/// is absent when the driver is built in): its length including the
/// trailing space, or 0 when there is none.
size_t drm_tag_length(std::string_view text) {
  if (!starts_with(text, "[drm:"))
    return 0;
  auto end = text.find("] ");
  if (end == std::string_view::npos) {
    // The tag alone, nothing after it.
    return text.back() == ']' ? text.size() : 0;
  }
  return end + 2;
}

/// What an amdgpu message says after its prefixes ("amdgpu: ", "[drm] ",
/// "[drm:...] "); nullopt when it is not an event.
std::optional<gpu_event_kind> amd_kind(std::string_view body) {
  for (int round = 0; round < 4; ++round) {
    body = trim_left(body);
    if (starts_with(body, "amdgpu: "))
      body.remove_prefix(8);
    else if (starts_with(body, "[drm] "))
      body.remove_prefix(6);
    else if (size_t tag = drm_tag_length(body))
      body.remove_prefix(tag);
    else
      break;
  }
  body = trim_left(body);
  if (starts_with(body, "*ERROR* "))
    body.remove_prefix(8);  // DRM_ERROR's mark, before any of the messages below
  if (starts_with(body, "GPU reset begin"))
    return gpu_event_kind::amd_reset_begin;
  if (starts_with(body, "VRAM is lost"))
    return gpu_event_kind::amd_vram_lost;
  if (contains_nocase(body, "uncorrectable hardware error") || contains_nocase(body, "fatal error"))
    return gpu_event_kind::amd_ras_fatal;
  if (starts_with(body, "ASIC reset failed"))
    return gpu_event_kind::amd_reset_failed;
  if (starts_with(body, "GPU reset")) {
    body.remove_prefix(9);
    if (starts_with(body, "(")) {
      size_t digits = digit_run(body.substr(1));
      if (digits == 0 || body.size() < digits + 2 || body[digits + 1] != ')')
        return std::nullopt;
      body.remove_prefix(digits + 2);
    }
    if (starts_with(body, " succeeded"))
      return gpu_event_kind::amd_reset_succeeded;
    if (starts_with(body, " failed"))
      return gpu_event_kind::amd_reset_failed;
    return std::nullopt;
  }
  // "*ERROR* ring gfx timeout, ..." (DRM_ERROR, drm_err); "ring gfx
  // timeout, ..." (dev_err, since Linux 6.10).
  if (starts_with(body, "*ERROR* "))
    body.remove_prefix(8);
  if (starts_with(body, "ring ")) {
    body.remove_prefix(5);
    auto name_end = body.find(' ');
    if (name_end == 0 || name_end == std::string_view::npos)
      return std::nullopt;
    if (starts_with(body.substr(name_end), " timeout"))
      return gpu_event_kind::amd_ring_timeout;
  }
  return std::nullopt;
}

} // namespace

std::optional<int64_t> resolve_wall_time(const log_wall_time& t, int64_t now_unix_ms) {
  if (t.month < 1 || t.month > 12 || t.day < 1 || t.day > 31 || t.hour < 0 || t.hour > 23
      || t.minute < 0 || t.minute > 59 || t.second < 0 || t.second > 60)
    return std::nullopt;
  auto in_year = [&t](int year) -> std::optional<int64_t> {
    std::tm tm{};
    tm.tm_year = year - 1900;
    tm.tm_mon = t.month - 1;
    tm.tm_mday = t.day;
    tm.tm_hour = t.hour;
    tm.tm_min = t.minute;
    tm.tm_sec = std::min(t.second, 59);
    time_t seconds = 0;
    if (t.utc_offset_s) {
      seconds = ::timegm(&tm) - *t.utc_offset_s;
    } else {
      tm.tm_isdst = -1;
      seconds = ::mktime(&tm);
    }
    // A date that does not exist comes back moved (February 30th: March 2nd).
    if (tm.tm_mday != t.day || tm.tm_mon != t.month - 1)
      return std::nullopt;
    return static_cast<int64_t>(seconds) * 1000;
  };
  if (t.year != 0)
    return in_year(t.year);
  // The year of now, in the line's zone; the year before when that puts
  // the line more than a day ahead.
  time_t now_s = static_cast<time_t>(now_unix_ms / 1000);
  std::tm now_tm{};
  if (t.utc_offset_s) {
    time_t shifted = now_s + *t.utc_offset_s;
    ::gmtime_r(&shifted, &now_tm);
  } else {
    ::localtime_r(&now_s, &now_tm);
  }
  const int year = now_tm.tm_year + 1900;
  constexpr int64_t day_ms = 24LL * 3600 * 1000;
  auto this_year = in_year(year);
  if (this_year && *this_year <= now_unix_ms + day_ms)
    return this_year;
  return in_year(year - 1);
}

std::optional<kmsg_record> parse_kmsg_line(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
    line.remove_suffix(1);
  if (line.empty() || line.front() == ' ' || line.front() == '\t')
    return std::nullopt;
  if (trim(line).empty())
    return std::nullopt;

  kmsg_record record;
  size_t lead = digit_run(line);
  if (lead > 0 && lead < line.size() && line[lead] == ',') {
    // "prio,seq,timestamp,flags[,more];message"
    auto semicolon = line.find(';');
    if (semicolon == std::string_view::npos)
      return std::nullopt;
    std::string_view header = line.substr(0, semicolon);
    std::string_view fields[3];
    for (auto& field : fields) {
      auto comma = header.find(',');
      if (comma == std::string_view::npos)
        return std::nullopt;  // fewer than four fields: no flags
      field = header.substr(0, comma);
      header.remove_prefix(comma + 1);
    }
    auto priority = to_number<uint32_t>(fields[0]);
    auto sequence = to_number<uint64_t>(fields[1]);
    auto timestamp = to_number<uint64_t>(fields[2]);
    if (!priority || *priority > static_cast<uint32_t>(INT_MAX) || !sequence || !timestamp)
      return std::nullopt;
    record.priority = static_cast<int>(*priority);
    record.sequence = *sequence;
    record.timestamp_us = *timestamp;
    record.message = std::string(line.substr(semicolon + 1));
    record.indented = !record.message.empty()
                      && (record.message.front() == ' ' || record.message.front() == '\t');
    return record;
  }

  // A plain line: "[<prio>][[ seconds.micros]][[ T123]] message", maybe
  // inside a syslog file's line, maybe with dmesg -T's human time instead.
  std::string_view rest = without_syslog_prefix(line, record.wall);
  if (auto human = human_stamp_length(rest)) {
    record.wall = human_stamp_time(rest.substr(1, human - 2));
    rest = trim_left(rest.substr(human));
  }
  if (rest.size() > 1 && rest[0] == '<' && is_digit(rest[1])) {
    size_t digits = digit_run(rest.substr(1));
    auto priority = to_number<uint32_t>(rest.substr(1, digits));
    if (!priority || *priority > static_cast<uint32_t>(INT_MAX) || digits + 1 >= rest.size()
        || rest[digits + 1] != '>')
      return std::nullopt;
    record.priority = static_cast<int>(*priority);
    rest.remove_prefix(digits + 2);
  }
  if (!rest.empty() && rest[0] == '[') {
    auto inside = trim_left(rest.substr(1));
    if (!inside.empty() && is_digit(inside[0])) {
      size_t whole = digit_run(inside);
      auto seconds = to_number<uint64_t>(inside.substr(0, whole));
      if (!seconds || whole >= inside.size() || inside[whole] != '.')
        return std::nullopt;
      auto after_dot = inside.substr(whole + 1);
      size_t fraction = digit_run(after_dot);
      if (fraction == 0 || fraction > 9 || fraction >= after_dot.size() || after_dot[fraction] != ']')
        return std::nullopt;
      uint64_t micros = 0;
      for (size_t k = 0; k < 6; ++k)
        micros = micros * 10 + (k < fraction ? static_cast<uint64_t>(after_dot[k] - '0') : 0);
      if (*seconds > (UINT64_MAX - micros) / 1000000u)
        return std::nullopt;
      record.timestamp_us = *seconds * 1000000u + micros;
      rest = after_dot.substr(fraction + 1);
      // An optional caller id: "[ T1234]" or "[  C3]".
      auto caller = trim_left(rest);
      if (!caller.empty() && caller[0] == '[') {
        auto id = trim_left(caller.substr(1));
        if (!id.empty() && (id[0] == 'T' || id[0] == 'C')) {
          size_t n = digit_run(id.substr(1));
          if (n > 0 && n + 1 < id.size() && id[n + 1] == ']')
            rest = id.substr(n + 2);
        }
      }
      // One space separates the timestamp from the message; more indent it.
      record.indented = rest.size() > 1 && (rest[0] == ' ' || rest[0] == '\t')
                        && (rest[1] == ' ' || rest[1] == '\t');
      rest = trim_left(rest);
    }
  }
  record.message = std::string(rest);
  return record;
}

std::optional<gpu_event> parse_gpu_event(const kmsg_record& record) {
  std::string_view message = trim(record.message);
  std::optional<gpu_event> event;
  if (starts_with(message, "NVRM:")) {
    auto body = trim_left(message.substr(5));
    if (starts_with(body, "Xid ") || starts_with(body, "Xid(")) {
      event = parse_xid(body);
    } else if (body.find("fallen off the bus") != std::string_view::npos) {
      event.emplace();
      event->kind = gpu_event_kind::fallen_off_bus;
      event->pci_address = find_pci(body);
    } else if (starts_with(body, "GPU at PCI:")) {
      auto pci = find_pci(body);
      auto uuid = gpu_uuid_in(body);
      if (!pci.empty() && !uuid.empty()) {
        event.emplace();
        event->kind = gpu_event_kind::gpu_identity;
        event->pci_address = std::move(pci);
        event->uuid = std::move(uuid);
      }
    }
  } else if (starts_with(message, "nvidia-nvswitch")) {
    // "nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 24007, Fatal, Link 44 ...".
    auto at = message.find(": SXid");
    if (at != std::string_view::npos) {
      // parse_xid reads "Xid (PCI:...): <n>" from "SXid ...": skip the 'S'.
      event = parse_xid(trim_left(message.substr(at + 3)));
      if (event)
        event->kind = gpu_event_kind::nvswitch_sxid;
    }
  } else if (starts_with(message, "amdgpu ")) {
    auto rest = message.substr(7);
    size_t used = 0;
    auto pci = parse_pci(rest, true, &used);
    if (!pci || used >= rest.size() || rest[used] != ':')
      return std::nullopt;
    if (auto kind = amd_kind(rest.substr(used + 1))) {
      event.emplace();
      event->kind = *kind;
      event->pci_address = std::move(*pci);
    }
  } else if (size_t tag = drm_tag_length(message)) {
    // "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, ...":
    // no device named; only amdgpu's own tags count.
    if (message.substr(0, tag).find("amdgpu") == std::string_view::npos)
      return std::nullopt;
    // A fatal line that names no device is kept too (the caller attributes
    // it to the only AMD GPU, or keeps it as an unmapped incident).
    auto kind = amd_kind(message.substr(tag));
    if (kind && *kind != gpu_event_kind::amd_reset_begin
        && *kind != gpu_event_kind::amd_reset_succeeded) {
      event.emplace();
      event->kind = *kind;
    }
  }
  if (!event)
    return std::nullopt;
  event->text = event_text(message);
  event->sequence = record.sequence;
  event->timestamp_us = record.timestamp_us;
  event->wall = record.wall;
  return event;
}

std::string gpu_uuid_in(std::string_view text) {
  for (size_t at = text.find("GPU-"); at != std::string_view::npos; at = text.find("GPU-", at + 1)) {
    if (at > 0 && is_alnum(text[at - 1]))
      continue;
    size_t end = at + 4;
    while (end < text.size() && (hex_value(text[end]) >= 0 || text[end] == '-'))
      ++end;
    // GPU-8c9a3a0e-7d2b-4a47-9c1b-3f0c7a1e5d01: 32 hex digits, 4 dashes.
    if (end - at >= 4 + 32 && (end == text.size() || !is_alnum(text[end])))
      return std::string{text.substr(at, end - at)};
  }
  return {};
}

const char* to_string(gpu_event_kind kind) {
  switch (kind) {
  case gpu_event_kind::xid:
    return "xid";
  case gpu_event_kind::fallen_off_bus:
    return "fallen_off_bus";
  case gpu_event_kind::amd_reset_begin:
    return "amd_reset_begin";
  case gpu_event_kind::amd_reset_succeeded:
    return "amd_reset_succeeded";
  case gpu_event_kind::amd_reset_failed:
    return "amd_reset_failed";
  case gpu_event_kind::amd_ring_timeout:
    return "amd_ring_timeout";
  case gpu_event_kind::amd_vram_lost:
    return "amd_vram_lost";
  case gpu_event_kind::amd_ras_fatal:
    return "amd_ras_fatal";
  case gpu_event_kind::gpu_identity:
    return "gpu_identity";
  case gpu_event_kind::nvswitch_sxid:
    return "nvswitch_sxid";
  }
  return "unknown";
}

// --- kmsg_reader ------------------------------------------------------------

namespace {

/// Hands on the events one line of the log completes: parsed, assembled
/// (kmsg_assembler), delivered; what goes wrong goes to `report`.
void deliver_line(std::string_view line, kmsg_assembler& assembler,
                  const std::function<void(gpu_event)>& on_event,
                  const std::function<void(const std::string&)>& report) {
  auto record = parse_kmsg_line(line);
  if (!record)
    return;
  std::string warning;
  auto events = assembler.take(*record, &warning);
  if (!warning.empty())
    report(warning);
  if (!on_event)
    return;
  for (auto& event : events) {
    try {
      on_event(std::move(event));
    } catch (...) {
      report("the GPU event callback threw an exception");
    }
  }
}

} // namespace

kmsg_reader::kmsg_reader(std::string path, std::function<void(gpu_event)> on_event,
                         std::function<void(std::string)> on_error,
                         std::function<void()> on_caught_up)
    : path_(std::move(path)), on_event_(std::move(on_event)), on_error_(std::move(on_error)),
      on_caught_up_(std::move(on_caught_up)) {}

kmsg_reader::~kmsg_reader() {
  stop();
}

void kmsg_reader::start() {
  if (thread_.joinable()) {
    if (running_)
      return;
    stop();  // it ended by itself (a regular file read to its end)
  }
  stopping_ = false;
  running_ = true;
  // Without an eventfd the thread still ends: it then polls with a short
  // timeout and checks stopping_.
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    running_ = false;
    report(path_ + ": cannot start the reader thread");
    if (wake_fd_ >= 0)
      ::close(wake_fd_);
    wake_fd_ = -1;
  }
}

void kmsg_reader::stop() {
  stopping_ = true;
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    [[maybe_unused]] auto ignored = ::write(wake_fd_, &one, sizeof one);
  }
  if (!thread_.joinable() || thread_.get_id() == std::this_thread::get_id())
    return;
  thread_.join();
  if (wake_fd_ >= 0)
    ::close(wake_fd_);
  wake_fd_ = -1;
}

uint64_t kmsg_reader::lines_read() const {
  return lines_.load();
}

void kmsg_reader::report(const std::string& error) {
  if (!on_error_)
    return;
  try {
    on_error_(error);
  } catch (...) {
  }
}

void kmsg_reader::run() {
  struct mark_ended {
    std::atomic<bool>& running;
    ~mark_ended() {
      running = false;
    }
  } ended{running_};
  // Without an eventfd (wake_fd_ -1, which poll ignores) every wait is cut
  // into 100 ms slices so that stop() is still seen promptly.
  const int slice_ms = wake_fd_ >= 0 ? -1 : 100;

  // Waits until `fd` is readable (or hung up); false when stop() was called.
  auto wait_readable = [&](int fd) {
    while (!stopping_) {
      pollfd fds[2] = {{fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      int ready = ::poll(fds, 2, slice_ms);
      if (stopping_)
        return false;
      if (ready > 0 && fds[0].revents != 0)
        return true;
      if (ready < 0 && errno != EINTR)
        ::usleep(100 * 1000);  // ENOMEM: do not spin
    }
    return false;
  };
  // Sleeps `ms` milliseconds; false when stop() was called.
  auto pause = [&](int ms) {
    using clock = std::chrono::steady_clock;
    auto deadline = clock::now() + std::chrono::milliseconds(ms);
    while (!stopping_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0)
        return true;
      pollfd wake = {wake_fd_, POLLIN, 0};
      ::poll(&wake, 1, static_cast<int>(slice_ms < 0 ? left : std::min<long long>(left, slice_ms)));
    }
    return false;
  };

  std::string pending;
  bool discarding = false;  // inside a line that was too long
  kmsg_assembler assembler;
  bool caught_up = false;
  auto catch_up = [&] {
    if (caught_up)
      return;
    caught_up = true;
    if (!on_caught_up_)
      return;
    try {
      on_caught_up_();
    } catch (...) {
      report(path_ + ": the caught-up callback threw an exception");
    }
  };
  auto take_line = [&](std::string_view line) {
    lines_.fetch_add(1);
    deliver_line(line, assembler, on_event_, [&](const std::string& e) { report(path_ + ": " + e); });
  };
  auto feed = [&](std::string_view data) {
    while (!data.empty() && !stopping_) {
      auto newline = data.find('\n');
      auto part = data.substr(0, newline);
      if (!discarding) {
        pending.append(part);
        if (pending.size() > max_line_bytes) {
          report(path_ + ": dropped a line longer than " + std::to_string(max_line_bytes) + " bytes");
          pending.clear();
          discarding = true;
        }
      }
      if (newline == std::string_view::npos)
        return;
      if (discarding)
        lines_.fetch_add(1);  // counted, though dropped
      else
        take_line(pending);
      pending.clear();
      discarding = false;
      data.remove_prefix(newline + 1);
    }
  };
  auto flush = [&]() {
    if (discarding)
      lines_.fetch_add(1);
    else if (!pending.empty())
      take_line(pending);
    pending.clear();
    discarding = false;
  };

  std::vector<char> buffer(read_buffer_bytes);
  std::string last_error;
  int retry_ms = first_retry_ms;
  auto failed = [&](const std::string& error) {
    if (error != last_error)
      report(error);
    last_error = error;
    bool go_on = pause(retry_ms);
    retry_ms = std::min(retry_ms * 2, last_retry_ms);
    return go_on;
  };

  while (!stopping_) {
    int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      catch_up();  // nothing to wait for: the first pass must not hang on it
      if (!failed(path_ + ": cannot open: " + std::strerror(errno)))
        break;
      continue;
    }
    assembler.restart();
    struct stat st {};
    bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    bool fifo = !regular && S_ISFIFO(st.st_mode);
    if (S_ISCHR(st.st_mode))
      ::lseek(fd, 0, SEEK_SET);  // /dev/kmsg: the first retained record
    last_error.clear();
    retry_ms = first_retry_ms;

    enum class outcome { stopped, reopen, error } result = outcome::stopped;
    std::string error;
    off_t offset = 0;
    int idle_checks = 0;  // checks at a regular file's end without growth
    // A FIFO without a writer reads as end of file at once; poll first, it
    // waits for a writer's data or its close.
    bool readable = regular;
    while (!stopping_) {
      if (!readable) {
        // Nothing to read right now: what the log held is delivered.
        pollfd now = {fd, POLLIN, 0};
        if (::poll(&now, 1, 0) <= 0)
          catch_up();
        if (!wait_readable(fd))
          break;
      }
      ssize_t n = ::read(fd, buffer.data(), buffer.size());
      if (n > 0) {
        readable = true;
        offset += n;
        idle_checks = 0;
        feed(std::string_view(buffer.data(), static_cast<size_t>(n)));
        continue;
      }
      if (n == 0 && regular) {
        // Followed as it grows: a last line without a newline is taken once
        // the file stood still for a check; a file that shrank or was
        // replaced is read again from its start.
        catch_up();
        if (idle_checks++ == 1)
          flush();
        struct stat now {}, named {};
        bool replaced = ::stat(path_.c_str(), &named) != 0 || named.st_ino != st.st_ino
                        || named.st_dev != st.st_dev;
        if (replaced || (::fstat(fd, &now) == 0 && now.st_size < offset)) {
          flush();
          result = outcome::reopen;
          break;
        }
        if (!pause(follow_check_ms))
          break;
        continue;
      }
      if (n == 0) {
        flush();
        result = outcome::reopen;
        break;
      }
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        readable = false;
        continue;
      }
      if (errno == EPIPE) {
        report(path_ + ": kernel log records were overwritten before they were read; continuing");
        pending.clear();
        discarding = false;
        continue;
      }
      error = path_ + ": read failed: " + std::strerror(errno);
      result = outcome::error;
      break;
    }
    ::close(fd);
    if (result == outcome::stopped)
      break;
    flush();
    if (result == outcome::error) {
      catch_up();
      if (!failed(error))
        break;
    } else if (!fifo && !regular && !pause(first_retry_ms)) {
      break;  // end of a device or socket: do not spin
    }
  }
}

} // namespace astraeus
