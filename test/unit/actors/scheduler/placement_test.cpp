// The placement engine: one test per rule of the scheduler issue, with
// explicit times for the queue, and a seeded property test that checks the
// index against an independent model after every step.

#include "actors/scheduler/placement.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace astraeus;

namespace {

const label_map h100{{"pool", "h100"}};

// Eight GPUs: slots 0-3 on NUMA node 0, 4-7 on node 1, all joined by
// NVSwitch (every pair NVLinked), ids "<name>-g<i>".
machine_spec dgx(const std::string& name, label_map labels = h100, unsigned gpus = 8) {
  machine_spec m;
  m.name = name;
  m.labels = std::move(labels);
  for (unsigned i = 0; i < gpus; ++i) {
    gpu_spec g;
    g.id = name + "-g" + std::to_string(i);
    g.numa_node = i < gpus / 2 ? 0 : 1;
    g.nvlink_peers = ((gpu_mask{1} << gpus) - 1) & ~(gpu_mask{1} << i);
    m.gpus.push_back(g);
  }
  return m;
}

placement_request single(const std::string& run, uint32_t gpus, label_map labels = h100) {
  placement_request r;
  r.run = run;
  r.groups = {worker_group{"default", 1, gpus}};
  r.required_labels = std::move(labels);
  return r;
}

placement_request gang(const std::string& run, uint32_t workers, uint32_t gpus,
                       label_map labels = h100) {
  placement_request r = single(run, gpus, std::move(labels));
  r.groups[0].workers = workers;
  return r;
}

unsigned lowest_slot(gpu_mask m) {
  return static_cast<unsigned>(__builtin_ctzll(m));
}

unsigned popcount_of(gpu_mask m) {
  return static_cast<unsigned>(__builtin_popcountll(m));
}

gpu_mask bits(std::initializer_list<unsigned> slots) {
  gpu_mask m = 0;
  for (unsigned s : slots)
    m |= gpu_mask{1} << s;
  return m;
}

machine_id add(placement_index& idx, const machine_spec& spec) {
  auto id = idx.add_machine(spec);
  EXPECT_TRUE(id) << spec.name;
  return id ? *id : 0;
}

// Holds slots of a machine for someone else.
allocation_id hold(placement_index& idx, machine_id m, gpu_mask gpus) {
  auto a = idx.hold("someone else", {gpu_set{m, gpus}});
  EXPECT_TRUE(a);
  return a ? *a : 0;
}

std::optional<placement> placed(const placement_result& r) {
  if (auto* w = std::get_if<waiting_reason>(&r)) {
    ADD_FAILURE() << "not placed: " << w->message;
    return std::nullopt;
  }
  return std::get<placement>(r);
}

std::string why(const placement_result& r) {
  if (auto* w = std::get_if<waiting_reason>(&r))
    return w->message;
  return "placed";
}

// Places and commits; the placement, or nullopt.
std::optional<placement> place_commit(placement_index& idx, const placement_request& r) {
  auto res = idx.place(r);
  auto* p = std::get_if<placement>(&res);
  if (!p)
    return std::nullopt;
  auto a = idx.commit(*p);
  EXPECT_TRUE(a) << r.run;
  return *p;
}

// Everything a placement can change, as text.
std::string fingerprint(const placement_index& idx) {
  std::string out;
  auto t = idx.totals();
  out += std::to_string(t.held) + "/" + std::to_string(t.free_healthy) + "/" +
         std::to_string(t.free_at_risk) + "/" + std::to_string(t.allocations) + ";";
  for (machine_id m = 0; m < idx.machine_ids(); ++m)
    for (unsigned s = 0; s < idx.gpu_slots(m); ++s)
      out += std::to_string(idx.holder({m, static_cast<uint8_t>(s)})) + ",";
  return out;
}

} // namespace

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
            "waiting: needs 1 GPU on one machine in pool h100; best machine has 0");
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
            "waiting: no machine in pool h100 with zone=z1 takes new work (1 machine is Down, "
            "cordoned, in maintenance, in acceptance or under pressure)");
  // Labels change: gpu-b joins zone z1.
  ASSERT_FALSE(idx.set_labels(b, {{"pool", "h100"}, {"zone", "z1"}}));
  p = placed(idx.place(r));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->workers[0].machine, b);
  EXPECT_EQ(idx.check_invariants(), "");
}

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
  EXPECT_EQ(why(res), "waiting: no machine in pool a100");
  res = idx.place(single("huge", 16));
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::never_fits);
  EXPECT_EQ(why(res), "waiting: never fits: a worker needs 16 GPUs on one machine; machines in "
                      "pool h100 have at most 8");
  EXPECT_EQ(why(idx.place(gang("wide", 2, 8))),
            "waiting: never fits: needs 16 GPUs within one site; the largest site in pool h100 "
            "has 8");
  placement_request mixed;
  mixed.run = "mixed";
  mixed.required_labels = h100;
  mixed.groups = {worker_group{"a", 1, 4}, worker_group{"b", 3, 1}};
  ASSERT_FALSE(idx.set_gpu_health("gpu-01-g7", gpu_health::faulty));
  add(idx, dgx("gpu-02", h100, 2));
  hold(idx, *idx.find_machine("gpu-02"), bits({0, 1}));
  EXPECT_EQ(why(idx.place(mixed)),
            "waiting: needs 1 worker of 4 GPUs and 3 workers of 1 GPU (7 GPUs) within one site "
            "in pool h100; best site has 5 free");
  auto none = single("none", 0);
  res = idx.place(none);
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::invalid_request);
}

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

