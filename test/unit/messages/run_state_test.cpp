// The run state vocabulary (messages/run_state.hpp).

#include <gtest/gtest.h>

#include "messages/astraeus.pb.h"
#include "messages/run_state.hpp"

using namespace astraeus;

TEST(RunState, EveryWordRoundTrips) {
  for (auto s : {run_state::waiting, run_state::placed, run_state::running,
                 run_state::stopped, run_state::failed}) {
    auto parsed = parse_run_state(to_string(s));
    ASSERT_TRUE(parsed) << to_string(s);
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_FALSE(parse_run_state("Stopping")) << "a run is never Stopping";
}

TEST(RunState, PredicatesSplitTheStates) {
  EXPECT_TRUE(has_ended(run_state::stopped));
  EXPECT_TRUE(has_ended(run_state::failed));
  EXPECT_FALSE(has_ended(run_state::running));
  EXPECT_TRUE(is_live(run_state::placed));
  EXPECT_TRUE(is_live(run_state::running));
  EXPECT_FALSE(is_live(run_state::waiting));
  EXPECT_FALSE(is_live(run_state::stopped));
  EXPECT_FALSE(is_live(run_state::failed));
}

TEST(RunState, AnOldRecordWithTheWordOnlyReadsBack) {
  v1::Run run;
  run.mutable_spec()->set_name("train");
  run.set_state("Running");
  v1::Run old;
  ASSERT_TRUE(old.ParseFromString(run.SerializeAsString()));
  EXPECT_FALSE(old.has_state_code());
  EXPECT_EQ(state_of(old), run_state::running);
  old.set_state("no such state");
  EXPECT_EQ(state_of(old), run_state::waiting) << "an unknown word is placed again";
}

TEST(RunState, SetStateWritesBothAndTheEnumWins) {
  v1::Run run;
  set_state(run, run_state::failed);
  EXPECT_EQ(run.state(), "Failed");
  EXPECT_EQ(run.state_code(), v1::RunState::failed);
  v1::Run copy;
  ASSERT_TRUE(copy.ParseFromString(run.SerializeAsString()));
  copy.set_state("Running");  // a stale word: the enum decides
  EXPECT_EQ(state_of(copy), run_state::failed);
}
