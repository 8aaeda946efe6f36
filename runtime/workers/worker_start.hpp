#pragma once
/// @file
/// A worker started once, whatever instant the agent is killed at (issue 23,
/// item 3). Before the fork the agent writes the worker's record with sync in
/// state `Starting`, holding a start marker of its own
/// (`v1::WorkerProcess.start_marker`); the worker's processes carry the
/// marker in their environment (`_ASTRAEUS_WORKER_START=<marker>`, readable
/// in /proc/<pid>/environ), and its shim holds the worker folder's start lock
/// (`start.lock`, flock) from before the fork until it has ended. A restarted
/// agent that finds a record still `Starting` resolves it
/// (`resolve_start`): it adopts the process that carries the marker, waits
/// while the lock is held (the worker has not reached exec yet), takes the
/// exit file of a worker that has already ended, and only when none of these
/// holds (the agent died before the fork) starts the worker, once.
///
/// The variable's name begins with '_' so that the seed's list of what a
/// worker finds (shared/seeds/inside-a-worker.md, "A quick look": every
/// ASTRAEUS_* variable) stays exact.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "messages/astraeus.pb.h"
#include "runtime/workers/worker_process.hpp"

namespace astraeus {

/// The environment variable that carries a worker's start marker.
inline constexpr const char* worker_start_variable = "_ASTRAEUS_WORKER_START";

/// The state word of a record written before the fork (not a
/// `v1::WorkerState`: it never leaves the agent; the controller sees the
/// worker `Assigned`).
inline constexpr const char* starting_state = "Starting";

/// A new marker for one start of `worker`: "<worker>.<16 random hex digits>"
/// (also a valid cgroup name, as worker names hold no '/').
std::string new_start_marker(const std::string& worker);

/// Whether `rec` was written before its fork and not resolved since.
bool is_starting(const v1::WorkerProcess& rec);

/// Sets the state of `rec` to `Starting` (the word; no state code).
void set_starting(v1::WorkerProcess& rec);

/// The start lock of the worker folder `dir`.
std::string start_lock_path(const std::string& dir);

/// Whether some process (the worker's shim) holds the start lock in `dir`.
/// False when there is no lock file.
bool start_lock_held(const std::string& dir);

/// Every live process under `<proc_root>/proc` whose environment holds
/// `_ASTRAEUS_WORKER_START=<marker>` (processes whose environment cannot be
/// read are skipped).
std::vector<proc_stat> processes_with_marker(const std::string& marker,
                                             const std::string& proc_root = "/");

/// The worker's main process among the processes that carry its marker: a
/// process-group leader in its parent's session (the shim made both: a
/// descendant that ran `setsid` leads a session of its own), the earliest
/// started (lowest pid on a tie). `nullopt` when none qualifies.
std::optional<proc_stat> main_of_marked(const std::vector<proc_stat>& marked);

/// What a restarted agent does with a record left `Starting`.
enum class start_outcome {
  adopt,        ///< its main process runs: record it (pid, shim, start time)
  wait,         ///< its shim holds the start lock: look again at the next check
  ended,        ///< it ran and ended: its exit file says how
  not_started,  ///< no trace of it: the agent died before the fork; start it
};

/// The outcome, and the main process for `adopt`.
struct start_resolution {
  start_outcome outcome = start_outcome::not_started;
  proc_stat main;
};

/// Resolves the `Starting` record `rec` against the processes under
/// `proc_root` and its folder (`rec.dir()`: start lock, exit file). The
/// lock is read before the exit file: a shim writes the exit file before it
/// lets go of the lock.
start_resolution resolve_start(const v1::WorkerProcess& rec,
                               const std::string& proc_root = "/");

/// "adopt", "wait", "ended" or "not started".
const char* to_string(start_outcome x);

} // namespace astraeus
