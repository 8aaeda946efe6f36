#include "actors/scheduler_actor.hpp"

#include <algorithm>
#include <chrono>
#include <tuple>

#include <spdlog/spdlog.h>

#include "messages/error.hpp"
#include "runtime/wall_clock.hpp"
#include "runtime/run_spec.hpp"
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

caf::error persist(scheduler_state& st, const v1::Run& run, bool sync) {
  auto err = st.config.store->put(family::runs, run.spec().name(), run, sync);
  if (err)
    spdlog::error("scheduler: cannot store run {}: {}", run.spec().name(),
                  render_error(err));
  return err;
}

std::vector<std::string> held_gpu_ids(const v1::Run& run) {
  std::vector<std::string> out;
  for (const auto& w : run.workers())
    for (const auto& id : w.gpu_ids())
      out.push_back(id);
  return out;
}

void set_run_state(v1::Run& run, const char* state) {
  run.set_state(state);
  for (auto& w : *run.mutable_workers())
    w.set_state(state);
}

/// Releases the piecewise holds of a run still re-adopting its GPUs.
void drop_restore(scheduler_state& st, const std::string& name) {
  auto it = st.restoring.find(name);
  if (it == st.restoring.end())
    return;
  for (auto a : it->second.pieces)
    if (auto err = st.index->release(a))
      spdlog::error("scheduler: run {}: cannot release a restored hold: {}",
                    name, render_error(err));
  st.restoring.erase(it);
}

/// Releases whatever a run holds (running, restoring) or takes it out of
/// the queue (waiting).
void release_run(scheduler_state& st, const std::string& name) {
  if (st.restoring.count(name)) {
    drop_restore(st, name);
  } else if (st.queue->allocation_of(name)) {
    if (auto err = st.queue->complete(name))
      spdlog::error("scheduler: run {}: cannot release its GPUs: {}", name,
                    render_error(err));
  } else {
    // Waiting: leaves the queue. Stopped or Failed: nothing to release.
    static_cast<void>(st.queue->cancel(name));
  }
}

