// Issue 13: a run's key (scheduler, store) and a request's reference to a
// run: names are per workspace.

#include <gtest/gtest.h>

#include "messages/astraeus.pb.h"
#include "messages/run_key.hpp"

using namespace astraeus;

TEST(RunKey, TheDefaultWorkspacesRunsKeepTheirBareName) {
  EXPECT_EQ(run_key("", "train"), "train");
  EXPECT_EQ(run_key("default", "train"), "train");
  EXPECT_EQ(run_key("vision", "train"), "vision/train");
  v1::RunSpec spec;
  spec.set_name("train");
  spec.set_workspace("vision");
  EXPECT_EQ(run_key(spec), "vision/train");
}

TEST(RunKey, AReferenceNamesTheWorkspaceOnlyWhenTheCallerDid) {
  EXPECT_EQ(run_ref("", "train"), "train");
  EXPECT_EQ(run_ref("default", "train"), "default/train");
  auto parts = parse_run_ref("vision/train");
  EXPECT_EQ(parts.workspace, "vision");
  EXPECT_EQ(parts.name, "train");
  EXPECT_EQ(parse_run_ref("train").workspace, "");
  EXPECT_EQ(describe_run("train"), "train");
  EXPECT_EQ(describe_run("vision/train"), "train in workspace vision");
}
