#include "actors/scheduler/scheduler_actor.hpp"

#include <algorithm>
#include <chrono>
#include <tuple>

#include <spdlog/spdlog.h>

#include "messages/error.hpp"
#include "runtime/process/wall_clock.hpp"
#include "runtime/workers/run_spec.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "store/store.hpp"

namespace astraeus {

namespace {

using self_ptr = scheduler_actor::stateful_pointer<scheduler_state>;

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

/// The GPU ids the workers of copy `copy` (-1: all) hold.
std::vector<std::string> held_gpu_ids(const v1::Run& run, int32_t copy = -2) {
  std::vector<std::string> out;
  for (const auto& w : run.workers())
    if (copy == -2 || w.array_index() == copy)
      for (const auto& id : w.gpu_ids())
        out.push_back(id);
  return out;
}

/// Records which machines a live run has workers on (and forgets a run
/// that is no longer live); those machines get their new worker sets. A
/// live run's machines only grow (array copies placed later), so only its
/// own workers' machines are visited.
void index_run(self_ptr self, const v1::Run& run) {
  auto& st = self->state;
  const auto& name = run.spec().name();
  const bool is_live = live(run);
  for (const auto& w : run.workers()) {
    const auto& m = w.machine();
    if (is_live) {
      if (st.runs_on[m].insert(name).second)
        mark_machine(self, m);
      continue;
    }
    auto it = st.runs_on.find(m);
    if (it == st.runs_on.end() || it->second.erase(name) == 0)
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
void account(scheduler_state& st, const v1::Run& run, int sign, int32_t copy = -2) {
  const auto& spec = run.spec();
  const auto ended = copy == -2 ? ended_copies(run) : std::set<int32_t>{};
  for (const auto& w : run.workers()) {
    if ((copy != -2 && w.array_index() != copy) || ended.count(w.array_index())
        || (sign < 0 && state_of(w) == worker_state::stopped))
      continue;
    auto& f = st.machine_facts_by_name[w.machine()];
    f.cpus_used = std::max(0.0, f.cpus_used + sign * spec.cpus_per_worker());
    auto mem = spec.memory_bytes_per_worker();
    f.memory_used = sign > 0 ? f.memory_used + mem
                             : f.memory_used - std::min(f.memory_used, mem);
    if (cpu_only(spec))
      f.cpu_workers = sign > 0 ? f.cpu_workers + 1
                               : f.cpu_workers - std::min<uint32_t>(f.cpu_workers, 1);
  }
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
    if (st.restoring.count(qname)) {
      drop_restore(st, qname);
    } else if (st.queue->allocation_of(qname)) {
      if (auto err = st.queue->complete(qname))
        spdlog::error("scheduler: run {}: cannot release its GPUs: {}", qname,
                      render_error(err));
    } else {
      // Waiting: leaves the queue. Stopped or Failed: nothing to release.
      static_cast<void>(st.queue->cancel(qname));
    }
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
  set_run_state(run, state);
  run.set_waiting_reason(why);
  index_run(self, run);
  mark(self, run.spec().name());
}

/// Holds, for each copy still re-adopting, the GPUs its machines now list;
/// once all are there, holds them as one allocation and adopts the copy.
void restore_pass(self_ptr self) {
  auto& st = self->state;
  for (auto it = st.restoring.begin(); it != st.restoring.end();) {
    const auto& qname = it->first;
    auto& r = it->second;
    for (auto id = r.missing.begin(); id != r.missing.end();) {
      auto g = st.index->find_gpu(*id);
      if (!g || st.index->holder(*g) != 0) {
        if (g)
          spdlog::error("scheduler: run {}: its GPU {} is held by {}", qname,
                        *id,
                        st.index->allocation_owner(st.index->holder(*g)));
        ++id;
        continue;
      }
      auto a = st.index->restore(qname, {*id});
      if (!a) {
        spdlog::error("scheduler: run {}: cannot hold GPU {}: {}", qname, *id,
                      render_error(a.error()));
        ++id;
        continue;
      }
      r.pieces.push_back(*a);
      id = r.missing.erase(id);
    }
    if (!r.missing.empty()) {
      ++it;
      continue;
    }
    // Every GPU is there: one allocation for the whole copy (nothing runs
    // between the releases and the restore).
    auto [run_name, copy] = parse_queue_name(qname);
    const auto& run = st.runs[run_name];
    for (auto a : r.pieces)
      st.index->release(a);
    r.pieces.clear();
    auto ids = held_gpu_ids(run, copy);
    auto all = st.index->restore(qname, ids);
    if (!all) {
      spdlog::error("scheduler: run {}: cannot re-adopt its GPUs: {}", qname,
                    render_error(all.error()));
      ++it;
      continue;
    }
    int64_t elapsed =
      std::max<int64_t>(0, (st.config.clock->now_unix_ms() - run.placed_unix_ms()) / 1000);
    auto err = st.queue->adopt(qname, *all, clock_seconds(self) - elapsed,
                               static_cast<int64_t>(run.spec().time_limit_seconds()));
    if (err) {
      spdlog::error("scheduler: run {}: cannot adopt it: {}", qname, render_error(err));
      st.index->release(*all);
      ++it;
      continue;
    }
    spdlog::info("scheduler: run {} re-adopted its {} GPU(s)", qname, ids.size());
    it = st.restoring.erase(it);
  }
}

/// The waiting reason a run shows: the engine's words, and for an array how
/// many copies still wait.
std::string waiting_reason_of(const scheduler_state& st, const v1::Run& run) {
  auto names = queue_names_of(run.spec());
  size_t waiting = 0;
  const waiting_reason* first = nullptr;
  for (const auto& qname : names)
    if (st.waiting.count(qname)) {
      ++waiting;
      if (!first)
        first = st.queue->waiting(qname);
    }
  if (waiting == 0)
    return {};
  std::string why = first ? first->message : "waiting: not scheduled yet";
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

/// Places the CPU-only runs and copies waiting, in submission order, each
/// all or nothing: every worker goes to the machine (Up, taking work, with
/// every required label) with the most CPU cores left that still fits its
/// cores and memory; ties go to the machine with fewer CPU-only workers,
/// then by name. The GPU engine never sees them; their cores and memory
/// count against the machine like those of GPU workers.
void place_cpu_runs(scheduler_state& st, std::set<std::string>& touched,
                    std::vector<std::string>& started) {
  for (auto it = st.cpu_queue.begin(); it != st.cpu_queue.end();) {
    const auto qname = *it;
    auto [run_name, copy] = parse_queue_name(qname);
    auto r = st.runs.find(run_name);
    if (r == st.runs.end()) {
      it = st.cpu_queue.erase(it);
      continue;
    }
    auto& run = r->second;
    const auto& spec = run.spec();
    auto req = placement_request_of(spec, qname);
    const double cpus = spec.cpus_per_worker();
    const uint64_t mem = spec.memory_bytes_per_worker();
    std::map<std::string, std::pair<double, uint64_t>> taken;  // tentative
    std::vector<std::string> where;
    size_t candidates = 0;
    bool fits = true;
    uint32_t total = 0;
    for (const auto& g : req.groups)
      total += g.workers;
    for (uint32_t rank = 0; rank < total && fits; ++rank) {
      const std::string* best = nullptr;
      double best_free = -1;
      uint32_t best_load = 0;
      candidates = 0;
      for (const auto& [name, f] : st.machine_facts_by_name) {
        if (!f.schedulable || f.down)
          continue;
        bool labelled = std::all_of(req.required_labels.begin(), req.required_labels.end(),
                                    [&f = f](const auto& kv) {
                                      auto l = f.labels.find(kv.first);
                                      return l != f.labels.end() && l->second == kv.second;
                                    });
        if (!labelled)
          continue;
        ++candidates;
        auto t = taken[name];
        double free_cpus = static_cast<double>(f.logical_cpus) - f.cpus_used - t.first;
        uint64_t used_mem = f.memory_used + t.second;
        uint64_t free_mem = f.memory_bytes > used_mem ? f.memory_bytes - used_mem : 0;
        if (free_cpus + 1e-9 < cpus || free_mem < mem)
          continue;
        if (best == nullptr || free_cpus > best_free
            || (free_cpus == best_free
                && (f.cpu_workers < best_load
                    || (f.cpu_workers == best_load && name < *best)))) {
          best = &name;
          best_free = free_cpus;
          best_load = f.cpu_workers;
        }
      }
      if (best == nullptr) {
        fits = false;
        break;
      }
      taken[*best].first += cpus;
      taken[*best].second += mem;
      where.push_back(*best);
    }
    if (!fits) {
      std::string labels;
      for (const auto& [k, v] : req.required_labels)
        labels += (labels.empty() ? " carrying " : ",") + k + "=" + v;
      std::string each = show_number(cpus) + " core(s)";
      if (mem > 0)
        each += " and " + std::to_string(mem >> 20) + " MiB";
      st.cpu_waiting_reason[qname] =
        candidates == 0
          ? "waiting: no machine" + labels + " takes new work"
          : "waiting: needs " + std::to_string(total) + " CPU-only worker(s) of " + each
              + " on " + (labels.empty() ? "any machine" : "machines" + labels)
              + "; only " + std::to_string(where.size()) + " fit now";
      ++it;
      continue;
    }
    auto groups = run_groups_in_rank_order(spec);
    uint32_t rank = 0;
    for (size_t g = 0; g < groups.size(); ++g)
      for (uint32_t i = 0; i < groups[g].second; ++i, ++rank) {
        auto* w = run.add_workers();
        w->set_rank(rank);
        w->set_group(groups[g].first);
        w->set_group_rank(i);
        w->set_machine(where[rank]);
        w->set_numa_node(-1);
        set_state(*w, worker_state::placed);
        w->set_array_index(copy);
        w->set_name(worker_name(run_name, copy, rank));
      }
    copy_placed(st, run, copy, where.empty() ? std::string{} : where.front());
    st.cpu_waiting_reason.erase(qname);
    st.waiting.erase(qname);
    touched.insert(run_name);
    started.push_back(qname);
    spdlog::info("scheduler: run {} placed ({} CPU-only worker(s))", qname, where.size());
    it = st.cpu_queue.erase(it);
  }
}

/// Gives back what copy `copy` of `run` holds (its GPUs, cores and memory,
/// its time limit) and tells its machines: the copy has ended.
void end_copy(self_ptr self, const v1::Run& run, int32_t copy) {
  auto& st = self->state;
  const auto qname = run.spec().name() + "[" + std::to_string(copy) + "]";
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

/// Stops run or copy `qname` when its time limit, `seconds` from now, is
/// reached (an `atom::deadline` to itself, matched by token).
void arm_time_limit(self_ptr self, const std::string& qname, int64_t seconds) {
  auto token = self->state.next_limit_token++;
  self->state.limit_token[qname] = token;
  self->delayed_send(self, std::chrono::seconds{std::max<int64_t>(0, seconds)},
                     atom::deadline_v, qname, token);
}

/// One pass of the queue: placed runs get their workers and are marked for
/// the group commit; waiting runs get the engine's reason.
void schedule_pass(self_ptr self) {
  auto& st = self->state;
  auto decisions = st.queue->schedule(clock_seconds(self));
  std::set<std::string> touched;
  std::vector<std::string> started;
  for (auto& d : decisions) {
    auto [run_name, copy] = parse_queue_name(d.run);
    st.waiting.erase(d.run);
    auto it = st.runs.find(run_name);
    if (it == st.runs.end()) {
      spdlog::error("scheduler: placed unknown run {}; releasing it", d.run);
      st.queue->complete(d.run);
      continue;
    }
    auto& run = it->second;
    auto groups = run_groups_in_rank_order(run.spec());
    // Drop what an earlier placement of this copy left (none normally).
    auto* ws = run.mutable_workers();
    ws->erase(std::remove_if(ws->begin(), ws->end(),
                             [copy = copy](const auto& w) {
                               return w.array_index() == copy;
                             }),
              ws->end());
    std::string leader_machine;
    for (const auto& pw : d.where.workers) {
      auto* w = run.add_workers();
      w->set_rank(pw.rank);
      w->set_group(pw.group < groups.size() ? groups[pw.group].first : "");
      w->set_group_rank(pw.group_rank);
      w->set_machine(st.index->machine_name(pw.machine));
      for (auto& id : st.index->gpu_ids(pw.machine, pw.gpus))
        w->add_gpu_ids(std::move(id));
      w->set_numa_node(pw.numa_node);
      set_state(*w, worker_state::placed);
      w->set_array_index(copy);
      w->set_name(worker_name(run_name, copy, pw.rank));
      if (pw.rank == d.where.leader)
        leader_machine = w->machine();
    }
    copy_placed(st, run, copy, leader_machine);
    touched.insert(run_name);
    started.push_back(d.run);
    spdlog::info("scheduler: run {} placed ({} worker(s), {})", d.run,
                 d.where.workers.size(), to_string(d.where.tier));
  }
  place_cpu_runs(st, touched, started);
  for (const auto& qname : started) {
    const auto& spec = st.runs[parse_queue_name(qname).first].spec();
    if (spec.time_limit_seconds() > 0)
      arm_time_limit(self, qname, static_cast<int64_t>(spec.time_limit_seconds()));
  }
  for (const auto& name : touched) {
    auto& run = st.runs[name];
    run.set_waiting_reason(waiting_reason_of(st, run));
    index_run(self, run);
    mark(self, name);
  }
  for (const auto& qname : st.waiting) {
    auto run_name = parse_queue_name(qname).first;
    auto it = st.runs.find(run_name);
    if (it == st.runs.end() || touched.count(run_name))
      continue;
    auto why = waiting_reason_of(st, it->second);
    if (why != it->second.waiting_reason()) {
      it->second.set_waiting_reason(std::move(why));
      mark(self, run_name);
    }
  }
}

/// The worker set of `machine`: every worker of a live run placed there.
v1::WorkerOrders orders_for(scheduler_state& st, const std::string& machine) {
  v1::WorkerOrders out;
  out.set_machine(machine);
  auto& gen = st.generation[machine];
  gen = gen == 0 ? st.generation_base : gen + 1;
  out.set_generation(gen);
  auto on = st.runs_on.find(machine);
  if (on == st.runs_on.end())
    return out;
  // The machine's multi-machine NVLink domain (NVIDIA_IMEX_CHANNELS).
  std::string nvlink_domain;
  if (auto f = st.machine_facts_by_name.find(machine); f != st.machine_facts_by_name.end())
    if (auto l = f->second.labels.find(topology_label::nvlink_domain); l != f->second.labels.end())
      nvlink_domain = l->second;
  for (const auto& run_name : on->second) {
    auto it = st.runs.find(run_name);
    if (it == st.runs.end())
      continue;
    const auto& run = it->second;
    const auto ended = ended_copies(run);
    std::map<int32_t, uint32_t> world;
    std::map<int32_t, std::set<std::string>> spans;  // machines per copy
    for (const auto& w : run.workers()) {
      ++world[w.array_index()];
      spans[w.array_index()].insert(w.machine());
    }
    for (const auto& w : run.workers()) {
      if (w.machine() != machine || state_of(w) == worker_state::stopped
          || ended.count(w.array_index()))
        continue;
      auto* o = out.add_workers();
      o->set_worker(w.name());
      o->set_run(run_name);
      o->set_rank(w.rank());
      o->set_group(w.group());
      o->set_group_rank(w.group_rank());
      o->set_world_size(world[w.array_index()]);
      *o->mutable_gpu_ids() = w.gpu_ids();
      o->set_numa_node(w.numa_node());
      o->set_master_addr(run.master_addr());
      o->set_master_port(master_port);
      *o->mutable_spec() = run.spec();
      o->set_array_index(w.array_index());
      o->set_leader_machine(run.leader_machine());
      o->set_machine_count(static_cast<uint32_t>(spans[w.array_index()].size()));
      o->set_namespace_(run.spec().namespace_());
      o->set_nvlink_domain(nvlink_domain);
    }
  }
  return out;
}

/// The group commit: one batch with sync for every run changed since the
/// last flush, then the answers, then the machines' new worker sets.
void flush(self_ptr self) {
  auto& st = self->state;
  st.flush_pending = false;
  std::vector<Store::change> changes;
  changes.reserve(st.dirty_runs.size());
  for (const auto& name : st.dirty_runs) {
    auto it = st.runs.find(name);
    if (it == st.runs.end())
      changes.push_back({family::runs, name, std::nullopt});
    else
      changes.push_back({family::runs, name, it->second.SerializeAsString()});
  }
  auto err = st.config.store->write(changes, true);
  if (err) {
    // Kept dirty: the next change tries again. Nobody is told of a run that
    // is not on disk.
    spdlog::error("scheduler: cannot store {} run(s): {}", changes.size(),
                  render_error(err));
    for (auto& [rp, run] : st.replies)
      rp.deliver(err);
    for (auto& [rp, name] : st.run_replies)
      rp.deliver(err);
  } else {
    st.dirty_runs.clear();
    for (auto& [rp, run] : st.replies)
      rp.deliver(std::move(run));
    for (auto& [rp, name] : st.run_replies) {
      auto it = st.runs.find(name);
      if (it != st.runs.end())
        rp.deliver(it->second);
      else
        rp.deliver(caf::make_error(ec::invalid_request, "no run named " + name));
    }
    // Agents act only on what is on disk here.
    for (const auto& m : st.dirty_machines)
      if (auto h = st.machines.find(m); h != st.machines.end())
        self->send(h->second, atom::assign_v, orders_for(st, m));
    st.dirty_machines.clear();
  }
  st.replies.clear();
  st.run_replies.clear();
}

/// What a run's worker states say of it: {nullopt, ""} while it goes on;
/// {Failed, why} when a worker failed (`held`: the agent's statuses, for
/// the reason); {Stopped, why} when every worker of every copy exited 0.
std::pair<std::optional<run_state>, std::string>
run_outcome(const v1::Run& run,
            const std::map<std::string, const v1::WorkerStatus*>& held) {
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
  auto copies = std::max<uint32_t>(1, run.spec().array_size());
  if (all_exited && run.copies_placed() >= copies)
    return {run_state::stopped, "completed: every worker exited with code 0"};
  return {std::nullopt, {}};
}

caf::error no_such_run(const std::string& name) {
  return caf::make_error(ec::invalid_request, "no run named " + name);
}

} // namespace

std::vector<std::string> queue_names_of(const v1::RunSpec& spec) {
  if (spec.array_size() == 0)
    return {spec.name()};
  std::vector<std::string> out;
  out.reserve(spec.array_size());
  for (uint32_t i = 0; i < spec.array_size(); ++i)
    out.push_back(spec.name() + "[" + std::to_string(i) + "]");
  return out;
}

std::pair<std::string, int32_t> parse_queue_name(const std::string& queue_name) {
  auto open = queue_name.rfind('[');
  if (open == std::string::npos || queue_name.empty() || queue_name.back() != ']')
    return {queue_name, -1};
  auto digits = queue_name.substr(open + 1, queue_name.size() - open - 2);
  if (digits.empty() || digits.size() > 9
      || !std::all_of(digits.begin(), digits.end(),
                      [](char c) { return c >= '0' && c <= '9'; }))
    return {queue_name, -1};
  return {queue_name.substr(0, open), static_cast<int32_t>(std::stoul(digits))};
}

std::string worker_name(const std::string& run, int32_t copy, uint32_t rank) {
  if (copy < 0)
    return run + "-" + std::to_string(rank);
  return run + "[" + std::to_string(copy) + "]-" + std::to_string(rank);
}

caf::error scheduler_config::validate() const {
  if (!store)
    return caf::make_error(ec::invalid_config, "scheduler: no store");
  if (!clock)
    return caf::make_error(ec::invalid_config, "scheduler: no wall clock");
  return caf::none;
}

placement_request placement_request_of(const v1::RunSpec& spec,
                                       const std::string& queue_name) {
  placement_request out;
  out.run = queue_name.empty() ? spec.name() : queue_name;
  for (auto& [name, size] : run_groups_in_rank_order(spec))
    out.groups.push_back(worker_group{name, size, spec.gpus_per_worker()});
  out.leader_group = 0;
  for (const auto& [k, v] : spec.labels())
    out.required_labels[k] = v;
  if (!spec.pool().empty())
    out.required_labels["pool"] = spec.pool();
  out.healthy_only = spec.healthy_only();
  out.time_limit_seconds = static_cast<int64_t>(spec.time_limit_seconds());
  return out;
}

caf::expected<machine_spec> machine_spec_of(const v1::SchedulerMachine& m) {
  machine_spec out;
  out.name = m.name();
  out.schedulable = m.schedulable();
  for (const auto& [k, v] : m.labels())
    out.labels[k] = v;
  for (const auto& g : m.gpus()) {
    gpu_spec gs;
    gs.id = g.id();
    gs.numa_node = g.numa_node();
    auto h = health_of(g);
    if (!h)
      return caf::make_error(ec::invalid_request,
                             "machine " + m.name() + ": GPU " + g.id()
                               + " has unknown health '" + g.health() + "'");
    gs.health = *h;
    for (auto peer : g.nvlink_peers()) {
      if (peer >= static_cast<uint32_t>(m.gpus_size()) || peer >= max_gpus_per_machine)
        return caf::make_error(ec::invalid_request,
                               "machine " + m.name() + ": GPU " + g.id()
                                 + " has NVLink peer index " + std::to_string(peer)
                                 + " out of range");
      gs.nvlink_peers |= gpu_mask{1} << peer;
    }
    out.gpus.push_back(std::move(gs));
  }
  return out;
}

scheduler_actor::behavior_type
scheduler(scheduler_actor::stateful_pointer<scheduler_state> self,
          scheduler_config config) {
  if (auto err = config.validate()) {
    spdlog::error("scheduler: {}", render_error(err));
    self->quit(err);
    return scheduler_actor::behavior_type::make_empty_behavior();
  }
  auto& st = self->state;
  st.config = std::move(config);
  st.index = std::make_unique<placement_index>(st.config.placement);
  st.queue = std::make_unique<scheduler_queue>(*st.index, st.config.queue);
  st.generation_base = static_cast<uint64_t>(st.config.clock->now_unix_ms()) * 1000;

  // Load every stored run: waiting copies queue again in submission order;
  // placed ones re-adopt their GPUs as their machines' snapshots arrive.
  auto loaded = st.config.store->load_all<v1::Run>(family::runs);
  if (!loaded) {
    // Never run without knowing which GPUs are held.
    spdlog::error("scheduler: cannot load the stored runs: {}",
                  render_error(loaded.error()));
    self->quit(loaded.error());
    return scheduler_actor::behavior_type::make_empty_behavior();
  }
  std::sort(loaded->begin(), loaded->end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.second.submitted_unix_ms(), a.first)
           < std::make_tuple(b.second.submitted_unix_ms(), b.first);
  });
  auto now = clock_seconds(self);
  for (auto& [key, run] : *loaded) {
    if (key != run.spec().name()) {
      spdlog::error("scheduler: stored run '{}' names itself '{}'; left alone",
                    key, run.spec().name());
      continue;
    }
    // Runs stored before arrays and worker names existed.
    for (auto& w : *run.mutable_workers()) {
      if (run.spec().array_size() == 0)
        w.set_array_index(-1);
      if (w.name().empty())
        w.set_name(worker_name(key, w.array_index(), w.rank()));
    }
    if (has_ended(state_of(run))) {
      st.runs.emplace(key, std::move(run));
      continue;
    }
    const auto ended = ended_copies(run);
    for (const auto& qname : queue_names_of(run.spec())) {
      auto copy = parse_queue_name(qname).second;
      if (ended.count(copy))
        continue;  // it holds nothing
      if (cpu_only(run.spec())) {
        bool placed = std::any_of(run.workers().begin(), run.workers().end(),
                                  [copy = copy](const auto& w) {
                                    return w.array_index() == copy;
                                  });
        if (!placed) {
          st.cpu_queue.push_back(qname);
          st.waiting.insert(qname);
        }
        continue;
      }
      auto ids = held_gpu_ids(run, copy);
      if (!ids.empty()) {
        st.restoring[qname].missing.insert(ids.begin(), ids.end());
        continue;
      }
      if (auto err = st.queue->submit(placement_request_of(run.spec(), qname), now))
        spdlog::error("scheduler: cannot queue stored run {}: {}", qname,
                      render_error(err));
      else
        st.waiting.insert(qname);
    }
    if (run.workers_size() == 0 && state_of(run) != run_state::waiting) {
      spdlog::error("scheduler: stored run {} is {} without workers; it waits again",
                    key, run.state());
      set_state(run, run_state::waiting);
    }
    st.runs.emplace(key, std::move(run));
  }
  for (auto& [key, run] : st.runs)
    if (live(run)) {
      account(st, run, 1);
      for (const auto& w : run.workers())
        st.runs_on[w.machine()].insert(key);
    }
  for (const auto& [key, run] : st.runs) {
    if (!live(run) || run.spec().time_limit_seconds() == 0)
      continue;
    auto elapsed = (st.config.clock->now_unix_ms() - run.placed_unix_ms()) / 1000;
    auto left = static_cast<int64_t>(run.spec().time_limit_seconds()) - elapsed;
    std::set<int32_t> copies;
    const auto ended = ended_copies(run);
    for (const auto& w : run.workers())
      if (state_of(w) != worker_state::stopped && !ended.count(w.array_index()))
        copies.insert(w.array_index());
    for (auto c : copies)
      arm_time_limit(self, c < 0 ? key : key + "[" + std::to_string(c) + "]", left);
  }
  spdlog::info("scheduler: {} run(s) loaded, {} copies re-adopting GPUs",
               st.runs.size(), st.restoring.size());

  return {
    [self](atom::submit, v1::RunSpec& spec) -> caf::result<v1::Run> {
      auto& st = self->state;
      if (auto err = validate_run_spec(spec))
        return err;
      const auto name = spec.name();
      if (st.runs.count(name))
        return caf::make_error(ec::invalid_request,
                               "a run named " + name + " already exists");
      v1::Run run;
      *run.mutable_spec() = std::move(spec);
      set_state(run, run_state::waiting);
      run.set_waiting_reason("waiting: not scheduled yet");
      run.set_submitted_unix_ms(st.config.clock->now_unix_ms());
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
      st.runs.emplace(name, std::move(run));
      mark(self, name);
      schedule_pass(self);
      // Answered once the run (as the pass left it) is on disk.
      auto rp = self->make_response_promise<v1::Run>();
      st.run_replies.emplace_back(rp, name);
      return rp;
    },
    [self](atom::get, const std::string& name) -> caf::result<v1::Run> {
      auto& st = self->state;
      auto it = st.runs.find(name);
      if (it == st.runs.end())
        return no_such_run(name);
      return it->second;
    },
    [self](atom::runs) -> v1::RunList {
      v1::RunList out;
      for (const auto& [name, run] : self->state.runs)
        *out.add_runs() = run;
      return out;
    },
    [self](atom::remove, const std::string& name) -> caf::result<v1::Run> {
      auto& st = self->state;
      auto it = st.runs.find(name);
      if (it == st.runs.end())
        return no_such_run(name);
      v1::Run out = std::move(it->second);
      st.runs.erase(it);
      release_run(st, out);
      if (state_of(out) != run_state::failed)
        set_run_state(out, run_state::stopped);
      index_run(self, out);
      mark(self, name);
      spdlog::info("scheduler: run {} deleted", name);
      schedule_pass(self);
      auto rp = self->make_response_promise<v1::Run>();
      st.replies.emplace_back(rp, std::move(out));
      return rp;
    },
    [self](v1::SchedulerMachine& m) {
      auto& st = self->state;
      auto spec = machine_spec_of(m);
      if (!spec) {
        spdlog::error("scheduler: snapshot dropped: {}", render_error(spec.error()));
        return;
      }
      caf::error err;
      if (auto id = st.index->find_machine(m.name()))
        err = st.index->update_machine(*id, *spec);
      else if (auto added = st.index->add_machine(*spec); !added)
        err = added.error();
      if (err) {
        spdlog::error("scheduler: snapshot of {} dropped: {}", m.name(),
                      render_error(err));
        return;
      }
      auto& facts = st.machine_facts_by_name[m.name()];
      facts.address = m.address();
      facts.schedulable = m.schedulable() && !m.down();
      facts.labels.clear();
      for (const auto& [k, v] : m.labels())
        facts.labels[k] = v;
      facts.logical_cpus = m.logical_cpus();
      facts.memory_bytes = m.memory_bytes();
      if (m.down() && !facts.down) {
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
      restore_pass(self);
      schedule_pass(self);
    },
    [self](atom::complete, const std::string& name) {
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
    },
    [self](atom::attach, const std::string& machine, machine_actor& handle) {
      auto& st = self->state;
      st.machines[machine] = std::move(handle);
      // Its worker set, even an empty one: the agent drops what it holds
      // for runs that ended meanwhile.
      mark_machine(self, machine);
    },
    [self](v1::WorkerStatuses& statuses) {
      auto& st = self->state;
      const auto& machine = statuses.machine();
      // Outputs of a worker stopped with its run or its copy (a time limit,
      // a failed gang) come after that ended: kept on the worker all the same.
      for (const auto& w : statuses.workers()) {
        if (w.outputs_size() == 0)
          continue;
        auto r = st.runs.find(w.run());
        if (r == st.runs.end())
          continue;
        auto& run = r->second;
        bool run_ended = has_ended(state_of(run));
        auto ended = ended_copies(run);
        for (auto& rw : *run.mutable_workers())
          if (rw.name() == w.worker() && rw.machine() == machine && rw.outputs_size() == 0
              && (run_ended || ended.count(rw.array_index()))) {
            *rw.mutable_outputs() = w.outputs();
            mark(self, r->first);
          }
      }
      auto on = st.runs_on.find(machine);
      if (on == st.runs_on.end())
        return;
      std::map<std::string, const v1::WorkerStatus*> held;
      for (const auto& w : statuses.workers())
        held[w.worker()] = &w;
      std::vector<std::pair<std::string, std::string>> lost;
      std::vector<std::string> touched;
      std::vector<std::pair<std::string, int32_t>> newly_ended;
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
            changed = true;
          }
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
        }
      }
      // A copy whose workers have all ended gives back what it holds at
      // once (its waiting siblings may take it); if one failed, the run
      // fails below.
      for (const auto& [run_name, copy] : newly_ended) {
        spdlog::info("scheduler: run {}[{}] ended", run_name, copy);
        end_copy(self, st.runs[run_name], copy);
      }
      std::set<std::string> failed;
      for (const auto& [run_name, worker] : lost) {
        if (!failed.insert(run_name).second)
          continue;
        auto& run = st.runs[run_name];
        auto why = "worker " + worker + " was lost: machine " + machine
                   + " no longer holds it";
        spdlog::warn("scheduler: run {} failed: {}", run_name, why);
        finish_run(self, run, run_state::failed, why);
      }
      // A run whose workers all exited 0 is complete; one whose worker
      // failed fails, and its other workers are stopped (their machines get
      // worker sets without them).
      bool ended = !failed.empty() || !newly_ended.empty();
      for (const auto& run_name : touched) {
        if (failed.count(run_name))
          continue;
        auto& run = st.runs[run_name];
        auto [state, why] = run_outcome(run, held);
        if (!state)
          continue;
        spdlog::info("scheduler: run {} {}: {}", run_name, to_string(*state), why);
        finish_run(self, run, *state, why);
        ended = true;
      }
      if (ended)
        schedule_pass(self);
    },
    [self](atom::tick) { flush(self); },
    [self](atom::deadline, std::string& qname, uint64_t token) {
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
        end_copy(self, run, copy);
        for (auto& w : *run.mutable_workers())
          if (w.array_index() == copy && !worker_ended(w))
            set_state(w, worker_state::stopped);
        const auto ended = ended_copies(run);
        bool any_left = false;
        for (const auto& w : run.workers())
          any_left = any_left || !ended.count(w.array_index());
        for (const auto& q : queue_names_of(run.spec()))
          any_left = any_left || st.waiting.count(q) > 0;
        if (!any_left) {
          // Every copy has ended: nothing left to release.
          set_state(run, run_state::stopped);
          run.set_waiting_reason(why);
          index_run(self, run);
        }
        mark(self, run_name);
      }
      schedule_pass(self);
    },
  };
}

} // namespace astraeus
