// The job on a failing GPU is told (issue 17, rule 8): when a machine's
// snapshot shows a GPU Faulty that a worker of a live run holds, the worker
// records which GPU failed and why (`WorkerAssignment.gpu_faults`), the run
// shows it (`Run.gpu_fault`) and the controller logs it. A run with
// `on_gpu_fault: stop` has its gang stopped (the whole run, or its array
// copy) and Fails, so it can be resubmitted; the default (`report`) keeps it
// running: the training program may checkpoint or recover on its own, and
// stopping a run is the user's choice, not the control plane's (README,
// "When a GPU fails under a run").

#include "actors/scheduler/scheduler_actor.hpp"

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

#include "actors/scheduler/scheduler_internal.hpp"
#include "messages/gpu_health_state.hpp"
#include "messages/gpu_read.hpp"
#include "runtime/process/wall_clock.hpp"

namespace astraeus::scheduler_detail {

namespace {

/// A worker's GPU fault as a run shows it.
std::string describe(const v1::WorkerAssignment& w, const v1::WorkerGpuFault& f,
                     bool stop) {
  return "GPU " + f.gpu_id() + " of worker " + w.name() + " on " + f.machine()
         + " failed: " + f.reason()
         + (stop ? " (on_gpu_fault: stop: its gang was stopped)"
                 : " (kept running: on_gpu_fault: report)");
}

/// Stops the gang of copy `copy` (-1: the whole run) of `run`: its workers
/// that still go on are Stopped and give back what they hold; the run Fails
/// with `why` once no copy goes on.
void stop_gang(self_ptr self, v1::Run& run, int32_t copy, const std::string& why) {
  auto& st = self->state;
  if (copy < 0) {
    release_run(st, run);
    for (auto& w : *run.mutable_workers())
      if (!worker_ended(w))
        set_state(w, worker_state::stopped);
    set_state(run, run_state::failed);
    run.set_waiting_reason(why);
    index_run(self, run);
    mark(self, run_key(run.spec()));
    return;
  }
  if (ended_copies(run).count(copy))
    return;
  stop_copy(self, run, copy, run_state::failed, why);
}

/// What makes two fault reasons of one GPU the same fault: for a GPU that
/// does not answer its driver, its read status ("unresponsive: nvml... has
/// not returned for 20002 ms" is the "unresponsive" of 10 s before, its
/// words counting the time); otherwise the words themselves (a latch's).
std::string_view fault_kind(std::string_view reason) {
  for (auto s : {gpu_read_status::unresponsive, gpu_read_status::lost,
                 gpu_read_status::unavailable}) {
    std::string_view word = to_string(s);
    if (reason.size() > word.size() && reason.substr(0, word.size()) == word
        && reason[word.size()] == ':')
      return word;
  }
  return reason;
}

} // namespace

void note_gpu_faults(self_ptr self, const v1::SchedulerMachine& m) {
  auto& st = self->state;
  std::map<std::string, std::string> faulty;  // GPU id -> reason
  for (const auto& g : m.gpus())
    if (auto h = health_of(g); h && *h == gpu_health::faulty)
      faulty[g.id()] = g.fault_reason().empty() ? "Faulty" : g.fault_reason();
  if (faulty.empty())
    return;
  auto on = st.runs_on.find(m.name());
  if (on == st.runs_on.end())
    return;
  // Copied: stopping a run changes `runs_on`.
  const std::vector<std::string> run_names{on->second.begin(), on->second.end()};
  const auto now_ms = st.config.clock->now_unix_ms();
  for (const auto& run_name : run_names) {
    auto r = st.runs.find(run_name);
    if (r == st.runs.end() || !live(r->second))
      continue;
    auto& run = r->second;
    const bool stop = run.spec().on_gpu_fault() == "stop";
    const auto ended = ended_copies(run);
    std::vector<std::pair<int32_t, std::string>> gangs;  // to stop: copy, why
    for (auto& w : *run.mutable_workers()) {
      if (w.machine() != m.name() || worker_ended(w) || ended.count(w.array_index()))
        continue;
      for (const auto& id : w.gpu_ids()) {
        auto f = faulty.find(id);
        if (f == faulty.end())
          continue;
        // Recorded once per fault: a hung call's words count the time, and
        // a GPU hanging for a day added ~8,600 entries, a store write and a
        // warning each (a new-user trial).
        bool known = false;
        for (const auto& old : w.gpu_faults())
          known = known || (old.gpu_id() == id && fault_kind(old.reason()) == fault_kind(f->second));
        if (known)
          continue;
        auto* rec = w.add_gpu_faults();
        rec->set_gpu_id(id);
        rec->set_machine(m.name());
        rec->set_reason(f->second);
        rec->set_unix_ms(now_ms);
        rec->set_action(stop ? "stopped" : "reported");
        auto text = describe(w, *rec, stop);
        run.set_gpu_fault(text);
        spdlog::warn("scheduler: run {}: {}", run_name, text);
        mark(self, run_name);
        if (stop)
          gangs.emplace_back(w.array_index(), text);
      }
    }
    for (const auto& [copy, why] : gangs)
      if (live(run))
        stop_gang(self, run, copy, why);
  }
}

} // namespace astraeus::scheduler_detail
