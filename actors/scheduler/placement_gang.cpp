// A gang over several machines: the tightest tier (one NVLink domain, one
// InfiniBand fabric, one rack, one site) with a group that fits, best fit
// among that tier's groups; within the group the largest free machines
// first and the last one best fit, passing over machines without the free
// cores or memory for one more worker (issue 22); then each worker's GPUs on
// its machine (placement_gpu_pick.cpp).

#include "actors/scheduler/placement.hpp"

#include <algorithm>

#include "actors/scheduler/placement_internal.hpp"

namespace astraeus {

using namespace placement_detail;

size_t placement_index::state::gang_classes(const placement_request& request, const shape& sh,
                                            const placement& out) {
  if (classes.size() < request.groups.size())
    classes.resize(request.groups.size());
  size_t nclasses = 0;
  std::vector<std::pair<uint32_t, uint32_t>> sizes; // (g, group)
  for (uint32_t gi = 0; gi < request.groups.size(); ++gi)
    sizes.emplace_back(request.groups[gi].gpus_per_worker, gi);
  std::stable_sort(sizes.begin(), sizes.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [g, gi] : sizes) {
    if (nclasses == 0 || classes[nclasses - 1].g != g) {
      classes[nclasses].g = g;
      classes[nclasses].ranks.clear();
      ++nclasses;
    }
    for (uint32_t r = 0; r < sh.workers; ++r)
      if (out.workers[r].group == gi)
        classes[nclasses - 1].ranks.push_back(r);
  }
  for (size_t c = 0; c < nclasses; ++c)
    std::sort(classes[c].ranks.begin(), classes[c].ranks.end());
  return nclasses;
}

bool placement_index::state::pack_gang(const bucket_list& bl, size_t nclasses) {
  cursor.assign(bl.by_free.size(), 0);
  chosen.clear();
  const bool sized = ask_cpu || ask_mem;
  auto take = [&](size_t f) -> bool {
    if (f >= bl.by_free.size())
      return false;
    const auto& b = bl.by_free[f];
    while (cursor[f] < b.size()) {
      machine_id id = b[cursor[f]++];
      uint32_t r = sized ? room(machines[id]) : UINT32_MAX;
      if (r == 0) {
        note_short(id);
        continue;
      }
      // One worker per machine (sbatch --nodes=N): room for one only.
      if (one_per_machine)
        r = 1;
      chosen.push_back({id, static_cast<unsigned>(f), r});
      return true;
    }
    return false;
  };
  for (size_t c = 0; c < nclasses; ++c) {
    const demand& d = classes[c];
    size_t next = 0, need = d.ranks.size();
    // A machine whose cores or memory run out before its GPUs is named
    // should the gang not fit.
    auto short_of_room = [&](size_t ci) {
      if (sized && !one_per_machine && chosen[ci].room == 0 && chosen[ci].left >= d.g
          && next < need)
        note_short(chosen[ci].machine);
    };
    for (size_t ci = 0; ci < chosen.size() && next < need; ++ci) {
      while (chosen[ci].left >= d.g && chosen[ci].room > 0 && next < need) {
        rank_machine[d.ranks[next++]] = static_cast<uint32_t>(ci);
        chosen[ci].left -= d.g;
        --chosen[ci].room;
      }
      short_of_room(ci);
    }
    while (next < need) {
      uint64_t rest = need - next;
      bool got = false;
      for (uint64_t f = uint64_t(d.g) * rest; f < bl.by_free.size() && !got; ++f)
        got = take(f);
      for (size_t f = bl.by_free.size(); !got && f-- > d.g;)
        got = take(f);
      if (!got)
        return false;
      size_t ci = chosen.size() - 1;
      while (chosen[ci].left >= d.g && chosen[ci].room > 0 && next < need) {
        rank_machine[d.ranks[next++]] = static_cast<uint32_t>(ci);
        chosen[ci].left -= d.g;
        --chosen[ci].room;
      }
      short_of_room(ci);
    }
  }
  return true;
}

bool placement_index::state::pick_gang_gpus(unsigned k, size_t nclasses, placement& out) {
  std::vector<std::pair<gpu_mask, gpu_mask>> avail(chosen.size());
  gpu_mask uses_at_risk = 0;
  for (size_t ci = 0; ci < chosen.size(); ++ci) {
    const machine_rec& m = machines[chosen[ci].machine];
    avail[ci] = {m.free_healthy(), k == kind_usable ? m.free_at_risk() : 0};
  }
  for (size_t c = 0; c < nclasses; ++c)
    for (uint32_t r : classes[c].ranks) {
      size_t ci = rank_machine[r];
      const machine_rec& m = machines[chosen[ci].machine];
      gpu_mask secondary_before = avail[ci].second;
      uint64_t penalty = 0;
      int numa;
      out.workers[r].machine = chosen[ci].machine;
      out.workers[r].gpus =
        select_worker(m, avail[ci].first, avail[ci].second, classes[c].g, numa, penalty);
      out.workers[r].numa_node = numa;
      uses_at_risk |= out.workers[r].gpus & secondary_before;
    }
  return uses_at_risk != 0;
}

bool placement_index::state::place_gang(const selector_rec& sel, unsigned k,
                                        const placement_request& request, const shape& sh,
                                        placement& out) {
  size_t nclasses = gang_classes(request, sh, out);
  rank_machine.assign(sh.workers, 0);
  static constexpr unsigned tiers[] = {t_nvlink, t_fabric, t_rack, t_site};
  static constexpr placement_tier tier_names[] = {
    placement_tier::nvlink_domain, placement_tier::fabric, placement_tier::rack,
    placement_tier::site};
  auto fits = [&](const bucket_list& bl) {
    return bl.members > 0 && bl.free_sum >= sh.gpus &&
           bl.capacity(sh.gmax) >= sh.workers_gmax && bl.capacity(sh.gmin) >= sh.workers
           && (!one_per_machine || bl.members >= sh.workers);
  };
  for (unsigned ti = 0; ti < 4; ++ti) {
    const auto& groups = sel.groups[tiers[ti]];
    // The best-fitting group (least free GPUs left over, then the lowest
    // id); the others, in that order, only if packing fails there.
    uint64_t best_slack = UINT64_MAX;
    uint32_t best_group = 0;
    size_t feasible = 0;
    for (uint32_t g = 0; g < groups.size(); ++g) {
      const bucket_list& bl = groups[g].kind[k];
      if (!fits(bl))
        continue;
      ++feasible;
      if (bl.free_sum - sh.gpus < best_slack) {
        best_slack = bl.free_sum - sh.gpus;
        best_group = g;
      }
    }
    if (feasible == 0)
      continue;
    candidates.clear();
    candidates.emplace_back(best_slack, best_group);
    bool listed_all = feasible == 1;
    for (size_t ci_ = 0; ci_ < candidates.size(); ++ci_) {
      uint32_t g = candidates[ci_].second;
      if (!pack_gang(groups[g].kind[k], nclasses)) {
        if (!listed_all) {
          listed_all = true;
          for (uint32_t other = 0; other < groups.size(); ++other)
            if (other != best_group && fits(groups[other].kind[k]))
              candidates.emplace_back(groups[other].kind[k].free_sum - sh.gpus, other);
          std::sort(candidates.begin() + 1, candidates.end());
        }
        continue;
      }
      out.uses_at_risk = pick_gang_gpus(k, nclasses, out);
      out.tier = tier_names[ti];
      return true;
    }
  }
  return false;
}

} // namespace astraeus
