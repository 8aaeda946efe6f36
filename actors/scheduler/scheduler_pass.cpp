// A schedule pass: GPU runs and copies through the placement engine's
// queue, CPU-only ones by cores and memory (place_cpu_runs); then the group
// commit (flush): the changed runs stored in one batch with sync, the
// waiting requests answered, and each changed machine sent its worker set
// (orders_for). With background sync: bursts handed to the syncer's
// threads, several at once when their runs are disjoint (etcd), delivered
// in burst order.

#include "actors/scheduler/scheduler_actor.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "actors/scheduler/placement_internal.hpp"
#include "actors/scheduler/scheduler_internal.hpp"
#include "messages/error.hpp"
#include "runtime/process/wall_clock.hpp"
#include "runtime/workers/run_spec.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "store/store.hpp"

namespace astraeus::scheduler_detail {

/// Places the CPU-only runs and copies waiting, in submission order, each
/// all or nothing: every worker goes to the machine (Up, taking work, with
/// every required label) with the most CPU cores left that still fits its
/// cores and memory; ties go to the machine with fewer CPU-only workers,
/// then by name. The GPU engine never sees them; their cores and memory
/// count against the machine like those of GPU workers.
void place_cpu_runs(scheduler_state& st, touched_runs& touched,
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
        if (!f.has_labels(req.required_labels))
          continue;
        ++candidates;
        // One worker per machine (sbatch --nodes=N): a machine this run
        // has one on already is passed over.
        if (spec.one_worker_per_machine()
            && std::find(where.begin(), where.end(), name) != where.end())
          continue;
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
        if (k.rfind("astraeus.io/", 0) != 0)  // the scheduler's own labels (issue 21)
          labels += (labels.empty() ? " carrying " : ",") + k + "=" + v;
      std::string each = show_number(cpus) + " core(s)";
      if (mem > 0)
        each += " and " + placement_detail::memory_text(mem);
      // More cores or memory than any machine with the labels has: it
      // cannot fit anywhere now (issue 13, item 5).
      double most_cpus = 0;
      uint64_t most_mem = 0;
      for (const auto& [name, f] : st.machine_facts_by_name)
        if (f.has_labels(req.required_labels)) {
          most_cpus = std::max(most_cpus, static_cast<double>(f.logical_cpus));
          most_mem = std::max(most_mem, f.memory_bytes);
        }
      std::string never;
      if (!st.machine_facts_by_name.empty() && most_cpus > 0 && cpus > most_cpus)
        never = "cannot fit anywhere now: a worker asks for " + show_number(cpus) +
                " CPU cores; the largest machine" + labels + " has " + show_number(most_cpus);
      else if (!st.machine_facts_by_name.empty() && most_mem > 0 && mem > most_mem)
        // In the GPU path's units ("256 GiB", "15.5 GiB"), not MiB here and
        // GiB there (a new-user trial).
        never = "cannot fit anywhere now: a worker asks for " +
                placement_detail::memory_text(mem) + "; the largest machine" + labels +
                " has " + placement_detail::memory_text(most_mem);
      st.cpu_waiting_reason[qname] =
        !never.empty() ? never
        : candidates == 0 && spec.rdma()
          ? "waiting: needs RDMA; no machine" + labels + " has an RDMA port up"
        : candidates == 0
          ? "waiting: no machine" + labels + " takes new work"
              + cpu_blockers(st, req.required_labels)
          : "waiting: needs " + std::to_string(total) + " CPU-only worker(s) of " + each
              + (spec.one_worker_per_machine() ? ", one per machine," : "")
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
        w->set_name(worker_name(spec, copy, rank));
      }
    copy_placed(st, run, copy, where.empty() ? std::string{} : where.front());
    st.cpu_waiting_reason.erase(qname);
    st.waiting.erase(qname);
    touched.emplace(run_name, &run);
    started.push_back(qname);
    spdlog::info("scheduler: run {} placed ({} CPU-only worker(s))", qname, where.size());
    it = st.cpu_queue.erase(it);
  }
}

