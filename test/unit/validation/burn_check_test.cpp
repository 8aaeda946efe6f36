// The burn-in's verdict rules.
#include <gtest/gtest.h>

#include "runtime/validation/burn_check.hpp"

namespace astraeus::validation {
namespace {

burn_figures gpu(const std::string& id, double tflops, double clock = 1980) {
  burn_figures f;
  f.gpu = id;
  f.tflops = tflops;
  f.mean_sm_clock_mhz = clock;
  f.max_temperature_c = 70;
  f.mean_power_w = 650;
  f.launches = 100;
  return f;
}

const finding* first(const check_result& r, const std::string& gpu) {
  for (const auto& f : r.findings)
    if (f.gpu == gpu)
      return &f;
  return nullptr;
}

TEST(BurnRules, EqualPeersPassWithTheirFigures) {
  check_result r;
  judge_burn({gpu("GPU-1", 50), gpu("GPU-2", 49)}, "", thresholds{}, r);
  EXPECT_EQ(r.result, verdict::pass);
  EXPECT_TRUE(r.findings.empty());
  int fp32 = 0;
  for (const auto& m : r.measurements)
    fp32 += m.name == "fp32";
  EXPECT_EQ(fp32, 2);
}

TEST(BurnRules, AGpuMoreThanTenPercentSlowerAtEqualClocksFails) {
  check_result r;
  judge_burn({gpu("GPU-1", 50), gpu("GPU-2", 44)}, "", thresholds{}, r);
  EXPECT_EQ(r.result, verdict::fail);
  auto* f = first(r, "GPU-2");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->what, "GPU-2 did 44.0 TFLOP/s, 88 % of the best GPU's 50.0 (GPU-1) at equal clocks "
                     "(1980.0 vs 1980.0 MHz)");
}

TEST(BurnRules, SlowerOnlyBecauseOfLowerClocksIsNotAPeerFinding) {
  check_result r;
  judge_burn({gpu("GPU-1", 50, 1980), gpu("GPU-2", 40, 1584)}, "", thresholds{}, r);
  EXPECT_EQ(first(r, "GPU-2"), nullptr) << to_json_line(r);
}

TEST(BurnRules, AnXidOrACudaErrorOrWrongResultsFail) {
  auto a = gpu("GPU-1", 50), b = gpu("GPU-2", 50), c = gpu("GPU-3", 50);
  a.xids = {79};
  b.cuda_error = "cuLaunchKernel returned CUDA_ERROR_ILLEGAL_ADDRESS (700)";
  c.wrong_results = true;
  check_result r;
  judge_burn({a, b, c}, "", thresholds{}, r);
  EXPECT_EQ(r.result, verdict::fail);
  ASSERT_NE(first(r, "GPU-1"), nullptr);
  EXPECT_EQ(first(r, "GPU-1")->what,
            "Xid 79 on GPU-1 during the burn-in (GPU has fallen off the bus)");
  ASSERT_NE(first(r, "GPU-2"), nullptr);
  EXPECT_NE(first(r, "GPU-2")->what.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos);
  ASSERT_NE(first(r, "GPU-3"), nullptr);
  EXPECT_NE(first(r, "GPU-3")->fix.find("RMA"), std::string::npos);
}

TEST(BurnRules, PowerAndThermalThrottlingPassOtherReasonsFail) {
  auto a = gpu("GPU-1", 50), b = gpu("GPU-2", 50);
  a.reasons_seen = clock_reason::sw_power_cap | clock_reason::sw_thermal | clock_reason::gpu_idle;
  b.reasons_seen = clock_reason::sw_power_cap | clock_reason::hw_slowdown;
  check_result r;
  judge_burn({a, b}, "", thresholds{}, r);
  EXPECT_EQ(first(r, "GPU-1"), nullptr);
  auto* f = first(r, "GPU-2");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, verdict::fail);
  EXPECT_EQ(f->what, "GPU-2's clocks were held back by HW slowdown during the burn-in");
  EXPECT_NE(f->fix.find("power cables"), std::string::npos);
  EXPECT_EQ(clock_reason_text(clock_reason::applications_clocks | clock_reason::hw_power_brake),
            "applications clocks setting, HW power brake");
}

TEST(BurnRules, AHotGpuWarnsAndAnUnwatchedBurnWarns) {
  auto a = gpu("GPU-1", 50);
  a.max_temperature_c = 95;
  check_result hot;
  judge_burn({a}, "", thresholds{}, hot);
  EXPECT_EQ(hot.result, verdict::warn);
  check_result blind;
  judge_burn({gpu("GPU-1", 50)}, "dlopen libnvidia-ml.so.1: no such file", thresholds{}, blind);
  EXPECT_EQ(blind.result, verdict::warn);
  ASSERT_EQ(blind.findings.size(), 1u);
  EXPECT_NE(blind.findings[0].what.find("Xids were not checked"), std::string::npos);
}

}  // namespace

// A sixth new-user trial read "GPU-2 did 50.0 TFLOP/s, 17 % of the best
// GPU's 50.0": with clocks apart the share is of the work per MHz, and the
// words now say so with both clocks.
TEST(BurnRules, ASlowGpuAtOtherClocksIsJudgedAndWordedPerMhz) {
  check_result r;
  judge_burn({gpu("GPU-1", 50, 1000), gpu("GPU-2", 40, 1980)}, "", thresholds{}, r);
  auto* f = first(r, "GPU-2");
  ASSERT_NE(f, nullptr) << to_json_line(r);
  EXPECT_EQ(f->what, "GPU-2 did 40.0 TFLOP/s at 1980.0 MHz, 40 % of the best GPU's work per "
                     "MHz of SM clock (GPU-1: 50.0 TFLOP/s at 1000.0 MHz)");
}

// A seventh new-user trial: on the 8x H100 fixture two GPUs report 345 MHz
// and six 1980 MHz, all doing 50 TFLOP/s; per MHz the six looked slow and
// each failed with "replace it if it stays slower than its peers". A GPU
// that did as much work as the best is not slower than its peers.
TEST(BurnRules, AGpuThatDidAsMuchWorkAsTheBestIsNotSlowPerMhz) {
  check_result r;
  judge_burn({gpu("GPU-1", 50, 345), gpu("GPU-2", 50, 1980), gpu("GPU-3", 50, 1980)}, "",
             thresholds{}, r);
  EXPECT_EQ(first(r, "GPU-2"), nullptr) << to_json_line(r);
  EXPECT_EQ(first(r, "GPU-3"), nullptr) << to_json_line(r);
  EXPECT_EQ(r.result, verdict::pass) << to_json_line(r);
}

}  // namespace astraeus::validation
