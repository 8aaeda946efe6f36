// The GPU health vocabulary (messages/gpu_health_state.hpp).

#include <gtest/gtest.h>

#include "messages/astraeus.pb.h"
#include "messages/gpu_health_state.hpp"

using namespace astraeus;

TEST(GpuHealthState, EveryWordRoundTrips) {
  for (auto h : {gpu_health::healthy, gpu_health::at_risk, gpu_health::faulty,
                 gpu_health::foreign}) {
    auto parsed = parse_gpu_health(to_string(h));
    ASSERT_TRUE(parsed) << to_string(h);
    EXPECT_EQ(*parsed, h);
  }
  EXPECT_STREQ(to_string(gpu_health::at_risk), "AtRisk");
  EXPECT_FALSE(parse_gpu_health(""));
  EXPECT_FALSE(parse_gpu_health("healthy"));
}

TEST(GpuHealthState, SettersWriteTheEnumAndTheWord) {
  v1::SchedulerGpu g;
  set_health(g, gpu_health::foreign);
  EXPECT_EQ(g.health(), "Foreign");
  EXPECT_EQ(g.health_code(), v1::GpuHealth::foreign);
  v1::GpuView v;
  set_health(v, gpu_health::faulty);
  EXPECT_EQ(v.health(), "Faulty");
  EXPECT_EQ(health_of(v), gpu_health::faulty);
}

TEST(GpuHealthState, AnOldRecordWithWordsOnlyReadsBack) {
  v1::SchedulerMachine m;
  m.add_gpus()->set_health("AtRisk");
  m.add_gpus();  // empty: Healthy
  m.add_gpus()->set_health("Broken");
  v1::SchedulerMachine old;
  ASSERT_TRUE(old.ParseFromString(m.SerializeAsString()));
  EXPECT_EQ(health_of(old.gpus(0)), gpu_health::at_risk);
  EXPECT_EQ(health_of(old.gpus(1)), gpu_health::healthy);
  EXPECT_FALSE(health_of(old.gpus(2))) << "an unknown word is refused, not guessed";
  v1::GpuView view;
  view.set_health("Foreign");
  v1::GpuView old_view;
  ASSERT_TRUE(old_view.ParseFromString(view.SerializeAsString()));
  EXPECT_FALSE(old_view.has_health_code());
  EXPECT_EQ(health_of(old_view), gpu_health::foreign);
  EXPECT_EQ(health_of(v1::GpuView{}), gpu_health::healthy);
}
