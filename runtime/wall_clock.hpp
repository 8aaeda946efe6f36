#pragma once
/// @file
/// Wall-clock time for what users read (registered, last report, audit
/// records). Timers and lapses use the actor clock instead, so tests can run
/// them on virtual time.

#include <chrono>
#include <cstdint>

namespace astraeus {

/// Milliseconds since the Unix epoch, now.
inline int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

} // namespace astraeus
