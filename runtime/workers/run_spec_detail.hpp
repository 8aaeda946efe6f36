#pragma once
/// @file
/// Helpers shared by the run-spec reader (run_spec.cpp) and the run-spec
/// checks and writer (run_spec_fields.cpp); not part of the public API.

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include <caf/error.hpp>

namespace astraeus::run_spec_detail {

/// Memory units and integer limits.
inline constexpr uint64_t KiB = 1024;
inline constexpr uint64_t MiB = KiB * 1024;   ///< 2^20
inline constexpr uint64_t GiB = MiB * 1024;   ///< 2^30
inline constexpr uint64_t TiB = GiB * 1024;   ///< 2^40
inline constexpr uint64_t u64_max = std::numeric_limits<uint64_t>::max();  ///< max
inline constexpr uint64_t u32_max = std::numeric_limits<uint32_t>::max();  ///< max

/// Whether `c` is an ASCII digit.
bool is_digit(char c);

/// Whether `c` is an ASCII letter or digit.
bool is_alnum(char c);

/// `x` in double quotes, with '"', '\\' and control characters escaped.
std::string quote(std::string_view x);

/// At most 60 characters of `x`, quoted, for error messages.
std::string quote_short(std::string_view x);

/// An `ec::invalid_request` error with `text`.
caf::error spec_error(std::string text);

/// A run or group name: 1-63 letters, digits and '-', starting with a
/// letter or digit.
bool valid_name(std::string_view x);

/// The rule `valid_name` checks, in words.
extern const char* const name_rule;

} // namespace astraeus::run_spec_detail
