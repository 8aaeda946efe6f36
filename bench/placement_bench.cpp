// The placement engine on a simulated cluster (plain main; figures in
// bench/RESULTS.md).
//
//   placement_bench [--machines N[,N...]] [--ops N] [--gangs N] [--seed S]
//                   [--cores CPUS:PER_GPU]
//
// For each cluster size (default 5,000 and 100,000 machines of 8 GPUs):
//   - builds the index: 2 NUMA nodes per machine (GPUs 0-3, 4-7), NVSwitch on
//     9 machines of 10 and NVLink pairs on the rest, 40-character UUIDs; pools
//     h100 (80 %) and a100 (20 %); 2 sites; racks of 32 machines; InfiniBand
//     fabrics of 512; NVLink domains of 8 machines in every 4th rack; 2 % of
//     GPUs fenced (Faulty), 1 % AtRisk;
//   - fills it to 60 % of its GPUs with single workers (1/2/4/8 GPUs);
//   - single-worker mix: `--ops` decisions (place + commit) of 1/2/4/8-GPU
//     workers (weights 40/25/20/15, pool h100 or a100 as the machines are
//     split, 10 % healthy_only), each followed by releases that bring the
//     cluster back to 60 % (not timed with the decision);
//   - the mix: 10 x `--gangs` decisions, 90 % single workers and 10 % gangs
//     of 2-16 machines (8-GPU workers x 2..16, or 4-GPU workers x 4..32),
//     all kept, the cluster held at 60 % by random releases;
//   - gangs at 95 %: the same gangs, most of which wait (the waiting path);
//   - queue passes: every running allocation adopted with an end time within
//     24 h, one head gang that cannot start now (so a reservation is
//     computed), then 1,000 small runs; at 60 % with a head of 70 % of one
//     site's h100 machines, and at 95 % with a head of 3 % of the machines;
//   - memory: VmRSS / VmHWM from /proc/self/status.
// `--cores CPUS:PER_GPU` (issue 22): every machine has CPUS logical CPUs
// (and 16 GiB of memory per CPU) and every worker asks for PER_GPU cores
// (and 8 GiB) per GPU, so GPUs, cores and memory are fitted together:
// 128:16 never runs short of cores before GPUs (the cost of the check);
// 96:16 does (machines with free GPUs but not the cores are passed over).

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "actors/scheduler/placement.hpp"
#include "sim_cluster.hpp"

using namespace astraeus;
using namespace astraeus::bench;

namespace {

/// `--cores CPUS:PER_GPU`: 0 = machines and workers without cores.
uint32_t machine_cpus = 0;
double cores_per_gpu = 0;

/// `r` asking for cores and memory per GPU (with `--cores`).
placement_request sized(placement_request r) {
  if (machine_cpus && !r.groups.empty()) {
    r.cpus_per_worker = cores_per_gpu * r.groups[0].gpus_per_worker;
    r.memory_bytes_per_worker = (uint64_t{8} << 30) * r.groups[0].gpus_per_worker;
  }
  return r;
}

placement_request single_request(std::mt19937_64& rng, uint64_t n) {
  return sized(bench::single_request(rng, n));
}

placement_request gang_request(std::mt19937_64& rng, uint64_t n) {
  return sized(bench::gang_request(rng, n));
}

void build(placement_index& idx, size_t machines, std::mt19937_64& rng) {
  for (size_t i = 0; i < machines; ++i) {
    auto spec = sim_machine(i, machines, rng);
    spec.cpus = machine_cpus;
    spec.memory_bytes = (uint64_t{16} << 30) * machine_cpus;
    if (!idx.add_machine(spec)) {
      std::fprintf(stderr, "add_machine failed\n");
      std::exit(1);
    }
  }
}

// Live allocations and how many GPUs they hold, kept by the bench (the
// index's totals() walks every machine).
struct live_set {
  std::vector<std::pair<allocation_id, unsigned>> ids;
  uint64_t held = 0;

