// Waiting reasons that name the blocker (issue 13, item 5): a machine that
// would take the worker but is cordoned, in Maintenance, Down, under
// pressure or has GPUs fenced is named (three at most, then "and N more");
// a run that cannot fit anywhere in the cluster as it is says so at once.

#include "actors/scheduler/placement.hpp"

#include <string>

#include <gtest/gtest.h>

#include "test/unit/actors/scheduler/placement_test_support.hpp"

using namespace astraeus;
using namespace astraeus::placement_test;

namespace {

const label_map none{};

machine_spec state(machine_spec m, const std::string& why) {
  m.schedulable = false;
  m.not_schedulable = why;
  return m;
}

} // namespace

TEST(PlacementReasons, NameTheMachineThatWouldFitAndWhyItTakesNoWork) {
  placement_index idx;
  auto m = add(idx, dgx("gpu-01", none));
  ASSERT_FALSE(idx.set_schedulable(m, false, "is cordoned"));
  auto one = single("one", 1, none);
  auto res = idx.place(one);
  EXPECT_EQ(why(res), "waiting: needs 1 GPU; gpu-01 has 8 free but is cordoned");
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::none_schedulable);
  for (const char* words : {"is in Maintenance", "is Down", "is under memory pressure",
                            "is under disk pressure", "is draining"}) {
    ASSERT_FALSE(idx.update_machine(m, state(dgx("gpu-01", none), words)));
    EXPECT_EQ(why(idx.place(one)), std::string{"waiting: needs 1 GPU; gpu-01 has 8 free but "} +
                                       words);
  }
  // Taking work again: it places, and nothing is named any more.
  ASSERT_FALSE(idx.set_schedulable(m, true));
  EXPECT_TRUE(placed(idx.place(one)));
  EXPECT_EQ(idx.check_invariants(), "");
}

TEST(PlacementReasons, NameFencedGpusThatWouldMakeRoom) {
  placement_index idx;
  add(idx, dgx("gpu-01", none));
  ASSERT_FALSE(idx.set_gpu_health("gpu-01-g0", gpu_health::faulty));
  ASSERT_FALSE(idx.set_gpu_health("gpu-01-g1", gpu_health::foreign));
  EXPECT_EQ(why(idx.place(single("eight", 8, none))),
            "waiting: needs 8 GPUs on one machine; best machine has 6; gpu-01 has 6 free, 1 GPU "
            "fenced and 1 GPU held outside Astraeus");
  // Cleared, the fault no longer blocks.
  ASSERT_FALSE(idx.set_gpu_health("gpu-01-g0", gpu_health::healthy));
  ASSERT_FALSE(idx.set_gpu_health("gpu-01-g1", gpu_health::healthy));
  EXPECT_TRUE(placed(idx.place(single("eight", 8, none))));
}

TEST(PlacementReasons, BusyMachinesAndABlockedOneWithRoom) {
  placement_index idx;
  auto busy = add(idx, dgx("gpu-01"));
  hold(idx, busy, bits({0, 1, 2, 3, 4, 5, 6, 7}));
  add(idx, state(dgx("gpu-02"), "is in Maintenance"));
  // Another pool's cordoned machine is no blocker of this one.
  add(idx, state(dgx("gpu-03", {{"pool", "a100"}}), "is cordoned"));
  EXPECT_EQ(why(idx.place(single("four", 4))),
            "waiting: needs 4 GPUs on one machine in pool h100; best machine has 0; gpu-02 has "
            "8 free but is in Maintenance");
}

TEST(PlacementReasons, NameAtMostThreeMachinesThenHowManyMore) {
  placement_index idx;
  for (int i = 1; i <= 6; ++i)
    add(idx, state(dgx("gpu-0" + std::to_string(i), none), "is Down"));
  EXPECT_EQ(why(idx.place(single("one", 1, none))),
            "waiting: needs 1 GPU; gpu-01 has 8 free but is Down, gpu-02 has 8 free but is "
            "Down, gpu-03 has 8 free but is Down and 3 more");
  // A removed machine is never named.
  ASSERT_FALSE(idx.remove_machine(*idx.find_machine("gpu-01")));
  ASSERT_FALSE(idx.remove_machine(*idx.find_machine("gpu-02")));
  ASSERT_FALSE(idx.remove_machine(*idx.find_machine("gpu-03")));
  EXPECT_EQ(why(idx.place(single("one", 1, none))),
            "waiting: needs 1 GPU; gpu-04 has 8 free but is Down, gpu-05 has 8 free but is "
            "Down, gpu-06 has 8 free but is Down");
  EXPECT_EQ(idx.check_invariants(), "");
}

