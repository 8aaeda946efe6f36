// A run's life and its array copies: submitting, deleting and completing
// a run; which machines a live run is on; the CPU cores and memory its
// workers use there; what a run or a copy holds and gives back when it ends.

#include "actors/scheduler/scheduler_actor.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "actors/scheduler/scheduler_internal.hpp"
#include "messages/error.hpp"
#include "messages/run_key.hpp"
#include "runtime/process/wall_clock.hpp"
#include "runtime/workers/run_spec.hpp"

namespace astraeus::scheduler_detail {

/// Seconds on the actor clock (virtual in tests): the queue's `now`.
int64_t clock_seconds(self_ptr self) {
  return std::chrono::duration_cast<std::chrono::seconds>(
           self->clock().now().time_since_epoch())
    .count();
}

bool live(const v1::Run& run) {
  return is_live(state_of(run));
}

/// Schedules the group commit (once per burst).
void mark(self_ptr self, const std::string& run) {
  auto& st = self->state;
  st.dirty_runs.insert(run);
  if (!st.flush_pending) {
    st.flush_pending = true;
    self->send(self, atom::tick_v);
  }
}

void mark_machine(self_ptr self, const std::string& machine) {
  self->state.dirty_machines.insert(machine);
  if (!self->state.flush_pending) {
    self->state.flush_pending = true;
    self->send(self, atom::tick_v);
  }
}

/// The (machine, GPU id) pairs the workers of copy `copy` (-2: all) hold:
/// a GPU id is unique only within its machine.
std::vector<std::pair<std::string, std::string>> held_gpu_ids(const v1::Run& run,
                                                              int32_t copy) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& w : run.workers())
    if (copy == -2 || w.array_index() == copy)
      for (const auto& id : w.gpu_ids())
        out.emplace_back(w.machine(), id);
  return out;
}

/// Records which machines a live run has workers on (and forgets a run
/// that is no longer live); those machines get their new worker sets. A
/// live run's machines only grow (array copies placed later), so only its
/// own workers' machines are visited. A machine the run is on already gets
/// its set again when one of the run's workers there is newly placed (an
/// array copy placed beside an earlier one: a fifth new-user trial found
/// such a copy Placed, "agent has it: not yet", for good).
void index_run(self_ptr self, const v1::Run& run) {
  auto& st = self->state;
  const auto name = run_key(run.spec());
  const bool is_live = live(run);
  for (const auto& w : run.workers()) {
    const auto& m = w.machine();
    if (is_live) {
      if (st.runs_on[m].insert(name)
          || (!w.acknowledged() && state_of(w) == worker_state::placed))
        mark_machine(self, m);
      continue;
    }
    auto it = st.runs_on.find(m);
    if (it == st.runs_on.end() || !it->second.erase(name))
      continue;
    mark_machine(self, m);
    if (it->second.empty())
      st.runs_on.erase(it);
  }
}

/// Whether a worker has ended (messages/worker_state.hpp, worker_ended).
bool worker_ended(const v1::WorkerAssignment& w) {
  return worker_ended(state_of(w));
}

/// Sets the run's end (Stopped or Failed), and that of each worker still
/// going on (a worker keeps the end its agent reported: Exited, Failed,
/// OOMKilled, Cancelled).
void set_run_state(v1::Run& run, run_state end) {
  set_state(run, end);
  const auto worker_end = end == run_state::failed ? worker_state::failed : worker_state::stopped;
  for (auto& w : *run.mutable_workers())
    if (!worker_ended(w))
      set_state(w, worker_end);
}

/// The array copies of a run that have ended (every worker of the copy
/// ended): they hold nothing and are no longer on their machines.
std::set<int32_t> ended_copies(const v1::Run& run) {
  std::map<int32_t, bool> all_ended;
  for (const auto& w : run.workers()) {
    if (w.array_index() < 0)
      continue;
    auto [it, fresh] = all_ended.emplace(w.array_index(), true);
    it->second = it->second && worker_ended(w);
  }
  std::set<int32_t> out;
  for (const auto& [copy, ended] : all_ended)
    if (ended)
      out.insert(copy);
  return out;
}