TEST(Placement, BackfillThatWouldDelayTheHeadGangIsRefused) {
  placement_index idx;
  auto m1 = add(idx, dgx("m1"));
  auto m2 = add(idx, dgx("m2"));
  auto small = add(idx, dgx("small", h100, 2)); // too small for the head gang
  scheduler_queue q{idx};
  auto a = single("a", 8);
  a.time_limit_seconds = 1000;
  auto b = single("b", 4);
  b.time_limit_seconds = 500;
  ASSERT_FALSE(q.submit(a, 0));
  ASSERT_FALSE(q.submit(b, 0));
  auto first = q.schedule(0);
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(first[0].where.workers[0].machine, m1);
  ASSERT_EQ(first[1].where.workers[0].machine, m2);
  // The head: two whole machines, which it gets when a ends at t=1000.
  auto head = gang("head", 2, 8);
  head.time_limit_seconds = 100;
  auto long_one = single("long", 4);
  long_one.time_limit_seconds = 2000; // would still run at t=1000
  auto short_one = single("short", 4);
  short_one.time_limit_seconds = 300; // ends at t=310, before the reservation
  auto elsewhere = single("elsewhere", 2); // no limit, but off the reserved GPUs
  for (const auto& r : {head, long_one, short_one, elsewhere})
    ASSERT_FALSE(q.submit(r, 5));
  auto started = q.schedule(10);
  ASSERT_TRUE(q.reservation());
  EXPECT_EQ(q.reservation()->run, "head");
  EXPECT_EQ(q.reservation()->start, 1000);
  ASSERT_EQ(started.size(), 2u);
  EXPECT_EQ(started[0].run, "short");
  EXPECT_TRUE(started[0].backfilled);
  EXPECT_EQ(started[0].where.workers[0].machine, m2);
  EXPECT_EQ(started[0].end, 310);
  EXPECT_EQ(started[1].run, "elsewhere");
  EXPECT_EQ(started[1].where.workers[0].machine, small);
  ASSERT_NE(q.waiting("long"), nullptr);
  EXPECT_EQ(q.waiting("long")->code, waiting_code::reserved);
  EXPECT_EQ(q.waiting("long")->message,
            "waiting: the GPUs it fits on are reserved for head, due to start in 16m, before "
            "this run's time limit would end it");
  EXPECT_EQ(q.waiting("head")->message,
            "waiting: needs 2 workers of 8 GPUs each (16 GPUs) within one site in pool h100; "
            "best site has room for 0; GPUs are reserved for it, due to start in 16m");
  EXPECT_EQ(idx.totals().allocations, 4u) << "the reservation is not left held";
  // Time passes; b and short end; still nobody takes the reserved GPUs.
  ASSERT_FALSE(q.complete("b"));
  ASSERT_FALSE(q.complete("short"));
  EXPECT_TRUE(q.schedule(600).empty());
  EXPECT_EQ(q.waiting("long")->code, waiting_code::reserved);
  // a ends: the head starts before "long".
  ASSERT_FALSE(q.complete("a"));
  auto later = q.schedule(1000);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].run, "head");
  EXPECT_FALSE(later[0].backfilled);
  EXPECT_EQ(idx.check_invariants(), "");
}

