#pragma once
/// @file
/// Durations for people, the one way Astraeus prints them: the scheduler's
/// reasons ("due to start in 16m", "time limit of 2h reached") and `astra
/// machine`'s uptime.

#include <cstdint>
#include <string>

namespace astraeus {

/// "45s", "12m", "1h 30m", "2h", "2d 3h": the largest unit and, from an
/// hour on, the next one when it is not 0 (seconds are dropped from a
/// minute on, minutes from a day on). Negative durations print as "0s".
std::string format_duration(int64_t seconds);

/// A duration as it is given (`--burn-in 7d`), exactly, each unit that is not
/// 0 from days to seconds: "7d", "1h30m", "10m", "90s" -> "1m30s"; it parses
/// back to the same seconds (`parse_seconds`). 0 and less: "0s".
std::string format_duration_exact(int64_t seconds);

} // namespace astraeus
