/// Down detection precision: how late a machine actor declares `Down` after
/// its heartbeat deadline (last report + lapse).
///
/// 10,000 machine actors (no store) in a real caf::actor_system; each gets
/// exactly one report, the sends staggered evenly over `--stagger` seconds,
/// then none. Once every deadline has passed, one atom::get per actor
/// returns its MachineView; for each machine:
///   lateness = state_since_unix_ms (when it went Down, actor's wall clock)
///              - (last_report_unix_ms + lapse)   (its deadline, same clock)
/// and, as a cross-check, the same against the producer's send time.
/// Printed: min / median / p99 / max lateness in ms per lapse.
///
/// Run: build-bench/bench/down_detection_bench [--lapse 2,5] [--stagger 1]
///        [--machines 10000] [--threads 2] [--load 0]
///   --load R: meanwhile, another 1,000 machine actors receive R reports/s
///             in total (background ingestion), to see timers under load.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "bench_support.hpp"
#include "runtime/process/system_setup.hpp"

namespace {

using namespace astraeus;
using steady = std::chrono::steady_clock;

struct options {
  std::vector<double> lapses_s{2.0, 5.0};
  double stagger_s = 1.0;
  size_t machines = 10'000;
  int threads = 2;
  double load_per_s = 0;
};

int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--lapse S[,S...]] [--stagger S] [--machines N] "
               "[--threads N] [--load REPORTS_PER_S]\n",
               argv0);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    auto arg = std::string{argv[i]};
    if (i + 1 >= argc)
      usage(argv[0]);
    std::string val = argv[++i];
    if (arg == "--lapse") {
      o.lapses_s.clear();
      std::stringstream ss{val};
      std::string item;
      while (std::getline(ss, item, ','))
        o.lapses_s.push_back(std::stod(item));
    } else if (arg == "--stagger") {
      o.stagger_s = std::stod(val);
    } else if (arg == "--machines") {
      o.machines = std::stoul(val);
    } else if (arg == "--threads") {
      o.threads = std::stoi(val);
    } else if (arg == "--load") {
      o.load_per_s = std::stod(val);
    } else {
      usage(argv[0]);
    }
  }
  if (o.lapses_s.empty() || o.machines == 0 || o.threads < 1)
    usage(argv[0]);
  return o;
}

double percentile(const std::vector<double>& sorted, double p) {
  auto idx = static_cast<size_t>(p * static_cast<double>(sorted.size() - 1)
                                 + 0.5);
  return sorted[std::min(idx, sorted.size() - 1)];
}

struct stats {
  double min, median, p99, max, mean;
};

stats summarize(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  double sum = 0;
  for (auto x : xs)
    sum += x;
  return {xs.front(), percentile(xs, 0.5), percentile(xs, 0.99), xs.back(),
          sum / static_cast<double>(xs.size())};
}

struct run_result {
  double lapse_s;
  size_t down;
  size_t total;
  stats vs_deadline;   // from last_report_unix_ms + lapse (actor clock)
  stats vs_send;       // from the producer's send time + lapse
  double send_jitter_ms; // worst producer lag behind its schedule
};

