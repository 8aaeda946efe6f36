/// Report ingestion: in-process v1::MachineReports per second into 10,000
/// machine actors (lapse 60 s, no store) in a real caf::actor_system with
/// 1 or 2 scheduler threads. One producer thread (this one) sends reports
/// round-robin, one per machine per round, with a realistic HostFacts
/// payload; the clock stops when every actor has answered an atom::get sent
/// after its last report (a fan-out barrier), so every report was processed.
///
/// Producer modes:
///   parse    - the producer parses each report from its wire bytes, then
///              moves it into the message: what the gate does per frame.
///   prebuilt - the reports are built before the clock starts and moved in:
///              the machine actors' own cost plus CAF's.
///
/// Run: build-bench/bench/report_ingestion_bench
///      (Google Benchmark flags work, e.g. --benchmark_filter=parse)

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "bench_support.hpp"
#include "runtime/process/system_setup.hpp"

namespace {

using namespace astraeus;
using clk = std::chrono::steady_clock;

constexpr size_t num_machines = 10'000;
constexpr size_t rounds_per_iteration = 20; // 200,000 reports per iteration

void BM_ReportIngestion(benchmark::State& state) {
  const auto threads = state.range(0);
  const bool prebuilt = state.range(1) != 0;
  caf::actor_system_config cfg;
  register_astraeus_types(cfg);
  cfg.set("scheduler.max-threads", static_cast<int64_t>(threads));
  caf::actor_system sys{cfg};
  if (static_cast<int64_t>(sys.scheduler().num_workers()) != threads) {
    state.SkipWithError("scheduler.max-threads not applied");
    return;
  }
  auto machines = bench::spawn_machines(sys, num_machines,
                                        std::chrono::seconds{60});
  // One wire image per machine (what the gate would receive).
  std::vector<std::string> wire(num_machines);
  for (size_t i = 0; i < num_machines; ++i)
    wire[i] = bench::make_report(i, 0).SerializeAsString();
  // Warm-up: every machine goes Idle -> Up (the only transition).
  for (size_t i = 0; i < num_machines; ++i) {
    v1::MachineReport r;
    r.ParseFromString(wire[i]);
    caf::anon_send(machines[i], std::move(r));
  }
  bench::barrier(sys, machines);

  const size_t per_iter = num_machines * rounds_per_iteration;
  std::vector<v1::MachineReport> ready;
  double send_s = 0;
  double barrier_s = 0;
  uint64_t seq = 1;
  for (auto _ : state) {
    if (prebuilt) {
      state.PauseTiming();
      ready.clear();
      ready.resize(per_iter);
      for (size_t k = 0; k < per_iter; ++k) {
        ready[k].ParseFromString(wire[k % num_machines]);
        ready[k].set_sequence(seq + k / num_machines);
      }
      state.ResumeTiming();
    }
    auto t0 = clk::now();
    for (size_t round = 0; round < rounds_per_iteration; ++round, ++seq)
      for (size_t i = 0; i < num_machines; ++i) {
        if (prebuilt) {
          caf::anon_send(machines[i],
                         std::move(ready[round * num_machines + i]));
        } else {
          v1::MachineReport r;
          r.ParseFromString(wire[i]);
          r.set_sequence(seq);
          caf::anon_send(machines[i], std::move(r));
        }
      }
    auto t1 = clk::now();
    bench::barrier(sys, machines);
    auto t2 = clk::now();
    send_s += std::chrono::duration<double>(t1 - t0).count();
    barrier_s += std::chrono::duration<double>(t2 - t1).count();
  }
  auto iters = static_cast<double>(state.iterations());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * per_iter));
  state.counters["machines"] = num_machines;
  state.counters["reports_per_iter"] = static_cast<double>(per_iter);
  // How long the producer alone took to enqueue, and the wait after it.
  state.counters["send_ms"] = 1e3 * send_s / iters;
  state.counters["drain_ms"] = 1e3 * barrier_s / iters;
  state.counters["bytes_per_report"] = static_cast<double>(wire[0].size());
  bench::shutdown(machines);
}

// The cost of the barrier alone (10,000 get round trips, no reports), to
// show it is small against an iteration.
void BM_BarrierOnly(benchmark::State& state) {
  caf::actor_system_config cfg;
  register_astraeus_types(cfg);
  cfg.set("scheduler.max-threads", static_cast<int64_t>(state.range(0)));
  caf::actor_system sys{cfg};
  auto machines = bench::spawn_machines(sys, num_machines,
                                        std::chrono::seconds{60});
  for (size_t i = 0; i < num_machines; ++i)
    caf::anon_send(machines[i], bench::make_report(i, 0));
  bench::barrier(sys, machines);
  for (auto _ : state)
    bench::barrier(sys, machines);
  state.SetItemsProcessed(
    static_cast<int64_t>(state.iterations() * num_machines));
  bench::shutdown(machines);
}

} // namespace

BENCHMARK(BM_ReportIngestion)
  ->ArgNames({"threads", "prebuilt"})
  ->ArgsProduct({{1, 2}, {0, 1}})
  ->Iterations(3)
  ->UseRealTime()
  ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_BarrierOnly)
  ->ArgNames({"threads"})
  ->Arg(1)
  ->Arg(2)
  ->Iterations(3)
  ->UseRealTime()
  ->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  // The machine actor logs each transition at info: keep logging out of
  // the figures.
  spdlog::set_level(spdlog::level::warn);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
