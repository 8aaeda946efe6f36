#include "runtime/process/duration_limits.hpp"

#include <string>

#include "messages/error.hpp"
#include "runtime/process/duration_text.hpp"
#include "runtime/workers/run_spec.hpp"

namespace astraeus {

namespace {

/// Whether `text` has parse_seconds' shape (digits, or runs of digits each
/// with a unit d, h, m or s), whatever its size.
bool well_formed(std::string_view text) {
  auto b = text.find_first_not_of(" \t");
  auto e = text.find_last_not_of(" \t");
  if (b == std::string_view::npos)
    return false;
  auto x = text.substr(b, e - b + 1);
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  auto unit = [](char c) { return std::string_view{"dhmsDHMS"}.find(c) != std::string_view::npos; };
  if (x.find_first_not_of("0123456789") == std::string_view::npos)
    return true;
  for (size_t i = 0; i < x.size();) {
    size_t start = i;
    while (i < x.size() && digit(x[i]))
      ++i;
    if (i == start || i == x.size() || !unit(x[i]))
      return false;
    ++i;
  }
  return true;
}

} // namespace

caf::expected<uint64_t> parse_bounded_seconds(std::string_view text, std::string_view what,
                                              uint64_t max_seconds) {
  auto quoted = std::string{what} + ": '" + std::string{text} + "'";
  auto first = text.find_first_not_of(" \t");
  if (first != std::string_view::npos && text[first] == '-')
    return caf::make_error(ec::invalid_request, quoted + " is not a duration: it is negative");
  auto seconds = parse_seconds(text);
  // parse_seconds refuses a sum that overflows: that is too long, not malformed.
  // A fraction is a duration a user meant, in whole seconds here (a
  // seventh new-user trial read "'1.5m' is not a duration").
  if (!seconds && text.find('.') != std::string_view::npos)
    return caf::make_error(ec::invalid_request,
                           quoted + " has a fraction: give whole units (90s, not 1.5m; 1s "
                                    "at least)");
  if (!seconds && !well_formed(text))
    return caf::make_error(ec::invalid_request,
                           quoted + " is not a duration (use 10m, 90s, 2h, 7d or a number "
                                    "of seconds)");
  if (!seconds || *seconds > max_seconds)
    return caf::make_error(ec::invalid_request,
                           quoted + " is too long: at most "
                             + format_duration(static_cast<int64_t>(max_seconds)));
  return *seconds;
}

caf::error check_seconds_bound(uint64_t seconds, std::string_view what, uint64_t max_seconds) {
  if (seconds <= max_seconds)
    return caf::none;
  return caf::make_error(ec::invalid_request,
                         std::string{what} + ": " + std::to_string(seconds)
                           + " is too long: at most " + std::to_string(max_seconds) + " ("
                           + format_duration(static_cast<int64_t>(max_seconds)) + ")");
}

} // namespace astraeus
