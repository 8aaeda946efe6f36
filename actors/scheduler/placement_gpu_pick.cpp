// GPU picking within a machine: the NUMA node with the most free GPUs
// first and its local GPUs first (Drove's rule), then GPUs joined by NVLink;
// and, for a run that fits on one machine, the best-fitting machine with the
// best such layout.

#include "actors/scheduler/placement.hpp"

#include <algorithm>
#include <array>
#include <climits>

#include "actors/scheduler/placement_internal.hpp"

namespace astraeus {

using namespace placement_detail;

// The best `t` GPUs of `cand` for one worker: the most NVLinks among them
// and to `linked` (GPUs it already has), then the fewest NVLinks cut to
// the rest of `cand` (keeping joined GPUs together for later workers),
// then the lowest slots.
gpu_mask placement_index::state::best_subset(const machine_rec& m, gpu_mask cand, unsigned t, gpu_mask linked) {
  if (t == 0)
    return 0;
  if (popcount(cand) <= t)
    return cand;
  bool any_link = false;
  for (gpu_mask b = cand; b; b &= b - 1)
    if (m.gpus[lowest(b)].nvlink) {
      any_link = true;
      break;
    }
  if (!any_link) { // no NVLink at all: the lowest slots
    gpu_mask out = 0;
    for (unsigned i = 0; i < t; ++i) {
      out |= cand & (~cand + 1) ;
      cand &= cand - 1;
    }
    return out;
  }
  gpu_mask best = 0;
  int best_in = -1, best_cut = INT_MAX;
  unsigned starts = 0;
  for (gpu_mask st = cand; st && starts < 16; st &= st - 1, ++starts) {
    gpu_mask set = bit(lowest(st));
    while (popcount(set) < t) {
      int pick = -1, pick_in = -1, pick_cut = INT_MAX;
      for (gpu_mask b = cand & ~set; b; b &= b - 1) {
        unsigned j = lowest(b);
        int in = static_cast<int>(popcount(m.gpus[j].nvlink & (set | linked)));
        int cut = static_cast<int>(popcount(m.gpus[j].nvlink & cand & ~set & ~bit(j)));
        if (in > pick_in || (in == pick_in && cut < pick_cut)) {
          pick = static_cast<int>(j);
          pick_in = in;
          pick_cut = cut;
        }
      }
      set |= bit(static_cast<unsigned>(pick));
    }
    int in = 0, cut = 0;
    for (gpu_mask b = set; b; b &= b - 1) {
      const auto& g = m.gpus[lowest(b)];
      in += static_cast<int>(popcount(g.nvlink & (set | linked)));
      cut += static_cast<int>(popcount(g.nvlink & cand & ~set));
    }
    if (in > best_in || (in == best_in && cut < best_cut)) {
      best = set;
      best_in = in;
      best_cut = cut;
    }
  }
  return best;
}

// Drove's rule: the NUMA node with the most GPUs of `avail` first, taking
// its GPUs first, then the next; NVLink decides within a node.
gpu_mask placement_index::state::pick_gpus(const machine_rec& m, gpu_mask avail, unsigned n, gpu_mask linked) {
  if (n == 0)
    return 0;
  std::array<uint8_t, max_gpus_per_machine> order;
  size_t nodes = m.numa.size();
  for (size_t i = 0; i < nodes; ++i)
    order[i] = static_cast<uint8_t>(i);
  auto before = [&](uint8_t a, uint8_t b) {
    unsigned fa = popcount(avail & m.numa[a].second), fb = popcount(avail & m.numa[b].second);
    if (fa != fb)
      return fa > fb;
    bool ua = m.numa[a].first < 0, ub = m.numa[b].first < 0;
    if (ua != ub)
      return ub; // a known node before the unknown one
    return m.numa[a].first < m.numa[b].first;
  };
  std::sort(order.begin(), order.begin() + static_cast<long>(nodes), before);
  gpu_mask chosen = 0;
  for (size_t i = 0; i < nodes && popcount(chosen) < n; ++i) {
    gpu_mask cand = avail & m.numa[order[i]].second;
    if (!cand)
      continue;
    unsigned t = std::min(n - popcount(chosen), popcount(cand));
    chosen |= best_subset(m, cand, t, linked | chosen);
  }
  return chosen;
}

// One worker of g GPUs from the machine's remaining `primary` (healthy)
// GPUs, then `secondary` (AtRisk) ones; removes what it takes. Returns
// the GPUs; sets its NUMA node and adds a quality penalty (0 = all on one
// NUMA node and all joined by NVLink).
gpu_mask placement_index::state::select_worker(const machine_rec& m, gpu_mask& primary, gpu_mask& secondary,
                              unsigned g, int& numa, uint64_t& penalty) {
  unsigned n1 = std::min(g, popcount(primary));
  gpu_mask a = pick_gpus(m, primary, n1, 0);
  gpu_mask b = g > n1 ? pick_gpus(m, secondary, g - n1, a) : 0;
  primary &= ~a;
  secondary &= ~b;
  gpu_mask sel = a | b;
  numa = -1;
  unsigned most = 0, spanned = 0;
  for (const auto& [node, mask] : m.numa) {
    unsigned c = popcount(sel & mask);
    if (c > 0)
      ++spanned;
    if (c > most) {
      most = c;
      numa = node;
    }
  }
  if (g > 1) {
    unsigned links = 0;
    for (gpu_mask x = sel; x; x &= x - 1)
      links += popcount(m.gpus[lowest(x)].nvlink & sel);
    uint64_t pairs = uint64_t(g) * (g - 1) / 2;
    penalty += (spanned > 1 ? (spanned - 1) * 4096ull : 0) + (pairs - links / 2);
  }
  return sel;
}

bool placement_index::state::place_on_one_machine(const selector_rec& sel, unsigned k,
                                                  const placement_request& request,
                                                  const shape& sh, placement& out) {
  if (sh.gpus > max_gpus_per_machine)
    return false;
  auto gpus_of = [&](uint32_t rank) {
    return request.groups[out.workers[rank].group].gpus_per_worker;
  };
  const bucket_list& cluster = sel.groups[t_cluster][0].kind[k];
  auto need = static_cast<unsigned>(sh.gpus);
  // Cores and memory (issue 22): a machine without room for every worker
  // is passed over (and named in the waiting reason of a single worker).
  const bool sized = ask_cpu || ask_mem;
  auto has_room = [&](machine_id id) {
    if (!sized || room(machines[id]) >= sh.workers)
      return true;
    if (sh.workers == 1)
      note_short(id);
    return false;
  };
  const std::vector<machine_id>* best_count = nullptr;
  unsigned f = need;
  if (!sized) {
    while (f < cluster.by_free.size() && cluster.by_free[f].empty())
      ++f;
    if (f >= cluster.by_free.size())
      return false;
    best_count = &cluster.by_free[f];
  } else {
    // The best-fitting count with a machine that has the room: up to
    // `quality_lookahead` such machines of that count are compared. Within
    // a count, only classes of free cores that may hold every worker's are
    // looked at, the tightest first (the lower classes have too few for
    // sure); memory is checked machine by machine.
    size_t want = need > 1 ? options.quality_lookahead : 1;
    const auto& lists = sel.cores[k].by_free;
    unsigned c0 = ask_cpu ? core_class_of(ask_cpu * sh.workers) : 0;
    fitting.clear();
    for (; f < lists.size() && fitting.empty(); ++f)
      for (unsigned c = c0; c < core_classes && fitting.size() < want; ++c)
        for (machine_id id : lists[f][c])
          if (has_room(id)) {
            fitting.push_back(id);
            if (fitting.size() >= want)
              break;
          }
    if (fitting.empty()) {
      // For the waiting reason: a few machines with the GPUs whose cores
      // are too few (the classes skipped above).
      if (sh.workers == 1)
        for (size_t g = need; g < lists.size() && !short_more; ++g)
          for (unsigned c = 0; c < c0 && !short_more; ++c)
            for (machine_id id : lists[g][c]) {
              note_short(id);
              if (short_more)
                break;
            }
      return false;
    }
    best_count = &fitting;
  }
  // With AtRisk GPUs: the machine that needs the fewest of them (the
  // most free healthy GPUs), looking at a bounded number per count.
  const std::vector<machine_id>* fewest_at_risk = nullptr;
  if (k == kind_usable) {
    const bucket_list& healthy = sel.groups[t_cluster][0].kind[kind_healthy];
    for (size_t h = std::min<size_t>(need, healthy.by_free.size()); h-- > 0 && !fewest_at_risk;) {
      const auto& b = healthy.by_free[h];
      for (size_t i = 0; i < b.size() && i < 64; ++i)
        if (popcount(machines[b[i]].free_usable()) >= need && has_room(b[i])) {
          fewest_at_risk = &one_machine;
          one_machine.assign(1, b[i]);
          break;
        }
    }
  }
  const auto& bucket = fewest_at_risk ? *fewest_at_risk : *best_count;
  size_t look = (need > 1) ? std::min<size_t>(bucket.size(), options.quality_lookahead) : 1;
  machine_id best = bucket[0];
  uint64_t best_penalty = UINT64_MAX;
  for (size_t i = 0; i < look; ++i) {
    const machine_rec& m = machines[bucket[i]];
    gpu_mask primary = m.free_healthy();
    gpu_mask secondary = k == kind_usable ? m.free_at_risk() : 0;
    uint64_t penalty = 0;
    for (uint32_t r = 0; r < sh.workers; ++r) {
      int numa;
      out.workers[r].gpus = select_worker(m, primary, secondary, gpus_of(r), numa, penalty);
      out.workers[r].numa_node = numa;
    }
    if (penalty < best_penalty) {
      best_penalty = penalty;
      best = bucket[i];
    }
    if (penalty == 0)
      break;
  }
  const machine_rec& m = machines[best];
  gpu_mask primary = m.free_healthy();
  gpu_mask secondary = k == kind_usable ? m.free_at_risk() : 0;
  gpu_mask at_risk = secondary;
  uint64_t penalty = 0;
  gpu_mask all = 0;
  for (uint32_t r = 0; r < sh.workers; ++r) {
    int numa;
    out.workers[r].machine = best;
    out.workers[r].gpus = select_worker(m, primary, secondary, gpus_of(r), numa, penalty);
    out.workers[r].numa_node = numa;
    all |= out.workers[r].gpus;
  }
  out.tier = placement_tier::one_machine;
  out.uses_at_risk = (all & at_risk) != 0;
  return true;
}

} // namespace astraeus
