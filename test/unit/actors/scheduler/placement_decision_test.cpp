// The placement engine's rules for a request (actors/scheduler/
// placement_decision.cpp): never Faulty, Foreign or held GPUs, AtRisk ones
// only when nothing healthy fits and never for healthy_only, only
// schedulable machines with every label, the leader's rank, and the
// waiting reasons.

#include "actors/scheduler/placement.hpp"

#include <string>

#include <gtest/gtest.h>

#include "test/unit/actors/scheduler/placement_test_support.hpp"

using namespace astraeus;
using namespace astraeus::placement_test;

TEST(Placement, NeverUsesFaultyForeignOrHeldGpus) {
  placement_index idx;
  auto m = add(idx, dgx("gpu-01"));
  ASSERT_FALSE(idx.set_gpu_health("gpu-01-g0", gpu_health::faulty));
  ASSERT_FALSE(idx.set_gpu_health("gpu-01-g1", gpu_health::foreign));
  auto other = idx.restore("other-run", {"gpu-01-g2"});
  ASSERT_TRUE(other);
  EXPECT_TRUE(std::holds_alternative<waiting_reason>(idx.place(single("six", 6))));
  gpu_mask used = 0;
  for (int i = 0; i < 5; ++i) {
    auto p = place_commit(idx, single("w" + std::to_string(i), 1));
    ASSERT_TRUE(p) << i;
    used |= p->workers[0].gpus;
  }
  EXPECT_EQ(used, bits({3, 4, 5, 6, 7}));
  EXPECT_EQ(why(idx.place(single("w5", 1))),
            "waiting: needs 1 GPU on one machine in pool h100; best machine has 0; gpu-01 has 0 "
            "free, 1 GPU fenced, 1 GPU held outside Astraeus and 6 GPUs held by runs")
    << "the counts add up to the machine's 8";
  EXPECT_EQ(idx.holder({m, 2}), *other);
  EXPECT_EQ(idx.holder({m, 0}), 0u);
  EXPECT_EQ(idx.holder({m, 1}), 0u);
  EXPECT_EQ(idx.check_invariants(), "");
}

TEST(Placement, AtRiskOnlyWhenNoHealthyGpusFit) {
  placement_index idx;
  auto a = add(idx, dgx("gpu-a"));
  for (int i = 0; i < 4; ++i)
    ASSERT_FALSE(idx.set_gpu_health("gpu-a-g" + std::to_string(i), gpu_health::at_risk));
  // Two GPUs: healthy ones exist (on gpu-a itself), so no AtRisk GPU.
  auto p = placed(idx.place(single("two", 2)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].gpus & bits({0, 1, 2, 3}), 0u);
  EXPECT_FALSE(p->uses_at_risk);
  // Six GPUs: only gpu-a can, with its 4 healthy GPUs and 2 at risk.
  p = placed(idx.place(single("six", 6)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].machine, a);
  EXPECT_EQ(p->workers[0].gpus & bits({4, 5, 6, 7}), bits({4, 5, 6, 7}));
  EXPECT_TRUE(p->uses_at_risk);
  // Falling back, the machine needing the fewest AtRisk GPUs wins over the
  // best-fitting one: gpu-c fits exactly but would use 5 AtRisk GPUs.
  {
    placement_index two;
    auto c = add(two, dgx("gpu-c"));
    auto d = add(two, dgx("gpu-d"));
    hold(two, c, bits({6, 7}));           // 6 free: 1 healthy (5), 5 at risk
    for (int i = 0; i < 5; ++i)
      ASSERT_FALSE(two.set_gpu_health("gpu-c-g" + std::to_string(i), gpu_health::at_risk));
    for (int i = 5; i < 8; ++i)           // 8 free: 5 healthy, 3 at risk
      ASSERT_FALSE(two.set_gpu_health("gpu-d-g" + std::to_string(i), gpu_health::at_risk));
    auto q = placed(two.place(single("six", 6)));
    ASSERT_TRUE(q);
    EXPECT_EQ(q->workers[0].machine, d);
    EXPECT_EQ(q->workers[0].gpus & bits({0, 1, 2, 3, 4}), bits({0, 1, 2, 3, 4}));
  }
  // Once a machine with six healthy GPUs exists, it wins.
  auto b = add(idx, dgx("gpu-b"));
  p = placed(idx.place(single("six", 6)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].machine, b);
  EXPECT_FALSE(p->uses_at_risk);
  EXPECT_EQ(idx.check_invariants(), "");
}

