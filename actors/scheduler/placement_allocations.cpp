// Holding and freeing GPUs (and the cores and memory that go with them):
// the allocation slot map, `commit` (a placement checked again and held),
// `hold` and `restore` (holds whatever the GPUs' health), `release`, and
// the queue's what-if `suspend` and `resume`.

#include "actors/scheduler/placement.hpp"

#include <algorithm>

#include "actors/scheduler/placement_internal.hpp"
#include "messages/error.hpp"

namespace astraeus {

using namespace placement_detail;

namespace {

/// Sorts `use` by machine, adds up entries of one machine and drops empty
/// ones.
void merge_use(std::vector<machine_use>& use) {
  std::sort(use.begin(), use.end(),
            [](const machine_use& a, const machine_use& b) { return a.machine < b.machine; });
  size_t out = 0;
  for (size_t i = 0; i < use.size(); ++i) {
    if (use[i].cpu_millis == 0 && use[i].memory_bytes == 0)
      continue;
    if (out > 0 && use[out - 1].machine == use[i].machine) {
      use[out - 1].cpu_millis += use[i].cpu_millis;
      use[out - 1].memory_bytes += use[i].memory_bytes;
    } else {
      use[out++] = use[i];
    }
  }
  use.resize(out);
}

} // namespace

void placement_index::state::use_add(const std::vector<machine_use>& use, int sign) {
  for (const auto& u : use) {
    machine_rec& m = machines[u.machine];
    if (sign > 0) {
      m.cpu_held += u.cpu_millis;
      m.mem_held += u.memory_bytes;
    } else {
      m.cpu_held -= std::min(m.cpu_held, u.cpu_millis);
      m.mem_held -= std::min(m.mem_held, u.memory_bytes);
    }
    cores_changed(u.machine);
  }
}

alloc_rec* placement_index::state::find_alloc(allocation_id a) {
  uint64_t low = a & 0xffffffffu;
  if (low == 0 || low > alloc_slots.size())
    return nullptr;
  alloc_slot& slot = alloc_slots[low - 1];
  if (!slot.live || slot.generation != static_cast<uint32_t>(a >> 32))
    return nullptr;
  return &slot.rec;
}

allocation_id placement_index::state::hold_checked(const std::string& owner,
                                                  const std::vector<gpu_set>& sets,
                                                  const std::vector<machine_use>& use) {
  uint32_t slot;
  if (!alloc_free.empty()) {
    slot = alloc_free.back();
    alloc_free.pop_back();
  } else {
    slot = static_cast<uint32_t>(alloc_slots.size());
    alloc_slots.emplace_back();
  }
  alloc_slot& as = alloc_slots[slot];
  as.live = true;
  as.rec.owner.assign(owner);
  as.rec.gpus.assign(sets.begin(), sets.end());
  as.rec.use.assign(use.begin(), use.end());
  as.rec.suspended = false;
  use_add(use, +1);
  ++alloc_live;
  allocation_id a = (static_cast<uint64_t>(as.generation) << 32) | (uint64_t{slot} + 1);
  for (const auto& set : sets) {
    machine_rec& m = machines[set.machine];
    counts before = count_of(m);
    for (gpu_mask b = set.gpus; b; b &= b - 1)
      m.gpus[lowest(b)].holder = a;
    m.held |= set.gpus;
    changed(set.machine, before);
  }
  return a;
}

void placement_index::state::drop_alloc(allocation_id a) {
  alloc_slot& as = alloc_slots[(a & 0xffffffffu) - 1];
  as.live = false;
  ++as.generation;
  as.rec.owner.clear();
  as.rec.gpus.clear();
  as.rec.use.clear();
  as.rec.suspended = false;
  alloc_free.push_back(static_cast<uint32_t>((a & 0xffffffffu) - 1));
  --alloc_live;
}

// Sorts by machine and merges; false if two sets overlap.
bool placement_index::state::merge_sets(std::vector<gpu_set>& sets) {
  std::sort(sets.begin(), sets.end(),
            [](const gpu_set& a, const gpu_set& b) { return a.machine < b.machine; });
  size_t out = 0;
  for (size_t i = 0; i < sets.size(); ++i) {
    if (out > 0 && sets[out - 1].machine == sets[i].machine) {
      if (sets[out - 1].gpus & sets[i].gpus)
        return false;
      sets[out - 1].gpus |= sets[i].gpus;
    } else {
      sets[out++] = sets[i];
    }
  }
  sets.resize(out);
  return true;
}

// Frees the GPUs of `sets` held by `a`; drops gone slots when `forget`.
void placement_index::state::free_sets(const std::vector<gpu_set>& sets, allocation_id a, bool forget) {
  for (const auto& set : sets) {
    machine_rec& m = machines[set.machine];
    counts before = count_of(m);
    gpu_mask freed = 0;
    bool dropped = false;
    for (gpu_mask b = set.gpus; b; b &= b - 1) {
      unsigned s = lowest(b);
      if (s >= m.gpus.size())
        continue;
      gpu_rec& g = m.gpus[s];
      if (a != 0 && g.holder == a) {
        g.holder = 0;
        freed |= bit(s);
      }
      if (forget && g.gone && g.holder == 0) {
        drop_slot(m, s);
        dropped = true;
      }
    }
    m.held &= ~freed;
    if (dropped) {
      while (!m.gpus.empty() && !m.gpus.back().named() && m.gpus.back().holder == 0)
        m.gpus.pop_back();
      rebuild_masks(m);
    }
    changed(set.machine, before);
  }
}

caf::expected<allocation_id> placement_index::commit(const placement& where) {
  auto& S = *st_;
  if (where.selector >= S.selectors.size())
    return invalid("placement of " + where.run + " names an unknown label set");
  if (where.workers.empty())
    return invalid("placement of " + where.run + " has no workers");
  std::vector<gpu_set>& sets = S.sets_scratch;
  sets.clear();
  for (const auto& w : where.workers) {
    if (w.machine >= S.machines.size() || S.machines[w.machine].removed)
      return unknown_machine(w.machine);
    const machine_rec& m = S.machines[w.machine];
    if (!m.schedulable)
      return invalid("machine " + m.name + " no longer takes new work");
    if (std::find(m.selectors.begin(), m.selectors.end(), where.selector) == m.selectors.end())
      return invalid("machine " + m.name + " no longer carries the labels of " + where.run);
    if (w.gpus == 0)
      return invalid("a worker of " + where.run + " has no GPUs");
    gpu_mask allowed = where.healthy_only ? m.free_healthy() : m.free_usable();
    if ((w.gpus & ~allowed) != 0)
      return invalid("GPUs of machine " + m.name + " for " + where.run +
                     " are no longer free and assignable");
    sets.push_back({w.machine, w.gpus});
  }
  if (!state::merge_sets(sets))
    return invalid("placement of " + where.run + " gives a GPU to two workers");
  // The cores and memory of its workers, machine by machine (issue 22).
  std::vector<machine_use>& use = S.use_scratch;
  use.clear();
  if (where.cpu_millis_per_worker || where.memory_bytes_per_worker) {
    for (const auto& w : where.workers)
      use.push_back({w.machine, where.cpu_millis_per_worker, where.memory_bytes_per_worker});
    merge_use(use);
    for (const auto& u : use) {
      const machine_rec& m = S.machines[u.machine];
      if (m.cpu_cap && u.cpu_millis > m.free_cpu())
        return invalid("machine " + m.name + " no longer has the free CPU cores for " +
                       where.run);
      if (m.mem_cap && u.memory_bytes > m.free_mem())
        return invalid("machine " + m.name + " no longer has the free memory for " + where.run);
    }
  }
  return S.hold_checked(where.run, sets, use);
}

caf::expected<allocation_id> placement_index::hold(std::string owner,
                                                   const std::vector<gpu_set>& gpus,
                                                   const std::vector<machine_use>& use) {
  auto& S = *st_;
  std::vector<machine_use> uses = use;
  for (const auto& u : uses)
    if (u.machine >= S.machines.size() || S.machines[u.machine].removed)
      return unknown_machine(u.machine);
  merge_use(uses);
  std::vector<gpu_set> sets = gpus;
  if (!state::merge_sets(sets))
    return invalid("a GPU is listed twice for " + owner);
  for (const auto& set : sets) {
    if (set.machine >= S.machines.size() || S.machines[set.machine].removed)
      return unknown_machine(set.machine);
    const machine_rec& m = S.machines[set.machine];
    for (gpu_mask b = set.gpus; b; b &= b - 1) {
      unsigned s = lowest(b);
      if (s >= m.gpus.size() || !m.gpus[s].named())
        return caf::make_error(ec::no_such_machine,
                               "no GPU in slot " + std::to_string(s) + " of machine " + m.name);
      if (m.gpus[s].holder != 0)
        return invalid("GPU " + std::string{m.gpu_name(s)} + " is already held by allocation " +
                       std::to_string(m.gpus[s].holder));
    }
  }
  sets.erase(std::remove_if(sets.begin(), sets.end(), [](const gpu_set& s) { return !s.gpus; }),
             sets.end());
  return S.hold_checked(owner, sets, uses);
}

caf::expected<allocation_id> placement_index::restore(std::string owner,
                                                      const std::vector<std::string>& gpu_ids) {
  std::vector<gpu_set> sets;
  for (const auto& id : gpu_ids) {
    auto ref = find_gpu(id);
    if (!ref)
      return caf::make_error(ec::no_such_machine, "no GPU " + id);
    sets.push_back({ref->machine, bit(ref->slot)});
  }
  return hold(std::move(owner), sets);
}

caf::expected<allocation_id>
placement_index::restore(std::string owner,
                         const std::vector<std::pair<std::string, std::string>>& gpus,
                         const std::vector<machine_use>& use) {
  std::vector<gpu_set> sets;
  for (const auto& [machine, id] : gpus) {
    auto m = find_machine(machine);
    auto ref = m ? find_gpu(*m, id) : std::nullopt;
    if (!ref)
      return caf::make_error(ec::no_such_machine, "no GPU " + id + " on machine " + machine);
    sets.push_back({ref->machine, bit(ref->slot)});
  }
  return hold(std::move(owner), sets, use);
}

caf::error placement_index::release(allocation_id a) {
  ++st_->capacity_epoch;
  return give_back_hold(a);
}

caf::error placement_index::give_back_hold(allocation_id a) {
  auto& S = *st_;
  alloc_rec* rec = S.find_alloc(a);
  if (!rec)
    return invalid("no allocation " + std::to_string(a));
  S.free_sets(rec->gpus, rec->suspended ? 0 : a, true); // also forgets GPUs that left
  if (!rec->suspended)
    S.use_add(rec->use, -1);
  S.drop_alloc(a);
  return {};
}

caf::error placement_index::suspend(allocation_id a) {
  auto& S = *st_;
  alloc_rec* rec = S.find_alloc(a);
  if (!rec || rec->suspended)
    return invalid("no held allocation " + std::to_string(a));
  rec->suspended = true;
  S.free_sets(rec->gpus, a, false);
  S.use_add(rec->use, -1);
  return {};
}

caf::error placement_index::resume(allocation_id a) {
  auto& S = *st_;
  alloc_rec* rec = S.find_alloc(a);
  if (!rec || !rec->suspended)
    return invalid("no suspended allocation " + std::to_string(a));
  for (const auto& set : rec->gpus) {
    const machine_rec& m = S.machines[set.machine];
    for (gpu_mask b = set.gpus; b; b &= b - 1) {
      unsigned s = lowest(b);
      if (s >= m.gpus.size() || !m.gpus[s].named() || m.gpus[s].holder != 0) {
        // It stays suspended: what it held is free for good.
        ++S.capacity_epoch;
        return invalid("a GPU of allocation " + std::to_string(a) + " was taken meanwhile");
      }
    }
  }
  for (const auto& set : rec->gpus) {
    machine_rec& m = S.machines[set.machine];
    counts before = count_of(m);
    for (gpu_mask b = set.gpus; b; b &= b - 1)
      m.gpus[lowest(b)].holder = a;
    m.held |= set.gpus;
    S.changed(set.machine, before);
  }
  S.use_add(rec->use, +1);
  rec->suspended = false;
  return {};
}

} // namespace astraeus
