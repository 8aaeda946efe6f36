// The index's machines and GPUs (actors/scheduler/placement_index.cpp):
// a Down machine and a changed GPU list keep held GPUs until released.

#include "actors/scheduler/placement.hpp"

#include <string>

#include <gtest/gtest.h>

#include "messages/error.hpp"
#include "test/unit/actors/scheduler/placement_test_support.hpp"

using namespace astraeus;
using namespace astraeus::placement_test;

TEST(Placement, DownMachineKeepsItsGpusUntilTheyAreReleased) {
  placement_index idx;
  auto m = add(idx, dgx("gpu-01"));
  scheduler_queue q{idx};
  ASSERT_FALSE(q.submit(single("train", 8), 0));
  auto started = q.schedule(0);
  ASSERT_EQ(started.size(), 1u);
  auto a = started[0].allocation;
  ASSERT_FALSE(idx.set_schedulable(m, false)); // heartbeat lapsed: Down
  for (unsigned s = 0; s < 8; ++s)
    EXPECT_EQ(idx.holder({m, static_cast<uint8_t>(s)}), a);
  ASSERT_FALSE(q.submit(single("next", 1), 1));
  EXPECT_TRUE(q.schedule(1).empty());
  EXPECT_EQ(q.waiting("next")->code, waiting_code::none_schedulable);
  ASSERT_FALSE(idx.set_schedulable(m, true)); // back, its workers still run
  EXPECT_TRUE(q.schedule(2).empty());
  EXPECT_EQ(idx.holder({m, 0}), a);
  ASSERT_FALSE(q.complete("train"));
  auto next = q.schedule(3);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].run, "next");
  EXPECT_EQ(idx.check_invariants(), "");
}

TEST(Placement, GpuListChangesKeepHeldGpusUntilReleased) {
  placement_index idx;
  auto m = add(idx, dgx("gpu-01"));
  auto p = place_commit(idx, single("train", 2));
  ASSERT_TRUE(p);
  auto a = idx.holder({m, static_cast<uint8_t>(lowest_slot(p->workers[0].gpus))});
  // The machine now reports 7 GPUs: one of the held ones vanished (lost),
  // and a replacement (new UUID) appeared.
  auto spec = dgx("gpu-01");
  unsigned lost = lowest_slot(p->workers[0].gpus);
  spec.gpus.erase(spec.gpus.begin() + lost);
  spec.gpus.push_back({"gpu-01-new", 1, 0, gpu_health::healthy});
  ASSERT_FALSE(idx.update_machine(m, spec));
  EXPECT_EQ(idx.holder({m, static_cast<uint8_t>(lost)}), a);
  EXPECT_EQ(idx.check_invariants(), "");
  EXPECT_TRUE(idx.find_gpu("gpu-01-new"));
  ASSERT_FALSE(idx.release(a));
  EXPECT_FALSE(idx.find_gpu("gpu-01-g" + std::to_string(lost)));
  EXPECT_EQ(idx.totals().gpus, 8u);
  EXPECT_EQ(idx.totals().held, 0u);
  EXPECT_EQ(idx.check_invariants(), "");
  // A machine name twice changes nothing.
  EXPECT_FALSE(idx.add_machine(dgx("gpu-01")));
  // GPUs are keyed by (machine, id) (issue 18): another machine with an id
  // gpu-01 has too is added, each machine keeping its own GPU.
  auto same_id = dgx("gpu-09");
  same_id.gpus[3].id = "gpu-01-g5";
  auto other = idx.add_machine(same_id);
  ASSERT_TRUE(other);
  EXPECT_TRUE(idx.find_gpu(*other, "gpu-01-g5"));
  EXPECT_TRUE(idx.find_gpu(m, "gpu-01-g5"));
  EXPECT_EQ(idx.totals().gpus, 16u);
  EXPECT_EQ(idx.check_invariants(), "");
}

TEST(Placement, GpuIdsStayRightThroughListChangesAndLongIdsAreRefused) {
  placement_index idx;
  auto m = add(idx, dgx("gpu-01"));
  auto p = place_commit(idx, single("train", 1));
  ASSERT_TRUE(p);
  unsigned held = lowest_slot(p->workers[0].gpus);
  std::string held_id = "gpu-01-g" + std::to_string(held);
  // Ten list changes: the held GPU vanishes, others come and go under new
  // UUIDs. Every slot keeps naming the GPU it holds.
  for (int round = 0; round < 10; ++round) {
    auto spec = dgx("gpu-01");
    spec.gpus.erase(spec.gpus.begin() + held);
    for (size_t i = 0; i < spec.gpus.size(); i += 2)
      spec.gpus[i].id = "GPU-" + std::to_string(round) + "-" + std::to_string(i) +
                        "-8d4c5f1e-3b2a-4c6d-9e8f-0a1b2c3d";
    ASSERT_FALSE(idx.update_machine(m, spec));
    EXPECT_EQ(idx.gpu_id({m, static_cast<uint8_t>(held)}), held_id);
    for (const auto& g : spec.gpus) {
      auto ref = idx.find_gpu(m, g.id);
      ASSERT_TRUE(ref) << g.id;
      EXPECT_EQ(idx.gpu_id(*ref), g.id);
    }
    EXPECT_EQ(idx.check_invariants(), "");
  }
  EXPECT_EQ(idx.totals().gpus, 7u); // the held one is gone, not present
  // An id longer than 256 characters is refused, naming the limit; the
  // machine keeps what it had.
  auto spec = dgx("gpu-01");
  spec.gpus[0].id = std::string(300, 'x');
  auto err = idx.update_machine(m, spec);
  ASSERT_TRUE(err);
  EXPECT_NE(render_error(err).find("longer than 256 characters"), std::string::npos);
  EXPECT_EQ(idx.gpu_id({m, static_cast<uint8_t>(held)}), held_id);
  EXPECT_EQ(idx.check_invariants(), "");
}