/// Releases the piecewise holds of a copy still re-adopting its GPUs.
void drop_restore(scheduler_state& st, const std::string& qname) {
  auto it = st.restoring.find(qname);
  if (it == st.restoring.end())
    return;
  for (auto a : it->second.pieces)
    if (auto err = st.index->release(a))
      spdlog::error("scheduler: run {}: cannot release a restored hold: {}",
                    qname, render_error(err));
  st.restoring.erase(it);
}

/// Adds (`sign` 1) or removes (-1) the CPU cores and memory the workers of
/// copy `copy` (-2: all) ask for to their machines' use.
/// With `copy` -2, the workers of copies that have ended are left out
/// (they gave theirs back when they ended).
void account(scheduler_state& st, const v1::Run& run, int sign, int32_t copy) {
  const auto& spec = run.spec();
  const auto cpu = cpu_millis_of(spec.cpus_per_worker());
  const auto mem = spec.memory_bytes_per_worker();
  // A GPU run that asks for no cores or memory changes no machine's use:
  // its machines are not looked up (issue 14: two lookups per placement).
  if (!cpu && !mem && spec.cpus_per_worker() == 0 && !cpu_only(spec))
    return;
  const auto ended = copy == -2 ? ended_copies(run) : std::set<int32_t>{};
  // Outside the index's allocations: CPU-only workers, and those of a copy
  // still re-adopting its GPUs (issue 22).
  auto outside = [&](const v1::WorkerAssignment& w) {
    if (cpu_only(spec))
      return true;
    if (st.restoring.empty())
      return false;
    return st.restoring.count(w.array_index() < 0
                                ? spec.name()
                                : spec.name() + "[" + std::to_string(w.array_index()) + "]")
           > 0;
  };
  std::set<std::string> pushed;
  for (const auto& w : run.workers()) {
    if ((copy != -2 && w.array_index() != copy) || ended.count(w.array_index())
        || (sign < 0 && state_of(w) == worker_state::stopped))
      continue;
    auto& f = st.machine_facts_by_name[w.machine()];
    f.cpus_used = std::max(0.0, f.cpus_used + sign * spec.cpus_per_worker());
    f.memory_used = sign > 0 ? f.memory_used + mem
                             : f.memory_used - std::min(f.memory_used, mem);
    if (cpu_only(spec))
      f.cpu_workers = sign > 0 ? f.cpu_workers + 1
                               : f.cpu_workers - std::min<uint32_t>(f.cpu_workers, 1);
    if ((cpu || mem) && outside(w)) {
      f.cpu_millis_outside = sign > 0 ? f.cpu_millis_outside + cpu
                                      : f.cpu_millis_outside - std::min(f.cpu_millis_outside, cpu);
      f.memory_outside = sign > 0 ? f.memory_outside + mem
                                  : f.memory_outside - std::min(f.memory_outside, mem);
      pushed.insert(w.machine());
    }
  }
  for (const auto& m : pushed)
    push_outside_use(st, m);
}

void push_outside_use(scheduler_state& st, const std::string& machine) {
  auto f = st.machine_facts_by_name.find(machine);
  auto id = st.index->find_machine(machine);
  if (!id)
    return;  // told when its snapshot adds it (index_snapshot)
  uint64_t cpu = f == st.machine_facts_by_name.end() ? 0 : f->second.cpu_millis_outside;
  uint64_t mem = f == st.machine_facts_by_name.end() ? 0 : f->second.memory_outside;
  if (auto err = st.index->set_outside_use(*id, cpu, mem))
    spdlog::error("scheduler: machine {}: cannot set its cores in use: {}", machine,
                  render_error(err));
}

std::vector<machine_use> copy_use(const scheduler_state& st, const v1::Run& run,
                                  int32_t copy) {
  std::vector<machine_use> out;
  const auto cpu = cpu_millis_of(run.spec().cpus_per_worker());
  const auto mem = run.spec().memory_bytes_per_worker();
  if (!cpu && !mem)
    return out;
  for (const auto& w : run.workers())
    if (w.array_index() == copy)
      if (auto id = st.index->find_machine(w.machine()))
        out.push_back({*id, cpu, mem});
  return out;
}

