// check_invariants: everything the index keeps incrementally (masks, NUMA
// masks, the GPU id map, selector membership, bucket positions and totals,
// allocation slots) recounted from the per-GPU records.

#include "actors/scheduler/placement.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "actors/scheduler/placement_internal.hpp"

namespace astraeus {

using namespace placement_detail;

std::string placement_index::check_invariants() const {
  const auto& S = *st_;
  auto fail = [](std::string what) { return what; };
  std::unordered_map<allocation_id, std::vector<gpu_set>> seen;
  for (machine_id id = 0; id < S.machines.size(); ++id) {
    const machine_rec& m = S.machines[id];
    if (m.in_blocked != (S.blocked.count(id) > 0))
      return fail("machine " + m.name + "'s blocked flag disagrees with the blocked set");
    if (m.removed) {
      if (!m.gpus.empty() || m.schedulable || !m.selectors.empty() || m.in_blocked)
        return fail("removed machine " + m.name + " keeps state");
      continue;
    }
    if (m.in_blocked != (!m.schedulable || m.free_fenced() != 0 || m.accepting))
      return fail("machine " + m.name + " is " + (m.in_blocked ? "" : "not ") +
                  "in the blocked set against its state");
    if (m.gpus.size() > max_gpus_per_machine)
      return fail("machine " + m.name + " has more than 64 slots");
    gpu_mask present = 0, healthy = 0, at_risk = 0, held = 0;
    for (unsigned s = 0; s < m.gpus.size(); ++s) {
      const gpu_rec& g = m.gpus[s];
      if (g.named()) {
        if (size_t{g.name_at} + g.name_len > m.gpu_names.size() ||
            m.slot_named(m.gpu_name(s)) != static_cast<int>(s))
          return fail("GPU ids disagree for slot " + std::to_string(s) + " of " + m.name);
      } else if (g.present || g.holder) {
        return fail("slot " + std::to_string(s) + " of " + m.name + " is used without an id");
      }
      if (g.present && g.gone)
        return fail("GPU both present and gone on " + m.name);
      if (g.holder) {
        held |= bit(s);
        const alloc_rec* a = S.find_alloc(g.holder);
        if (!a || a->suspended)
          return fail("GPU " + std::string{m.gpu_name(s)} + " held by a dead or suspended allocation");
        seen[g.holder].push_back({id, bit(s)});
      }
      if (g.present) {
        present |= bit(s);
        if (g.health == gpu_health::healthy)
          healthy |= bit(s);
        if (g.health == gpu_health::at_risk)
          at_risk |= bit(s);
        if (g.nvlink & ~m.present)
          return fail("NVLink to an absent GPU on " + m.name);
        for (gpu_mask b = g.nvlink; b; b &= b - 1)
          if (!(m.gpus[lowest(b)].nvlink & bit(s)))
            return fail("one-way NVLink on " + m.name);
      }
    }
    if (present != m.present || healthy != m.healthy || at_risk != m.at_risk || held != m.held)
      return fail("masks of " + m.name + " disagree with its GPUs");
    gpu_mask numa_all = 0;
    for (const auto& [node, mask] : m.numa) {
      if (numa_all & mask)
        return fail("NUMA masks overlap on " + m.name);
      numa_all |= mask;
      for (gpu_mask b = mask; b; b &= b - 1)
        if (m.gpus[lowest(b)].numa != node)
          return fail("NUMA node of a GPU on " + m.name + " disagrees");
    }
    if (numa_all != m.present)
      return fail("NUMA masks of " + m.name + " do not cover its GPUs");
    // Selector membership.
    for (uint32_t sid = 0; sid < S.selectors.size(); ++sid) {
      bool listed = std::find(m.selectors.begin(), m.selectors.end(), sid) != m.selectors.end();
      if (listed != state::matches(m, S.selectors[sid]))
        return fail("selector membership of " + m.name + " is wrong");
      const selector_rec& sel = S.selectors[sid];
      counts c = count_of(m);
      for (unsigned t = 0; t < tier_count; ++t) {
        uint32_t g = m.group[t];
        if (g == no_group)
          continue;
        for (unsigned k = 0; k < 2; ++k) {
          size_t slot = static_cast<size_t>(id) * slots_per_machine + t * 2 + k;
          uint32_t pos = slot < sel.pos.size() ? sel.pos[slot] : not_member;
          bool in = listed && m.in_views();
          if (!in) {
            if (pos != not_member)
              return fail("machine " + m.name + " is in buckets it should not be in");
            continue;
          }
          unsigned f = k == kind_healthy ? c.healthy : c.usable;
          if (t == t_cluster) {
            // The cores lists (issue 22): the same machines, by class too.
            size_t cslot = static_cast<size_t>(id) * 2 + k;
            uint32_t cp = cslot < sel.core_pos.size() ? sel.core_pos[cslot] : not_member;
            const auto& lists = sel.cores[k].by_free;
            if (m.core_class != m.core_class_now() || f >= lists.size() ||
                cp >= lists[f][m.core_class].size() || lists[f][m.core_class][cp] != id)
              return fail("machine " + m.name + " is not where its free cores say");
          }
          if (g >= sel.groups[t].size() || f >= sel.groups[t][g].kind[k].by_free.size() ||
              pos >= sel.groups[t][g].kind[k].by_free[f].size() ||
              sel.groups[t][g].kind[k].by_free[f][pos] != id)
            return fail("machine " + m.name + " is not where its free count says (tier " +
                        std::to_string(t) + ", kind " + std::to_string(k) + ")");
        }
      }
    }
  }
  // Bucket totals.
  for (const auto& sel : S.selectors) {
    uint32_t matching = 0, in_views = 0;
    for (machine_id id = 0; id < S.machines.size(); ++id) {
      const auto& m = S.machines[id];
      if (!m.removed && state::matches(m, sel)) {
        ++matching;
        in_views += m.in_views();
      }
    }
    if (matching != sel.matching || in_views != sel.schedulable)
      return fail("selector counts disagree");
    for (unsigned t = 0; t < tier_count; ++t)
      for (const auto& gv : sel.groups[t])
        for (unsigned k = 0; k < 2; ++k) {
          uint64_t members = 0, sum = 0;
          for (size_t f = 0; f < gv.kind[k].by_free.size(); ++f) {
            members += gv.kind[k].by_free[f].size();
            sum += f * gv.kind[k].by_free[f].size();
          }
          if (members != gv.kind[k].members || sum != gv.kind[k].free_sum)
            return fail("bucket totals disagree");
        }
    for (unsigned k = 0; k < 2; ++k) {
      uint64_t listed = 0;
      for (const auto& by_class : sel.cores[k].by_free)
        for (const auto& v : by_class)
          listed += v.size();
      if (listed != in_views)
        return fail("cores lists do not hold every schedulable machine once");
    }
    uint64_t cluster_members =
      sel.groups[t_cluster].empty() ? 0 : sel.groups[t_cluster][0].kind[0].members;
    if (cluster_members != in_views)
      return fail("cluster bucket does not hold every schedulable machine");
  }
  // Allocations hold exactly their GPUs.
  size_t live = 0;
  for (size_t slot = 0; slot < S.alloc_slots.size(); ++slot) {
    const alloc_slot& as = S.alloc_slots[slot];
    if (!as.live)
      continue;
    ++live;
    allocation_id a = (static_cast<uint64_t>(as.generation) << 32) | (slot + 1);
    const alloc_rec& rec = as.rec;
    if (rec.suspended)
      continue;
    auto it = seen.find(a);
    uint64_t expect = 0, got = 0;
    for (const auto& set : rec.gpus)
      expect += popcount(set.gpus);
    if (it != seen.end())
      got = it->second.size();
    if (expect != got)
      return fail("allocation " + std::to_string(a) + " of " + rec.owner + " holds " +
                  std::to_string(got) + " GPUs, expected " + std::to_string(expect));
    for (const auto& set : rec.gpus)
      for (gpu_mask b = set.gpus; b; b &= b - 1) {
        unsigned s = lowest(b);
        const auto& m = S.machines[set.machine];
        if (s >= m.gpus.size() || m.gpus[s].holder != a)
          return fail("allocation " + std::to_string(a) + " lost a GPU");
      }
  }
  // Cores and memory held: exactly what the allocations not suspended hold.
  std::vector<std::pair<uint64_t, uint64_t>> use(S.machines.size());
  for (const auto& as : S.alloc_slots)
    if (as.live && !as.rec.suspended)
      for (const auto& u : as.rec.use) {
        if (u.machine >= use.size())
          return fail("an allocation holds cores on an unknown machine");
        use[u.machine].first += u.cpu_millis;
        use[u.machine].second += u.memory_bytes;
      }
  for (machine_id id = 0; id < S.machines.size(); ++id)
    if (use[id].first != S.machines[id].cpu_held || use[id].second != S.machines[id].mem_held)
      return fail("cores or memory held on " + S.machines[id].name +
                  " disagree with the allocations");
  // Each selector's machine sizes.
  for (const auto& sel : S.selectors) {
    std::map<uint64_t, uint32_t> cpu, mem;
    for (const auto& m : S.machines)
      if (!m.removed && state::matches(m, sel)) {
        ++cpu[m.cpu_cap];
        ++mem[m.mem_cap];
      }
    if (cpu != sel.cpu_caps || mem != sel.mem_caps)
      return fail("selector machine sizes disagree");
  }
  if (live != S.alloc_live || S.alloc_free.size() + live != S.alloc_slots.size())
    return fail("allocation slot counts disagree");
  for (const auto& [g_unused, holders] : seen)
    if (!S.find_alloc(g_unused))
      return fail("a GPU is held by an unknown allocation");
  return {};
}

} // namespace astraeus
