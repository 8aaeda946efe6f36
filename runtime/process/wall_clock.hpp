#pragma once
/// @file
/// Wall-clock time for what users read (registered, last report, audit
/// records). Timers and lapses use the actor clock instead, so tests can run
/// them on virtual time.

#include <chrono>
#include <cstdint>
#include <ctime>
#include <string>

namespace astraeus {

/// Milliseconds since the Unix epoch, now.
inline int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

/// `unix_ms` as "2026-12-01 14:05:09 UTC" (token expiry, audit records).
inline std::string format_utc(int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

} // namespace astraeus