TEST(Placement, BackfillThatEndsBeforeTheReservationIsAllowed) {
  placement_index idx;
  add(idx, dgx("m1"));
  add(idx, dgx("m2"));
  scheduler_queue q{idx};
  auto a = single("a", 8);
  a.time_limit_seconds = 3600;
  ASSERT_FALSE(q.submit(a, 0));
  ASSERT_EQ(q.schedule(0).size(), 1u);
  ASSERT_FALSE(q.submit(gang("head", 2, 8), 1));
  // Exactly up to the reservation (t=3600) is fine.
  auto fits = single("fits", 8);
  fits.time_limit_seconds = 3590;
  ASSERT_FALSE(q.submit(fits, 2));
  auto started = q.schedule(10);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].run, "fits");
  EXPECT_TRUE(started[0].backfilled);
  // Without a time limit it could delay the head forever: refused.
  ASSERT_FALSE(q.complete("fits"));
  ASSERT_FALSE(q.submit(single("forever", 1), 11));
  EXPECT_TRUE(q.schedule(11).empty());
  EXPECT_EQ(q.waiting("forever")->code, waiting_code::reserved);
  // With no reservation (a has no time limit, so no start time can be
  // promised), small runs are not held back.
  placement_index idx2;
  add(idx2, dgx("m1"));
  add(idx2, dgx("m2"));
  scheduler_queue q2{idx2};
  ASSERT_FALSE(q2.submit(single("a", 8), 0));
  ASSERT_EQ(q2.schedule(0).size(), 1u);
  ASSERT_FALSE(q2.submit(gang("head", 2, 8), 1));
  ASSERT_FALSE(q2.submit(single("small", 4), 2));
  auto s2 = q2.schedule(3);
  EXPECT_FALSE(q2.reservation());
  ASSERT_EQ(s2.size(), 1u);
  EXPECT_EQ(s2[0].run, "small");
}

TEST(Placement, QueueOrderIsPriorityThenSubmission) {
  placement_index idx;
  add(idx, dgx("m1"));
  scheduler_queue q{idx};
  auto low = single("low", 8);
  auto high = single("high", 8);
  high.priority = 10;
  ASSERT_FALSE(q.submit(low, 0));
  ASSERT_FALSE(q.submit(high, 5));
  EXPECT_TRUE(q.submit(single("low", 1), 6)) << "duplicate names are refused";
  auto started = q.schedule(10);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].run, "high");
  ASSERT_FALSE(q.cancel("low"));
  EXPECT_EQ(q.waiting_count(), 0u);
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
  // Conflicts change nothing.
  EXPECT_FALSE(idx.add_machine(dgx("gpu-01")));
  auto clash = dgx("gpu-09");
  clash.gpus[3].id = "gpu-01-g5";
  EXPECT_FALSE(idx.add_machine(clash));
  EXPECT_FALSE(idx.find_machine("gpu-09"));
  EXPECT_EQ(idx.check_invariants(), "");
}

// -- property test -------------------------------------------------------------

