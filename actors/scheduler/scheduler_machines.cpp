// What machines tell the scheduler: snapshots (`v1::SchedulerMachine`:
// GPUs, labels, cores, memory, Down) and their agents' worker statuses
// (`v1::WorkerStatuses`: acknowledged, Running, ended, lost).

#include "actors/scheduler/scheduler_actor.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include <spdlog/spdlog.h>

#include "actors/scheduler/scheduler_internal.hpp"
#include "actors/scheduler/scheduler_inventory.hpp"
#include "messages/error.hpp"
#include "runtime/process/wall_clock.hpp"
#include "runtime/workers/run_spec.hpp"

namespace astraeus::scheduler_detail {

namespace {

/// What a run's worker states say of it: {nullopt, ""} while it goes on;
/// {Failed, why} when a worker failed (`held`: the agent's statuses, for
/// the reason); {Stopped, why} when every worker of every copy exited 0.
std::pair<std::optional<run_state>, std::string>
run_outcome(const v1::Run& run,
            const std::map<std::string, const v1::WorkerStatus*>& held,
            int32_t copy = -1) {
  bool all_exited = run.workers_size() > 0;
  // The worker that failed names the reason; one its agent Cancelled (its
  // gang stopped) only when none failed.
  const v1::WorkerAssignment* cancelled = nullptr;
  auto failure = [&](const v1::WorkerAssignment& w)
    -> std::pair<std::optional<run_state>, std::string> {
    const std::string s = to_string(state_of(w));
    std::string detail;
    if (auto h = held.find(w.name()); h != held.end())
      detail = h->second->detail();
    // "worker g-1 Failed: exited with code 3", "worker g-1 OOMKilled: the
    // container exceeded its memory limit".
    if (detail.rfind(s, 0) != 0)
      detail = s + (detail.empty() ? "" : ": " + detail);
    return {run_state::failed, "worker " + w.name() + " " + detail};
  };
  for (const auto& w : run.workers()) {
    // An array copy (`copy` >= 0) is a gang of its own: only its workers.
    if (copy >= 0 && w.array_index() != copy)
      continue;
    const auto s = state_of(w);
    if (s == worker_state::cancelled) {
      if (!cancelled)
        cancelled = &w;
      continue;
    }
    if (worker_failed(s))
      return failure(w);
    // A copy stopped at its time limit has ended too.
    if (s != worker_state::exited && s != worker_state::stopped)
      all_exited = false;
  }
  if (cancelled)
    return failure(*cancelled);
  if (copy >= 0)
    return all_exited ? std::pair<std::optional<run_state>, std::string>{
                          run_state::stopped, "completed: every worker exited with code 0"}
                      : std::pair<std::optional<run_state>, std::string>{};
  auto copies = std::max<uint32_t>(1, run.spec().array_size());
  if (all_exited && run.copies_placed() >= copies)
    return {run_state::stopped, "completed: every worker exited with code 0"};
  return {std::nullopt, {}};
}

/// The run a status's worker belongs to: the one keyed by its run's name
/// (the default workspace), else the run of that name with a worker of that
/// name on `machine` (issue 13: orders carry a run's name, not its key).
run_map::iterator
run_of_worker(scheduler_state& st, const v1::WorkerStatus& w, const std::string& machine) {
  auto holds = [&](const v1::Run& run) {
    return std::any_of(run.workers().begin(), run.workers().end(),
                       [&](const v1::WorkerAssignment& x) {
                         return x.name() == w.worker() && x.machine() == machine;
                       });
  };
  auto r = st.runs.find(w.run());
  if (r != st.runs.end() && holds(r->second))
    return r;
  for (auto it = st.runs.begin(); it != st.runs.end(); ++it)
    if (it->second.spec().name() == w.run() && holds(it->second))
      return it;
  return st.runs.end();
}

} // namespace

/// Puts the last snapshot of machine `name` into the placement index: its
/// labels and state always, its GPUs but those set aside (issue 18, rule 2);
/// tells its machine actor which were set aside when that changed.
void index_snapshot(self_ptr self, const std::string& name) {
  auto& st = self->state;
  auto snap = st.snapshots.find(name);
  if (snap == st.snapshots.end())
    return;
  v1::SchedulerMachine m;
  if (!m.ParseFromString(snap->second)) {
    spdlog::error("scheduler: the kept snapshot of {} does not parse; not re-indexed", name);
    return;
  }
  auto admitted = admit_snapshot(m, st.claims);
  auto put = [&](const machine_spec& spec) -> caf::error {
    if (auto id = st.index->find_machine(name))
      return st.index->update_machine(*id, spec);
    if (auto added = st.index->add_machine(spec); !added)
      return added.error();
    return caf::none;
  };
  if (auto err = put(admitted.spec)) {
    // The GPU list cannot be used: the machine's labels and state still
    // reach the index, its GPUs are set aside with the reason.
    spdlog::error("scheduler: GPUs of {} set aside: {}", name, render_error(err));
    auto bare = admitted.spec;
    bare.gpus.clear();
    for (const auto& g : admitted.spec.gpus) {
      auto* a = &admitted.set_aside.emplace_back();
      a->set_id(g.id);
      a->set_reason(render_error(err));
    }
    if (auto again = put(bare))
      spdlog::error("scheduler: machine {} not indexed: {}", name, render_error(again));
  }
  // What its CPU-only workers (and those of copies still re-adopting their
  // GPUs) use: the index's new machine is told (issue 22).
  push_outside_use(st, name);
  for (const auto& a : admitted.set_aside)
    spdlog::warn("scheduler: machine {}: GPU {} set aside: {}", name, a.id(), a.reason());
  v1::SchedulerNotes notes;
  notes.set_machine(name);
  for (auto& a : admitted.set_aside)
    *notes.add_set_aside() = std::move(a);
  auto bytes = notes.SerializeAsString();
  auto& sent = st.notes_sent[name];
  auto handle = st.machines.find(name);
  // Nothing told yet means nothing set aside: an empty list is news only
  // after a list that was not.
  bool nothing_new = bytes == sent || (sent.empty() && notes.set_aside_size() == 0);
  if (nothing_new || handle == st.machines.end())
    return;
  sent = std::move(bytes);
  self->send(handle->second, std::move(notes));
}

/// Copies what the agent reports of where a worker runs on its machine
/// (cores, NUMA nodes, RDMA devices; issue 22) into `w`. True when
/// something changed.
static bool take_placement_report(const v1::WorkerStatus& s, v1::WorkerAssignment& w) {
  bool changed = false;
  if (s.cpus() != w.cpus() || s.mems() != w.mems()) {
    w.set_cpus(s.cpus());
    w.set_mems(s.mems());
    changed = true;
  }
  if (!std::equal(s.rdma_devices().begin(), s.rdma_devices().end(),
                  w.rdma_devices().begin(), w.rdma_devices().end())) {
    *w.mutable_rdma_devices() = s.rdma_devices();
    changed = true;
  }
  return changed;
}

void apply_snapshot(self_ptr self, v1::SchedulerMachine& m) {
  (*m.mutable_labels())[machine_label] = m.name();
  (*m.mutable_labels())[accepting_label] = m.accepting() ? "true" : "false";
  (*m.mutable_labels())[rdma_label] = m.rdma_up() ? "up" : "down";
  auto& st = self->state;
  if (m.name().empty()) {
    spdlog::error("scheduler: a snapshot without a machine name, ignored");
    return;
  }
  // A machine that is Down reports nothing: its GPUs' ids are not claims,
  // so a UUID it shared with a live machine is that machine's again (a new-
  // user trial found the live machine's GPUs set aside until the Down one
  // was removed). Its claims come back with its next report.
  std::vector<std::string> ids;
  if (!m.down())
    for (const auto& g : m.gpus())
      ids.push_back(g.id());
  auto touched = st.claims.update(m.name(), ids);
  m.SerializeToString(&st.snapshots[m.name()]);
  index_snapshot(self, m.name());
  // A UUID it now shares (or no longer shares) changes what the other
  // machines may place onto too.
  for (const auto& other : touched)
    index_snapshot(self, other);
  auto& facts = st.machine_facts_by_name[m.name()];
  facts.address = m.address();
  facts.schedulable = m.schedulable() && !m.down();
  facts.why_not = m.not_schedulable();
  facts.set_labels(m.labels());
  facts.logical_cpus = m.logical_cpus();
  facts.memory_bytes = m.memory_bytes();
  if (m.down() && !facts.down) {
    // Stopping workers there are not waited for (issue 23 item 6); what
    // they held goes with them (the machine takes no work while Down).
    settle_stopping(self, m.name(), nullptr);
    // Its workers are Down and keep their GPUs until it is back.
    if (auto on = st.runs_on.find(m.name()); on != st.runs_on.end())
      for (const auto& run_name : on->second) {
        auto& run = st.runs[run_name];
        for (auto& w : *run.mutable_workers())
          if (w.machine() == m.name())
            set_state(w, worker_state::down);
        mark(self, run_name);
      }
  }
  facts.down = m.down();
  // A GPU that failed under a run: the run is told (issue 17, rule 8).
  note_gpu_faults(self, m);
  restore_pass(self);
  schedule_pass(self);
}

void apply_worker_statuses(self_ptr self, v1::WorkerStatuses& statuses) {
  auto& st = self->state;
  const auto& machine = statuses.machine();
  // Workers of ended or deleted runs that its agent was stopping: how they
  // ended (issue 23 item 6; a drain is done only once none is left). What
  // they held is free now: a pass places the runs that waited for it.
  const bool released = settle_stopping(self, machine, &statuses);
  // Outputs of a worker stopped with its run or its copy (a time limit,
  // a failed gang) come after that ended: kept on the worker all the same.
  // So does how it ended, for a worker the scheduler marked Stopped with its
  // copy (no agent words yet): an array copy at its time limit showed
  // "Stopped, exit 0" for a worker its agent Cancelled with 143 (a new-user
  // trial).
  for (const auto& w : statuses.workers()) {
    const bool ended_report = worker_ended(state_of(w));
    if (w.outputs_size() == 0 && !ended_report)
      continue;
    auto r = run_of_worker(st, w, machine);
    if (r == st.runs.end())
      continue;
    auto& run = r->second;
    bool run_ended = has_ended(state_of(run));
    auto ended = ended_copies(run);
    for (auto& rw : *run.mutable_workers()) {
      if (rw.name() != w.worker() || rw.machine() != machine
          || !(run_ended || ended.count(rw.array_index())))
        continue;
      if (w.outputs_size() > 0 && rw.outputs_size() == 0) {
        *rw.mutable_outputs() = w.outputs();
        mark(self, r->first);
      }
      if (ended_report && state_of(rw) == worker_state::stopped && rw.exit_code() == 0
          && rw.detail().empty() && state_of(w) != worker_state::stopped) {
        set_state(rw, state_of(w));
        rw.set_exit_code(w.exit_code());
        rw.set_detail(w.detail());
        mark(self, r->first);
      }
    }
  }
  std::map<std::string, const v1::WorkerStatus*> held;
  for (const auto& w : statuses.workers())
    held[w.worker()] = &w;
  auto on = st.runs_on.find(machine);
  if (on == st.runs_on.end()) {
    if (released)
      schedule_pass(self);
    return;
  }
  std::vector<std::pair<std::string, std::string>> lost;
  std::vector<std::string> touched;
  std::vector<std::pair<std::string, int32_t>> newly_ended;
  struct copy_failure {
    std::string run;
    int32_t copy;
    std::string why;
  };
  std::vector<copy_failure> copy_failures;
  for (const auto& run_name : on->second) {
    auto& run = st.runs[run_name];
    bool changed = false;
    // A copy that has ended is off its machines: its workers' statuses
    // (the agent still stopping them) change nothing.
    const auto ended_before = ended_copies(run);
    // Set again below while an earlier worker of the name is still held.
    const auto reason_before = run.waiting_reason();
    if (reason_before.find(" still holds an earlier worker named ") != std::string::npos)
      run.set_waiting_reason(waiting_reason_of(st, run));
    for (auto& w : *run.mutable_workers()) {
      if (w.machine() != machine || ended_before.count(w.array_index()))
        continue;
      auto h = held.find(w.name());
      if (h == held.end()) {
        if (w.acknowledged())
          lost.emplace_back(run_name, w.name());
        continue;
      }
      // The agent's word, but Assigned until it runs.
      auto next = state_of(*h->second);
      if (!w.acknowledged() && (next == worker_state::stopping || worker_ended(next))) {
        // The agent answers a worker it was just handed with Assigned;
        // one it reports stopping or ended before that is an earlier
        // worker of the same name (a run deleted and submitted again)
        // that it still stops: not this run's. It changes nothing here.
        auto why = "waiting: machine " + machine + " still holds an earlier worker named "
                   + w.name() + " (" + h->second->state() + "); this worker starts once "
                   + "the agent has let it go";
        run.set_waiting_reason(why);
        spdlog::warn("scheduler: run {}: {}", run_name, why);
        continue;
      }
      if (!w.acknowledged() || state_of(w) != next) {
        w.set_acknowledged(true);
        set_state(w, next);
        // How it ended, in its agent's words (issue 23 item 6).
        if (worker_ended(next)) {
          w.set_exit_code(h->second->exit_code());
          w.set_detail(h->second->detail());
        }
        changed = true;
      }
      // Its main process, for `astra run show` (issue 23 item 6).
      if (h->second->pid() != 0 && h->second->pid() != w.pid()) {
        w.set_pid(h->second->pid());
        changed = true;
      }
      // The cores, NUMA nodes and RDMA devices its agent gave it (issue 22).
      changed |= take_placement_report(*h->second, w);
      // What it wrote to $ASTRAEUS_OUTPUTS, once it has ended.
      if (h->second->outputs_size() > 0 && w.outputs_size() == 0) {
        *w.mutable_outputs() = h->second->outputs();
        changed = true;
      }
    }
    // Placed until every worker runs; then Running.
    const auto ended_now = ended_copies(run);
    if (changed && state_of(run) == run_state::placed
        && std::all_of(run.workers().begin(), run.workers().end(),
                       [&ended_now](const auto& w) {
                         return state_of(w) == worker_state::running
                                || ended_now.count(w.array_index());
                       }))
      set_state(run, run_state::running);
    if (run.waiting_reason() != reason_before)
      mark(self, run_name);
    if (changed) {
      mark(self, run_name);
      touched.push_back(run_name);
      for (auto copy : ended_copies(run))
        if (!ended_before.count(copy))
          newly_ended.emplace_back(run_name, copy);
      // A copy with a worker that failed while others of it go on: the
      // copy stops alone (below), as a gang; the other copies go on.
      if (run.spec().array_size() > 0) {
        const auto ended_now2 = ended_copies(run);
        std::set<int32_t> copies;
        for (const auto& w : run.workers())
          if (!ended_now2.count(w.array_index()) && w.array_index() >= 0)
            copies.insert(w.array_index());
        for (auto copy : copies)
          if (auto [state, why] = run_outcome(run, held, copy);
              state == run_state::failed)
            copy_failures.push_back({run_name, copy, why});
      }
    }
  }
  // A copy whose workers have all ended gives back what it holds at
  // once (its waiting siblings may take it) and keeps how it ended; the
  // run ends once every copy has (settle_array, below).
  for (const auto& [run_name, copy] : newly_ended) {
    auto& run = st.runs[run_name];
    auto [state, why] = run_outcome(run, held, copy);
    spdlog::info("scheduler: run {}[{}] {}: {}", run_name, copy,
                 to_string(state.value_or(run_state::stopped)), why);
    end_copy(self, run, copy);
    record_copy_end(run, copy, state.value_or(run_state::stopped), why);
  }
  for (const auto& f : copy_failures) {
    spdlog::warn("scheduler: run {}[{}] failed: {}; its other workers are stopped", f.run,
                 f.copy, f.why);
    stop_copy(self, st.runs[f.run], f.copy, run_state::failed, f.why);
  }
  std::set<std::string> failed;
  for (const auto& [run_name, worker] : lost) {
    auto& run = st.runs[run_name];
    auto why = "worker " + worker + " was lost: machine " + machine
               + " no longer holds it";
    int32_t copy = -1;
    for (const auto& w : run.workers())
      if (w.name() == worker && w.machine() == machine)
        copy = w.array_index();
    const bool alone = copy >= 0 && live(run);
    if (alone ? ended_copies(run).count(copy) > 0 : !failed.insert(run_name).second)
      continue;  // its run, or its copy, was stopped already (another lost worker)
    // Its agent has nothing to stop: Failed, not Stopping.
    for (auto& w : *run.mutable_workers())
      if (w.name() == worker && w.machine() == machine)
        set_state(w, worker_state::failed);
    if (alone) {
      // An array copy fails alone; the others go on.
      spdlog::warn("scheduler: run {}[{}] failed: {}", run_name, copy, why);
      stop_copy(self, run, copy, run_state::failed, why);
      continue;
    }
    spdlog::warn("scheduler: run {} failed: {}", run_name, why);
    finish_run(self, run, run_state::failed, why);
  }
  // A run whose workers all exited 0 is complete; one whose worker
  // failed fails, and its other workers are stopped (their machines get
  // worker sets without them). An array run ends once all its copies have.
  bool ended = released || !failed.empty() || !newly_ended.empty() || !copy_failures.empty();
  for (const auto& run_name : touched) {
    if (failed.count(run_name))
      continue;
    auto& run = st.runs[run_name];
    if (run.spec().array_size() > 0) {
      ended = settle_array(self, run) || ended;
      continue;
    }
    auto [state, why] = run_outcome(run, held);
    if (!state)
      continue;
    spdlog::info("scheduler: run {} {}: {}", run_name, to_string(*state), why);
    finish_run(self, run, *state, why);
    ended = true;
  }
  if (ended)
    schedule_pass(self);
}

caf::error forget_machine(self_ptr self, const std::string& name) {
  auto& st = self->state;
  if (auto on = st.runs_on.find(name); on != st.runs_on.end() && !on->second.empty()) {
    std::string runs;
    size_t n = 0;
    for (const auto& r : on->second)
      if (n++ < 5)
        runs += (runs.empty() ? "" : ", ") + r;
    if (n > 5)
      runs += " and " + std::to_string(n - 5) + " more";
    return caf::make_error(ec::invalid_request,
                           "machine " + name + " still has workers of " +
                             (n == 1 ? "run " : "runs ") + runs +
                             "; stop them first (astra delete RUN) or drain it "
                             "(astra drain " + name + ")");
  }
  // Workers its agent still stops: a drained machine's in their stop grace.
  // A Down machine's agent cannot report them: they are Stopped with it.
  auto facts = st.machine_facts_by_name.find(name);
  bool down = facts != st.machine_facts_by_name.end() && facts->second.down;
  if (auto stopping = stopping_workers_text(st, name); !stopping.empty() && !down)
    return caf::make_error(ec::invalid_request,
                           "machine " + name + " still has workers its agent is stopping ("
                             + stopping + "); it can be removed once its agent reports "
                             "them ended (at most the stop grace, then SIGKILL)");
  // Not waited for any more: what they held is given back first (the index
  // removes no machine with GPUs held).
  settle_stopping(self, name, nullptr);
  if (auto id = st.index->find_machine(name))
    if (auto err = st.index->remove_machine(*id))
      return err;
  if (auto h = st.machines.find(name); h != st.machines.end()) {
    st.removed_senders.insert(caf::actor_cast<caf::actor_addr>(h->second));
    st.machines.erase(h);
  }
  auto touched = st.claims.update(name, {});
  st.snapshots.erase(name);
  st.machine_facts_by_name.erase(name);
  st.notes_sent.erase(name);
  st.runs_on.erase(name);
  st.generation.erase(name);
  st.dirty_machines.erase(name);
  for (const auto& other : touched)
    index_snapshot(self, other);
  spdlog::info("scheduler: machine {} removed", name);
  schedule_pass(self);
  return caf::none;
}

} // namespace astraeus::scheduler_detail