/// Issue 21 (giving way): a GPU run of priority 0 or more that waits for
/// GPUs (not enough free, or reserved) stops the live runs below priority 0
/// (a validation's checks) that it needs, marked `preempted`, and no others:
/// the seed's checks give way "to anything that needs them"
/// (bring-up-a-gpu-cluster, "How checks stay out of your work's way"). The
/// engine is asked where the run would go with every check's hold set
/// aside (`placement_index::suspend`); the checks holding GPUs of that
/// placement (or, for a run that asks for cores or memory, holding any on
/// its machines) give way, if with only those set aside the run is placed.
/// A run that would not fit even then (it needs 8 GPUs, the machine has 7
/// healthy) stops nothing. Waiting runs are looked at by priority, then age
/// (at most `max_looked_at`); what one is given is held while the next is
/// looked at. Changes nothing in the index in the end but the stopped
/// checks' release. Returns whether any run was stopped.
bool preempt_for_waiting(self_ptr self) {
  constexpr size_t max_looked_at = 64;
  auto& st = self->state;
  // The live runs that may give way: usually none, and then no waiting run
  // is looked at (a long queue costs nothing here).
  struct check_hold {
    const std::string* run;
    allocation_id id;
    bool suspended = false;
  };
  std::vector<check_hold> holds;
  for (auto k = st.below_zero_runs.begin(); k != st.below_zero_runs.end();) {
    auto r = st.runs.find(*k);
    if (r == st.runs.end() || r->second.spec().priority() >= 0) {
      k = st.below_zero_runs.erase(k);
      continue;
    }
    if (live(r->second))
      for (const auto& qname : queue_names_of(r->second.spec())) {
        if (auto a = st.queue->allocation_of(qname))
          holds.push_back({&r->first, *a});
        if (auto rs = st.restoring.find(qname); rs != st.restoring.end())
          for (auto a : rs->second.pieces)
            holds.push_back({&r->first, a});
      }
    ++k;
  }
  if (holds.empty())
    return false;
  struct candidate {
    int32_t priority;
    int64_t submitted;
    const std::string* qname;
    const v1::Run* run;
  };
  std::vector<candidate> waiting;
  for (const auto& qname : st.waiting) {
    auto it = st.runs.find(parse_queue_name(qname).first);
    if (it == st.runs.end() || it->second.spec().priority() < 0 || cpu_only(it->second.spec()))
      continue;
    const auto* why = st.queue->waiting(qname);
    if (!why || (why->code != waiting_code::not_enough_gpus && why->code != waiting_code::reserved
                 && why->code != waiting_code::not_enough_cores_or_memory))
      continue;
    waiting.push_back({it->second.spec().priority(), it->second.submitted_unix_ms(), &qname,
                       &it->second});
  }
  std::sort(waiting.begin(), waiting.end(), [](const candidate& a, const candidate& b) {
    if (a.priority != b.priority)
      return a.priority > b.priority;
    if (a.submitted != b.submitted)
      return a.submitted < b.submitted;
    return *a.qname < *b.qname;
  });
  if (waiting.size() > max_looked_at)
    waiting.resize(max_looked_at);
  auto& index = *st.index;
  // Nothing freed, no check placed or ended and the same runs waiting
  // since a look that stopped nothing: it would stop nothing again (a
  // suspend and resume leave the epoch), so the pass costs nothing here.
  uint64_t seen = std::hash<uint64_t>{}(index.capacity_epoch());
  auto mix = [&seen](uint64_t v) { seen ^= v + 0x9e3779b97f4a7c15ull + (seen << 6) + (seen >> 2); };
  for (const auto& h : holds)
    mix(h.id);
  for (const auto& c : waiting) {
    mix(std::hash<std::string>{}(*c.qname));
    mix(static_cast<uint64_t>(st.queue->waiting(*c.qname)->code));
  }
  seen |= 1;  // never 0
  if (seen == st.give_way_seen)
    return false;
  std::set<std::string> victims;
  auto set_aside = [&](check_hold& h, bool aside) {
    if (h.suspended == aside)
      return;
    auto err = aside ? index.suspend(h.id) : index.resume(h.id);
    if (err)
      spdlog::error("scheduler: run {}: cannot {} its hold to see what it gives way to: {}",
                    *h.run, aside ? "set aside" : "take back", render_error(err));
    else
      h.suspended = aside;
  };
  // Where a waiting run would go, held while the next is looked at.
  std::vector<allocation_id> given;
  for (const auto& c : waiting) {
    // Its required labels keep accepting=false: a check on an Accepting
    // machine never gives way to work that may not go there anyway.
    auto req = placement_request_of(c.run->spec(), *c.qname);
    for (auto& h : holds)
      set_aside(h, true);
    auto where = index.place(req);
    const auto* p = std::get_if<placement>(&where);
    std::set<std::string> needed;
    if (p) {
      const bool asks_cores = req.cpus_per_worker > 0 || req.memory_bytes_per_worker > 0;
      for (const auto& h : holds) {
        if (victims.count(*h.run))
          continue;
        for (const auto& set : index.allocation_gpus(h.id))
          for (const auto& w : p->workers)
            if (w.machine == set.machine && ((w.gpus & set.gpus) != 0 || asks_cores))
              needed.insert(*h.run);
      }
    }
    for (auto& h : holds)
      set_aside(h, victims.count(*h.run) > 0 || needed.count(*h.run) > 0);
    if (needed.empty())
      continue;  // it would not fit with every check gone, or fits without stopping one
    // With only those set aside it must fit, or it stops nothing.
    where = index.place(req);
    p = std::get_if<placement>(&where);
    if (!p) {
      for (auto& h : holds)
        set_aside(h, victims.count(*h.run) > 0);
      continue;
    }
    if (auto a = index.commit(*p))
      given.push_back(*a);
    for (const auto& name : needed) {
      victims.insert(name);
      spdlog::info("scheduler: run {} gives way to run {}", name, *c.qname);
    }
  }
  for (auto a : given)
    if (auto err = index.give_back_hold(a))
      spdlog::error("scheduler: cannot give back a hold of giving way: {}", render_error(err));
  for (auto& h : holds)
    set_aside(h, false);
  st.give_way_seen = victims.empty() ? seen : 0;
  for (const auto& name : victims) {
    auto& run = st.runs[name];
    run.set_preempted(true);
    finish_run(self, run, run_state::stopped, "gave way to real work");
  }
  return !victims.empty();
}