/// Holds, for each run still re-adopting, the GPUs its machines now list;
/// once all are there, holds them as one allocation and adopts the run.
void restore_pass(self_ptr self) {
  auto& st = self->state;
  for (auto it = st.restoring.begin(); it != st.restoring.end();) {
    const auto& name = it->first;
    auto& r = it->second;
    for (auto id = r.missing.begin(); id != r.missing.end();) {
      auto g = st.index->find_gpu(*id);
      if (!g || st.index->holder(*g) != 0) {
        if (g)
          spdlog::error("scheduler: run {}: its GPU {} is held by {}", name,
                        *id,
                        st.index->allocation_owner(st.index->holder(*g)));
        ++id;
        continue;
      }
      auto a = st.index->restore(name, {*id});
      if (!a) {
        spdlog::error("scheduler: run {}: cannot hold GPU {}: {}", name, *id,
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
    // Every GPU is there: one allocation for the whole run (nothing runs
    // between the releases and the restore).
    const auto& run = st.runs[name];
    for (auto a : r.pieces)
      st.index->release(a);
    r.pieces.clear();
    auto all = st.index->restore(name, held_gpu_ids(run));
    if (!all) {
      spdlog::error("scheduler: run {}: cannot re-adopt its GPUs: {}", name,
                    render_error(all.error()));
      ++it;
      continue;
    }
    int64_t elapsed = std::max<int64_t>(0, (unix_ms_now() - run.placed_unix_ms()) / 1000);
    auto err = st.queue->adopt(name, *all, clock_seconds(self) - elapsed,
                               static_cast<int64_t>(run.spec().time_limit_seconds()));
    if (err) {
      spdlog::error("scheduler: run {}: cannot adopt it: {}", name, render_error(err));
      st.index->release(*all);
      ++it;
      continue;
    }
    spdlog::info("scheduler: run {} re-adopted its {} GPU(s)", name,
                 held_gpu_ids(run).size());
    it = st.restoring.erase(it);
  }
}

/// One pass of the queue: placed runs are stored with sync; waiting runs get
/// the engine's reason.
void schedule_pass(self_ptr self) {
  auto& st = self->state;
  auto decisions = st.queue->schedule(clock_seconds(self));
  for (auto& d : decisions) {
    auto it = st.runs.find(d.run);
    if (it == st.runs.end()) {
      spdlog::error("scheduler: placed unknown run {}; releasing it", d.run);
      st.queue->complete(d.run);
      continue;
    }
    auto& run = it->second;
    auto groups = run_groups_in_rank_order(run.spec());
    run.clear_workers();
    for (const auto& pw : d.where.workers) {
      auto* w = run.add_workers();
      w->set_rank(pw.rank);
      w->set_group(pw.group < groups.size() ? groups[pw.group].first : "");
      w->set_group_rank(pw.group_rank);
      w->set_machine(st.index->machine_name(pw.machine));
      for (auto& id : st.index->gpu_ids(pw.machine, pw.gpus))
        w->add_gpu_ids(std::move(id));
      w->set_numa_node(pw.numa_node);
    }
    set_run_state(run, run_state::placed);
    run.clear_waiting_reason();
    run.set_placed_unix_ms(unix_ms_now());
    if (d.where.leader < static_cast<uint32_t>(run.workers_size()))
      run.set_leader_machine(run.workers(static_cast<int>(d.where.leader)).machine());
    persist(st, run, true);
    spdlog::info("scheduler: run {} placed ({} worker(s), {})", d.run,
                 run.workers_size(), to_string(d.where.tier));
  }
  for (auto& [name, run] : st.runs) {
    if (run.state() != run_state::waiting)
      continue;
    if (const auto* why = st.queue->waiting(name);
        why && why->message != run.waiting_reason()) {
      run.set_waiting_reason(why->message);
      persist(st, run, false);
    }
  }
}

caf::error no_such_run(const std::string& name) {
  return caf::make_error(ec::invalid_request, "no run named " + name);
}

} // namespace

caf::error scheduler_config::validate() const {
  if (!store)
    return caf::make_error(ec::invalid_config, "scheduler: no store");
  return caf::none;
}

placement_request placement_request_of(const v1::RunSpec& spec) {
  placement_request out;
  out.run = spec.name();
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
    if (!g.health().empty()) {
      auto h = parse_gpu_health(g.health());
      if (!h)
        return caf::make_error(ec::invalid_request,
                               "machine " + m.name() + ": GPU " + g.id()
                                 + " has unknown health '" + g.health() + "'");
      gs.health = *h;
    }
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

  // Load every stored run: waiting ones queue again in submission order;
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
    const auto& state = run.state();
    if (state == run_state::placed || state == run_state::running
        || state == run_state::stopping) {
      auto ids = held_gpu_ids(run);
      if (ids.empty()) {
        spdlog::error("scheduler: stored run {} is {} without GPUs; it waits again",
                      key, state);
        set_run_state(run, run_state::waiting);
      } else {
        st.restoring[key].missing.insert(ids.begin(), ids.end());
      }
    }
    if (run.state() == run_state::waiting) {
      run.clear_workers();
      if (auto err = st.queue->submit(placement_request_of(run.spec()), now))
        spdlog::error("scheduler: cannot queue stored run {}: {}", key,
                      render_error(err));
    }
    st.runs.emplace(key, std::move(run));
  }
  spdlog::info("scheduler: {} run(s) loaded, {} re-adopting GPUs",
               st.runs.size(), st.restoring.size());

  return {
    [self](atom::submit, v1::RunSpec& spec) -> caf::result<v1::Run> {
      auto& st = self->state;
      if (auto err = validate_run_spec(spec))
        return err;
      if (spec.gpus_per_worker() == 0)
        return caf::make_error(ec::invalid_request,
                               "gpus: the scheduler places GPU workers; ask for "
                               "at least 1 GPU per worker");
      const auto name = spec.name();
      if (st.runs.count(name))
        return caf::make_error(ec::invalid_request,
                               "a run named " + name + " already exists");
      v1::Run run;
      *run.mutable_spec() = std::move(spec);
      run.set_state(run_state::waiting);
      run.set_waiting_reason("waiting: not scheduled yet");
      run.set_submitted_unix_ms(unix_ms_now());
      if (auto err = persist(st, run, true))
        return err;
      if (auto err = st.queue->submit(placement_request_of(run.spec()),
                                      clock_seconds(self))) {
        st.config.store->erase(family::runs, name, true);
        return err;
      }
      st.runs.emplace(name, std::move(run));
      schedule_pass(self);
      return st.runs[name];
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
      if (auto err = st.config.store->erase(family::runs, name, true)) {
        spdlog::error("scheduler: cannot erase run {}: {}", name, render_error(err));
        return err;
      }
      v1::Run out = std::move(it->second);
      st.runs.erase(it);
      release_run(st, name);
      if (out.state() != run_state::failed)
        set_run_state(out, run_state::stopped);
      spdlog::info("scheduler: run {} deleted", name);
      schedule_pass(self);
      return out;
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
      if (!st.restoring.count(name) && !st.queue->allocation_of(name)) {
        spdlog::warn("scheduler: completion of run {} ({}) ignored: not placed",
                     name, run.state());
        return;
      }
      release_run(st, name);
      set_run_state(run, run_state::stopped);
      persist(st, run, true);
      spdlog::info("scheduler: run {} stopped", name);
      schedule_pass(self);
    },
  };
}

} // namespace astraeus