void outside_adopted(scheduler_state& st, const v1::Run& run, int32_t copy) {
  const auto cpu = cpu_millis_of(run.spec().cpus_per_worker());
  const auto mem = run.spec().memory_bytes_per_worker();
  if (!cpu && !mem)
    return;
  std::set<std::string> pushed;
  for (const auto& w : run.workers()) {
    if (w.array_index() != copy)
      continue;
    auto& f = st.machine_facts_by_name[w.machine()];
    f.cpu_millis_outside -= std::min(f.cpu_millis_outside, cpu);
    f.memory_outside -= std::min(f.memory_outside, mem);
    pushed.insert(w.machine());
  }
  for (const auto& m : pushed)
    push_outside_use(st, m);
}

/// Releases whatever each copy of a run holds (running, restoring) or takes
/// it out of the queue (waiting).
void release_run(scheduler_state& st, const v1::Run& run) {
  if (live(run))
    account(st, run, -1);
  for (const auto& qname : queue_names_of(run.spec())) {
    st.waiting.erase(qname);
    if (cpu_only(run.spec())) {
      st.cpu_queue.erase(std::remove(st.cpu_queue.begin(), st.cpu_queue.end(), qname),
                         st.cpu_queue.end());
      st.cpu_waiting_reason.erase(qname);
      continue;
    }
    if (!st.restoring.empty() && st.restoring.count(qname)) {
      drop_restore(st, qname);
      continue;
    }
    auto released = st.queue->complete_if_running(qname);
    if (!released)
      spdlog::error("scheduler: run {}: cannot release its GPUs: {}", qname,
                    render_error(released.error()));
    else if (!*released)
      // Waiting: leaves the queue. Stopped or Failed: nothing to release.
      static_cast<void>(st.queue->cancel(qname));
  }
}

/// Whether any copy of the run holds GPUs or is re-adopting them (a
/// CPU-only run: whether it is placed).
bool holds_gpus(const scheduler_state& st, const v1::Run& run) {
  if (cpu_only(run.spec()))
    return live(run);
  for (const auto& qname : queue_names_of(run.spec()))
    if (st.restoring.count(qname) || st.queue->allocation_of(qname))
      return true;
  return false;
}

/// Ends a run: releases its GPUs, sets its state, stores it.
void finish_run(self_ptr self, v1::Run& run, run_state state,
                const std::string& why) {
  auto& st = self->state;
  release_run(st, run);
  end_run_workers(self, run, state);
  run.set_waiting_reason(why);
  index_run(self, run);
  mark(self, run_key(run.spec()));
}

/// The waiting reason a run shows: the engine's words, and for an array how
/// many copies still wait.
std::string waiting_reason_of(const scheduler_state& st, const v1::Run& run) {
  // A run without copies that does not wait (most, after a pass): no names.
  if (run.spec().array_size() == 0 && st.waiting.count(run_key(run.spec())) == 0)
    return {};
  auto names = queue_names_of(run.spec());
  size_t waiting = 0;
  const waiting_reason* first = nullptr;
  const std::string* first_name = nullptr;
  for (const auto& qname : names)
    if (st.waiting.count(qname)) {
      ++waiting;
      if (!first_name) {
        first_name = &qname;
        first = st.queue->waiting(qname);
      }
    }
  if (waiting == 0)
    return {};
  std::string why = first ? first->message : "waiting: not scheduled yet";
  // Issue 23: what workers still stopping hold is what it waits for.
  if (auto sw = st.stopping_waits.find(*first_name); sw != st.stopping_waits.end())
    why = sw->second;
  if (cpu_only(run.spec()))
    for (const auto& qname : names)
      if (auto r = st.cpu_waiting_reason.find(qname); r != st.cpu_waiting_reason.end()) {
        why = r->second;
        break;
      }
  if (run.spec().array_size() > 0) {
    const std::string prefix = "waiting: ";
    if (why.rfind(prefix, 0) == 0)
      why = why.substr(prefix.size());
    return std::to_string(waiting) + " of " + std::to_string(names.size())
           + " copies waiting: " + why;
  }
  return why;
}

