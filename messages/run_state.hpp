#pragma once
/// @file
/// A run's state (`v1::Run.state`) as an enum, its accessors (`state_code`
/// when set, else the stored word parsed, so runs stored before the enum
/// read back the same) and the predicates on it. The scheduler sets it
/// (actors/scheduler/scheduler_actor.cpp); `astra runs` shows the word.

#include <cstdint>
#include <optional>
#include <string_view>

namespace astraeus {

namespace v1 {
class Run;
} // namespace v1

/// A run's state (values equal `v1::RunState`). A run is never Stopping:
/// its workers are (messages/worker_state.hpp).
enum class run_state : uint8_t {
  waiting = 1, ///< not placed (yet)
  placed = 2,  ///< GPUs held, workers handed out
  running = 3, ///< every worker of a copy runs
  stopped = 4, ///< stopped, deleted, completed or at its time limit
  failed = 5,  ///< a worker failed
};

/// "Waiting", "Placed", "Running", "Stopped", "Failed".
const char* to_string(run_state x);
/// The state for its word; nullopt for any other word.
std::optional<run_state> parse_run_state(std::string_view text);

/// The run's state: `state_code` when set, else `state` parsed (an unknown
/// word reads as Waiting: the run is placed again).
run_state state_of(const v1::Run& run);
/// Sets `state_code` and `state`.
void set_state(v1::Run& run, run_state state);

/// Whether the run has ended (Stopped, Failed): it holds nothing and is
/// only shown.
bool has_ended(run_state state);
/// Whether the run holds GPUs or workers (Placed, Running).
bool is_live(run_state state);

} // namespace astraeus
