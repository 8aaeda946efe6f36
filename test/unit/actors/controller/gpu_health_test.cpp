// GPU health on the controller: the seed's thresholds at their exact
// boundaries, on virtual time (shared/seeds/gpus.md, "Health", "At risk",
// "Used outside Astraeus").

#include <gtest/gtest.h>

#include "actors/controller/gpu_health.hpp"
#include "messages/gpu_read.hpp"

using namespace astraeus;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

v1::Gpu h100() {
  v1::Gpu g;
  g.set_id("GPU-1");
  g.set_vendor("nvidia");
  g.set_pci_address("0000:3b:00.0");
  g.set_memory_total_bytes(80ull << 30);
  g.set_memory_used_bytes(0);
  g.set_temperature_c(40);
  g.mutable_ecc()->set_volatile_correctable(0);
  g.set_pcie_replays(0);
  return g;
}

health_verdict judge(const v1::Gpu& g, const gpu_health_history& h,
                     bool assigned = false) {
  return evaluate_health(g, h, assigned, 1'000'000'000);
}

} // namespace

TEST(GpuHealth, AQuietGpuIsHealthy) {
  gpu_health_history h;
  auto g = h100();
  h.add(g, clock_type::time_point{} + 1h, 24h);
  EXPECT_EQ(judge(g, h).health, gpu_health::healthy);
}

TEST(GpuHealth, FiftyCorrectableErrorsIn24hAreFineFiftyOneAreAtRisk) {
  gpu_health_history h;
  auto g = h100();
  auto t = clock_type::time_point{} + 1h;
  h.add(g, t, 24h);
  g.mutable_ecc()->set_volatile_correctable(50);
  h.add(g, t + 1h, 24h);
  EXPECT_EQ(judge(g, h).health, gpu_health::healthy);
  g.mutable_ecc()->set_volatile_correctable(51);
  h.add(g, t + 2h, 24h);
  auto v = judge(g, h);
  EXPECT_EQ(v.health, gpu_health::at_risk);
  ASSERT_EQ(v.reasons.size(), 1u);
  EXPECT_EQ(v.reasons[0], "51 correctable memory errors in 24 h (> 50)");
}

TEST(GpuHealth, ErrorsOlderThan24hNoLongerCount) {
  gpu_health_history h;
  auto g = h100();
  auto t = clock_type::time_point{} + 1h;
  h.add(g, t, 24h);
  g.mutable_ecc()->set_volatile_correctable(60);
  h.add(g, t + 1h, 24h);
  ASSERT_EQ(judge(g, h).health, gpu_health::at_risk);
  // A day later with no new errors, the growth has left the window.
  h.add(g, t + 26h, 24h);
  EXPECT_EQ(judge(g, h).health, gpu_health::healthy);
}

TEST(GpuHealth, ACounterResetDoesNotHideNewErrors) {
  gpu_health_history h;
  auto g = h100();
  auto t = clock_type::time_point{} + 1h;
  g.mutable_ecc()->set_volatile_correctable(40);
  h.add(g, t, 24h);
  g.mutable_ecc()->set_volatile_correctable(0);  // driver reloaded
  h.add(g, t + 1h, 24h);
  g.mutable_ecc()->set_volatile_correctable(51);
  h.add(g, t + 2h, 24h);
  EXPECT_EQ(h.correctable_ecc(), 51u);
}

TEST(GpuHealth, PcieReplaysAndNvlinkErrorsAtTheirBoundaries) {
  gpu_health_history h;
  auto g = h100();
  auto* link = g.add_nvlinks();
  link->set_active(true);
  link->set_replay_errors(0);
  auto t = clock_type::time_point{} + 1h;
  h.add(g, t, 24h);
  g.set_pcie_replays(100);
  link->set_replay_errors(10);
  h.add(g, t + 1min, 24h);
  EXPECT_EQ(judge(g, h).health, gpu_health::healthy);
  g.set_pcie_replays(101);
  link->set_replay_errors(11);
  h.add(g, t + 2min, 24h);
  auto v = judge(g, h);
  EXPECT_EQ(v.health, gpu_health::at_risk);
  EXPECT_EQ(v.reasons.size(), 2u);
}