/// One pass of the queue: placed runs get their workers and are marked for
/// the group commit; waiting runs get the engine's reason. A run that waits
/// while a validation's check holds GPUs it could use preempts the check,
/// and the pass runs once more.
void schedule_pass(self_ptr self) {
  schedule_pass_once(self);
  if (preempt_for_waiting(self))
    schedule_pass_once(self);
}

/// One pass of the queue (schedule_pass without giving way).
void schedule_pass_once(self_ptr self) {
  auto& st = self->state;
  auto decisions = st.queue->schedule(clock_seconds(self));
  touched_runs touched;
  std::vector<std::string> started;
  // Each started copy's run, for its time limit.
  std::vector<const v1::Run*> started_runs;
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
      w->set_name(worker_name(run.spec(), copy, pw.rank));
      give_degraded_ports(st, run.spec(), *w);
      if (pw.rank == d.where.leader)
        leader_machine = w->machine();
    }
    copy_placed(st, run, copy, leader_machine);
    touched.emplace(run_name, &run);
    started.push_back(d.run);
    started_runs.push_back(&run);
    spdlog::info("scheduler: run {} placed ({} worker(s), {})", d.run,
                 d.where.workers.size(), to_string(d.where.tier));
  }
  const size_t gpu_started = started.size();
  place_cpu_runs(st, touched, started);
  // Issue 23: which waiting runs wait for what stopping workers hold.
  note_stopping_waits(st);
  for (size_t i = 0; i < started.size(); ++i) {
    const auto& qname = started[i];
    const auto& spec = i < gpu_started ? started_runs[i]->spec()
                                       : st.runs[parse_queue_name(qname).first].spec();
    if (spec.time_limit_seconds() > 0)
      arm_time_limit(self, qname, static_cast<int64_t>(spec.time_limit_seconds()));
  }
  for (const auto& [name, run_ptr] : touched) {
    auto& run = *run_ptr;
    run.set_waiting_reason(waiting_reason_of(st, run));
    index_run(self, run);
    mark(self, name);
  }
  auto refresh = [&](const std::string& qname) {
    auto run_name = parse_queue_name(qname).first;
    auto it = st.runs.find(run_name);
    if (it == st.runs.end() || touched.count(run_name))
      return;
    auto why = waiting_reason_of(st, it->second);
    if (why != it->second.waiting_reason()) {
      it->second.set_waiting_reason(std::move(why));
      mark(self, run_name);
    }
  };
  // A waiting run's reason changes only with the queue's, unless what
  // stopping workers hold is in play (now or in the last pass) or it is a
  // CPU-only run (reasons of their own): a long queue costs a submission
  // the runs whose reason changed, not every waiting run.
  const bool stopping_in_play = !st.stopping_waits.empty() || st.had_stopping_waits;
  st.had_stopping_waits = !st.stopping_waits.empty();
  if (stopping_in_play) {
    for (const auto& qname : st.waiting)
      refresh(qname);
    return;
  }
  for (const auto& qname : st.queue->reasons_changed())
    if (st.waiting.count(qname))
      refresh(qname);
  for (const auto& qname : st.cpu_queue)
    refresh(qname);
}

