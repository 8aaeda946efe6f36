// A GPU listed twice by one agent is shown once, with a warning
// (actors/controller/machine_inventory.cpp; issue 18, rule 1).

#include "actors/controller/machine_inventory.hpp"

#include <gtest/gtest.h>

using namespace astraeus;

TEST(MachineInventory, AGpuListedTwiceIsShownOnceWithAWarning) {
  v1::GpuSection s;
  for (const char* id : {"0000:01:00.0", "0000:02:00.0", "0000:01:00.0", "", ""})
    s.add_gpus()->set_id(id);
  s.mutable_gpus(0)->set_model("first");
  s.mutable_gpus(2)->set_model("second");
  auto warnings = fold_repeated_gpus(s);
  ASSERT_EQ(s.gpus_size(), 4); // GPUs without an id are left alone
  EXPECT_EQ(s.gpus(0).model(), "first");
  EXPECT_EQ(s.gpus(1).id(), "0000:02:00.0");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "GPU 0000:01:00.0 is listed 2 times by the agent; shown once");
  EXPECT_TRUE(fold_repeated_gpus(s).empty());
}