  void add(allocation_id a, const placement& p) {
    unsigned n = 0;
    for (const auto& w : p.workers)
      n += static_cast<unsigned>(__builtin_popcountll(w.gpus));
    ids.emplace_back(a, n);
    held += n;
  }
  void release_random(placement_index& idx, std::mt19937_64& rng) {
    size_t i = rng() % ids.size();
    idx.release(ids[i].first);
    held -= ids[i].second;
    ids[i] = ids.back();
    ids.pop_back();
  }
};

void check(const placement_index& idx) {
  if (auto problem = idx.check_invariants(); !problem.empty()) {
    std::fprintf(stderr, "invariants: %s\n", problem.c_str());
    std::exit(1);
  }
}

void run_size(size_t machines, size_t ops, size_t gangs, uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::printf("== %zu machines x 8 GPUs ==\n", machines);
  if (machine_cpus)
    std::printf("  with cores: %u CPUs and %u GiB a machine, %.1f cores and 8 GiB a GPU asked\n",
                machine_cpus, machine_cpus * 16, cores_per_gpu);
  auto m0 = memory_mib();
  auto t0 = clock_type::now();
  placement_index idx;
  build(idx, machines, rng);
  double build_s = ns_since(t0) / 1e9;
  auto tot = idx.totals();
  auto m1 = memory_mib();
  std::printf("  built in %.2f s: %" PRIu64 " GPUs, %" PRIu64 " fenced, %" PRIu64
              " at risk; RSS %.0f MiB (index +%.0f MiB)\n",
              build_s, tot.gpus, tot.fenced, tot.free_at_risk, m1.first, m1.first - m0.first);

  // Fill to 60 % of all GPUs with single workers.
  live_set live;
  const uint64_t target = tot.gpus * 60 / 100;
  uint64_t n = 0, refused = 0;
  // With `--cores`, the cores may run out before the GPUs: a fill stops
  // after 10,000 refusals in a row.
  auto fill_to = [&](uint64_t level) {
    uint64_t n_refused = 0;
    while (live.held < level && n_refused < 10000) {
      auto r = idx.place(single_request(rng, n++));
      allocation_id got = 0;
      if (auto* p = std::get_if<placement>(&r))
        if (auto a = idx.commit(*p)) {
          live.add(*a, *p);
          got = *a;
        }
      n_refused = got ? 0 : n_refused + 1;
    }
    if (live.held < level)
      std::printf("  (filled to %.1f %% only: the cores ran out first)\n",
                  100.0 * static_cast<double>(live.held) / static_cast<double>(tot.gpus));
  };
  t0 = clock_type::now();
  while (live.held < target) {
    auto r = idx.place(single_request(rng, n++));
    if (auto* p = std::get_if<placement>(&r)) {
      if (auto a = idx.commit(*p))
        live.add(*a, *p);
    } else {
      ++refused;
    }
  }
  double fill_s = ns_since(t0) / 1e9;
  tot = idx.totals();
  auto m2 = memory_mib();
  std::printf("  filled in %.2f s to %.1f %% (%zu allocations, %" PRIu64
              " refused on the way; %.0f placements/s); RSS %.0f MiB\n",
              fill_s, 100.0 * static_cast<double>(tot.held) / static_cast<double>(tot.gpus),
              live.ids.size(), refused, static_cast<double>(n) / fill_s, m2.first);
  check(idx);

  // Single-worker mix at a steady 60 %.
  {
    std::vector<double> decide, placed, waited;
    decide.reserve(ops);
    size_t ok = 0;
    double decide_ns = 0, release_ns = 0;
    for (size_t i = 0; i < ops; ++i) {
      auto req = single_request(rng, n++);
      auto d0 = clock_type::now();
      auto r = idx.place(req);
      bool done = false;
      if (auto* p = std::get_if<placement>(&r)) {
        if (auto a = idx.commit(*p)) {
          live.add(*a, *p);
          done = true;
        }
      }
      double ns = ns_since(d0);
      decide.push_back(ns);
      (done ? placed : waited).push_back(ns);
      decide_ns += ns;
      ok += done;
      auto r0 = clock_type::now();
      while (live.held > target)
        live.release_random(idx, rng);
      release_ns += ns_since(r0);
    }
    std::printf("  single-worker mix: %zu decisions, %zu placed (%.1f %%): %.0f decisions/s, "
                "%.0f placements/s (place+commit time only); releases %.0f/s\n",
                ops, ok, 100.0 * static_cast<double>(ok) / static_cast<double>(ops),
                static_cast<double>(ops) / (decide_ns / 1e9),
                static_cast<double>(ok) / (decide_ns / 1e9),
                static_cast<double>(ok) / (release_ns / 1e9));
    print_latency("decision (place+commit)", decide);
    print_latency("  placed", placed);
    print_latency("  waiting (with reason)", waited);
    check(idx);
  }

  // The mix: 90 % single workers, 10 % gangs of 2-16 machines, all kept;
  // random releases hold the cluster at 60 %.
  auto gang_phase = [&](const char* title, size_t count, double single_share, bool keep,
                        uint64_t level) {
    std::vector<double> singles, gang_all, gang_placed, gang_waited;
    size_t ok = 0, gang_ok = 0, gang_n = 0;
    size_t by_tier[5] = {};
    std::uniform_real_distribution<double> share(0, 1);
    for (size_t i = 0; i < count; ++i) {
      bool is_gang = share(rng) >= single_share;
      auto req = is_gang ? gang_request(rng, n++) : single_request(rng, n++);
      auto d0 = clock_type::now();
      auto r = idx.place(req);
      allocation_id a = 0;
      const placement* p = std::get_if<placement>(&r);
      if (p) {
        if (auto got = idx.commit(*p))
          a = *got;
      }
      double ns = ns_since(d0);
      if (is_gang) {
        ++gang_n;
        gang_all.push_back(ns);
        (a ? gang_placed : gang_waited).push_back(ns);
      } else {
        singles.push_back(ns);
      }
      if (a) {
        ++ok;
        if (is_gang) {
          ++gang_ok;
          ++by_tier[static_cast<int>(p->tier)];
        }
        if (keep)
          live.add(a, *p);
        else
          idx.release(a);
      }
      while (live.held > level)
        live.release_random(idx, rng);
    }
    std::printf("  %s: %zu decisions, %zu placed; gangs %zu, %zu placed (one machine %zu, NVLink "
                "domain %zu, fabric %zu, rack %zu, site %zu)\n",
                title, count, ok, gang_n, gang_ok, by_tier[0], by_tier[1], by_tier[2],
                by_tier[3], by_tier[4]);
    if (!singles.empty())
      print_latency("single decision", singles);
    print_latency("gang decision (place+commit)", gang_all);
    print_latency("  placed", gang_placed);
    print_latency("  waiting (with reason)", gang_waited);
    check(idx);
  };
  gang_phase("mix at 60 %", gangs * 10, 0.9, true, target);
  // Gangs at 95 %: many wait, so the waiting path and every tier are timed.
  {
    uint64_t high = tot.gpus * 95 / 100;
    fill_to(high);
    gang_phase("gangs at 95 % (each released at once)", gangs, 0.0, false, high);
    while (live.held > target)
      live.release_random(idx, rng);
  }

  // Queue passes: every running allocation adopted with an end time within
  // 24 h, one head gang that cannot start now (so a reservation is
  // computed), then 1,000 small runs with time limits of 5 min - 2 h.
  auto queue_pass = [&](const char* title, uint32_t head_machines) {
    scheduler_queue q{idx};
    int64_t now = 0;
    size_t adopted = 0;
    for (const auto& [a, gpus] : live.ids) {
      int64_t limit = 600 + static_cast<int64_t>(rng() % (24 * 3600));
      if (!q.adopt("adopted-" + std::to_string(a), a, now, limit))
        ++adopted;
    }
    placement_request head;
    head.run = "head";
    head.groups = {worker_group{"default", head_machines, 8}};
    head.required_labels = {{"pool", "h100"}};
    head.time_limit_seconds = 3600;
    q.submit(sized(head), now);
    for (int i = 0; i < 1000; ++i) {
      auto r = single_request(rng, n++);
      r.time_limit_seconds = 300 + static_cast<int64_t>(rng() % 7200);
      q.submit(r, now);
    }
    auto p0 = clock_type::now();
    auto started = q.schedule(now);
    double pass_ms = ns_since(p0) / 1e6;
    size_t backfilled = 0;
    for (const auto& d : started)
      backfilled += d.backfilled;
    std::printf("  queue pass %s: %zu running, head gang of %u machines + 1,000 runs: %.1f ms; "
                "%zu started (%zu backfilled), reservation %s (starts in %s)\n",
                title, adopted, head_machines, pass_ms, started.size(), backfilled,
                q.reservation() ? "made" : "none",
                q.reservation() ? format_duration(q.reservation()->start - now).c_str() : "-");
    p0 = clock_type::now();
    auto again = q.schedule(now + 1);
    std::printf("    the next pass, nothing changed: %.1f ms; %zu started; %zu waiting\n",
                ns_since(p0) / 1e6, again.size(), q.waiting_count());
    for (const auto& d : started)
      q.complete(d.run);
    for (const auto& d : again)
      q.complete(d.run);
    check(idx);
  };
  // At 60 %, only a head larger than the free machines of a site waits.
  queue_pass("at 60 %", static_cast<uint32_t>(machines / 2 * 4 / 5 * 7 / 10));
  {
    uint64_t high = tot.gpus * 95 / 100;
    fill_to(high);
    queue_pass("at 95 %", static_cast<uint32_t>(machines * 3 / 100));
  }
  auto m3 = memory_mib();
  std::printf("  memory: VmRSS %.0f MiB, VmHWM %.0f MiB\n\n", m3.first, m3.second);
}

} // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes{5000, 100000};
  size_t ops = 1000000, gangs = 20000;
  uint64_t seed = 7;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool has_value = i + 1 < argc;
    if (arg == "--machines" && has_value) {
      sizes = parse_sizes(argv[++i]);
    } else if (arg == "--ops" && has_value) {
      ops = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--gangs" && has_value) {
      gangs = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--seed" && has_value) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--cores" && has_value) {
      std::string v = argv[++i];
      auto colon = v.find(':');
      machine_cpus = static_cast<uint32_t>(std::strtoul(v.c_str(), nullptr, 10));
      cores_per_gpu = colon == std::string::npos ? 0 : std::strtod(v.c_str() + colon + 1, nullptr);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--machines N[,N...]] [--ops N] [--gangs N] [--seed S] "
                   "[--cores CPUS:PER_GPU]\n",
                   argv[0]);
      return 2;
    }
  }
  auto t0 = clock_type::now();
  for (size_t m : sizes)
    run_size(m, ops, gangs, seed);
  std::printf("total %.1f s\n", ns_since(t0) / 1e9);
  return 0;
}