void give_degraded_ports(const scheduler_state& st, const v1::RunSpec& spec,
                         v1::WorkerAssignment& w) {
  if (w.gpu_ids_size() == 0 || spec.env().count("NCCL_IB_HCA"))
    return;
  auto d = st.degraded_ib_ports.find(w.machine());
  if (d == st.degraded_ib_ports.end())
    return;
  std::string kept, left_out;
  for (const auto& p : d->second) {
    *w.add_degraded_ib_ports() = p;
    auto& list = p.kept() ? kept : left_out;
    list += (list.empty() ? "" : ",") + p.port();
  }
  if (!left_out.empty())
    spdlog::info("scheduler: worker {} on {}: NCCL_IB_HCA leaves out {} (degraded)", w.name(),
                 w.machine(), left_out);
  if (!kept.empty())
    spdlog::warn("scheduler: worker {} on {}: NCCL_IB_HCA keeps {} though degraded: leaving "
                 "them out would leave no port", w.name(), w.machine(), kept);
}

namespace {

/// Whether `machines` (a copy of a run, on several machines) share no one
/// InfiniBand fabric: one of them has no RDMA port up, or two carry
/// different fabrics (topology.astraeus.io/fabric, an admin's or found from
/// the ports' subnet; a machine without one matches any). A machine the
/// scheduler no longer knows is taken as having no fabric to share.
bool spans_no_one_fabric(const scheduler_state& st, const std::set<std::string>& machines) {
  std::string fabric;
  for (const auto& name : machines) {
    auto f = st.machine_facts_by_name.find(name);
    if (f == st.machine_facts_by_name.end())
      return true;
    auto rdma = f->second.label(rdma_label);
    if (!rdma || *rdma != "up")
      return true;
    if (auto l = f->second.label(topology_label::fabric); l && !l->empty()) {
      if (fabric.empty())
        fabric = std::string{*l};
      else if (fabric != *l)
        return true;
    }
  }
  return false;
}

/// The address a worker reaches `machine` at (MASTER_ADDR): the one its
/// agent reported, else its name (as copy_placed sets the run's).
std::string address_of(const scheduler_state& st, const std::string& machine) {
  auto f = st.machine_facts_by_name.find(machine);
  return f != st.machine_facts_by_name.end() && !f->second.address.empty() ? f->second.address
                                                                         : machine;
}

} // namespace

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
    if (auto l = f->second.label(topology_label::nvlink_domain))
      nvlink_domain = std::string{*l};
  for (const auto& run_name : on->second) {
    auto it = st.runs.find(run_name);
    if (it == st.runs.end())
      continue;
    const auto& run = it->second;
    const auto ended = ended_copies(run);
    std::map<int32_t, uint32_t> world;
    std::map<int32_t, std::set<std::string>> spans;  // machines per copy
    // Each copy's leader (its rank 0) and so its MASTER_ADDR: a copy of an
    // array rendezvouses on its own leader's machine, not copy 0's (a
    // helper's audit: every copy was sent the first copy's address).
    std::map<int32_t, const std::string*> leader_of;
    for (const auto& w : run.workers()) {
      ++world[w.array_index()];
      spans[w.array_index()].insert(w.machine());
      if (w.rank() == 0)
        leader_of[w.array_index()] = &w.machine();
    }
    // Copies placed over Ethernet (NCCL_IB_DISABLE): worked out once per
    // copy that spans machines.
    std::map<int32_t, bool> over_ethernet;
    for (const auto& [copy, machines] : spans)
      if (machines.size() > 1)
        over_ethernet[copy] = spans_no_one_fabric(st, machines);
    for (const auto& w : run.workers()) {
      if (w.machine() != machine || state_of(w) == worker_state::stopped
          || ended.count(w.array_index()))
        continue;
      auto* o = out.add_workers();
      o->set_worker(w.name());
      o->set_run(run.spec().name());
      o->set_rank(w.rank());
      o->set_group(w.group());
      o->set_group_rank(w.group_rank());
      o->set_world_size(world[w.array_index()]);
      *o->mutable_gpu_ids() = w.gpu_ids();
      o->set_numa_node(w.numa_node());
      if (auto l = leader_of.find(w.array_index());
          run.spec().array_size() > 0 && l != leader_of.end()) {
        o->set_master_addr(address_of(st, *l->second));
        o->set_leader_machine(*l->second);
      } else {
        o->set_master_addr(run.master_addr());
        o->set_leader_machine(run.leader_machine());
      }
      o->set_master_port(master_port);
      *o->mutable_spec() = run.spec();
      o->set_array_index(w.array_index());
      o->set_machine_count(static_cast<uint32_t>(spans[w.array_index()].size()));
      o->set_namespace_(run.spec().namespace_());
      o->set_nvlink_domain(nvlink_domain);
      if (auto e = over_ethernet.find(w.array_index()); e != over_ethernet.end())
        o->set_over_ethernet(e->second);
      for (const auto& d : w.degraded_ib_ports())
        if (!d.kept())
          o->add_excluded_ib_ports(d.port());
    }
  }
  return out;
}