TEST(PlacementReasons, CannotFitAnywhereNowSaysSoAtOnce) {
  placement_index idx;
  auto res = idx.place(single("one", 1, none));
  EXPECT_EQ(why(res), "cannot fit anywhere now: the cluster has no machines");
  machine_spec cpu;
  cpu.name = "cpu-01";
  add(idx, cpu);
  res = idx.place(single("one", 1, none));
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::never_fits);
  EXPECT_EQ(why(res), "cannot fit anywhere now: no machine has a GPU");
  add(idx, dgx("gpu-01"));
  add(idx, dgx("gpu-02", {{"pool", "a100"}}));
  EXPECT_EQ(why(idx.place(single("big", 9, none))),
            "cannot fit anywhere now: a worker needs 9 GPUs on one machine; machines have at "
            "most 8");
  EXPECT_EQ(why(idx.place(single("b", 1, {{"pool", "b200"}}))),
            "cannot fit anywhere now: no machine in pool b200 (machines are in pools a100, "
            "h100)");
  // Even when the machines that could take it are cordoned, too large is
  // said first: uncordoning would not help.
  ASSERT_FALSE(idx.set_schedulable(*idx.find_machine("gpu-01"), false, "is cordoned"));
  EXPECT_EQ(why(idx.place(single("big", 9))),
            "cannot fit anywhere now: a worker needs 9 GPUs on one machine; machines in pool "
            "h100 have at most 8");
}

// A check pinned to a machine that was removed says that machine is gone,
// not that the cluster has none.
TEST(PlacementReasons, ARunPinnedToAMachineThatIsGoneNamesIt) {
  placement_index idx;
  add(idx, dgx("dgx-02"));
  auto res = idx.place(single("check", 8, {{"astraeus.io/machine", "dgx-01"}}));
  EXPECT_EQ(why(res), "cannot fit anywhere now: machine dgx-01 is not in the cluster");
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::no_machine);
}

// Issue 21: an Accepting machine takes only its checks (every other run
// requires astraeus.io/accepting=false); a run that waits for it names it
// with its acceptance, as a machine that matches but takes no new work.
TEST(PlacementReasons, AnAcceptingMachineIsNamedWithItsAcceptance) {
  placement_index idx;
  auto accepting = dgx("gpu-03", {{"pool", "h100"}, {"astraeus.io/accepting", "true"}});
  accepting.not_schedulable = "is Accepting (acceptance val-20261006-7f3a2c runs there)";
  auto m = add(idx, accepting);
  auto user = single("train", 1, {{"pool", "h100"}, {"astraeus.io/accepting", "false"}});
  auto res = idx.place(user);
  EXPECT_EQ(why(res), "waiting: needs 1 GPU in pool h100; gpu-03 is Accepting (acceptance "
                      "val-20261006-7f3a2c runs there)");
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::none_schedulable);
  // A check (no accepting requirement) still goes there.
  EXPECT_TRUE(placed(idx.place(single("check", 8, {{"pool", "h100"}}))));
  // Another pool's Accepting machine is no blocker of this one.
  auto other = dgx("gpu-09", {{"pool", "a100"}, {"astraeus.io/accepting", "true"}});
  other.not_schedulable = "is Accepting (until it passes acceptance)";
  add(idx, other);
  EXPECT_EQ(why(idx.place(user)), "waiting: needs 1 GPU in pool h100; gpu-03 is Accepting "
                                  "(acceptance val-20261006-7f3a2c runs there)");
  // Accepted: it takes the run, and nothing is named any more.
  auto done = dgx("gpu-03", {{"pool", "h100"}, {"astraeus.io/accepting", "false"}});
  ASSERT_FALSE(idx.update_machine(m, done));
  EXPECT_TRUE(placed(idx.place(user)));
  EXPECT_EQ(idx.check_invariants(), "");
}

// GPUs a process Astraeus did not start holds are not fenced (no fault to
// clear): the reason says they are held outside Astraeus (seeds/gpus.md,
// "Used outside Astraeus").
TEST(PlacementReasons, GpusHeldOutsideAstraeusAreNotCalledFenced) {
  placement_index idx;
  add(idx, dgx("gpu-01", none));
  for (int i = 0; i < 6; ++i)
    ASSERT_FALSE(idx.set_gpu_health("gpu-01-g" + std::to_string(i), gpu_health::foreign));
  EXPECT_EQ(why(idx.place(single("eight", 8, none))),
            "waiting: needs 8 GPUs on one machine; best machine has 2; gpu-01 has 2 free and 6 "
            "GPUs held outside Astraeus");
  ASSERT_FALSE(idx.set_gpu_health("gpu-01-g0", gpu_health::faulty));
  ASSERT_FALSE(idx.set_gpu_health("gpu-01-g1", gpu_health::faulty));
  EXPECT_EQ(why(idx.place(single("eight", 8, none))),
            "waiting: needs 8 GPUs on one machine; best machine has 2; gpu-01 has 2 free, 2 "
            "GPUs fenced and 4 GPUs held outside Astraeus");
}

