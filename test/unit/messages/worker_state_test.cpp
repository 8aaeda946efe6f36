// The worker state vocabulary (messages/worker_state.hpp).

#include <gtest/gtest.h>

#include "messages/astraeus.pb.h"
#include "messages/worker_state.hpp"

using namespace astraeus;

TEST(WorkerState, EveryWordRoundTrips) {
  for (auto s : {worker_state::placed, worker_state::assigned, worker_state::running,
                 worker_state::down, worker_state::stopping, worker_state::stopped,
                 worker_state::exited, worker_state::failed, worker_state::oom_killed,
                 worker_state::cancelled}) {
    auto parsed = parse_worker_state(to_string(s));
    ASSERT_TRUE(parsed) << to_string(s);
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_STREQ(to_string(worker_state::oom_killed), "OOMKilled");
}

TEST(WorkerState, EndsFailuresAndLiveProcesses) {
  for (auto s : {worker_state::exited, worker_state::failed, worker_state::oom_killed,
                 worker_state::cancelled, worker_state::stopped})
    EXPECT_TRUE(worker_ended(s)) << to_string(s);
  for (auto s : {worker_state::placed, worker_state::assigned, worker_state::running,
                 worker_state::down, worker_state::stopping})
    EXPECT_FALSE(worker_ended(s)) << to_string(s);
  EXPECT_TRUE(worker_failed(worker_state::failed));
  EXPECT_TRUE(worker_failed(worker_state::oom_killed));
  EXPECT_FALSE(worker_failed(worker_state::cancelled));
  EXPECT_TRUE(process_runs(worker_state::running));
  EXPECT_TRUE(process_runs(worker_state::stopping));
  EXPECT_FALSE(process_runs(worker_state::exited));
}

TEST(WorkerState, OldRecordsWithWordsOnlyReadBack) {
  v1::WorkerProcess p;
  p.set_worker("train-0");
  p.set_state("OOMKilled");
  v1::WorkerProcess old_p;
  ASSERT_TRUE(old_p.ParseFromString(p.SerializeAsString()));
  EXPECT_FALSE(old_p.has_state_code());
  EXPECT_EQ(state_of(old_p), worker_state::oom_killed);
  old_p.set_state("Starting");
  EXPECT_FALSE(state_of(old_p)) << "a word no build sets";

  v1::Run run;
  run.add_workers()->set_state("Down");
  run.add_workers();  // empty: Placed
  v1::Run old_run;
  ASSERT_TRUE(old_run.ParseFromString(run.SerializeAsString()));
  EXPECT_EQ(state_of(old_run.workers(0)), worker_state::down);
  EXPECT_EQ(state_of(old_run.workers(1)), worker_state::placed);

  v1::WorkerStatus status;  // an agent that predates the enum, still starting
  EXPECT_EQ(state_of(status), worker_state::assigned);
  status.set_state("Running");
  EXPECT_EQ(state_of(status), worker_state::running);
}

TEST(WorkerState, SetStateWritesBoth) {
  v1::WorkerAssignment w;
  set_state(w, worker_state::cancelled);
  EXPECT_EQ(w.state(), "Cancelled");
  EXPECT_EQ(w.state_code(), v1::WorkerState::cancelled);
}
