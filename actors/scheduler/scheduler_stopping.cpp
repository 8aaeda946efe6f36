// Workers told to stop: a run that ends (stopped by a drain or `astra
// stop`, failed, completed) leaves its machines' worker sets, and each of its
// workers still going is `Stopping` until its agent reports it ended
// (shared/seeds/inside-a-worker.md, "Signals on stop": Stopping, then
// Cancelled). A machine whose agent still stops workers is neither drained
// nor removed (README, "Day two").
//
// Issue 23: what a Stopping worker holds (its GPUs, cores and memory) stays
// held until then (`stopping_hold`): its process may use its GPUs through
// the whole stop grace, and GPUs are never shared (shared/seeds/gpus.md).

#include "actors/scheduler/scheduler_actor.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include <spdlog/spdlog.h>

#include "actors/scheduler/scheduler_internal.hpp"
#include "messages/error.hpp"
#include "messages/run_key.hpp"

namespace astraeus::scheduler_detail {

namespace {

/// The most waiting runs and copies one pass asks whether they wait for
/// stopping workers (each a what-if placement): the stop grace is short.
constexpr size_t max_stopping_what_ifs = 32;

/// Holds what `h` (worker `worker`) still misses and its machine lists
/// free now, with its cores and memory if not held yet: one allocation.
void take_hold(scheduler_state& st, const std::string& worker, stopping_hold& h) {
  auto m = st.index->find_machine(h.machine);
  if (!m)
    return;  // held once its snapshot adds it (restore_pass)
  std::vector<std::pair<std::string, std::string>> ids;
  for (auto it = h.missing.begin(); it != h.missing.end();) {
    auto g = st.index->find_gpu(*m, it->second);
    if (!g || st.index->holder(*g) != 0) {
      ++it;
      continue;
    }
    ids.push_back(*it);
    it = h.missing.erase(it);
  }
  std::vector<machine_use> use;
  if (!h.use_held && (h.cpu_millis > 0 || h.memory_bytes > 0))
    use.push_back({*m, h.cpu_millis, h.memory_bytes});
  if (ids.empty() && use.empty())
    return;
  auto a = st.index->restore("stopping worker " + worker, ids, use);
  if (!a) {
    spdlog::error("scheduler: stopping worker {} on {}: cannot hold its GPUs: {}", worker,
                  h.machine, render_error(a.error()));
    h.missing.insert(ids.begin(), ids.end());
    return;
  }
  h.pieces.push_back(*a);
  h.use_held = h.use_held || !use.empty();
}

/// "8 GPUs", "1 GPU".
std::string gpus_text(unsigned n) {
  return std::to_string(n) + (n == 1 ? " GPU" : " GPUs");
}

} // namespace

bool agent_reports(const scheduler_state& st, const std::string& machine) {
  if (!st.machines.count(machine))
    return false;
  auto f = st.machine_facts_by_name.find(machine);
  return f != st.machine_facts_by_name.end() && !f->second.down;
}

void hold_stopping(scheduler_state& st, const std::string& key, const v1::Run& run,
                   const v1::WorkerAssignment& w, int64_t since_unix_ms) {
  auto& h = st.stopping_holds[{key, w.name()}];
  if (!h.machine.empty())
    return;  // held already
  h.machine = w.machine();
  for (const auto& id : w.gpu_ids())
    h.missing.emplace(w.machine(), id);
  h.cpus = run.spec().cpus_per_worker();
  h.cpu_millis = cpu_millis_of(h.cpus);
  h.memory_bytes = run.spec().memory_bytes_per_worker();
  h.stop_unix_ms = since_unix_ms;
  // The next set it is sent (orders_for numbers them) leaves it out.
  auto g = st.generation.find(w.machine());
  h.stop_generation =
    g == st.generation.end() || g->second == 0 ? st.generation_base : g->second + 1;
  // Counted as used on its machine (CPU-only placement reads these).
  auto& f = st.machine_facts_by_name[w.machine()];
  f.cpus_used += h.cpus;
  f.memory_used += h.memory_bytes;
  take_hold(st, w.name(), h);
}

bool replaced_by_new_worker(const scheduler_state& st, const std::string& key,
                            const v1::WorkerStatus& status, uint64_t generation) {
  if (state_of(status) == worker_state::stopping || worker_ended(state_of(status)))
    return false;
  auto h = st.stopping_holds.find({key, status.worker()});
  return h != st.stopping_holds.end() && h->second.stop_generation != 0
         && generation >= h->second.stop_generation;
}

void take_stopping_holds(scheduler_state& st) {
  for (auto& [id, h] : st.stopping_holds)
    if (!h.missing.empty() || (!h.use_held && (h.cpu_millis > 0 || h.memory_bytes > 0)))
      take_hold(st, id.second, h);
}

bool release_stopping(scheduler_state& st, const std::string& key, const std::string& worker) {
  auto it = st.stopping_holds.find({key, worker});
  if (it == st.stopping_holds.end())
    return false;
  auto& h = it->second;
  for (auto a : h.pieces)
    if (auto err = st.index->release(a))
      spdlog::error("scheduler: stopping worker {}: cannot release its GPUs: {}", worker,
                    render_error(err));
  if (auto f = st.machine_facts_by_name.find(h.machine); f != st.machine_facts_by_name.end()) {
    f->second.cpus_used = std::max(0.0, f->second.cpus_used - h.cpus);
    f->second.memory_used -= std::min(f->second.memory_used, h.memory_bytes);
  }
  st.stopping_holds.erase(it);
  return true;
}

void release_record_holds(scheduler_state& st, const std::string& key) {
  std::vector<std::string> workers;
  for (auto it = st.stopping_holds.lower_bound({key, std::string{}});
       it != st.stopping_holds.end() && it->first.first == key; ++it)
    workers.push_back(it->first.second);
  for (const auto& w : workers)
    release_stopping(st, key, w);
}

const v1::Run* stopping_record(const scheduler_state& st, const std::string& key) {
  if (auto r = st.runs.find(key); r != st.runs.end())
    return &r->second;
  if (auto d = st.displaced.find(key); d != st.displaced.end())
    return &d->second;
  return nullptr;
}

v1::Run* stopping_record(scheduler_state& st, const std::string& key) {
  return const_cast<v1::Run*>(stopping_record(static_cast<const scheduler_state&>(st), key));
}

void displace_run(self_ptr self, const std::string& key) {
  auto& st = self->state;
  auto node = st.runs.extract(key);
  if (node.empty())
    return;
  std::string to;
  for (int n = 1;; ++n) {
    to = key + "~" + std::to_string(n);
    if (!st.displaced.count(to) && !st.dirty_runs.count(to))
      break;
  }
  st.displaced.emplace(to, std::move(node.mapped()));
  for (auto& [machine, keys] : st.stopping_on)
    if (keys.erase(key) > 0)
      keys.insert(to);
  std::vector<std::string> workers;
  for (auto it = st.stopping_holds.lower_bound({key, std::string{}});
       it != st.stopping_holds.end() && it->first.first == key; ++it)
    workers.push_back(it->first.second);
  for (const auto& w : workers) {
    auto h = st.stopping_holds.extract(std::make_pair(key, w));
    h.key() = std::make_pair(to, w);
    st.stopping_holds.insert(std::move(h));
  }
  mark(self, key);
  mark(self, to);
  spdlog::info("scheduler: deleted run {} gives its name to a new run; its workers still "
               "stopping keep their GPUs (kept as {})",
               key, to);
}

void end_run_workers(self_ptr self, v1::Run& run, run_state end) {
  auto& st = self->state;
  const auto key = run_key(run.spec());
  std::vector<int> going;
  for (int i = 0; i < run.workers_size(); ++i) {
    const auto& w = run.workers(i);
    auto s = state_of(w);
    // A worker whose agent cannot say how it ends (a Down or detached
    // machine) is not waited for: it takes the run's end.
    if (!worker_ended(s) && s != worker_state::down && agent_reports(st, w.machine()))
      going.push_back(i);
  }
  set_run_state(run, end);
  const auto now = st.config.clock->now_unix_ms();
  for (int i : going) {
    auto& w = *run.mutable_workers(i);
    set_state(w, worker_state::stopping);
    st.stopping_on[w.machine()].insert(key);
    hold_stopping(st, key, run, w, now);
  }
}

void index_stopping(scheduler_state& st, const std::string& key, const v1::Run& run) {
  const auto now = st.config.clock->now_unix_ms();
  for (const auto& w : run.workers())
    if (state_of(w) == worker_state::stopping) {
      st.stopping_on[w.machine()].insert(key);
      hold_stopping(st, key, run, w, now);
    }
}

std::string stopping_workers_text(const scheduler_state& st, const std::string& machine) {
  auto on = st.stopping_on.find(machine);
  if (on == st.stopping_on.end())
    return {};
  std::string out;
  size_t n = 0;
  for (const auto& key : on->second) {
    const auto* run = stopping_record(st, key);
    if (!run)
      continue;
    for (const auto& w : run->workers())
      if (w.machine() == machine && state_of(w) == worker_state::stopping && n++ < 5)
        out += (out.empty() ? "" : ", ") + w.name() + " of run "
               + describe_run(run_key(run->spec()));
  }
  if (n > 5)
    out += " and " + std::to_string(n - 5) + " more";
  return out;
}

void note_stopping_waits(scheduler_state& st) {
  st.stopping_waits.clear();
  if (st.stopping_holds.empty() || st.waiting.empty())
    return;
  std::vector<std::string> names;
  for (const auto& qname : st.waiting) {
    const auto* why = st.queue->waiting(qname);
    if (why
        && (why->code == waiting_code::not_enough_gpus || why->code == waiting_code::reserved
            || why->code == waiting_code::not_enough_cores_or_memory))
      names.push_back(qname);
  }
  if (names.empty())
    return;
  std::sort(names.begin(), names.end());
  if (names.size() > max_stopping_what_ifs)
    names.resize(max_stopping_what_ifs);
  // What if the stopping workers had ended: their holds are suspended for
  // the what-if placements, then held again exactly as they were.
  std::vector<allocation_id> suspended;
  for (const auto& [id, h] : st.stopping_holds)
    for (auto a : h.pieces)
      if (!st.index->suspend(a))
        suspended.push_back(a);
  const auto now = st.config.clock->now_unix_ms();
  const auto grace_ms = st.config.stop_grace.count();
  for (const auto& qname : names) {
    auto r = st.runs.find(parse_queue_name(qname).first);
    if (r == st.runs.end())
      continue;
    auto placed = st.index->place(placement_request_of(r->second.spec(), qname));
    const auto* p = std::get_if<placement>(&placed);
    if (!p)
      continue;
    const bool wants_use = p->cpu_millis_per_worker > 0 || p->memory_bytes_per_worker > 0;
    // Machine -> run -> (GPUs it needs that they hold, latest stop).
    std::map<std::string, std::map<std::string, std::pair<unsigned, int64_t>>> in_way;
    for (const auto& [id, h] : st.stopping_holds) {
      auto m = st.index->find_machine(h.machine);
      if (!m)
        continue;
      gpu_mask wanted = 0;
      bool on_machine = false;
      for (const auto& w : p->workers)
        if (w.machine == *m) {
          wanted |= w.gpus;
          on_machine = true;
        }
      if (!on_machine)
        continue;
      unsigned n = 0;
      for (auto a : h.pieces)
        for (const auto& set : st.index->allocation_gpus(a))
          if (set.machine == *m)
            n += static_cast<unsigned>(__builtin_popcountll(set.gpus & wanted));
      if (n == 0 && !(wants_use && h.use_held))
        continue;
      const auto* record = stopping_record(st, id.first);
      auto& e = in_way[h.machine][record ? run_key(record->spec()) : id.first];
      e.first += n;
      e.second = std::max(e.second, h.stop_unix_ms);
    }
    std::string text;
    for (const auto& [machine, runs] : in_way)
      for (const auto& [run, e] : runs) {
        const auto left_ms = e.second + grace_ms - now;
        const auto grace_s = (grace_ms + 999) / 1000;
        text += (text.empty() ? "waiting: " : "; ") + machine + ": "
                + (e.first > 0 ? gpus_text(e.first) : std::string{"cores and memory"})
                + " held by stopping workers of run " + describe_run(run)
                + (left_ms > 0 ? " (ending within " + std::to_string((left_ms + 999) / 1000)
                                   + " s)"
                               : " (past their " + std::to_string(grace_s)
                                   + " s stop grace; waiting for their agent's report)");
      }
    if (!text.empty())
      st.stopping_waits.emplace(qname, std::move(text));
  }
  for (auto a = suspended.rbegin(); a != suspended.rend(); ++a)
    if (auto err = st.index->resume(*a))
      spdlog::error("scheduler: a stopping worker's hold could not be resumed: {}",
                    render_error(err));
}

} // namespace astraeus::scheduler_detail
