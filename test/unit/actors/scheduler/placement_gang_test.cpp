// Gangs over several machines (actors/scheduler/placement_gang.cpp): all
// or nothing, never across sites, the tightest tier first.

#include "actors/scheduler/placement.hpp"

#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "test/unit/actors/scheduler/placement_test_support.hpp"

using namespace astraeus;
using namespace astraeus::placement_test;

TEST(Placement, GangIsAllOrNothingAndLeavesTheIndexUnchanged) {
  placement_index idx;
  auto a = add(idx, dgx("gpu-a"));
  auto b = add(idx, dgx("gpu-b"));
  hold(idx, a, bits({0}));
  auto before = fingerprint(idx);
  // Two 8-GPU workers: one machine's worth fits now, so nothing is placed.
  auto r = idx.place(gang("big", 2, 8));
  ASSERT_TRUE(std::holds_alternative<waiting_reason>(r));
  EXPECT_EQ(std::get<waiting_reason>(r).code, waiting_code::not_enough_gpus);
  EXPECT_EQ(fingerprint(idx), before);
  // A placement across both machines gone stale (a GPU of its second
  // machine fenced meanwhile) commits nothing at all, not even on the first.
  auto p = placed(idx.place(gang("pair", 2, 6)));
  ASSERT_TRUE(p);
  placement stale = *p;
  ASSERT_NE(stale.workers[0].machine, stale.workers[1].machine);
  machine_id second = stale.workers[1].machine;
  unsigned slot = lowest_slot(stale.workers[1].gpus);
  ASSERT_FALSE(idx.set_gpu_health({second, static_cast<uint8_t>(slot)}, gpu_health::faulty));
  before = fingerprint(idx);
  EXPECT_FALSE(idx.commit(stale));
  EXPECT_EQ(fingerprint(idx), before);
  (void)b;
  EXPECT_EQ(idx.check_invariants(), "");
}

TEST(Placement, GangNeverSpansSites) {
  placement_index idx;
  for (auto site : {"fra", "ams"})
    for (int i = 0; i < 3; ++i) {
      auto m = add(idx, dgx(std::string(site) + "-" + std::to_string(i),
                            {{"pool", "h100"}, {topology_label::site, site}}));
      if (i < 2)
        hold(idx, m, bits({0}));
    }
  // Two whole machines are free, one in each site.
  EXPECT_EQ(why(idx.place(gang("two", 2, 8))),
            "waiting: needs 2 workers of 8 GPUs each (16 GPUs) within one site in pool h100; "
            "best site has room for 1");
  auto p = placed(idx.place(gang("two", 2, 7)));
  ASSERT_TRUE(p);
  EXPECT_EQ(idx.machine_label(p->workers[0].machine, topology_label::site),
            idx.machine_label(p->workers[1].machine, topology_label::site));
  EXPECT_NE(p->workers[0].machine, p->workers[1].machine);
}

TEST(Placement, GangPrefersOneNvlinkDomainThenFabricThenRack) {
  placement_index idx;
  auto labels = [](const char* rack, const char* fabric, const char* domain) {
    label_map l = h100;
    l[topology_label::rack] = rack;
    if (*fabric)
      l[topology_label::fabric] = fabric;
    if (*domain)
      l[topology_label::nvlink_domain] = domain;
    return l;
  };
  // Fabric ib-1 spans racks r1 and r2; NVLink domain nvl-1 is m1 + m2.
  // Rack r3 has no InfiniBand. Declared so that the lowest ids are not the
  // right answer by accident.
  auto m5 = add(idx, dgx("m5", labels("r3", "", "")));
  auto m6 = add(idx, dgx("m6", labels("r3", "", "")));
  auto m3 = add(idx, dgx("m3", labels("r1", "ib-1", "")));
  auto m4 = add(idx, dgx("m4", labels("r2", "ib-1", "")));
  auto m1 = add(idx, dgx("m1", labels("r1", "ib-1", "nvl-1")));
  auto m2 = add(idx, dgx("m2", labels("r2", "ib-1", "nvl-1")));
  auto machines_of = [](const placement& p) {
    std::set<machine_id> out;
    for (const auto& w : p.workers)
      out.insert(w.machine);
    return out;
  };
  auto r = gang("g", 2, 8);
  auto p = placed(idx.place(r));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tier, placement_tier::nvlink_domain);
  EXPECT_EQ(machines_of(*p), (std::set<machine_id>{m1, m2}));
  // The domain is half busy: one fabric (over one Ethernet rack).
  hold(idx, m2, bits({0}));
  p = placed(idx.place(r));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tier, placement_tier::fabric);
  for (auto m : machines_of(*p))
    EXPECT_TRUE(m == m1 || m == m3 || m == m4) << idx.machine_name(m);
  // The fabric has one whole machine left: one rack.
  hold(idx, m3, bits({0}));
  hold(idx, m4, bits({0}));
  p = placed(idx.place(r));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tier, placement_tier::rack);
  EXPECT_EQ(machines_of(*p), (std::set<machine_id>{m5, m6}));
  // No rack has two: anywhere in the site.
  hold(idx, m6, bits({0}));
  p = placed(idx.place(r));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tier, placement_tier::site);
  EXPECT_EQ(machines_of(*p), (std::set<machine_id>{m1, m5}));
  // A gang that fits on one machine stays on it.
  p = placed(idx.place(gang("small", 2, 4)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tier, placement_tier::one_machine);
  EXPECT_EQ(machines_of(*p).size(), 1u);
}