namespace {

/// Whether anything waits for the next burst: changed runs or machines, or
/// requests to answer.
bool gathered(const scheduler_state& st) {
  return !st.dirty_runs.empty() || !st.dirty_machines.empty() || !st.replies.empty()
         || !st.run_replies.empty();
}

/// The runs changed since the last burst, as store changes (an erased run,
/// no longer kept, is deleted).
/// The store changes for the runs changed since the last flush. A run
/// `shown` (name -> index into the shown copies, as the run is now) is left
/// to the syncer's thread: its change's value is left empty and its
/// (change, copy) pair added to `from_shown`.
std::vector<Store::change>
dirty_run_changes(const scheduler_state& st,
                  const std::unordered_map<std::string_view, size_t>* shown = nullptr,
                  std::vector<std::pair<size_t, size_t>>* from_shown = nullptr) {
  std::vector<Store::change> changes;
  changes.reserve(st.dirty_runs.size());
  for (const auto& name : st.dirty_runs) {
    // A run answered in this burst is in `runs` as its copy shows it: no
    // second look-up.
    if (shown) {
      if (auto s = shown->find(name); s != shown->end()) {
        from_shown->emplace_back(changes.size(), s->second);
        changes.push_back({family::runs, name, std::string{}});
        continue;
      }
    }
    // A displaced run (issue 23) is stored under its own key until its
    // workers have ended.
    const auto* run = stopping_record(st, name);
    if (!run) {
      changes.push_back({family::runs, name, std::nullopt});
      continue;
    }
    changes.push_back({family::runs, name, run->SerializeAsString()});
  }
  return changes;
}

/// Sends what the bursts at the front of `unsynced` say, in burst order,
/// for as long as they are done: answers and worker sets when the burst is
/// durable; else its requests fail, its runs and machines are marked again
/// (written with the next change), and so does every burst after it (their
/// worker sets may name its runs), whatever their own commit says.
void deliver_done_bursts(self_ptr self) {
  auto& st = self->state;
  size_t failed_runs = 0;
  caf::error failure;
  while (!st.unsynced.empty() && st.unsynced.front().done) {
    auto b = std::move(st.unsynced.front());
    st.unsynced.pop_front();
    if (b.err) {
      // As a failed synced write: nobody is told, the runs are written again
      // with the next change, and the machines get their sets then.
      for (auto& [rp, answer] : b.answers)
        rp.deliver(b.err);
      for (auto& [rp, i] : b.shown_answers)
        rp.deliver(b.err);
      failed_runs += b.runs.size();
      for (const auto& name : b.runs)
        st.dirty_runs.insert(name);
      for (const auto& o : b.orders)
        st.dirty_machines.insert(o.machine());
      for (auto& later : st.unsynced)
        if (!later.err)
          later.err = b.err;
      failure = b.err;
      continue;
    }
    for (auto& [rp, answer] : b.answers)
      if (answer)
        rp.deliver(std::move(*answer));
      else
        rp.deliver(answer.error());
    // The last answer from a copy takes it; an earlier one (the same run
    // asked for twice in a burst) gets its own.
    std::vector<size_t> last_use(b.shown ? b.shown->size() : 0);
    for (size_t a = 0; a < b.shown_answers.size(); ++a)
      last_use[b.shown_answers[a].second] = a;
    for (size_t a = 0; a < b.shown_answers.size(); ++a) {
      auto& [rp, i] = b.shown_answers[a];
      if (last_use[i] == a)
        rp.deliver(std::move((*b.shown)[i]));
      else
        rp.deliver(v1::Run{(*b.shown)[i]});
    }
    for (auto& o : b.orders)
      if (auto h = st.machines.find(o.machine()); h != st.machines.end())
        self->send(h->second, atom::assign_v, std::move(o));
  }
  if (failure)
    spdlog::error("scheduler: cannot store {} run(s): {}", failed_runs, render_error(failure));
}

/// `flush` with `background_sync`: what gathered becomes a burst handed to
/// the syncer's threads, unless they are all busy or one of its runs is in
/// a burst not yet durable (a run's later state must not race its earlier
/// one): then it waits for the next report (`synced`).
void flush_in_background(self_ptr self) {
  auto& st = self->state;
  if (!gathered(st))
    return;
  if (!st.dirty_runs.empty()) {
    if (st.commits_in_flight >= st.syncer->writes_in_flight())
      return;
    // With one write in flight at most, none is here (issue 14: no set
    // kept per run then).
    if (!st.runs_in_flight.empty())
      for (const auto& name : st.dirty_runs)
        if (st.runs_in_flight.count(name))
          return;
  }
  // Everything this burst says, as it is now (later bursts may change the
  // runs meanwhile), waits for its commit and for the bursts before it.
  commit_batch b;
  b.seq = ++st.written_seq;
  b.answers.reserve(st.replies.size());
  for (auto& [rp, run] : st.replies)
    b.answers.emplace_back(std::move(rp), std::move(run));
  // The runs answered as they are now: copied once, for the answer and
  // for the syncer's thread to serialize.
  b.shown = std::make_shared<std::vector<v1::Run>>();
  b.shown->reserve(st.run_replies.size());
  std::unordered_map<std::string_view, size_t> shown_of;
  for (auto& [rp, name] : st.run_replies) {
    auto it = st.runs.find(name);
    if (it == st.runs.end()) {
      b.answers.emplace_back(std::move(rp), no_such_run(name));
      continue;
    }
    auto [s, added] = shown_of.try_emplace(it->first, b.shown->size());
    if (added)
      b.shown->push_back(it->second);
    b.shown_answers.emplace_back(std::move(rp), s->second);
  }
  std::vector<std::pair<size_t, size_t>> from_shown;
  auto changes = dirty_run_changes(st, &shown_of, &from_shown);
  st.replies.clear();
  st.run_replies.clear();
  for (const auto& m : st.dirty_machines)
    if (st.machines.count(m))
      b.orders.push_back(orders_for(st, m));
  st.dirty_machines.clear();
  b.runs.assign(st.dirty_runs.begin(), st.dirty_runs.end());
  st.dirty_runs.clear();
  b.done = changes.empty();
  if (!b.done) {
    ++st.commits_in_flight;
    if (st.syncer->writes_in_flight() > 1)
      st.runs_in_flight.insert(b.runs.begin(), b.runs.end());
  }
  auto seq = b.seq;
  st.unsynced.push_back(std::move(b));
  if (changes.empty()) {
    deliver_done_bursts(self);
    return;
  }
  // Within the store's limits per batch (etcd: 128 operations per txn);
  // each run is a record of its own, so batches need not be one.
  if (from_shown.empty()) {
    st.syncer->write_and_sync(seq, std::move(changes));
    return;
  }
  st.syncer->write_and_sync(
    seq, std::move(changes),
    [shown = st.unsynced.back().shown,
     from_shown = std::move(from_shown)](std::vector<Store::change>& out) {
      for (auto [c, i] : from_shown)
        (*shown)[i].SerializeToString(&*out[c].value);
    });
}

} // namespace