run_result run_once(const options& opt, double lapse_s) {
  caf::actor_system_config cfg;
  register_astraeus_types(cfg);
  cfg.set("scheduler.max-threads", static_cast<int64_t>(opt.threads));
  caf::actor_system sys{cfg};
  auto lapse = std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(lapse_s));
  const auto lapse_ms = static_cast<int64_t>(lapse_s * 1000.0 + 0.5);
  const size_t n = opt.machines;
  auto machines = bench::spawn_machines(sys, n, lapse);
  std::vector<v1::MachineReport> reports(n);
  for (size_t i = 0; i < n; ++i)
    reports[i] = bench::make_report(i, 1);
  // Background load: other machines that keep reporting.
  std::vector<machine_actor> loaded;
  std::atomic<bool> stop{false};
  std::thread load_thread;
  if (opt.load_per_s > 0) {
    const size_t load_machines = 1000;
    loaded = bench::spawn_machines(sys, load_machines, lapse, n);
    auto wire = bench::make_report(n, 0).SerializeAsString();
    load_thread = std::thread([&, wire, load_machines] {
      auto start = steady::now();
      uint64_t sent = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        auto elapsed = std::chrono::duration<double>(steady::now() - start);
        auto due = static_cast<uint64_t>(elapsed.count() * opt.load_per_s);
        for (; sent < due; ++sent) {
          v1::MachineReport r;
          r.ParseFromString(wire);
          r.set_sequence(sent);
          caf::anon_send(loaded[sent % load_machines], std::move(r));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds{1});
      }
    });
  }
  bench::barrier(sys, machines); // all initialized, timers armed
  std::vector<int64_t> sent_us(n);
  const auto step = std::chrono::duration_cast<steady::duration>(
    std::chrono::duration<double>(opt.stagger_s / static_cast<double>(n)));
  const auto t0 = steady::now() + std::chrono::milliseconds{20};
  double worst_lag_ms = 0;
  for (size_t i = 0; i < n; ++i) {
    auto due = t0 + step * static_cast<int64_t>(i);
    std::this_thread::sleep_until(due);
    worst_lag_ms = std::max(
      worst_lag_ms,
      std::chrono::duration<double, std::milli>(steady::now() - due).count());
    sent_us[i] = wall_us();
    caf::anon_send(machines[i], std::move(reports[i]));
  }
  // Wait past the last deadline, then ask everyone; re-ask (briefly) if
  // some machine has not gone Down yet.
  std::this_thread::sleep_until(steady::now() + lapse
                                + std::chrono::milliseconds{300});
  std::vector<v1::MachineView> views;
  size_t down = 0;
  for (int attempt = 0; attempt < 20; ++attempt) {
    views = bench::collect_views(sys, machines);
    down = static_cast<size_t>(
      std::count_if(views.begin(), views.end(), [](const auto& v) {
        return v.state() == v1::Machine::Down;
      }));
    if (down == n)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds{250});
  }
  stop = true;
  if (load_thread.joinable())
    load_thread.join();
  std::vector<double> vs_deadline;
  std::vector<double> vs_send;
  for (size_t i = 0; i < n; ++i) {
    const auto& v = views[i];
    if (v.state() != v1::Machine::Down)
      continue;
    vs_deadline.push_back(static_cast<double>(
      v.state_since_unix_ms() - (v.last_report_unix_ms() + lapse_ms)));
    vs_send.push_back(static_cast<double>(v.state_since_unix_ms())
                      - (static_cast<double>(sent_us[i]) / 1000.0
                         + static_cast<double>(lapse_ms)));
  }
  bench::shutdown(machines);
  bench::shutdown(loaded);
  run_result res{lapse_s, down, n, {}, {}, worst_lag_ms};
  if (!vs_deadline.empty()) {
    res.vs_deadline = summarize(vs_deadline);
    res.vs_send = summarize(vs_send);
  }
  return res;
}

void print_stats(const char* label, const stats& s) {
  std::printf("    %-34s min %6.1f  median %6.1f  p99 %6.1f  max %6.1f  "
              "mean %6.2f ms\n",
              label, s.min, s.median, s.p99, s.max, s.mean);
}

} // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  auto opt = parse(argc, argv);
  std::printf("down detection: %zu machines, one report each staggered over "
              "%.1f s, %d scheduler thread(s), background load %.0f "
              "reports/s\n",
              opt.machines, opt.stagger_s, opt.threads, opt.load_per_s);
  bool all_ok = true;
  for (auto lapse_s : opt.lapses_s) {
    auto t = steady::now();
    auto r = run_once(opt, lapse_s);
    auto took = std::chrono::duration<double>(steady::now() - t).count();
    std::printf("lapse %.1f s: %zu/%zu Down (run took %.1f s; producer lag "
                "behind schedule <= %.2f ms)\n",
                r.lapse_s, r.down, r.total, took, r.send_jitter_ms);
    if (r.down == 0) {
      all_ok = false;
      continue;
    }
    print_stats("lateness vs deadline (actor clock):", r.vs_deadline);
    print_stats("lateness vs send time + lapse:", r.vs_send);
    if (r.down != r.total || r.vs_deadline.max > 1000.0
        || r.vs_deadline.min < -1.0)
      all_ok = false;
  }
  std::printf("target (every Down <= 1000 ms late, none early, all Down): "
              "%s\n",
              all_ok ? "met" : "NOT met");
  return all_ok ? 0 : 1;
}