/// Marks copy `copy` of `run` placed: state, counters, its workers' use of
/// CPU and memory, and (for the first copy) the leader and MASTER_ADDR.
void copy_placed(scheduler_state& st, v1::Run& run, int32_t copy,
                 const std::string& leader_machine) {
  set_state(run, run_state::placed);
  run.set_copies_placed(run.copies_placed() + 1);
  if (run.placed_unix_ms() == 0)
    run.set_placed_unix_ms(st.config.clock->now_unix_ms());
  account(st, run, 1, copy);
  if (run.leader_machine().empty() && !leader_machine.empty()) {
    run.set_leader_machine(leader_machine);
    auto f = st.machine_facts_by_name.find(leader_machine);
    run.set_master_addr(f != st.machine_facts_by_name.end() && !f->second.address.empty()
                          ? f->second.address
                          : leader_machine);
  }
}

/// Gives back what copy `copy` of `run` holds (its GPUs, cores and memory,
/// its time limit) and tells its machines: the copy has ended.
void end_copy(self_ptr self, const v1::Run& run, int32_t copy) {
  auto& st = self->state;
  const auto qname = run_key(run.spec()) + "[" + std::to_string(copy) + "]";
  account(st, run, -1, copy);
  if (st.restoring.count(qname))
    drop_restore(st, qname);
  else if (!cpu_only(run.spec()) && st.queue->allocation_of(qname))
    if (auto err = st.queue->complete(qname))
      spdlog::error("scheduler: run {}: cannot release its GPUs: {}", qname,
                    render_error(err));
  st.limit_token.erase(qname);
  for (const auto& w : run.workers())
    if (w.array_index() == copy)
      mark_machine(self, w.machine());
}

void stop_copy(self_ptr self, v1::Run& run, int32_t copy, run_state end,
               const std::string& why) {
  end_copy(self, run, copy);
  for (auto& w : *run.mutable_workers())
    if (w.array_index() == copy && !worker_ended(w))
      set_state(w, worker_state::stopped);
  record_copy_end(run, copy, end, why);
  settle_array(self, run);
  mark(self, run_key(run.spec()));
}

void record_copy_end(v1::Run& run, int32_t copy, run_state end, const std::string& why) {
  for (const auto& e : run.copy_ends())
    if (e.copy() == copy)
      return;
  auto* e = run.add_copy_ends();
  e->set_copy(copy);
  e->set_state(to_string(end));
  e->set_reason(why);
}

namespace {

/// How copy `copy` ended, from its workers (a run stored before copy ends
/// were kept): the first that failed, else one Cancelled, else completed.
std::pair<run_state, std::string> copy_end_of_workers(const v1::Run& run, int32_t copy) {
  const v1::WorkerAssignment* cancelled = nullptr;
  auto words = [](const v1::WorkerAssignment& w) {
    const std::string s = to_string(state_of(w));
    auto detail = w.detail();
    if (detail.rfind(s, 0) != 0)
      detail = s + (detail.empty() ? "" : ": " + detail);
    return "worker " + w.name() + " " + detail;
  };
  for (const auto& w : run.workers()) {
    if (w.array_index() != copy)
      continue;
    if (worker_failed(state_of(w)))
      return {run_state::failed, words(w)};
    if (state_of(w) == worker_state::cancelled && !cancelled)
      cancelled = &w;
  }
  if (cancelled)
    return {run_state::failed, words(*cancelled)};
  return {run_state::stopped, "completed: every worker exited with code 0"};
}

} // namespace

