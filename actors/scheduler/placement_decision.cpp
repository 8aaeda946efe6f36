// Placing a request: its checks and shape, the cases where it can never be
// placed, the rank layout, the order of attempts (healthy GPUs first, then
// with AtRisk ones; one machine, then a gang tier by tier) and, when it
// cannot be placed now, why, in plain words.

#include "actors/scheduler/placement.hpp"

#include <algorithm>
#include <functional>
#include <map>

#include "actors/scheduler/placement_internal.hpp"

namespace astraeus {

using namespace placement_detail;

namespace {

std::string plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string gpus_text(uint64_t n, bool healthy) {
  return std::to_string(n) + (healthy ? " healthy" : "") + (n == 1 ? " GPU" : " GPUs");
}

/// Whether the machines make one site (none carries a site label, or all
/// the same one): a gang's reason then says nothing of sites.
bool one_site(const placement_detail::selector_rec& sel) {
  return sel.groups[placement_detail::t_site].size() <= 1;
}

} // namespace

namespace placement_detail {

std::string cores_text(uint64_t millis) {
  std::string out = std::to_string(millis / 1000);
  if (uint64_t frac = millis % 1000) {
    std::string f = std::to_string(1000 + frac).substr(1);
    while (!f.empty() && f.back() == '0')
      f.pop_back();
    out += "." + f;
  }
  return out;
}

std::string memory_text(uint64_t bytes) {
  constexpr uint64_t mib = uint64_t{1} << 20, gib = uint64_t{1} << 30;
  if (bytes >= gib && bytes % gib == 0)
    return std::to_string(bytes / gib) + " GiB";
  if (bytes >= gib) {
    uint64_t tenths = bytes * 10 / gib; // rounded down: never more than there is
    return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " GiB";
  }
  return std::to_string(bytes / mib) + " MiB";
}

} // namespace placement_detail

namespace {

shape shape_of(const placement_request& r) {
  shape s;
  for (const auto& g : r.groups) {
    s.workers += g.workers;
    s.gpus += uint64_t(g.workers) * g.gpus_per_worker;
    if (g.gpus_per_worker > s.gmax) {
      s.gmax = g.gpus_per_worker;
      s.workers_gmax = 0;
    }
    if (g.gpus_per_worker == s.gmax)
      s.workers_gmax += g.workers;
    s.gmin = std::min(s.gmin, g.gpus_per_worker);
  }
  s.uniform = s.gmin == s.gmax;
  return s;
}

std::optional<std::string> check_request(const placement_request& r) {
  if (r.groups.empty())
    return "the run has no worker groups";
  if (r.leader_group >= r.groups.size())
    return "the leader group " + std::to_string(r.leader_group) + " does not exist";
  uint64_t workers = 0;
  for (const auto& g : r.groups) {
    if (g.workers == 0)
      return "worker group " + g.name + " has no workers";
    if (g.gpus_per_worker == 0)
      return "worker group " + g.name + " asks for no GPUs (the GPU placement engine places GPU workers)";
    workers += g.workers;
  }
  if (workers > (1u << 20))
    return "the run has more than 1,048,576 workers";
  return std::nullopt;
}

waiting_reason waiting_for(waiting_code code, std::string message) {
  return waiting_reason{code, std::move(message)};
}

// Why `request` can never be placed on the machines of `sel` as they are,
// if so: "cannot fit anywhere now: ..." (issue 13, item 5), else whether
// none of them takes new work (naming those that would fit but for their
// state).
// `blockers(k, need)` and `pools()` are `placement_index::state`'s.
// `kept_out()` is `placement_index::state::most_kept_out` for `sel`.
template <class Blockers, class Pools, class KeptOut>
std::optional<waiting_reason> never_placed(const selector_rec& sel, const shape& sh,
                                           bool gang, unsigned k, uint64_t ask_cpu,
                                           uint64_t ask_mem, const Blockers& blockers,
                                           const Pools& pools, const KeptOut& kept_out) {
  const std::string& where = sel.where;
  const std::string now = "cannot fit anywhere now: ";
  if (sel.matching == 0) {
    // Only the scheduler's own labels (astraeus.io/…) are not a user's ask.
    bool asked = false;
    for (const auto& kv : sel.label_text)
      asked = asked || kv.first.rfind("astraeus.io/", 0) != 0;
    // issue 22: a run asking for RDMA (scheduler_actor.hpp's rdma_label).
    if (sel.label_text.count("astraeus.io/rdma"))
      return waiting_for(waiting_code::no_machine,
                         "waiting: needs RDMA; no machine" + where + " has an RDMA port up");
    // Machines that only their acceptance (or cordon) keeps from it (issue
    // 21): named, whatever else the run asks; never "the cluster has no
    // machines" while it has them.
    if (std::string named = blockers(k, sh.gmax); !named.empty())
      return waiting_for(waiting_code::none_schedulable,
                         "waiting: needs " + gpus_text(sh.gmax, false) +
                           (gang ? " per worker" : "") + where + named);
    // A run pinned to one machine (a validation's check) whose machine the
    // cluster no longer has: not "the cluster has no machines".
    auto pinned = sel.label_text.find("astraeus.io/machine");
    if (!asked && pinned == sel.label_text.end())
      return waiting_for(waiting_code::no_machine, now + "the cluster has no machines");
    if (pinned != sel.label_text.end())
      return waiting_for(waiting_code::no_machine,
                         now + "machine " + pinned->second + " is not in the cluster");
    return waiting_for(waiting_code::no_machine,
                       now + "no machine" + where +
                         (sel.label_text.count("pool") ? pools() : std::string{}));
  }
  unsigned max_present = 0;
  for (size_t p = sel.present_hist.size(); p-- > 0;)
    if (sel.present_hist[p]) {
      max_present = static_cast<unsigned>(p);
      break;
    }
  // The machines that match have too few GPUs, but one that only its
  // cordon or acceptance keeps from this run (issue 21: it takes checks
  // only, so it does not match) may have them: it is named, as above.
  // Before, a cordoned GPU machine beside a machine without GPUs (the dev
  // cluster's own) made a user's run "cannot fit anywhere now: no machine
  // has a GPU".
  // (Unless the worker's cores or memory fit none of them either: then it
  // cannot fit anywhere, said below.)
  auto largest = [](const std::map<uint64_t, uint32_t>& caps) -> uint64_t {
    return caps.empty() || caps.count(0) ? UINT64_MAX : caps.rbegin()->first;
  };
  auto fits_kept_out = [&] {
    if (!ask_cpu && !ask_mem)
      return true;
    const auto kept = kept_out();
    return (!ask_cpu || ask_cpu <= kept.cpu_cap) && (!ask_mem || ask_mem <= kept.mem_cap);
  };
  if (sh.gmax > max_present && fits_kept_out())
    if (std::string named = blockers(k, sh.gmax, true); !named.empty())
      return waiting_for(waiting_code::none_schedulable,
                         "waiting: needs " + gpus_text(sh.gmax, false) +
                           (gang ? " per worker" : "") + where + named);
  // The most GPUs counts those machines too: a 16-GPU ask beside a
  // cordoned 8-GPU machine and the dev cluster's GPU-less one is "machines
  // have at most 8", not "no machine has a GPU" (a new-user trial).
  if (sh.gmax > max_present) {
    const unsigned most = std::max(max_present, kept_out().gpus);
    if (most == 0)
      return waiting_for(waiting_code::never_fits,
                         now + "no machine" + where + " has a GPU");
    if (sh.gmax > most)
      return waiting_for(waiting_code::never_fits,
                         now + "a worker needs " + gpus_text(sh.gmax, false) +
                           " on one machine; machines" + where + " have at most " +
                           std::to_string(most));
  }
  if (gang) {
    uint64_t best_site = 0;
    for (uint64_t p : sel.site_present)
      best_site = std::max(best_site, p);
    if (sh.gpus > best_site)
      return waiting_for(waiting_code::never_fits,
                         one_site(sel)
                           ? now + "needs " + gpus_text(sh.gpus, false) + "; the machines" +
                               where + " have " + std::to_string(best_site) + " in all"
                           : now + "needs " + gpus_text(sh.gpus, false) +
                               " within one site; the largest site" + where + " has " +
                               std::to_string(best_site));
  }
  // More cores or memory than the largest machine has (issue 22; a machine
  // whose size is unknown, 0, may have any; `largest` above).
  // A machine that only its cordon or acceptance keeps from the run, large
  // enough, is named as what it waits for (an eighth-trial run asking 200
  // GiB beside cordoned 2 TiB machines read "cannot fit anywhere now").
  const bool too_big_cpu = ask_cpu && ask_cpu > largest(sel.cpu_caps);
  const bool too_big_mem = ask_mem && ask_mem > largest(sel.mem_caps);
  if (too_big_cpu || too_big_mem) {
    if (fits_kept_out())
      if (std::string named = blockers(k, sh.gmax, true); !named.empty())
        return waiting_for(waiting_code::none_schedulable,
                           "waiting: needs " + gpus_text(sh.gmax, false) +
                             (gang ? " per worker" : "") + where + named);
  }
  if (too_big_cpu)
    return waiting_for(waiting_code::never_fits,
                       now + "a worker asks for " + cores_text(ask_cpu) +
                         " CPU cores; the largest machine" + where + " has " +
                         cores_text(largest(sel.cpu_caps)));
  if (too_big_mem)
    return waiting_for(waiting_code::never_fits,
                       now + "a worker asks for " + memory_text(ask_mem) +
                         " of memory; the largest machine" + where + " has " +
                         memory_text(largest(sel.mem_caps)));
  if (sel.schedulable == 0) {
    std::string named = blockers(k, sh.gmax);
    if (!named.empty())
      return waiting_for(waiting_code::none_schedulable,
                         "waiting: needs " + gpus_text(sh.gmax, false) +
                           (gang ? " per worker" : "") + where + named);
    return waiting_for(waiting_code::none_schedulable,
                       "waiting: no machine" + where + " takes new work (" +
                         plural(sel.matching, "machine is", "machines are") +
                         " Down, cordoned, in maintenance, in acceptance or under pressure)");
  }
  return std::nullopt;
}

// Ranks run across groups in request order; the leader is rank 0 of the
// leader group.
void lay_out_ranks(const placement_request& request, placement& out) {
  uint32_t rank = 0;
  for (uint32_t gi = 0; gi < request.groups.size(); ++gi) {
    if (gi == request.leader_group)
      out.leader = rank;
    for (uint32_t r = 0; r < request.groups[gi].workers; ++r, ++rank) {
      out.workers[rank].rank = rank;
      out.workers[rank].group = gi;
      out.workers[rank].group_rank = r;
    }
  }
}

// Why a request that could be placed on empty machines waits now, in the
// words of the best there is.
template <class Blockers>
waiting_reason why_waiting(const selector_rec& sel, const placement_request& request,
                           const shape& sh, bool gang, const Blockers& blockers) {
  const std::string& where = sel.where;
  unsigned k = request.healthy_only ? kind_healthy : kind_usable;
  if (!gang) {
    unsigned best = sel.groups[t_cluster][0].kind[k].max_free();
    std::string msg = "waiting: needs " + gpus_text(sh.gpus, request.healthy_only) +
                      " on one machine" + where + "; best machine has " + std::to_string(best);
    if (request.healthy_only &&
        sel.groups[t_cluster][0].kind[kind_usable].max_free() >= sh.gpus)
      msg += " (it would fit with GPUs at risk, which healthy_only refuses)";
    msg += blockers(k, sh.gmax);
    return waiting_for(waiting_code::not_enough_gpus, std::move(msg));
  }
  std::string need;
  if (sh.uniform) {
    need = plural(sh.workers, "worker", "workers") + " of " +
           gpus_text(sh.gmax, request.healthy_only) + " each (" + gpus_text(sh.gpus, false) + ")";
  } else {
    std::map<uint32_t, uint64_t, std::greater<>> by_size;
    for (const auto& g : request.groups)
      by_size[g.gpus_per_worker] += g.workers;
    for (const auto& [g, n] : by_size) {
      if (!need.empty())
        need += " and ";
      need += plural(n, "worker", "workers") + " of " + gpus_text(g, request.healthy_only);
    }
    need += " (" + gpus_text(sh.gpus, false) + ")";
  }
  uint64_t best_room = 0, best_free = 0;
  for (const auto& site : sel.groups[t_site]) {
    // One worker per machine: a site's room is its machines with room for
    // one (sbatch --nodes=N).
    uint64_t room = site.kind[k].capacity(sh.gmax);
    if (request.one_worker_per_machine) {
      room = 0;
      const auto& by_free = site.kind[k].by_free;
      for (size_t f = sh.gmax; f < by_free.size(); ++f)
        room += by_free[f].size();
    }
    best_room = std::max(best_room, room);
    best_free = std::max(best_free, site.kind[k].free_sum);
  }
  if (request.one_worker_per_machine)
    need += ", one per machine";
  // Sites are named only where machines carry site labels: with one site
  // (none labelled) "best site" would send a user looking for a label
  // problem (a new-user trial).
  std::string msg;
  if (one_site(sel)) {
    msg = "waiting: needs " + need + where + "; the machines have " +
          (sh.uniform ? "room for " + plural(best_room, "worker", "workers")
                          + (request.one_worker_per_machine ? " (one per machine)" : "")
                      : std::to_string(best_free) + " free");
  } else {
    msg = "waiting: needs " + need + " within one site" + where;
    if (sh.uniform)
      msg += "; best site has room for " + std::to_string(best_room);
    else
      msg += "; best site has " + std::to_string(best_free) + " free";
  }
  msg += blockers(k, sh.gmax, false, true);
  return waiting_for(waiting_code::not_enough_gpus, std::move(msg));
}

// " with 64 free cores and 512 GiB free memory": what each worker asks
// for besides GPUs.
std::string with_text(uint64_t cpu, uint64_t mem) {
  std::string out;
  if (cpu)
    out += " with " + cores_text(cpu) + " free " + (cpu == 1000 ? "core" : "cores");
  if (mem)
    out += (out.empty() ? " with " : " and ") + memory_text(mem) + " free memory";
  return out;
}

// Why a request waits whose GPUs are free somewhere, but not with the cores
// or memory its workers ask for (issue 22): "waiting: no machine in pool
// h100 has 2 free GPUs with 64 free cores and 512 GiB free memory; gpu-01
// has the GPUs but only 16 free cores".
template <class Blockers>
waiting_reason why_short(const selector_rec& sel, const placement_request& request,
                         const shape& sh, bool gang, uint64_t cpu, uint64_t mem,
                         const std::string& shorts, const Blockers& blockers) {
  const std::string& where = sel.where;
  unsigned k = request.healthy_only ? kind_healthy : kind_usable;
  std::string msg;
  if (!gang) {
    msg = "waiting: no machine" + where + " has " + std::to_string(sh.gpus) + " free" +
          (request.healthy_only ? " healthy" : "") + (sh.gpus == 1 ? " GPU" : " GPUs") +
          with_text(cpu, mem);
  } else {
    std::string each;
    if (sh.uniform) {
      each = std::to_string(sh.gmax) + " free" + (request.healthy_only ? " healthy" : "") +
             (sh.gmax == 1 ? " GPU" : " GPUs");
    } else {
      std::map<uint32_t, uint64_t, std::greater<>> by_size;
      for (const auto& g : request.groups)
        by_size[g.gpus_per_worker] += g.workers;
      for (const auto& [g, n] : by_size)
        each += (each.empty() ? "" : " or ") + gpus_text(g, request.healthy_only);
      each = "(" + each + ") free";
    }
    msg = "waiting: no machines" + where + " have room for " +
          plural(sh.workers, "worker", "workers") + " of " + each + with_text(cpu, mem) +
          (one_site(sel) ? " each" : " each within one site");
  }
  msg += shorts;
  msg += blockers(k, sh.gmax);
  return waiting_for(waiting_code::not_enough_cores_or_memory, std::move(msg));
}

} // namespace

const char* to_string(placement_tier x) {
  switch (x) {
    case placement_tier::one_machine: return "one machine";
    case placement_tier::nvlink_domain: return "one NVLink domain";
    case placement_tier::fabric: return "one fabric";
    case placement_tier::rack: return "one rack";
    case placement_tier::site: return "one site";
  }
  return "one site";
}

bool placement_index::may_fit(const placement_request& request) {
  auto& S = *st_;
  if (check_request(request))
    return false;
  shape sh = shape_of(request);
  const selector_rec& sel = S.selectors[S.selector_for(request.required_labels)];
  if (sel.schedulable == 0)
    return false;
  unsigned k = request.healthy_only ? kind_healthy : kind_usable;
  const auto& cluster = sel.groups[t_cluster][0].kind[k];
  if (cluster.max_free() < sh.gmax)
    return false;
  if (sh.workers == 1)
    return true;
  for (const auto& site : sel.groups[t_site])
    if (site.kind[k].free_sum >= sh.gpus && site.kind[k].capacity(sh.gmax) >= sh.workers_gmax)
      return true;
  return false;
}

placement_result placement_index::place(const placement_request& request) {
  auto& S = *st_;
  if (auto why = check_request(request))
    return waiting_for(waiting_code::invalid_request, "cannot place: " + *why);
  shape sh = shape_of(request);
  uint32_t sid = S.selector_for(request.required_labels);
  const selector_rec& sel = S.selectors[sid];
  bool gang = sh.workers > 1;
  unsigned kind = request.healthy_only ? kind_healthy : kind_usable;
  auto blockers = [&S, &sel](unsigned k, unsigned need, bool accepting_must_fit = false,
                             bool gang = false) {
    return S.blockers(sel, k, need, accepting_must_fit, gang);
  };
  auto pools = [&S] { return S.pools_text(); };
  S.ask_cpu = cpu_millis_of(request.cpus_per_worker);
  S.ask_mem = request.memory_bytes_per_worker;
  S.one_per_machine = request.one_worker_per_machine && gang;
  S.short_named.clear();
  S.short_more = false;
  auto kept_out = [&S, &sel] { return S.most_kept_out(sel); };
  if (auto never =
        never_placed(sel, sh, gang, kind, S.ask_cpu, S.ask_mem, blockers, pools, kept_out))
    return std::move(*never);
  placement out;
  out.run = request.run;
  out.healthy_only = request.healthy_only;
  out.selector = sid;
  out.cpu_millis_per_worker = S.ask_cpu;
  out.memory_bytes_per_worker = S.ask_mem;
  out.workers.resize(sh.workers);
  lay_out_ranks(request, out);
  for (unsigned k : {kind_healthy, kind_usable}) {
    if (k == kind_usable && request.healthy_only)
      break;
    if (!S.one_per_machine && S.place_on_one_machine(sel, k, request, sh, out))
      return out;
    if (gang && S.place_gang(sel, k, request, sh, out))
      return out;
  }
  if (!S.short_named.empty())
    return why_short(sel, request, sh, gang, S.ask_cpu, S.ask_mem, S.shorts_text(), blockers);
  return why_waiting(sel, request, sh, gang, blockers);
}

} // namespace astraeus
