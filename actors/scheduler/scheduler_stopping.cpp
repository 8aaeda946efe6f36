// Workers told to stop: a run that ends (stopped by a drain or `astra
// stop`, failed, completed) leaves its machines' worker sets, and each of its
// workers still going is `Stopping` until its agent reports it ended
// (shared/seeds/inside-a-worker.md, "Signals on stop": Stopping, then
// Cancelled). A machine whose agent still stops workers is neither drained
// nor removed (README, "Day two").

#include "actors/scheduler/scheduler_actor.hpp"

#include <spdlog/spdlog.h>

#include "actors/scheduler/scheduler_internal.hpp"

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
    st.stopping_on[w.machine()].insert(run.spec().name());
  }
}

void settle_stopping(self_ptr self, const std::string& machine,
                     const std::map<std::string, const v1::WorkerStatus*>& held) {
  auto& st = self->state;
  auto on = st.stopping_on.find(machine);
  if (on == st.stopping_on.end())
    return;
  for (auto it = on->second.begin(); it != on->second.end();) {
    auto r = st.runs.find(*it);
    bool left = false;
    if (r != st.runs.end() && has_ended(state_of(r->second))) {
      bool changed = false;
      for (auto& w : *r->second.mutable_workers()) {
        if (w.machine() != machine || state_of(w) != worker_state::stopping)
          continue;
        auto h = held.find(w.name());
        if (h != held.end() && !worker_ended(state_of(*h->second))) {
          left = true;  // its agent still stops it (or has not been told yet)
          continue;
        }
        // Its agent's end (Cancelled by the stop signal, or Exited, Failed
        // meanwhile), or Stopped when its agent no longer holds it.
        set_state(w, h == held.end() ? worker_state::stopped : state_of(*h->second));
        if (h != held.end() && h->second->outputs_size() > 0 && w.outputs_size() == 0)
          *w.mutable_outputs() = h->second->outputs();
        changed = true;
        spdlog::info("scheduler: run {}: worker {} on {} {}", *it, w.name(), machine,
                     to_string(state_of(w)));
      }
      if (changed)
        mark(self, *it);
    }
    it = left ? std::next(it) : on->second.erase(it);
  }
  if (on->second.empty())
    st.stopping_on.erase(on);
}

void index_stopping(scheduler_state& st, const v1::Run& run) {
  for (const auto& w : run.workers())
    if (state_of(w) == worker_state::stopping)
      st.stopping_on[w.machine()].insert(run.spec().name());
}

std::string stopping_workers_text(const scheduler_state& st, const std::string& machine) {
  auto on = st.stopping_on.find(machine);
  if (on == st.stopping_on.end())
    return {};
  std::string out;
  size_t n = 0;
  for (const auto& name : on->second) {
    auto r = st.runs.find(name);
    if (r == st.runs.end())
      continue;
    for (const auto& w : r->second.workers())
      if (w.machine() == machine && state_of(w) == worker_state::stopping && n++ < 5)
        out += (out.empty() ? "" : ", ") + w.name() + " of run " + name;
  }
  if (n > 5)
    out += " and " + std::to_string(n - 5) + " more";
  return out;
}

void drop_stopping(self_ptr self, const std::string& machine) {
  settle_stopping(self, machine, {});
}

} // namespace astraeus::scheduler_detail