std::pair<std::optional<run_state>, std::string> array_outcome(const scheduler_state& st,
                                                               const v1::Run& run) {
  const auto copies = static_cast<int32_t>(run.spec().array_size());
  if (copies == 0 || !live(run) || run.copies_placed() < run.spec().array_size())
    return {std::nullopt, {}};
  for (const auto& q : queue_names_of(run.spec()))
    if (st.waiting.count(q))
      return {std::nullopt, {}};
  const auto ended = ended_copies(run);
  std::map<int32_t, std::pair<run_state, std::string>> ends;
  for (int32_t c = 0; c < copies; ++c) {
    if (!ended.count(c))
      return {std::nullopt, {}};
    ends[c] = copy_end_of_workers(run, c);
  }
  for (const auto& e : run.copy_ends())
    if (auto it = ends.find(e.copy()); it != ends.end())
      it->second = {parse_run_state(e.state()).value_or(run_state::failed), e.reason()};
  std::vector<int32_t> failed, stopped;
  for (const auto& [c, end] : ends) {
    if (end.first == run_state::failed)
      failed.push_back(c);
    else if (end.second.rfind("completed", 0) != 0)
      stopped.push_back(c);
  }
  const auto n = std::to_string(copies);
  if (!failed.empty()) {
    std::string why = std::to_string(failed.size()) + " of " + n + " copies failed";
    if (failed.size() > 1)
      why += "; " + run.spec().name() + "[" + std::to_string(failed.front()) + "]";
    return {run_state::failed, why + ": " + ends[failed.front()].second};
  }
  if (stopped.empty())
    return {run_state::stopped, "completed: every worker exited with code 0"};
  const auto& first = ends[stopped.front()].second;
  if (stopped.size() == ends.size())
    return {run_state::stopped, "every copy stopped: " + first};
  return {run_state::stopped, std::to_string(stopped.size()) + " of " + n
                                + " copies stopped (" + first + "); the others completed: "
                                + "every worker exited with code 0"};
}

bool settle_array(self_ptr self, v1::Run& run) {
  auto [state, why] = array_outcome(self->state, run);
  if (!state)
    return false;
  spdlog::info("scheduler: run {} {}: {}", run_key(run.spec()), to_string(*state), why);
  set_state(run, *state);
  run.set_waiting_reason(why);
  index_run(self, run);
  mark(self, run_key(run.spec()));
  return true;
}

caf::error no_such_run(const std::string& ref) {
  return caf::make_error(ec::invalid_request, "no run named " + describe_run(ref));
}

caf::expected<std::string> find_run(const scheduler_state& st, const std::string& ref) {
  auto it = find_run_entry(st, ref);
  if (!it)
    return it.error();
  return (*it)->first;
}

caf::expected<run_map::const_iterator> find_run_entry(const scheduler_state& st,
                                                      const std::string& ref) {
  auto parts = parse_run_ref(ref);
  auto key = run_key(parts.workspace, parts.name);
  if (auto it = st.runs.find(key); it != st.runs.end())
    return it;
  // Elsewhere: the one workspace that has it, for a bare name; named in
  // the error otherwise.
  std::vector<std::string> keys;
  for (const auto& [k, run] : st.runs)
    if (run.spec().name() == parts.name)
      keys.push_back(k);
  if (parts.workspace.empty() && keys.size() == 1)
    return st.runs.find(keys.front());
  std::sort(keys.begin(), keys.end());
  std::string where;
  for (const auto& k : keys) {
    auto ws = parse_run_ref(k).workspace;
    where += (where.empty() ? "" : ", ") + (ws.empty() ? std::string{default_workspace} : ws);
  }
  if (keys.empty())
    return no_such_run(ref);
  if (!parts.workspace.empty())
    return caf::make_error(ec::invalid_request,
                           "no run named " + describe_run(ref)
                             + (keys.size() == 1 ? " (it is in workspace "
                                                 : " (it is in workspaces ")
                             + where + ")");
  return caf::make_error(ec::invalid_request,
                         "no run named " + parts.name + " in workspace default; runs named "
                           + parts.name + " are in workspaces " + where
                           + ": name one with --workspace");
}

std::string stopping_workers(const v1::Run& run) {
  std::string out;
  size_t n = 0;
  for (const auto& w : run.workers())
    if (state_of(w) == worker_state::stopping && n++ < 5)
      out += (out.empty() ? "" : ", ") + w.name() + " on " + w.machine();
  if (n > 5)
    out += " and " + std::to_string(n - 5) + " more";
  return out;
}

