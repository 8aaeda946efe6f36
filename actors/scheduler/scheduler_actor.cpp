#include "actors/scheduler/scheduler_actor.hpp"

#include <algorithm>
#include <tuple>

#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "actors/scheduler/scheduler_internal.hpp"
#include "messages/error.hpp"
#include "messages/run_key.hpp"
#include "runtime/process/wall_clock.hpp"
#include "runtime/workers/run_spec.hpp"

namespace astraeus {

using namespace scheduler_detail;

std::vector<std::string> queue_names_of(const v1::RunSpec& spec) {
  auto key = run_key(spec);
  if (spec.array_size() == 0)
    return {key};
  std::vector<std::string> out;
  out.reserve(spec.array_size());
  for (uint32_t i = 0; i < spec.array_size(); ++i)
    out.push_back(key + "[" + std::to_string(i) + "]");
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

std::string worker_name(const v1::RunSpec& spec, int32_t copy, uint32_t rank) {
  const auto& ns = spec.namespace_();
  return worker_name(ns.empty() ? spec.name() : ns + "." + spec.name(), copy, rank);
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
  out.run = queue_name.empty() ? run_key(spec) : queue_name;
  for (auto& [name, size] : run_groups_in_rank_order(spec))
    out.groups.push_back(worker_group{name, size, spec.gpus_per_worker()});
  out.leader_group = 0;
  for (const auto& [k, v] : spec.labels())
    out.required_labels[k] = v;
  if (!spec.pool().empty())
    out.required_labels["pool"] = spec.pool();
  out.healthy_only = spec.healthy_only();
  out.time_limit_seconds = static_cast<int64_t>(spec.time_limit_seconds());
  out.priority = spec.priority();
  // issue 22: a GPU worker's cores and memory are placed with its GPUs.
  out.cpus_per_worker = spec.cpus_per_worker();
  out.memory_bytes_per_worker = spec.memory_bytes_per_worker();
  out.one_worker_per_machine = spec.one_worker_per_machine();
  // issue 21: only a validation's checks go to an Accepting machine.
  if (spec.validation().empty())
    out.required_labels[std::string(accepting_label)] = "false";
  // issue 22: RDMA devices are only given where a port is up.
  if (spec.rdma())
    out.required_labels[std::string(rdma_label)] = "up";
  return out;
}

caf::expected<machine_spec> machine_spec_of(const v1::SchedulerMachine& m) {
  machine_spec out;
  out.name = m.name();
  out.schedulable = m.schedulable();
  out.cpus = m.logical_cpus();
  out.memory_bytes = m.memory_bytes();
  if (!out.schedulable)
    out.not_schedulable = m.down() ? std::string{"is Down"} : m.not_schedulable();
  // An Accepting machine takes checks only (issue 21): why it takes no
  // other work, for the waiting reasons of runs that may not go there.
  else if (m.accepting())
    out.not_schedulable = m.not_schedulable();
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

  if (st.config.background_sync) {
    // The syncer reports to the actor by a weak reference: it never keeps
    // the actor alive, and it is stopped with the actor's state.
    caf::weak_actor_ptr weak{self->ctrl()};
    st.syncer = std::make_unique<wal_syncer>(
      st.config.store, [weak](uint64_t seq, caf::error err) {
        if (auto strong = weak.lock())
          caf::anon_send(caf::actor_cast<scheduler_actor>(strong), atom::tick_v, seq,
                         std::move(err));
      },
      st.config.commits_in_flight != 0 ? st.config.commits_in_flight
                                       : st.config.store->limits().writes_in_flight,
      st.config.commit_priority);
  }
  if (auto err = load_runs(self)) {
    self->quit(err);
    return scheduler_actor::behavior_type::make_empty_behavior();
  }
  return {
    [self](atom::submit, v1::RunSpec& spec) -> caf::result<v1::Run> {
      return submit_run(self, spec);
    },
    [self](atom::get, const std::string& ref) -> caf::result<v1::Run> {
      auto key = find_run(self->state, ref);
      if (!key)
        return key.error();
      return self->state.runs.at(*key);
    },
    [self](atom::runs) -> v1::RunList {
      std::vector<const v1::Run*> sorted;
      sorted.reserve(self->state.runs.size());
      for (const auto& [name, run] : self->state.runs)
        sorted.push_back(&run);
      // By name, then workspace (issue 13: a name may be in several).
      std::sort(sorted.begin(), sorted.end(), [](const v1::Run* a, const v1::Run* b) {
        return std::tie(a->spec().name(), a->spec().workspace())
               < std::tie(b->spec().name(), b->spec().workspace());
      });
      v1::RunList out;
      out.mutable_runs()->Reserve(static_cast<int>(sorted.size()));
      for (const auto* run : sorted)
        *out.add_runs() = *run;
      return out;
    },
    [self](atom::remove, const std::string& ref) -> caf::result<v1::Run> {
      return remove_run(self, ref);
    },
    [self](atom::stop, const std::string& ref, const std::string& why) -> caf::result<v1::Run> {
      auto key = find_run(self->state, ref);
      if (!key)
        return key.error();
      auto r = self->state.runs.find(*key);
      if (live(r->second)) {
        spdlog::info("scheduler: run {} stopped: {}", *key, why);
        finish_run(self, r->second, run_state::stopped, why);
        schedule_pass(self);
      }
      return r->second;
    },
    [self](v1::SchedulerMachine& m) {
      // A removed machine's actor may still have a snapshot on its way.
      if (!self->state.removed_senders.empty()
          && self->state.removed_senders.count(
            caf::actor_cast<caf::actor_addr>(self->current_sender())))
        return;
      apply_snapshot(self, m);
    },
    [self](atom::complete, const std::string& name) { complete_run(self, name); },
    [self](atom::attach, const std::string& machine, machine_actor& handle) {
      auto& st = self->state;
      st.machines[machine] = std::move(handle);
      // A new machine actor has been told nothing yet.
      st.notes_sent.erase(machine);
      // Its worker set, even an empty one: the agent drops what it holds
      // for runs that ended meanwhile.
      mark_machine(self, machine);
    },
    [self](v1::WorkerStatuses& statuses) { apply_worker_statuses(self, statuses); },
    [self](atom::tick) { flush(self); },
    [self](atom::tick, uint64_t seq, caf::error& err) { synced(self, seq, err); },
    [self](atom::deadline, std::string& qname, uint64_t token) {
      time_limit_reached(self, qname, token);
    },
    [self](atom::expire, const std::string& key, int64_t submitted_unix_ms) {
      auto r = self->state.runs.find(key);
      if (r != self->state.runs.end() && r->second.deleted()
          && r->second.submitted_unix_ms() == submitted_unix_ms
          && stopping_workers(r->second).empty())
        forget_run(self, key);
    },
    [self](atom::expire, const std::string& workspace) -> uint64_t {
      std::vector<std::string> keys;
      for (const auto& [key, run] : self->state.runs)
        if (run.spec().workspace() == workspace && has_ended(state_of(run))
            && stopping_workers(run).empty())
          keys.push_back(key);
      for (const auto& key : keys)
        forget_run(self, key);
      return keys.size();
    },
    [self](const v1::RemoveMachine& req) -> caf::result<bool> {
      if (auto err = forget_machine(self, req.name()))
        return err;
      return true;
    },
    [self](v1::DegradedIbPortList& list) {
      auto& degraded = self->state.degraded_ib_ports;
      degraded.clear();
      for (auto& m : *list.mutable_machines())
        degraded[m.machine()].assign(std::make_move_iterator(m.mutable_ports()->begin()),
                                     std::make_move_iterator(m.mutable_ports()->end()));
    },
  };
}

} // namespace astraeus
