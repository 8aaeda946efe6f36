// After a restart: every stored run loaded (waiting copies queue again in
// submission order, placed ones wait for their GPUs), and each placed copy
// re-adopts its GPUs as its machines' snapshots name them.

#include "actors/scheduler/scheduler_actor.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <tuple>

#include <spdlog/spdlog.h>

#include "actors/scheduler/scheduler_internal.hpp"
#include "messages/error.hpp"
#include "runtime/process/wall_clock.hpp"
#include "runtime/workers/run_spec.hpp"
#include "store/store.hpp"

namespace astraeus::scheduler_detail {

caf::error load_runs(self_ptr self) {
  auto& st = self->state;
  auto loaded = st.config.store->load_all<v1::Run>(family::runs);
  if (!loaded) {
    // Never run without knowing which GPUs are held.
    spdlog::error("scheduler: cannot load the stored runs: {}",
                  render_error(loaded.error()));
    return loaded.error();
  }
  std::sort(loaded->begin(), loaded->end(), [](const auto& a, const auto& b) {
    return std::make_tuple(a.second.submitted_unix_ms(), a.first)
           < std::make_tuple(b.second.submitted_unix_ms(), b.first);
  });
  auto now = clock_seconds(self);
  // Issue 13: runs stored before names were per workspace are keyed by
  // their bare name; those of another workspace move to their key, in one
  // synced batch before anything is placed.
  std::vector<Store::change> moved;
  for (auto& [stored_key, run] : *loaded) {
    const auto key = run_key(run.spec());
    if (stored_key.find('~') != std::string::npos) {
      // Issue 23: a deleted run whose name a new run took while its workers
      // stopped: they hold their GPUs until their agents report them ended.
      if (stopping_workers(run).empty()) {
        moved.push_back({family::runs, stored_key, std::nullopt});
        continue;
      }
      index_stopping(st, stored_key, run);
      st.displaced.emplace(stored_key, std::move(run));
      continue;
    }
    if (stored_key != key) {
      if (stored_key != run.spec().name() || st.runs.count(key)) {
        spdlog::error("scheduler: stored run '{}' is run {}; left alone", stored_key,
                      describe_run(key));
        continue;
      }
      spdlog::info("scheduler: stored run {} moves to its workspace's key {}", stored_key,
                   key);
      moved.push_back({family::runs, stored_key, std::nullopt});
      moved.push_back({family::runs, key, run.SerializeAsString()});
    }
    // Runs stored before arrays and worker names existed.
    for (auto& w : *run.mutable_workers()) {
      if (run.spec().array_size() == 0)
        w.set_array_index(-1);
      if (w.name().empty())
        w.set_name(worker_name(run.spec().name(), w.array_index(), w.rank()));
      // Stored before issue 14: the GPU ids twice (for_display fills them).
      w.clear_assigned_gpu_ids();
    }
    if (run.deleted() && stopping_workers(run).empty()) {
      // Issue 23 item 6: its workers have ended: shown no longer (one still
      // stopping is indexed below: its agent says how it ended).
      moved.push_back({family::runs, key, std::nullopt});
      continue;
    }
    if (has_ended(state_of(run))) {
      // Issue 23: its workers still stopping hold their GPUs again as
      // their machines report them.
      index_stopping(st, key, run);
      if (run.spec().priority() < 0)
        st.below_zero_runs.insert(key);
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
    if (run.spec().priority() < 0)
      st.below_zero_runs.insert(key);
    st.runs.emplace(key, std::move(run));
  }
  if (auto err = st.config.store->write_chunked(moved, true)) {
    spdlog::error("scheduler: cannot store the runs moved to their keys: {}",
                  render_error(err));
    return err;
  }
  for (auto& [key, run] : st.runs)
    if (live(run)) {
      account(st, run, 1);
      for (const auto& w : run.workers())
        st.runs_on[w.machine()].insert(key);
    }
  arm_stored_time_limits(self);
  spdlog::info("scheduler: {} run(s) loaded, {} copies re-adopting GPUs",
               st.runs.size(), st.restoring.size());
  return caf::none;
}

/// Holds, for each copy still re-adopting, the GPUs its machines now list;
/// once all are there, holds them as one allocation and adopts the copy.
void restore_pass(self_ptr self) {
  auto& st = self->state;
  // Workers still stopping first (issue 23): their GPUs are theirs.
  take_stopping_holds(st);
  for (auto it = st.restoring.begin(); it != st.restoring.end();) {
    const auto& qname = it->first;
    auto& r = it->second;
    for (auto id = r.missing.begin(); id != r.missing.end();) {
      auto m = st.index->find_machine(id->first);
      auto g = m ? st.index->find_gpu(*m, id->second) : std::nullopt;
      if (!g || st.index->holder(*g) != 0) {
        if (g)
          spdlog::error("scheduler: run {}: its GPU {} on {} is held by {}", qname,
                        id->second, id->first,
                        st.index->allocation_owner(st.index->holder(*g)));
        ++id;
        continue;
      }
      auto a = st.index->restore(qname, {*id});
      if (!a) {
        spdlog::error("scheduler: run {}: cannot hold GPU {}: {}", qname, id->second,
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
    // Its workers' cores and memory, held with its GPUs from now on (issue
    // 22): until now they counted as used outside the index's allocations.
    auto all = st.index->restore(qname, ids, copy_use(st, run, copy));
    if (!all) {
      spdlog::error("scheduler: run {}: cannot re-adopt its GPUs: {}", qname,
                    render_error(all.error()));
      ++it;
      continue;
    }
    int64_t elapsed = std::max<int64_t>(0, (self->state.config.clock->now_unix_ms() - run.placed_unix_ms()) / 1000);
    auto err = st.queue->adopt(qname, *all, clock_seconds(self) - elapsed,
                               static_cast<int64_t>(run.spec().time_limit_seconds()));
    if (err) {
      spdlog::error("scheduler: run {}: cannot adopt it: {}", qname, render_error(err));
      st.index->release(*all);
      ++it;
      continue;
    }
    outside_adopted(st, run, copy);
    spdlog::info("scheduler: run {} re-adopted its {} GPU(s)", qname, ids.size());
    it = st.restoring.erase(it);
  }
}

} // namespace astraeus::scheduler_detail
