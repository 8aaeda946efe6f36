// Issue 14: the agent sends a controller that takes them readings reports
// between full ones, and a full report whenever anything but a reading
// changed, at every new session and at least every 30th report.

#include <gtest/gtest.h>

#include "actors/agent/agent.hpp"
#include "messages/report_readings.hpp"

using namespace astraeus;

namespace {

v1::MachineReport report(uint64_t sequence, double temperature, uint64_t ecc = 0) {
  v1::MachineReport r;
  r.set_machine("gpu-01");
  r.set_sequence(sequence);
  auto* f = r.mutable_facts();
  f->set_hostname("gpu-01");
  f->mutable_memory()->set_total_bytes(1ull << 40);
  f->mutable_memory()->set_available_bytes(static_cast<uint64_t>(temperature) << 30);
  auto* g = f->mutable_gpus()->add_gpus();
  g->set_id("GPU-1");
  g->set_model("NVIDIA H200");
  g->set_temperature_c(temperature);
  g->mutable_ecc()->set_volatile_correctable(ecc);
  return r;
}

} // namespace

TEST(AgentReadings, OnlyWhatChangesTravelsBetweenFullReports) {
  agent_state st;
  auto first = report(1, 35);
  shrink_to_readings(st, first);
  EXPECT_EQ(first.readings_of(), 0u) << "a session's first report is full";
  EXPECT_EQ(first.facts().hostname(), "gpu-01");

  auto second = report(2, 70);
  shrink_to_readings(st, second);
  EXPECT_EQ(second.readings_of(), 1u);
  EXPECT_FALSE(second.has_facts()) << "static facts are not sent again";
  ASSERT_EQ(second.readings().gpus_size(), 1);
  EXPECT_EQ(second.readings().gpus(0).id(), "GPU-1");
  EXPECT_EQ(second.readings().gpus(0).temperature_c(), 70);

  // A corrected ECC error is not a reading: the report goes out whole.
  auto third = report(3, 71, 1);
  shrink_to_readings(st, third);
  EXPECT_EQ(third.readings_of(), 0u);
  EXPECT_EQ(third.facts().gpus().gpus(0).ecc().volatile_correctable(), 1u);
  auto fourth = report(4, 72, 1);
  shrink_to_readings(st, fourth);
  EXPECT_EQ(fourth.readings_of(), 3u) << "readings now follow report 3";
}

TEST(AgentReadings, AFullReportAtLeastEveryThirtiethAndAtEveryNewSession) {
  agent_state st;
  uint64_t seq = 1;
  auto r = report(seq, 40);
  shrink_to_readings(st, r);
  for (uint32_t i = 0; i < readings_between_full_reports; ++i) {
    auto next = report(++seq, 40 + i);
    shrink_to_readings(st, next);
    EXPECT_EQ(next.readings_of(), 1u) << "report " << seq;
  }
  auto due = report(++seq, 41);
  shrink_to_readings(st, due);
  EXPECT_EQ(due.readings_of(), 0u) << "the 30th report after a full one is full";
  st.full_sequence = 0;  // what a new session's welcome does
  auto fresh = report(++seq, 41);
  shrink_to_readings(st, fresh);
  EXPECT_EQ(fresh.readings_of(), 0u);
}
