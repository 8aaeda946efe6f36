// Time limits of runs and array copies: armed when a run or copy is
// placed (and at start for the stored ones), reached as an `atom::deadline`
// the actor sends itself; a stale timer is recognised by its token.

#include "actors/scheduler/scheduler_actor.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "actors/scheduler/scheduler_internal.hpp"
#include "messages/error.hpp"
#include "runtime/process/wall_clock.hpp"
#include "runtime/workers/run_spec.hpp"

namespace astraeus::scheduler_detail {

/// Stops run or copy `qname` when its time limit, `seconds` from now, is
/// reached (an `atom::deadline` to itself, matched by token).
void arm_time_limit(self_ptr self, const std::string& qname, int64_t seconds) {
  auto token = self->state.next_limit_token++;
  self->state.limit_token[qname] = token;
  self->delayed_send(self, std::chrono::seconds{std::max<int64_t>(0, seconds)},
                     atom::deadline_v, qname, token);
}

void arm_stored_time_limits(self_ptr self) {
  auto& st = self->state;
  // In name order (the runs are hashed): timers armed in a stable order.
  std::vector<const std::string*> names;
  for (const auto& [key, run] : st.runs)
    names.push_back(&key);
  std::sort(names.begin(), names.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  for (const auto* name : names) {
    const auto& key = *name;
    const auto& run = st.runs.at(key);
    if (!live(run) || run.spec().time_limit_seconds() == 0)
      continue;
    auto elapsed = (self->state.config.clock->now_unix_ms() - run.placed_unix_ms()) / 1000;
    auto left = static_cast<int64_t>(run.spec().time_limit_seconds()) - elapsed;
    std::set<int32_t> copies;
    const auto ended = ended_copies(run);
    for (const auto& w : run.workers())
      if (state_of(w) != worker_state::stopped && !ended.count(w.array_index()))
        copies.insert(w.array_index());
    for (auto c : copies)
      arm_time_limit(self, c < 0 ? key : key + "[" + std::to_string(c) + "]", left);
  }
}

void time_limit_reached(self_ptr self, const std::string& qname, uint64_t token) {
  auto& st = self->state;
  auto t = st.limit_token.find(qname);
  if (t == st.limit_token.end() || t->second != token)
    return;
  st.limit_token.erase(t);
  auto [run_name, copy] = parse_queue_name(qname);
  auto r = st.runs.find(run_name);
  if (r == st.runs.end() || !live(r->second))
    return;
  auto& run = r->second;
  auto why = "time limit of "
             + format_duration(static_cast<int64_t>(run.spec().time_limit_seconds()))
             + " reached";
  spdlog::info("scheduler: run {} stopped: {}", qname, why);
  if (copy < 0) {
    finish_run(self, run, run_state::stopped, why);
  } else {
    // One copy of an array: it alone ends.
    if (ended_copies(run).count(copy))
      return;
    stop_copy(self, run, copy, run_state::stopped, why);
  }
  schedule_pass(self);
}

} // namespace astraeus::scheduler_detail