caf::result<v1::Run> submit_run(self_ptr self, v1::RunSpec& spec) {
  auto& st = self->state;
  if (auto err = validate_run_spec(spec))
    return err;
  const auto name = run_key(spec);
  if (auto old = st.runs.find(name); old != st.runs.end()) {
    if (!old->second.deleted())
      return caf::make_error(ec::invalid_request,
                             "a run named " + describe_run(name) + " already exists");
    // Issue 23 item 6: a deleted run, its workers stopping or ended, gives
    // its name to the new run (which starts on each machine once the agent
    // has let the old worker of its name go: apply_worker_statuses). Its
    // workers still stopping keep what they hold, under a key of their own.
    if (stopping_workers(old->second).empty())
      forget_run(self, name);
    else
      displace_run(self, name);
  }
  v1::Run run;
  *run.mutable_spec() = std::move(spec);
  set_state(run, run_state::waiting);
  run.set_waiting_reason("waiting: not scheduled yet");
  run.set_submitted_unix_ms(self->state.config.clock->now_unix_ms());
  auto now = clock_seconds(self);
  std::vector<std::string> queued;
  for (const auto& qname : queue_names_of(run.spec())) {
    if (cpu_only(run.spec())) {
      st.cpu_queue.push_back(qname);
      st.waiting.insert(qname);
      continue;
    }
    if (auto err = st.queue->submit(placement_request_of(run.spec(), qname), now)) {
      for (const auto& q : queued) {
        static_cast<void>(st.queue->cancel(q));
        st.waiting.erase(q);
      }
      return err;
    }
    queued.push_back(qname);
    st.waiting.insert(qname);
  }
  if (run.spec().priority() < 0)
    st.below_zero_runs.insert(name);
  st.runs.emplace(name, std::move(run));
  mark(self, name);
  schedule_pass(self);
  // Answered once the run (as the pass left it) is on disk.
  auto rp = self->make_response_promise<v1::Run>();
  st.run_replies.emplace_back(rp, name);
  return rp;
}

void forget_run(self_ptr self, const std::string& key) {
  auto& st = self->state;
  st.runs.erase(key);
  release_record_holds(st, key);
  for (auto on = st.stopping_on.begin(); on != st.stopping_on.end();) {
    on->second.erase(key);
    on = on->second.empty() ? st.stopping_on.erase(on) : std::next(on);
  }
  mark(self, key);
  spdlog::info("scheduler: run {} forgotten", key);
}

caf::result<v1::Run> remove_run(self_ptr self, const std::string& ref) {
  auto& st = self->state;
  auto found = find_run_entry(st, ref);
  if (!found)
    return found.error();
  // One look-up (issue 14): the entry found, made mutable by erasing the
  // empty range at it, is erased through `entry` below.
  auto entry = st.runs.erase(*found, *found);
  const auto key = entry->first;
  auto& run = entry->second;
  if (run.deleted()) {
    auto stopping = stopping_workers(run);
    return caf::make_error(ec::invalid_request,
                           "run " + describe_run(key) + " is already "
                             + (stopping.empty() ? "deleted: its workers have ended"
                                                 : "stopping: its workers " + stopping
                                                     + " have not ended yet"));
  }
  // Issue 23 item 6: the workers still going on, on a machine whose agent
  // will say how they end (attached, not Down), are Stopping until it does.
  std::vector<int> going_on;
  if (live(run))
    for (int i = 0; i < run.workers_size(); ++i) {
      const auto& w = run.workers(i);
      const auto s = state_of(w);
      if (!worker_ended(s) && s != worker_state::down && agent_reports(st, w.machine()))
        going_on.push_back(i);
    }
  release_run(st, run);
  // A run that has ended keeps its end, and its workers still Stopping stay
  // so (issue 23: they hold their GPUs until their agent reports them).
  if (!has_ended(state_of(run)))
    set_run_state(run, run_state::stopped);
  index_run(self, run);
  spdlog::info("scheduler: run {} deleted", key);
  auto rp = self->make_response_promise<v1::Run>();
  // A run ended before (drained, stopped) may have workers Stopping still:
  // kept too, so that what they hold is given back when they end.
  if (going_on.empty() && stopping_workers(run).empty()) {
    v1::Run out = std::move(run);
    st.runs.erase(entry);
    mark(self, key);
    st.replies.emplace_back(rp, std::move(out));
  } else {
    // Issue 23: each keeps its GPUs, cores and memory until it has ended.
    const auto now = st.config.clock->now_unix_ms();
    for (int i : going_on) {
      auto& w = *run.mutable_workers(i);
      set_state(w, worker_state::stopping);
      st.stopping_on[w.machine()].insert(key);
      hold_stopping(st, key, run, w, now);
    }
    run.set_deleted(true);
    run.set_waiting_reason("deleted: its workers are stopping");
    mark(self, key);
    st.replies.emplace_back(rp, run);
  }
  schedule_pass(self);
  return rp;
}

