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

} // namespace astraeus