TEST(Placement, HealthyOnlyNeverGetsAtRiskGpusAndWaits) {
  placement_index idx;
  auto a = add(idx, dgx("gpu-a"));
  for (int i = 0; i < 4; ++i)
    ASSERT_FALSE(idx.set_gpu_health("gpu-a-g" + std::to_string(i), gpu_health::at_risk));
  auto six = single("six", 6);
  six.healthy_only = true;
  EXPECT_EQ(why(idx.place(six)),
            "waiting: needs 6 healthy GPUs on one machine in pool h100; best machine has 4 "
            "(it would fit with GPUs at risk, which healthy_only refuses)");
  // A stale placement that used AtRisk GPUs is refused at commit as well.
  auto plain = single("six", 6);
  auto p = placed(idx.place(plain));
  ASSERT_TRUE(p);
  placement forged = *p;
  forged.healthy_only = true;
  EXPECT_FALSE(idx.commit(forged));
  auto four = single("four", 4);
  four.healthy_only = true;
  p = placed(idx.place(four));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].machine, a);
  EXPECT_EQ(p->workers[0].gpus, bits({4, 5, 6, 7}));
}

TEST(Placement, OnlySchedulableMachinesCarryingEveryLabel) {
  placement_index idx;
  auto a = add(idx, dgx("gpu-a", {{"pool", "h100"}, {"zone", "z1"}}));
  auto b = add(idx, dgx("gpu-b", {{"pool", "h100"}, {"zone", "z2"}}));
  add(idx, dgx("gpu-c", {{"pool", "a100"}, {"zone", "z1"}}));
  auto r = single("r", 8, {{"pool", "h100"}, {"zone", "z1"}});
  auto p = placed(idx.place(r));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].machine, a);
  ASSERT_FALSE(idx.set_schedulable(a, false)); // cordoned, Down, pressure, ...
  EXPECT_EQ(why(idx.place(r)),
            "waiting: needs 8 GPUs in pool h100 with zone=z1; gpu-a has 8 free but is not "
            "taking new work");
  // Labels change: gpu-b joins zone z1.
  ASSERT_FALSE(idx.set_labels(b, {{"pool", "h100"}, {"zone", "z1"}}));
  p = placed(idx.place(r));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].machine, b);
  EXPECT_EQ(idx.check_invariants(), "");
}

TEST(Placement, LeaderIsRankZeroOfTheLeaderGroup) {
  placement_index idx;
  add(idx, dgx("gpu-a"));
  add(idx, dgx("gpu-b"));
  placement_request r;
  r.run = "train";
  r.required_labels = h100;
  r.groups = {worker_group{"worker", 3, 4}, worker_group{"main", 2, 2}};
  r.leader_group = 1;
  auto p = placed(idx.place(r));
  ASSERT_TRUE(p);
  ASSERT_EQ(p->workers.size(), 5u);
  for (uint32_t i = 0; i < 5; ++i)
    EXPECT_EQ(p->workers[i].rank, i);
  EXPECT_EQ(p->leader, 3u);
  EXPECT_EQ(p->workers[p->leader].group, 1u);
  EXPECT_EQ(p->workers[p->leader].group_rank, 0u);
  EXPECT_EQ(p->workers[4].group_rank, 1u);
  EXPECT_EQ(popcount_of(p->workers[0].gpus), 4u);
  EXPECT_EQ(popcount_of(p->workers[3].gpus), 2u);
  r.leader_group = 0;
  p = placed(idx.place(r));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->leader, 0u);
  // No two workers share a GPU.
  std::map<machine_id, gpu_mask> seen;
  for (const auto& w : p->workers) {
    EXPECT_EQ(seen[w.machine] & w.gpus, 0u);
    seen[w.machine] |= w.gpus;
  }
  EXPECT_TRUE(idx.commit(*p));
}