// Issue 22: each worker of a gang needs its cores and memory on its machine
// too; a machine without them for one more worker is passed over.
TEST(Placement, GangWorkersNeedTheirCoresAndMemoryToo) {
  placement_index idx;
  auto a = add(idx, sized(dgx("gpu-a"), 64, 512));
  auto b = add(idx, sized(dgx("gpu-b"), 64, 512));
  // Four workers of 1 GPU and 32 cores: one machine has the GPUs for all,
  // but the cores for two.
  auto p = placed(idx.place(asking(gang("g", 4, 1), 32, 100)));
  ASSERT_TRUE(p);
  std::map<machine_id, int> per;
  for (const auto& w : p->workers)
    ++per[w.machine];
  EXPECT_EQ(per, (std::map<machine_id, int>{{a, 2}, {b, 2}}));
  EXPECT_EQ(p->tier, placement_tier::site);
  auto held = idx.commit(*p);
  ASSERT_TRUE(held);
  EXPECT_EQ(idx.free_cpu_millis(a), 0u);
  EXPECT_EQ(idx.free_cpu_millis(b), 0u);
  EXPECT_EQ(idx.free_memory_bytes(a), 312ull << 30);
  // Six GPUs are free on each, no cores: a gang asking for cores waits and
  // says so; one asking for none places.
  auto r = idx.place(asking(gang("h", 2, 1), 1));
  ASSERT_TRUE(std::holds_alternative<waiting_reason>(r));
  EXPECT_EQ(std::get<waiting_reason>(r).code, waiting_code::not_enough_cores_or_memory);
  EXPECT_NE(why(r).find("waiting: no machines in pool h100 have room for 2 workers of 1 free "
                        "GPU with 1 free core each; gpu-"),
            std::string::npos)
    << why(r);
  EXPECT_NE(why(r).find(" has the GPUs but only 0 free cores"), std::string::npos) << why(r);
  EXPECT_TRUE(placed(idx.place(gang("h", 2, 1))));
  // Memory alone: 312 GiB free on each, 200 GiB a worker: one per machine.
  p = placed(idx.place(asking(gang("m", 2, 1), 0, 200)));
  ASSERT_TRUE(p);
  EXPECT_NE(p->workers[0].machine, p->workers[1].machine);
  // Releasing the first gang gives its cores and memory back.
  EXPECT_EQ(idx.check_invariants(), "");
  ASSERT_FALSE(idx.release(*held));
  EXPECT_EQ(idx.free_cpu_millis(a), 64000u);
  EXPECT_EQ(idx.free_memory_bytes(b), 512ull << 30);
  EXPECT_EQ(idx.check_invariants(), "");
}

// sbatch --nodes=2 (a sixth-trial finding): Slurm gives each task a node of
// its own; Astraeus put both 1-GPU workers on one machine. A run asking one
// worker per machine gets two machines, or waits saying so.
TEST(Placement, OneWorkerPerMachineNeverPacksTwoOnAMachine) {
  placement_index idx;
  auto a = add(idx, dgx("gpu-a"));
  auto packed = placed(idx.place(gang("packed", 2, 1)));
  ASSERT_TRUE(packed);
  EXPECT_EQ(packed->workers[0].machine, packed->workers[1].machine) << "packed as before";
  auto spread = gang("spread", 2, 1);
  spread.one_worker_per_machine = true;
  EXPECT_EQ(why(idx.place(spread)),
            "waiting: needs 2 workers of 1 GPU each (2 GPUs), one per machine in pool h100; the "
            "machines have room for 1 worker (one per machine)");
  auto b = add(idx, dgx("gpu-b"));
  hold(idx, b, bits({0, 1, 2, 3, 4, 5, 6}));
  auto p = place_commit(idx, spread);
  ASSERT_TRUE(p);
  EXPECT_NE(p->workers[0].machine, p->workers[1].machine);
  EXPECT_TRUE((p->workers[0].machine == a && p->workers[1].machine == b)
              || (p->workers[0].machine == b && p->workers[1].machine == a));
  EXPECT_EQ(idx.check_invariants(), "");
}