/// The group commit: one batch with sync for every run changed since the
/// last flush, then the answers, then the machines' new worker sets. With
/// `background_sync` the batch is handed to the syncer's threads, which
/// write and sync it (etcd: the round trip to the quorum) while the actor
/// goes on; what goes out waits in `unsynced` until it is durable (`synced`).
void flush(self_ptr self) {
  auto& st = self->state;
  st.flush_pending = false;
  if (st.syncer) {
    flush_in_background(self);
    return;
  }
  // Inline: one synced write, then what it says.
  auto changes = dirty_run_changes(st);
  caf::error err;
  if (!changes.empty())
    err = st.config.store->write_chunked(changes, true);
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
        rp.deliver(no_such_run(name));
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

/// The syncer's report on burst `seq`: durable, or `err`.
void synced(self_ptr self, uint64_t seq, const caf::error& err) {
  auto& st = self->state;
  for (auto& b : st.unsynced) {
    if (b.seq != seq || b.done)
      continue;
    b.done = true;
    if (!b.err)  // a burst failed before it keeps that failure
      b.err = err;
    --st.commits_in_flight;
    if (!st.runs_in_flight.empty())
      for (const auto& name : b.runs)
        st.runs_in_flight.erase(name);
    break;
  }
  // What gathered meanwhile (before a failed burst's runs are marked again
  // below): a store that keeps failing is not retried in a loop, as for a
  // failed inline write; the failed runs go with the next change.
  const bool next = gathered(st);
  deliver_done_bursts(self);
  if (next)
    flush(self);
}

} // namespace astraeus::scheduler_detail
