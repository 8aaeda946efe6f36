#pragma once
/// @file
/// A worker's state as an enum: on the controller (`v1::WorkerAssignment`,
/// set by the scheduler) and on its machine (`v1::WorkerStatus`,
/// `v1::WorkerProcess`, set by runtime/workers/worker_ledger.cpp and
/// worker_supervisor.cpp). The accessors read `state_code` when set, else
/// the stored word, so records written before the enum read back the same.

#include <cstdint>
#include <optional>
#include <string_view>

namespace astraeus {

namespace v1 {
class WorkerAssignment;
class WorkerStatus;
class WorkerProcess;
} // namespace v1

/// A worker's state (values equal `v1::WorkerState`; shared/seeds/
/// inside-a-worker.md, "Signals on stop", "Limits").
enum class worker_state : uint8_t {
  placed = 1,     ///< GPUs chosen (controller only)
  assigned = 2,   ///< handed to its agent, not started yet
  running = 3,    ///< its process runs
  down = 4,       ///< its machine's heartbeat lapsed (controller only)
  stopping = 5,   ///< the stop signal was sent
  stopped = 6,    ///< stopped by the scheduler (controller only)
  exited = 7,     ///< ended by itself with code 0
  failed = 8,     ///< another exit code, or could not start
  oom_killed = 9, ///< killed for its memory limit
  cancelled = 10, ///< ended by the stop signal
};

/// "Placed", "Assigned", "Running", "Down", "Stopping", "Stopped",
/// "Exited", "Failed", "OOMKilled", "Cancelled".
const char* to_string(worker_state x);
/// The state for its word; nullopt for any other word (also for "").
std::optional<worker_state> parse_worker_state(std::string_view text);

/// The state: `state_code` when set, else `state` parsed. An unknown or
/// empty word reads as Placed (assignment) or Assigned (status: the agent
/// holds it, nothing runs), or nullopt for a process record.
worker_state state_of(const v1::WorkerAssignment& worker);
worker_state state_of(const v1::WorkerStatus& worker);
std::optional<worker_state> state_of(const v1::WorkerProcess& process);
/// Set `state_code` and `state`.
void set_state(v1::WorkerAssignment& worker, worker_state state);
void set_state(v1::WorkerStatus& worker, worker_state state);
void set_state(v1::WorkerProcess& process, worker_state state);

/// Whether the worker has ended: an end its agent reported (Exited, Failed,
/// OOMKilled, Cancelled, kept as reported) or the scheduler's Stopped.
bool worker_ended(worker_state state);
/// Whether the worker's end is a failure of the run (Failed, OOMKilled).
bool worker_failed(worker_state state);
/// Whether the worker's process is alive on its machine (Running,
/// Stopping).
bool process_runs(worker_state state);

} // namespace astraeus