TEST(Placement, WaitingReasonsSayWhyInPlainWords) {
  placement_index idx;
  auto m = add(idx, dgx("gpu-01"));
  hold(idx, m, bits({0, 1}));
  auto r = single("big", 8);
  EXPECT_EQ(why(idx.place(r)),
            "waiting: needs 8 GPUs on one machine in pool h100; best machine has 6");
  r.healthy_only = true;
  EXPECT_EQ(why(idx.place(r)),
            "waiting: needs 8 healthy GPUs on one machine in pool h100; best machine has 6");
  auto res = idx.place(single("a", 1, {{"pool", "a100"}}));
  ASSERT_TRUE(std::holds_alternative<waiting_reason>(res));
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::no_machine);
  EXPECT_EQ(why(res), "cannot fit anywhere now: no machine in pool a100 (machines are in pool "
                      "h100)");
  res = idx.place(single("huge", 16));
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::never_fits);
  EXPECT_EQ(why(res), "cannot fit anywhere now: a worker needs 16 GPUs on one machine; "
                      "machines in pool h100 have at most 8");
  EXPECT_EQ(why(idx.place(gang("wide", 2, 8))),
            "cannot fit anywhere now: needs 16 GPUs; the machines in pool h100 have 8 in all");
  placement_request mixed;
  mixed.run = "mixed";
  mixed.required_labels = h100;
  mixed.groups = {worker_group{"a", 1, 4}, worker_group{"b", 3, 1}};
  ASSERT_FALSE(idx.set_gpu_health("gpu-01-g7", gpu_health::faulty));
  add(idx, dgx("gpu-02", h100, 2));
  hold(idx, *idx.find_machine("gpu-02"), bits({0, 1}));
  EXPECT_EQ(why(idx.place(mixed)),
            "waiting: needs 1 worker of 4 GPUs and 3 workers of 1 GPU (7 GPUs) in pool h100; "
            "the machines have 5 free");
  auto none = single("none", 0);
  res = idx.place(none);
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::invalid_request);
}

// Issue 22: GPUs, cores and memory are fitted together. Best fit by GPUs
// would put the second run beside the first; its cores are not there.
TEST(Placement, TwoGpuRunsWhoseCoresExceedAMachineGoToTwoMachines) {
  placement_index idx;
  auto a = add(idx, sized(dgx("gpu-a"), 64, 512));
  auto b = add(idx, sized(dgx("gpu-b"), 64, 512));
  auto first = place_commit(idx, asking(single("one", 2), 48, 128));
  ASSERT_TRUE(first);
  machine_id m1 = first->workers[0].machine;
  auto second = place_commit(idx, asking(single("two", 2), 48, 128));
  ASSERT_TRUE(second);
  EXPECT_NE(second->workers[0].machine, m1);
  EXPECT_EQ(idx.free_cpu_millis(a), 16000u);
  EXPECT_EQ(idx.free_cpu_millis(b), 16000u);
  // What still fits the 16 cores left goes beside them (best fit by GPUs).
  auto third = placed(idx.place(asking(single("three", 1), 16)));
  ASSERT_TRUE(third);
  EXPECT_EQ(idx.check_invariants(), "");
}

TEST(Placement, TheSecondOfTwoGpuRunsWhoseCoresExceedTheMachineWaitsNamingThem) {
  placement_index idx;
  auto m = add(idx, sized(dgx("gpu-a"), 64, 512));
  ASSERT_TRUE(place_commit(idx, asking(single("one", 2), 48, 128)));
  auto r = asking(single("two", 2), 48, 128);
  auto res = idx.place(r);
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::not_enough_cores_or_memory);
  EXPECT_EQ(why(res), "waiting: no machine in pool h100 has 2 free GPUs with 48 free cores and "
                      "128 GiB free memory; gpu-a has the GPUs but only 16 free cores");
  // A placement made before the cores were taken is refused at commit.
  auto small = asking(single("small", 1), 16);
  auto p = placed(idx.place(small));
  ASSERT_TRUE(p);
  ASSERT_FALSE(idx.set_outside_use(m, 1000, 0));
  auto before = fingerprint(idx);
  auto stale = idx.commit(*p);
  ASSERT_FALSE(stale);
  EXPECT_EQ(fingerprint(idx), before);
  EXPECT_EQ(idx.free_cpu_millis(m), 15000u);
  // Fractional cores count as asked: 15 cores left take 30 half cores.
  EXPECT_TRUE(placed(idx.place(asking(gang("halves", 6, 1), 2.5))));
  EXPECT_EQ(why(idx.place(asking(gang("halves", 6, 1), 2.6))),
            "waiting: no machines in pool h100 have room for 6 workers of 1 free GPU with 2.6 "
            "free cores each; gpu-a has the GPUs but only 15 free cores");
  EXPECT_EQ(idx.check_invariants(), "");
}
