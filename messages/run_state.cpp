#include "messages/run_state.hpp"

#include "messages/astraeus.pb.h"

namespace astraeus {

// The C++ values are the wire values.
static_assert(static_cast<int>(run_state::waiting) == v1::RunState::waiting);
static_assert(static_cast<int>(run_state::placed) == v1::RunState::placed);
static_assert(static_cast<int>(run_state::running) == v1::RunState::running);
static_assert(static_cast<int>(run_state::stopped) == v1::RunState::stopped);
static_assert(static_cast<int>(run_state::failed) == v1::RunState::failed);

const char* to_string(run_state x) {
  switch (x) {
    case run_state::waiting: return "Waiting";
    case run_state::placed: return "Placed";
    case run_state::running: return "Running";
    case run_state::stopped: return "Stopped";
    case run_state::failed: return "Failed";
  }
  return "Waiting";
}

std::optional<run_state> parse_run_state(std::string_view text) {
  for (auto x : {run_state::waiting, run_state::placed, run_state::running,
                 run_state::stopped, run_state::failed})
    if (text == to_string(x))
      return x;
  return std::nullopt;
}

run_state state_of(const v1::Run& run) {
  if (run.state_code() != v1::RunState::unset && v1::RunState::Value_IsValid(run.state_code()))
    return static_cast<run_state>(run.state_code());
  return parse_run_state(run.state()).value_or(run_state::waiting);
}

void set_state(v1::Run& run, run_state state) {
  run.set_state_code(static_cast<v1::RunState::Value>(state));
  run.set_state(to_string(state));
}

bool has_ended(run_state state) {
  return state == run_state::stopped || state == run_state::failed;
}

bool is_live(run_state state) {
  return state == run_state::placed || state == run_state::running;
}

} // namespace astraeus