void arm_forget(self_ptr self, const std::string& key) {
  auto r = self->state.runs.find(key);
  if (r == self->state.runs.end())
    return;
  self->delayed_send(self, self->state.config.deleted_run_retention, atom::expire_v, key,
                     static_cast<int64_t>(r->second.submitted_unix_ms()));
}

bool settle_stopping(self_ptr self, const std::string& machine,
                     const v1::WorkerStatuses* statuses) {
  auto& st = self->state;
  auto on = st.stopping_on.find(machine);
  if (on == st.stopping_on.end())
    return false;
  bool released = false;
  std::map<std::string, const v1::WorkerStatus*> held;
  if (statuses)
    for (const auto& w : statuses->workers())
      held[w.worker()] = &w;
  const std::vector<std::string> keys(on->second.begin(), on->second.end());
  st.stopping_on.erase(on);
  for (const auto& key : keys) {
    auto* record = stopping_record(st, key);
    if (!record)
      continue;
    auto& run = *record;
    bool changed = false;
    for (auto& w : *run.mutable_workers()) {
      if (w.machine() != machine || state_of(w) != worker_state::stopping)
        continue;
      auto h = held.find(w.name());
      // A new worker of its name that its agent runs: this one has ended.
      if (h != held.end() && replaced_by_new_worker(st, key, *h->second, statuses->generation()))
        h = held.end();
      if (h != held.end() && !worker_ended(state_of(*h->second))) {
        st.stopping_on[machine].insert(key);
        continue;
      }
      // Its GPUs, cores and memory are free now (issue 23).
      released |= release_stopping(st, key, w.name());
      if (h != held.end()) {
        // How it ended, in its agent's words.
        set_state(w, state_of(*h->second));
        w.set_exit_code(h->second->exit_code());
        w.set_detail(h->second->detail());
        if (h->second->outputs_size() > 0 && w.outputs_size() == 0)
          *w.mutable_outputs() = h->second->outputs();
      } else {
        set_state(w, worker_state::stopped);
        w.set_detail(statuses ? "its agent no longer holds it"
                              : "machine " + machine + " is Down or removed: not waited for");
      }
      changed = true;
    }
    if (!changed)
      continue;
    spdlog::info("scheduler: {}run {}: its workers on {} have ended",
                 run.deleted() ? "deleted " : "", key, machine);
    if (st.displaced.count(key)) {
      // A new run has its name: not shown, forgotten once none stops.
      if (stopping_workers(run).empty())
        st.displaced.erase(key);
    } else if (run.deleted() && stopping_workers(run).empty()) {
      run.set_waiting_reason("deleted");
      arm_forget(self, key);
    }
    mark(self, key);
  }
  return released;
}

void complete_run(self_ptr self, const std::string& name) {
  auto& st = self->state;
  auto it = st.runs.find(name);
  if (it == st.runs.end()) {
    spdlog::warn("scheduler: completion of unknown run {} ignored", name);
    return;
  }
  auto& run = it->second;
  if (!holds_gpus(st, run)) {
    spdlog::warn("scheduler: completion of run {} ({}) ignored: not placed",
                 name, run.state());
    return;
  }
  finish_run(self, run, run_state::stopped, "");
  spdlog::info("scheduler: run {} stopped", name);
  schedule_pass(self);
}

} // namespace astraeus::scheduler_detail