TEST(GpuHealth, TenMinutesSlowedByHeatAreFineMoreAreAtRisk) {
  gpu_health_history h;
  auto g = h100();
  auto t = clock_type::time_point{} + 1h;
  g.set_thermal_slowdown(true);
  h.add(g, t, 24h);
  h.add(g, t + 10min, 24h);
  EXPECT_EQ(judge(g, h).health, gpu_health::healthy);
  g.set_thermal_slowdown(false);
  h.add(g, t + 10min + 1s, 24h);
  auto v = judge(g, h);
  EXPECT_EQ(v.health, gpu_health::at_risk);
  EXPECT_NE(v.reasons.at(0).find("slowed down by heat"), std::string::npos);
}

TEST(GpuHealth, ADayOfReportsFromAQuietGpuKeepsAHandfulOfSamplesAndTheSameAnswers) {
  // One report every 10 s for a day: counters still, then 30 errors, still
  // again, 11 minutes slowed by heat, still again.
  gpu_health_history h;
  auto g = h100();
  auto t0 = clock_type::time_point{} + 1h;
  g.mutable_ecc()->set_volatile_correctable(5);
  g.set_thermal_slowdown(false);
  auto t = t0;
  for (; t < t0 + 6h; t += 10s)
    h.add(g, t, 24h);
  g.mutable_ecc()->set_volatile_correctable(35);
  for (; t < t0 + 12h; t += 10s)
    h.add(g, t, 24h);
  g.set_thermal_slowdown(true);
  for (auto until = t + 11min; t < until; t += 10s)
    h.add(g, t, 24h);
  g.set_thermal_slowdown(false);
  for (; t < t0 + 24h; t += 10s)
    h.add(g, t, 24h);
  EXPECT_LE(h.size(), 8u) << "8,640 reports, a handful of changes";
  EXPECT_EQ(h.correctable_ecc(), 30u);
  EXPECT_EQ(h.thermal_slowdown(), std::chrono::seconds{11 * 60});
  EXPECT_EQ(judge(g, h).health, gpu_health::at_risk);
  // A day later the heat and the errors have left the window.
  for (auto until = t + 13h; t < until; t += 10s)
    h.add(g, t, 24h);
  EXPECT_EQ(h.correctable_ecc(), 0u);
  EXPECT_EQ(h.thermal_slowdown(), std::chrono::seconds{0});
  EXPECT_LE(h.size(), 3u);
}

TEST(GpuHealth, EightySixDegreesIsFineEightySevenIsAtRisk) {
  gpu_health_history h;
  auto g = h100();
  g.set_temperature_c(86);
  EXPECT_EQ(judge(g, h).health, gpu_health::healthy);
  g.set_temperature_c(87);
  auto v = judge(g, h);
  EXPECT_EQ(v.health, gpu_health::at_risk);
  EXPECT_EQ(v.reasons.at(0), "temperature 87 °C (>= 87 °C)");
}

TEST(GpuHealth, ARowWaitingToBeRemappedIsAtRiskNotFaulty) {
  gpu_health_history h;
  auto g = h100();
  g.mutable_row_remapping()->set_pending(true);
  EXPECT_EQ(judge(g, h).health, gpu_health::at_risk);
}

TEST(GpuHealth, HistoricalScarsDoNotCount) {
  gpu_health_history h;
  auto g = h100();
  g.mutable_ecc()->set_aggregate_correctable(100000);
  g.mutable_ecc()->set_aggregate_uncorrectable(3);
  g.mutable_retired_pages()->set_double_bit(4);
  auto* up = g.add_nvlinks();
  up->set_active(true);
  g.add_nvlinks()->set_active(false);
  h.add(g, clock_type::time_point{} + 1h, 24h);
  EXPECT_EQ(judge(g, h).health, gpu_health::healthy);
}

TEST(GpuHealth, ALatchedFaultIsFaultyWithTheLatchReason) {
  gpu_health_history h;
  auto g = h100();
  g.set_temperature_c(95);
  g.set_memory_used_bytes(70ull << 30);
  g.add_latches()->set_reason("Xid 79 fault");
  auto v = judge(g, h);
  EXPECT_EQ(v.health, gpu_health::faulty) << "a fault outranks foreign use and heat";
  EXPECT_EQ(v.reasons, std::vector<std::string>{"Xid 79 fault"});
}

