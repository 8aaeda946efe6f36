// Readings reports (issue 14): what changes every report travels alone, and
// lands on the facts of the full report it follows.

#include <gtest/gtest.h>

#include "messages/report_readings.hpp"

using namespace astraeus;

namespace {

/// A machine's facts as an 8-GPU report carries them, with readings set.
v1::HostFacts facts_with(double temperature, uint64_t available) {
  v1::HostFacts f;
  f.set_hostname("gpu-01");
  f.set_uptime_seconds(1000 + static_cast<uint64_t>(temperature));
  f.mutable_memory()->set_total_bytes(2ull << 40);
  f.mutable_memory()->set_available_bytes(available);
  f.mutable_memory()->mutable_pressure()->set_present(true);
  f.mutable_memory()->mutable_pressure()->set_some_avg10(temperature / 100);
  f.mutable_io_pressure()->set_present(true);
  f.mutable_cpu()->set_logical_cpus(224);
  f.mutable_cpu()->set_use_percent(temperature / 2);
  for (uint32_t n = 0; n < 2; ++n) {
    auto* node = f.mutable_cpu()->add_nodes();
    node->set_id(n);
    node->set_cpulist(n == 0 ? "0-111" : "112-223");
    node->set_memory_total_bytes(1ull << 40);
    node->set_memory_free_bytes(available / 2);
  }
  auto* fs = f.add_filesystems();
  fs->set_mount_point("/");
  fs->set_size_bytes(1ull << 40);
  fs->set_free_bytes(available / 4);
  for (int i = 0; i < 8; ++i) {
    auto* g = f.mutable_gpus()->add_gpus();
    g->set_id("GPU-" + std::to_string(i));
    g->set_model("NVIDIA H100 80GB HBM3");
    g->mutable_ecc()->set_volatile_correctable(3);
    for (uint32_t l = 0; l < 18; ++l) {
      auto* link = g->add_nvlinks();
      link->set_link(l);
      link->set_active(true);
    }
    g->set_temperature_c(temperature + i);
    g->set_utilization_percent(temperature);
    g->set_power_watts(temperature * 10);
    g->set_memory_used_bytes(static_cast<uint64_t>(temperature) << 20);
    g->set_sm_clock_mhz(1980);
  }
  return f;
}

} // namespace

TEST(ReportReadings, TwoReportsThatDifferInReadingsAloneHaveTheSameStaticPart) {
  auto a = facts_with(40, 900ull << 30);
  auto b = facts_with(75, 500ull << 30);
  EXPECT_NE(a.SerializeAsString(), b.SerializeAsString());
  EXPECT_EQ(without_readings(a).SerializeAsString(), without_readings(b).SerializeAsString());
  // An ECC count, a link going down or a new GPU is not a reading.
  auto ecc = b;
  ecc.mutable_gpus()->mutable_gpus(3)->mutable_ecc()->set_volatile_correctable(4);
  EXPECT_NE(without_readings(a).SerializeAsString(), without_readings(ecc).SerializeAsString());
  auto link = b;
  link.mutable_gpus()->mutable_gpus(5)->mutable_nvlinks(7)->set_active(false);
  EXPECT_NE(without_readings(a).SerializeAsString(), without_readings(link).SerializeAsString());
}

TEST(ReportReadings, AppliedToTheFullReportTheyGiveTheNewReportsFactsExactly) {
  auto full = facts_with(40, 900ull << 30);
  auto next = facts_with(75, 500ull << 30);
  next.mutable_cpu()->clear_use_percent();  // not measured this time: absent after
  auto readings = readings_only(next);
  EXPECT_LT(readings.ByteSizeLong() * 3, next.ByteSizeLong())
    << "readings are a fraction of the report: " << readings.ByteSizeLong() << " of "
    << next.ByteSizeLong() << " bytes";
  auto held = full;
  EXPECT_EQ(apply_readings(readings, held), "");
  EXPECT_EQ(held.SerializeAsString(), next.SerializeAsString());
}

TEST(ReportReadings, ReadingsOfAnotherShapeAreRefusedAndChangeNothing) {
  auto full = facts_with(40, 900ull << 30);
  auto other = facts_with(75, 500ull << 30);
  other.mutable_gpus()->mutable_gpus(2)->set_id("GPU-replaced");
  auto readings = readings_only(other);
  auto held = full;
  EXPECT_EQ(apply_readings(readings, held),
            "GPU 2 is GPU-replaced in the readings, GPU-2 in the facts");
  EXPECT_EQ(held.SerializeAsString(), full.SerializeAsString());
  auto fewer = facts_with(75, 500ull << 30);
  fewer.mutable_gpus()->mutable_gpus()->RemoveLast();
  EXPECT_EQ(readings_misfit(readings_only(fewer), full), "7 GPU(s) in the readings, 8 in the facts");
  auto mounts = facts_with(75, 500ull << 30);
  mounts.add_filesystems()->set_mount_point("/data");
  EXPECT_EQ(readings_misfit(readings_only(mounts), full), "another count of filesystems");
}
