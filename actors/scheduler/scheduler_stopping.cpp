// Workers told to stop: a run that ends (stopped by a drain or `astra
// stop`, failed, completed) leaves its machines' worker sets, and each of its
// workers still going is `Stopping` until its agent reports it ended
// (shared/seeds/inside-a-worker.md, "Signals on stop": Stopping, then
// Cancelled). A machine whose agent still stops workers is neither drained
// nor removed (README, "Day two").

#include "actors/scheduler/scheduler_actor.hpp"

#include <spdlog/spdlog.h>

#include "actors/scheduler/scheduler_internal.hpp"
#include "messages/run_key.hpp"

namespace astraeus::scheduler_detail {

void end_run_workers(self_ptr self, v1::Run& run, run_state end) {
  auto& st = self->state;
  std::vector<int> going;
  for (int i = 0; i < run.workers_size(); ++i) {
    auto s = state_of(run.workers(i));
    if (!worker_ended(s) && s != worker_state::down)
      going.push_back(i);
  }
  set_run_state(run, end);
  for (int i : going) {
    auto& w = *run.mutable_workers(i);
    set_state(w, worker_state::stopping);
    st.stopping_on[w.machine()].insert(run_key(run.spec()));
  }
}

void index_stopping(scheduler_state& st, const v1::Run& run) {
  for (const auto& w : run.workers())
    if (state_of(w) == worker_state::stopping)
      st.stopping_on[w.machine()].insert(run_key(run.spec()));
}

std::string stopping_workers_text(const scheduler_state& st, const std::string& machine) {
  auto on = st.stopping_on.find(machine);
  if (on == st.stopping_on.end())
    return {};
  std::string out;
  size_t n = 0;
  for (const auto& key : on->second) {
    auto r = st.runs.find(key);
    if (r == st.runs.end())
      continue;
    for (const auto& w : r->second.workers())
      if (w.machine() == machine && state_of(w) == worker_state::stopping && n++ < 5)
        out += (out.empty() ? "" : ", ") + w.name() + " of run " + describe_run(key);
  }
  if (n > 5)
    out += " and " + std::to_string(n - 5) + " more";
  return out;
}

} // namespace astraeus::scheduler_detail