// Third new-user trial: a gang of 2 workers of 2 GPUs beside a machine with 2
// free and 6 held outside Astraeus was told "within one site; best site has
// room for 1", with no site labelled and the held GPUs unnamed.
TEST(PlacementReasons, AGangNamesTheGpusHeldOutsideAstraeusThatCostItRoom) {
  placement_index idx;
  add(idx, dgx("dgx-01", none));
  for (int i = 0; i < 6; ++i)
    ASSERT_FALSE(idx.set_gpu_health("dgx-01-g" + std::to_string(i), gpu_health::foreign));
  EXPECT_EQ(why(idx.place(gang("g4", 2, 2, none))),
            "waiting: needs 2 workers of 2 GPUs each (4 GPUs); the machines have room for 1 "
            "worker; dgx-01 has 2 free and 6 GPUs held outside Astraeus");
  // With sites labelled, the reason speaks of them.
  add(idx, dgx("dgx-02", {{"topology.astraeus.io/site", "west"}}));
  for (int i = 0; i < 7; ++i)
    ASSERT_FALSE(idx.set_gpu_health("dgx-02-g" + std::to_string(i), gpu_health::faulty));
  EXPECT_EQ(why(idx.place(gang("g4", 2, 2, none))),
            "waiting: needs 2 workers of 2 GPUs each (4 GPUs) within one site; best site has "
            "room for 1; dgx-01 has 2 free and 6 GPUs held outside Astraeus, dgx-02 has 1 free "
            "and 7 GPUs fenced");
}

// The trial's cluster: dgx-01 cordoned (the scheduler sees a machine only
// its cordon keeps from work as one that takes checks only) and dgx-02
// Accepting. A user's run names both, never "the cluster has no machines".
TEST(PlacementReasons, MachinesThatTakeNoUserWorkAreNamedNotAnEmptyCluster) {
  placement_index idx;
  const label_map checks_only{{"astraeus.io/accepting", "true"}};
  auto cordoned = dgx("dgx-01", checks_only);
  cordoned.not_schedulable = "is cordoned";
  add(idx, cordoned);
  auto accepting = dgx("dgx-02", checks_only);
  accepting.not_schedulable = "is Accepting (acceptance val-20261203-000b19 runs there)";
  add(idx, accepting);
  auto res = idx.place(single("g3", 3, {{"astraeus.io/accepting", "false"}}));
  EXPECT_EQ(why(res), "waiting: needs 3 GPUs; dgx-01 has 8 free but is cordoned, dgx-02 is Accepting "
                      "(acceptance val-20261203-000b19 runs there)");
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::none_schedulable);
}

// A new user's trial: the dev cluster's own machine (no GPUs, takes user
// runs) beside a cordoned 8-GPU machine. A 1-GPU run waits for the cordon,
// and says so; it said "cannot fit anywhere now: no machine has a GPU".
TEST(PlacementReasons, ACordonedGpuMachineBesideOneWithoutGpusIsNamed) {
  placement_index idx;
  add(idx, dgx("vm", {{"astraeus.io/accepting", "false"}}, 0));
  auto cordoned = dgx("dgx-01", {{"astraeus.io/accepting", "true"}});
  cordoned.not_schedulable = "is cordoned";
  add(idx, cordoned);
  auto res = idx.place(single("g1", 1, {{"astraeus.io/accepting", "false"}}));
  EXPECT_EQ(why(res), "waiting: needs 1 GPU; dgx-01 has 8 free but is cordoned");
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::none_schedulable);
  // One it could not take even uncordoned is not named, but its GPUs are
  // counted: "machines have at most 8", not "no machine has a GPU".
  auto big = idx.place(single("g16", 16, {{"astraeus.io/accepting", "false"}}));
  EXPECT_EQ(std::get<waiting_reason>(big).code, waiting_code::never_fits);
  EXPECT_EQ(why(big), "cannot fit anywhere now: a worker needs 16 GPUs on one machine; "
                      "machines have at most 8");
  // Without it, the cluster has no GPU for the run at all.
  placement_index alone;
  add(alone, dgx("vm", {{"astraeus.io/accepting", "false"}}, 0));
  EXPECT_EQ(why(alone.place(single("g1", 1, {{"astraeus.io/accepting", "false"}}))),
            "cannot fit anywhere now: no machine has a GPU");
}

