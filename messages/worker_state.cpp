#include "messages/worker_state.hpp"

#include "messages/astraeus.pb.h"

namespace astraeus {

// The C++ values are the wire values.
static_assert(static_cast<int>(worker_state::placed) == v1::WorkerState::placed);
static_assert(static_cast<int>(worker_state::assigned) == v1::WorkerState::assigned);
static_assert(static_cast<int>(worker_state::running) == v1::WorkerState::running);
static_assert(static_cast<int>(worker_state::down) == v1::WorkerState::down);
static_assert(static_cast<int>(worker_state::stopping) == v1::WorkerState::stopping);
static_assert(static_cast<int>(worker_state::stopped) == v1::WorkerState::stopped);
static_assert(static_cast<int>(worker_state::exited) == v1::WorkerState::exited);
static_assert(static_cast<int>(worker_state::failed) == v1::WorkerState::failed);
static_assert(static_cast<int>(worker_state::oom_killed) == v1::WorkerState::oom_killed);
static_assert(static_cast<int>(worker_state::cancelled) == v1::WorkerState::cancelled);

namespace {

std::optional<worker_state> from_code(v1::WorkerState::Value code) {
  if (code == v1::WorkerState::unset || !v1::WorkerState::Value_IsValid(code))
    return std::nullopt;
  return static_cast<worker_state>(code);
}

v1::WorkerState::Value to_code(worker_state state) {
  return static_cast<v1::WorkerState::Value>(state);
}

constexpr worker_state all_states[] = {
  worker_state::placed,  worker_state::assigned, worker_state::running,
  worker_state::down,    worker_state::stopping, worker_state::stopped,
  worker_state::exited,  worker_state::failed,   worker_state::oom_killed,
  worker_state::cancelled};

} // namespace

const char* to_string(worker_state x) {
  switch (x) {
    case worker_state::placed: return "Placed";
    case worker_state::assigned: return "Assigned";
    case worker_state::running: return "Running";
    case worker_state::down: return "Down";
    case worker_state::stopping: return "Stopping";
    case worker_state::stopped: return "Stopped";
    case worker_state::exited: return "Exited";
    case worker_state::failed: return "Failed";
    case worker_state::oom_killed: return "OOMKilled";
    case worker_state::cancelled: return "Cancelled";
  }
  return "Failed";
}

std::optional<worker_state> parse_worker_state(std::string_view text) {
  for (auto x : all_states)
    if (text == to_string(x))
      return x;
  return std::nullopt;
}

worker_state state_of(const v1::WorkerAssignment& worker) {
  if (auto s = from_code(worker.state_code()))
    return *s;
  return parse_worker_state(worker.state()).value_or(worker_state::placed);
}

worker_state state_of(const v1::WorkerStatus& worker) {
  if (auto s = from_code(worker.state_code()))
    return *s;
  return parse_worker_state(worker.state()).value_or(worker_state::assigned);
}

std::optional<worker_state> state_of(const v1::WorkerProcess& process) {
  if (auto s = from_code(process.state_code()))
    return s;
  return parse_worker_state(process.state());
}

void set_state(v1::WorkerAssignment& worker, worker_state state) {
  worker.set_state_code(to_code(state));
  worker.set_state(to_string(state));
}

void set_state(v1::WorkerStatus& worker, worker_state state) {
  worker.set_state_code(to_code(state));
  worker.set_state(to_string(state));
}

void set_state(v1::WorkerProcess& process, worker_state state) {
  process.set_state_code(to_code(state));
  process.set_state(to_string(state));
}

bool worker_ended(worker_state state) {
  switch (state) {
    case worker_state::exited:
    case worker_state::failed:
    case worker_state::oom_killed:
    case worker_state::cancelled:
    case worker_state::stopped: return true;
    default: return false;
  }
}

bool worker_failed(worker_state state) {
  return state == worker_state::failed || state == worker_state::oom_killed;
}

bool process_runs(worker_state state) {
  return state == worker_state::running || state == worker_state::stopping;
}

} // namespace astraeus
