// The typed twins (messages/typed_twins.hpp): cleared where users read.

#include <gtest/gtest.h>

#include "messages/astraeus.pb.h"
#include "messages/gpu_health_state.hpp"
#include "messages/gpu_read.hpp"
#include "messages/run_state.hpp"
#include "messages/typed_twins.hpp"
#include "messages/worker_state.hpp"

using namespace astraeus;

TEST(TypedTwins, ClearsEveryTwinAndKeepsTheWords) {
  v1::GpuList list;
  auto* view = list.add_gpus();
  set_health(*view, gpu_health::at_risk);
  set_read_status(*view->mutable_gpu(), gpu_read_status::lost);
  v1::RunList runs;
  auto* run = runs.add_runs();
  set_state(*run, run_state::running);
  set_state(*run->add_workers(), worker_state::running);
  clear_typed_twins(list);
  clear_typed_twins(runs);
  EXPECT_FALSE(list.gpus(0).has_health_code());
  EXPECT_FALSE(list.gpus(0).gpu().has_status_code());
  EXPECT_EQ(list.gpus(0).health(), "AtRisk");
  EXPECT_EQ(list.gpus(0).gpu().status(), "lost");
  EXPECT_FALSE(runs.runs(0).has_state_code());
  EXPECT_FALSE(runs.runs(0).workers(0).has_state_code());
  EXPECT_EQ(runs.runs(0).workers(0).state(), "Running");
}