// Issue 22: a GPU worker's cores and memory are placed with its GPUs. One
// asking for more than the largest machine has cannot fit anywhere now; one
// whose GPUs are free only where its cores or memory are not waits, naming
// the machine that has the GPUs and what it is short of.
TEST(PlacementReasons, AGpuWorkerAskingMoreMemoryOrCoresThanAnyMachineCannotFitAnywhere) {
  placement_index idx;
  add(idx, sized(dgx("gpu-01"), 64, 512));
  add(idx, sized(dgx("gpu-02"), 128, 256));
  auto res = idx.place(asking(single("mem", 1), 8, 1024));
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::never_fits);
  EXPECT_EQ(why(res), "cannot fit anywhere now: a worker asks for 1024 GiB of memory; the "
                      "largest machine in pool h100 has 512 GiB");
  res = idx.place(asking(gang("cores", 2, 1), 130));
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::never_fits);
  EXPECT_EQ(why(res), "cannot fit anywhere now: a worker asks for 130 CPU cores; the largest "
                      "machine in pool h100 has 128");
  // A machine whose size is unknown may have any: it is not ruled out.
  add(idx, dgx("gpu-03"));
  EXPECT_TRUE(placed(idx.place(asking(single("mem", 1), 8, 1024))));
  EXPECT_EQ(idx.check_invariants(), "");
}

// A cordoned machine large enough is no reason to give up: the run waits,
// naming it (eighth trial: "cannot fit anywhere now: ... the largest machine
// has 23.5 GiB" beside cordoned 2 TiB machines). The scheduler sees a
// machine only its cordon keeps from work as one that takes checks only.
TEST(PlacementReasons, ALargerMachineOnlyItsCordonKeepsOutIsNamedNotCannotFitAnywhere) {
  const label_map user{{"astraeus.io/accepting", "false"}};
  placement_index idx;
  add(idx, sized(dgx("vm", user, 0), 2, 24));
  auto cordoned = sized(dgx("dgx-01", {{"astraeus.io/accepting", "true"}}), 224, 2048);
  cordoned.not_schedulable = "is cordoned";
  add(idx, cordoned);
  auto res = idx.place(asking(single("mem", 1, user), 1, 200));
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::none_schedulable) << why(res);
  EXPECT_EQ(why(res), "waiting: needs 1 GPU; dgx-01 has 8 free but is cordoned");
  res = idx.place(asking(single("cores", 1, user), 64));
  EXPECT_EQ(why(res), "waiting: needs 1 GPU; dgx-01 has 8 free but is cordoned");
  // Larger than it too: it cannot fit anywhere.
  res = idx.place(asking(single("huge", 1, user), 1, 4096));
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::never_fits);
  EXPECT_EQ(why(res), "cannot fit anywhere now: a worker asks for 4096 GiB of memory; the "
                      "largest machine has 24 GiB");
}

TEST(PlacementReasons, AGpuWorkerWaitsNamingTheMachineShortOfCoresOrMemory) {
  placement_index idx;
  auto m = add(idx, sized(dgx("gpu-01", none), 64, 1024));
  // CPU-only workers use 48 cores and 600 GiB there.
  ASSERT_FALSE(idx.set_outside_use(m, 48000, 600ull << 30));
  auto r = asking(single("train", 2, none), 64, 512);
  auto res = idx.place(r);
  EXPECT_EQ(std::get<waiting_reason>(res).code, waiting_code::not_enough_cores_or_memory);
  EXPECT_EQ(why(res), "waiting: no machine has 2 free GPUs with 64 free cores and 512 GiB free "
                      "memory; gpu-01 has the GPUs but only 16 free cores and 424 GiB free "
                      "memory");
  // Only the cores short.
  EXPECT_EQ(why(idx.place(asking(single("train", 2, none), 32))),
            "waiting: no machine has 2 free GPUs with 32 free cores; gpu-01 has the GPUs but "
            "only 16 free cores");
  // Only the memory short (cores fit).
  EXPECT_EQ(why(idx.place(asking(single("train", 1, none), 1, 500))),
            "waiting: no machine has 1 free GPU with 1 free core and 500 GiB free memory; "
            "gpu-01 has the GPUs but only 424 GiB free memory");
  // A gang: each worker needs the cores.
  EXPECT_EQ(why(idx.place(asking(gang("pair", 2, 1, none), 32))),
            "waiting: no machines have room for 2 workers of 1 free GPU with 32 free cores each; "
            "gpu-01 has the GPUs but only 16 free cores");
  // What fits the 16 cores left places, and holds them.
  auto p = placed(idx.place(asking(single("small", 2, none), 16, 100)));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->cpu_millis_per_worker, 16000u);
  ASSERT_TRUE(idx.commit(*p));
  EXPECT_EQ(idx.free_cpu_millis(m), 0u);
  EXPECT_EQ(idx.free_memory_bytes(m), 324ull << 30);
  // The CPU-only workers end: the cores are free again, but for those held.
  ASSERT_FALSE(idx.set_outside_use(m, 0, 0));
  EXPECT_EQ(idx.free_cpu_millis(m), 48000u);
  EXPECT_TRUE(placed(idx.place(asking(single("train", 2, none), 48, 512))));
  EXPECT_EQ(idx.check_invariants(), "");
}
