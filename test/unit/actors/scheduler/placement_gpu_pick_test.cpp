// GPU picking within a machine (actors/scheduler/placement_gpu_pick.cpp):
// Drove's NUMA rule, GPUs joined by NVLink, best fit across machines.

#include "actors/scheduler/placement.hpp"

#include <string>

#include <gtest/gtest.h>

#include "test/unit/actors/scheduler/placement_test_support.hpp"

using namespace astraeus;
using namespace astraeus::placement_test;

TEST(Placement, NumaNodeWithMostFreeGpusFirstAsDroveDoes) {
  // Drove: "it prefers the NUMA node that has the most free GPUs local to
  // it. The controller then picks GPUs local to that NUMA node first."
  placement_index idx;
  auto m = add(idx, dgx("gpu-01"));
  hold(idx, m, bits({0, 1, 2})); // node 0: 1 free (3); node 1: 4 free
  auto p = placed(idx.place(single("one", 1)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].gpus, bits({4})) << "node 1 has the most free GPUs, not slot 3";
  EXPECT_EQ(p->workers[0].numa_node, 1);
  p = placed(idx.place(single("two", 2)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].gpus, bits({4, 5}));
  // More than node 1 has: all of node 1 first, then node 0.
  p = placed(idx.place(single("five", 5)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].gpus, bits({3, 4, 5, 6, 7}));
  EXPECT_EQ(p->workers[0].numa_node, 1);
  // A tie goes to the lower node; the next worker then prefers the other.
  placement_index fresh;
  add(fresh, dgx("gpu-02"));
  auto two = gang("two-fours", 2, 4);
  p = placed(fresh.place(two));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].gpus, bits({0, 1, 2, 3}));
  EXPECT_EQ(p->workers[0].numa_node, 0);
  EXPECT_EQ(p->workers[1].gpus, bits({4, 5, 6, 7}));
  EXPECT_EQ(p->workers[1].numa_node, 1);
}

TEST(Placement, MultiGpuWorkersGetGpusJoinedByNvlink) {
  // PCIe boards with NVLink bridges in pairs (0-1, 2-3, 4-5, 6-7), one NUMA node.
  machine_spec spec;
  spec.name = "pcie-01";
  spec.labels = h100;
  for (unsigned i = 0; i < 8; ++i)
    spec.gpus.push_back({"pcie-01-g" + std::to_string(i), 0, gpu_mask{1} << (i ^ 1u),
                         gpu_health::healthy});
  placement_index idx;
  auto m = add(idx, spec);
  hold(idx, m, bits({0}));
  auto p = placed(idx.place(single("two", 2)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].gpus, bits({2, 3})) << "not 1 and 2, which share no NVLink";
  // A single GPU takes the one whose partner is busy, keeping pairs whole.
  p = placed(idx.place(single("one", 1)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].gpus, bits({1}));
  // Among machines of the same free count, a 2-GPU worker prefers one whose
  // two free GPUs are joined.
  placement_index two;
  auto x = add(two, spec);
  spec.name = "pcie-02";
  for (unsigned i = 0; i < 8; ++i)
    spec.gpus[i].id = "pcie-02-g" + std::to_string(i);
  auto y = add(two, spec);
  hold(two, x, bits({0, 2, 4, 5, 6, 7})); // free 1 and 3: not joined
  hold(two, y, bits({0, 1, 2, 3, 4, 5}));  // free 6 and 7: joined
  p = placed(two.place(single("two", 2)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].machine, y);
  EXPECT_EQ(p->workers[0].gpus, bits({6, 7}));
}

TEST(Placement, BestFitKeepsWholeMachinesFree) {
  placement_index idx;
  auto a = add(idx, dgx("gpu-a"));
  auto b = add(idx, dgx("gpu-b"));
  auto c = add(idx, dgx("gpu-c"));
  hold(idx, b, bits({0, 1, 2, 3, 4}));  // 3 free
  hold(idx, c, bits({0, 1, 2}));        // 5 free
  auto p = placed(idx.place(single("two", 2)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].machine, b);
  p = placed(idx.place(single("four", 4)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].machine, c);
  p = placed(idx.place(single("eight", 8)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].machine, a);
}