namespace {

struct model_gpu {
  gpu_health health = gpu_health::healthy;
  std::string holder; // run name, empty = free
};

struct model_run {
  placement_request request;
  allocation_id allocation = 0;
  int64_t end = 0;
};

// What a property run went through, so that the test shows it covered the
// interesting paths.
struct coverage {
  int placed = 0, multi_machine = 0, at_risk = 0, backfilled = 0, reservations = 0,
      reserved_waits = 0;
};

// Runs `steps` random steps on a 16-machine cluster and checks, after each,
// the index against a model kept by the test alone.
void run_property(uint32_t seed, int steps, coverage& seen) {
  std::mt19937 rng{seed};
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  placement_index idx;
  scheduler_queue q{idx};
  const int machines = 16;
  std::vector<std::vector<model_gpu>> gpus(machines, std::vector<model_gpu>(8));
  std::vector<bool> up(machines, true);
  std::vector<std::string> pool(machines);
  std::vector<machine_id> ids(machines);
  for (int i = 0; i < machines; ++i) {
    pool[i] = i < 12 ? "h100" : "a100";
    label_map l{{"pool", pool[i]},
                {topology_label::site, i % 2 ? "s1" : "s2"},
                {topology_label::rack, "r" + std::to_string(i / 4)},
                {topology_label::fabric, "f" + std::to_string(i / 8)}};
    if (i < 6)
      l[topology_label::nvlink_domain] = "nvl" + std::to_string(i / 3);
    auto spec = dgx("m" + std::to_string(i), l);
    if (i % 3 == 0) // NVLink pairs instead of NVSwitch
      for (unsigned g = 0; g < 8; ++g)
        spec.gpus[g].nvlink_peers = gpu_mask{1} << (g ^ 1u);
    auto id = idx.add_machine(spec);
    ASSERT_TRUE(id);
    ids[i] = *id;
  }
  std::map<std::string, model_run> running;
  std::map<std::string, placement_request> submitted;
  int64_t now = 0;
  int next_run = 0;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " step " + std::to_string(step));
    switch (pick(12)) {
      case 0: case 1: case 2: case 3: { // submit
        placement_request r;
        r.run = "r" + std::to_string(next_run++);
        static const uint32_t sizes[] = {1, 1, 2, 4, 8};
        uint32_t groups = pick(5) == 0 ? 2 : 1;
        for (uint32_t g = 0; g < groups; ++g)
          r.groups.push_back({"g" + std::to_string(g), 1 + static_cast<uint32_t>(pick(3) ? 0 : pick(4)),
                              sizes[pick(5)]});
        r.leader_group = static_cast<uint32_t>(pick(groups));
        r.required_labels = {{"pool", pick(4) ? "h100" : "a100"}};
        r.healthy_only = pick(5) == 0;
        r.time_limit_seconds = pick(4) == 0 ? 0 : 50 + static_cast<int64_t>(pick(500));
        r.priority = pick(10) == 0 ? 1 : 0;
        submitted[r.run] = r;
        ASSERT_FALSE(q.submit(r, now));
        break;
      }
      case 4: { // complete a running run
        if (running.empty())
          break;
        auto it = std::next(running.begin(), static_cast<long>(pick(running.size())));
        ASSERT_FALSE(q.complete(it->first));
        for (auto& m : gpus)
          for (auto& g : m)
            if (g.holder == it->first)
              g.holder.clear();
        running.erase(it);
        break;
      }
      case 5: { // fence a GPU
        int m = static_cast<int>(pick(machines)), s = static_cast<int>(pick(8));
        ASSERT_FALSE(idx.set_gpu_health({ids[m], static_cast<uint8_t>(s)}, gpu_health::faulty));
        gpus[m][s].health = gpu_health::faulty;
        break;
      }
      case 6: { // other health changes: at risk, foreign, cleared
        int m = static_cast<int>(pick(machines)), s = static_cast<int>(pick(8));
        static const gpu_health hs[] = {gpu_health::at_risk, gpu_health::foreign,
                                        gpu_health::healthy, gpu_health::healthy};
        gpu_health h = hs[pick(4)];
        ASSERT_FALSE(idx.set_gpu_health({ids[m], static_cast<uint8_t>(s)}, h));
        gpus[m][s].health = h;
        break;
      }
      case 7: { // a machine goes Down or comes back
        int m = static_cast<int>(pick(machines));
        up[m] = !up[m];
        ASSERT_FALSE(idx.set_schedulable(ids[m], up[m]));
        break;
      }
      case 8: { // cancel a waiting run
        if (q.waiting_count() == 0)
          break;
        for (const auto& [name, r] : submitted)
          if (!running.count(name) && q.waiting(name)) {
            std::string victim = name;
            ASSERT_FALSE(q.cancel(victim));
            submitted.erase(victim);
            break;
          }
        break;
      }
      default: { // time passes; runs end at their time limits
        now += static_cast<int64_t>(pick(120));
        for (auto it = running.begin(); it != running.end();) {
          if (it->second.end <= now) {
            ASSERT_FALSE(q.complete(it->first));
            for (auto& m : gpus)
              for (auto& g : m)
                if (g.holder == it->first)
                  g.holder.clear();
            it = running.erase(it);
          } else {
            ++it;
          }
        }
      }
    }
    auto started = q.schedule(now);
    const auto& res = q.reservation();
    seen.reservations += res.has_value();
    for (const auto& [name, r] : submitted)
      if (const auto* w = q.waiting(name); w && w->code == waiting_code::reserved)
        ++seen.reserved_waits;
    for (const auto& d : started) {
      ++seen.placed;
      seen.backfilled += d.backfilled;
      seen.at_risk += d.where.uses_at_risk;
      seen.multi_machine += d.where.tier != placement_tier::one_machine;
      const auto& req = submitted.at(d.run);
      ASSERT_EQ(d.where.workers.size(), [&] {
        size_t n = 0;
        for (const auto& g : req.groups)
          n += g.workers;
        return n;
      }());
      const auto& leader = d.where.workers.at(d.where.leader);
      EXPECT_EQ(leader.group, req.leader_group);
      EXPECT_EQ(leader.group_rank, 0u);
      std::set<std::string> sites;
      bool at_risk = false;
      for (const auto& w : d.where.workers) {
        int m = static_cast<int>(w.machine);
        ASSERT_TRUE(up[m]) << "placed on a machine that takes no new work";
        ASSERT_EQ(pool[m], req.required_labels.at("pool"));
        ASSERT_EQ(__builtin_popcountll(w.gpus), static_cast<int>(req.groups[w.group].gpus_per_worker));
        sites.insert(*idx.machine_label(w.machine, topology_label::site));
        for (unsigned s = 0; s < 8; ++s) {
          if (!(w.gpus & (gpu_mask{1} << s)))
            continue;
          auto& g = gpus[m][s];
          ASSERT_EQ(g.holder, "") << "GPU assigned twice";
          ASSERT_NE(g.health, gpu_health::faulty) << "placed onto a fenced GPU";
          ASSERT_NE(g.health, gpu_health::foreign);
          if (g.health == gpu_health::at_risk)
            at_risk = true;
          g.holder = d.run;
        }
        if (res && d.backfilled && d.end > res->start) {
          for (const auto& set : res->gpus) {
            if (set.machine == w.machine) {
              ASSERT_EQ(set.gpus & w.gpus, 0u) << "backfill on reserved GPUs past the reservation";
            }
          }
        }
      }
      EXPECT_EQ(sites.size(), 1u) << "a gang spans sites";
      if (req.healthy_only) {
        ASSERT_FALSE(at_risk) << "AtRisk GPU for a healthy_only run";
      }
      running[d.run] = model_run{req, d.allocation, d.end};
    }
    // Recount: the index holds exactly what the model says, and its free
    // GPUs are what health and holds leave.
    for (int m = 0; m < machines; ++m) {
      gpu_mask free_healthy = 0;
      for (unsigned s = 0; s < 8; ++s) {
        const auto& g = gpus[m][s];
        allocation_id h = idx.holder({ids[m], static_cast<uint8_t>(s)});
        if (g.holder.empty())
          ASSERT_EQ(h, 0u) << "m" << m << " slot " << s << " held by nobody's run";
        else
          ASSERT_EQ(h, running.at(g.holder).allocation);
        if (g.holder.empty() && g.health == gpu_health::healthy)
          free_healthy |= gpu_mask{1} << s;
      }
      ASSERT_EQ(idx.free_gpus(ids[m], false), free_healthy);
    }
    ASSERT_EQ(idx.totals().allocations, running.size());
    ASSERT_EQ(q.running_count(), running.size());
    auto problem = idx.check_invariants();
    ASSERT_EQ(problem, "");
  }
}

} // namespace

TEST(Placement, PropertyRandomInterleavingsNeverDoubleAssignOrUseFencedGpus) {
  coverage seen;
  for (uint32_t seed : {1u, 2u, 3u, 42u, 2026u})
    run_property(seed, 2000, seen);
  std::printf("placed %d (across machines %d, with AtRisk GPUs %d, backfilled %d); passes with "
              "a reservation %d; waits for reserved GPUs %d\n",
              seen.placed, seen.multi_machine, seen.at_risk, seen.backfilled, seen.reservations,
              seen.reserved_waits);
  EXPECT_GT(seen.placed, 1000);
  EXPECT_GT(seen.multi_machine, 20);
  EXPECT_GT(seen.at_risk, 5);
  EXPECT_GT(seen.backfilled, 20);
  EXPECT_GT(seen.reservations, 100);
  EXPECT_GT(seen.reserved_waits, 20);
}