TEST(GpuHealth, MemoryInUseOutsideAstraeusIsForeignAboveTenPercent) {
  gpu_health_history h;
  auto g = h100();
  g.set_memory_total_bytes(1000);
  g.set_memory_used_bytes(100);  // exactly 10 %
  EXPECT_EQ(judge(g, h).health, gpu_health::healthy);
  g.set_memory_used_bytes(101);
  auto v = judge(g, h);
  EXPECT_EQ(v.health, gpu_health::foreign);
  EXPECT_NE(v.reasons.at(0).find("outside Astraeus"), std::string::npos);
  EXPECT_EQ(judge(g, h, /*assigned=*/true).health, gpu_health::healthy)
    << "memory of a GPU Astraeus assigned is the worker's own";
}

TEST(GpuHealth, AnAtRiskXidWithin24hIsAtRisk) {
  gpu_health_history h;
  auto g = h100();
  auto* inc = g.add_incidents();
  inc->set_kind("xid");
  inc->set_xid(13);
  inc->set_action("at-risk");
  inc->set_count(2);
  inc->set_text("NVRM: Xid ... 13");
  int64_t now = 100LL * 86400 * 1000;
  inc->set_last_seen_unix_ms(now - 24LL * 3600 * 1000);
  EXPECT_EQ(evaluate_health(g, h, false, now).health, gpu_health::at_risk);
  inc->set_last_seen_unix_ms(now - 24LL * 3600 * 1000 - 1);
  EXPECT_EQ(evaluate_health(g, h, false, now).health, gpu_health::healthy);
  inc->set_action("record");
  inc->set_last_seen_unix_ms(now);
  EXPECT_EQ(evaluate_health(g, h, false, now).health, gpu_health::healthy);
}

// Issue 17, rule 7: a GPU that does not answer is Faulty with that reason,
// never "Healthy (unresponsive)"; a latch still reads first.
TEST(GpuHealth, AGpuThatDoesNotAnswerIsFaultyWithTheReason) {
  gpu_health_history h;
  for (auto status : {gpu_read_status::unresponsive, gpu_read_status::lost,
                      gpu_read_status::unavailable}) {
    auto g = h100();
    set_read_status(g, status);
    g.set_status_detail("nvmlDeviceGetMemoryInfo did not return within 2000 ms");
    auto v = judge(g, h);
    EXPECT_EQ(v.health, gpu_health::faulty) << to_string(status);
    ASSERT_EQ(v.reasons.size(), 1u);
    EXPECT_EQ(v.reasons[0], std::string{to_string(status)}
                              + ": nvmlDeviceGetMemoryInfo did not return within 2000 ms");
    g.clear_status_detail();
    EXPECT_EQ(judge(g, h).reasons.at(0),
              std::string{to_string(status)} + ": it does not answer its driver");
  }
  auto g = h100();
  set_read_status(g, gpu_read_status::lost);
  auto* f = g.add_latches();
  f->set_reason("lost: nvmlDeviceGetMemoryInfo returned GPU is lost (15)");
  auto v = judge(g, h);
  EXPECT_EQ(v.health, gpu_health::faulty);
  EXPECT_EQ(v.reasons, std::vector<std::string>{f->reason()});
}

// Issue 18, rule 5: the seed's 87 °C sign is for the edge sensor; junction
// and memory sensors are judged against their own critical limit.
TEST(GpuHealth, AmdSensorsAreJudgedByLabel) {
  gpu_health_history h;
  v1::Gpu g;
  g.set_id("AMD-1");
  g.set_vendor("amd");
  g.set_temperature_c(90);  // shown: junction (no edge sensor)
  auto* junction = g.add_temperatures();
  junction->set_label("junction");
  junction->set_celsius(90);
  junction->set_critical_c(110);
  auto* mem = g.add_temperatures();
  mem->set_label("mem");
  mem->set_celsius(85);
  h.add(g, clock_type::time_point{} + 1h, 24h);
  EXPECT_EQ(judge(g, h).health, gpu_health::healthy) << "a normal 90 °C junction";
  junction->set_celsius(110);
  auto hot = judge(g, h);
  ASSERT_EQ(hot.health, gpu_health::at_risk);
  EXPECT_EQ(hot.reasons[0], "junction temperature 110 °C (>= its critical 110 °C)");
  junction->set_celsius(90);
  auto* edge = g.add_temperatures();
  edge->set_label("edge");
  edge->set_celsius(87);
  auto v = judge(g, h);
  ASSERT_EQ(v.health, gpu_health::at_risk);
  EXPECT_EQ(v.reasons[0], "edge temperature 87 °C (>= 87 °C)");
}
