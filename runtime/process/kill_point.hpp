#pragma once
/// @file
/// Named kill points for the crash suite (test/crash, issue 23): the
/// process ends at once (`_exit(137)`, as a SIGKILL would look to a parent)
/// when it reaches the point named by the environment variable
/// `ASTRAEUS_KILL_POINT`, after letting `ASTRAEUS_KILL_AFTER` earlier
/// passes through it go by (default 0). Compiled in always; unset, a point
/// costs one comparison of an empty string. Header-only, so the store can
/// use it too.
///
/// Points: `after_wal_write` (a sync store write is in the WAL, its caller
/// not told yet), `between_token_use_and_registration` (the enrolment's
/// write is done, the machine actor not spawned, the agent not answered),
/// `between_fork_and_record` (a worker's process started, its record not
/// yet written).

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

namespace astraeus {

/// Ends the process here when `ASTRAEUS_KILL_POINT` names `point` (see the
/// file comment); returns otherwise.
inline void kill_point(const char* point) {
  static const std::string armed = [] {
    const char* v = std::getenv("ASTRAEUS_KILL_POINT");
    return std::string{v != nullptr ? v : ""};
  }();
  if (armed.empty() || armed != point)
    return;
  static std::atomic<long> passes{[] {
    const char* v = std::getenv("ASTRAEUS_KILL_AFTER");
    return v != nullptr ? std::atol(v) : 0L;
  }()};
  if (passes.fetch_sub(1) > 0)
    return;
  std::fprintf(stderr, "astraeus: kill point %s reached: exiting\n", point);
  std::fflush(stderr);
  ::_exit(137);
}

} // namespace astraeus
