// Machine snapshots in the scheduler actor (actors/scheduler/scheduler_machines.cpp;
// issue 18, rules 1 and 2): identical machines whose GPUs are named by PCI
// address are both placed onto; a real UUID two machines report is set aside
// on both, and each machine actor is told why; a bad GPU never hides the
// machine's labels. Deterministic: CAF's test coordinator, no sleeping.

#include "actor_fixture.hpp"

#include <set>
#include <vector>

#include <caf/event_based_actor.hpp>

#include "actors/scheduler/scheduler_actor.hpp"
#include "store/store.hpp"
#include "snapshot_fixtures.hpp"

using namespace astraeus;
using astraeus::test::fixture_machine;

namespace {

v1::RunSpec one_gpu(const std::string& name) {
  v1::RunSpec s;
  s.set_name(name);
  s.set_image("busybox");
  s.add_command("true");
  s.set_gpus_per_worker(1);
  s.set_workers(1);
  return s;
}

/// What a stand-in machine actor was told by the scheduler.
struct notes_log {
  std::vector<v1::SchedulerNotes> notes;
};

caf::behavior notes_recorder(caf::event_based_actor*, std::shared_ptr<notes_log> log) {
  return {
    [](atom::assign, v1::WorkerOrders&) {},
    [log](v1::SchedulerNotes& n) { log->notes.push_back(std::move(n)); },
  };
}

class SchedulerMachines : public test::actor_test {
protected:
  SchedulerMachines() {
    auto s = Store::open(dir.path() + "/controller");
    if (!s)
      ADD_FAILURE() << render_error(s.error());
    else
      db = std::shared_ptr<Store>{std::move(*s)};
    scheduler_config sc;
    sc.store = db;
    sched_actor = spawn(scheduler, std::move(sc));
    run();
  }

  std::shared_ptr<notes_log> attach(const std::string& machine) {
    auto log = std::make_shared<notes_log>();
    auto rec = spawn(notes_recorder, log);
    (*self)->send(sched_actor, atom::attach_v, machine, caf::actor_cast<machine_actor>(rec));
    run();
    return log;
  }

  void snapshot(v1::SchedulerMachine m) {
    (*self)->send(sched_actor, std::move(m));
    run();
  }

  v1::Run submit(v1::RunSpec spec) {
    return ask<v1::Run>(sched_actor, atom::submit_v, std::move(spec));
  }

  test::temp_dir dir;
  std::shared_ptr<Store> db;
  scheduler_actor sched_actor;
};

} // namespace

TEST_F(SchedulerMachines, TwoIdenticalMachinesWithPciAddressIdsAreBothPlacedOnto) {
  const std::vector<std::string> ids{"0000:01:00.0"};
  auto a = attach("gpu-a");
  auto b = attach("gpu-b");
  snapshot(fixture_machine("gpu-a", ids));
  snapshot(fixture_machine("gpu-b", ids));
  auto first = submit(one_gpu("first"));
  auto second = submit(one_gpu("second"));
  ASSERT_EQ(first.state(), "Placed") << first.ShortDebugString();
  ASSERT_EQ(second.state(), "Placed") << second.ShortDebugString();
  std::set<std::string> machines{first.workers(0).machine(), second.workers(0).machine()};
  EXPECT_EQ(machines, (std::set<std::string>{"gpu-a", "gpu-b"}));
  EXPECT_EQ(first.workers(0).gpu_ids(0), "0000:01:00.0");
  EXPECT_EQ(second.workers(0).gpu_ids(0), "0000:01:00.0");
  // Nothing was set aside, so no machine was told anything.
  EXPECT_TRUE(a->notes.empty());
  EXPECT_TRUE(b->notes.empty());
}

TEST_F(SchedulerMachines, ASharedUuidIsSetAsideOnBothAndTheirOtherGpusStay) {
  const std::string dup = "GPU-5f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b";
  auto a = attach("gpu-a");
  auto b = attach("gpu-b");
  snapshot(fixture_machine("gpu-a", {dup, "GPU-aaaa"}));
  auto down = fixture_machine("gpu-b", {"GPU-bbbb", dup});
  snapshot(down);
  ASSERT_FALSE(a->notes.empty());
  ASSERT_FALSE(b->notes.empty());
  ASSERT_EQ(a->notes.back().set_aside_size(), 1);
  EXPECT_EQ(a->notes.back().set_aside(0).id(), dup);
  EXPECT_NE(a->notes.back().set_aside(0).reason().find("gpu-b"), std::string::npos);
  ASSERT_EQ(b->notes.back().set_aside_size(), 1);
  EXPECT_NE(b->notes.back().set_aside(0).reason().find("gpu-a"), std::string::npos);
  // Each machine's other GPU is placed onto; the shared one never.
  auto one = submit(one_gpu("one"));
  auto two = submit(one_gpu("two"));
  auto three = submit(one_gpu("three"));
  ASSERT_EQ(one.state(), "Placed");
  ASSERT_EQ(two.state(), "Placed");
  EXPECT_EQ(three.state(), "Waiting");
  std::set<std::string> used{one.workers(0).gpu_ids(0), two.workers(0).gpu_ids(0)};
  EXPECT_EQ(used, (std::set<std::string>{"GPU-aaaa", "GPU-bbbb"}));
  // gpu-b stops reporting it: gpu-a may use it again and is told so.
  snapshot(fixture_machine("gpu-b", {"GPU-bbbb"}));
  EXPECT_EQ(a->notes.back().set_aside_size(), 0);
  EXPECT_EQ(ask<v1::Run>(sched_actor, atom::get_v, std::string{"three"}).state(), "Placed");
}

// Fourth new-user trial: gpu-b went Down and gpu-a's GPUs stayed set aside
// until gpu-b was removed. A Down machine reports nothing; back Up, the
// conflict is back.
TEST_F(SchedulerMachines, AMachineThatIsDownNoLongerClaimsItsGpus) {
  const std::string dup = "GPU-5f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b";
  auto a = attach("gpu-a");
  attach("gpu-b");
  snapshot(fixture_machine("gpu-a", {dup}));
  snapshot(fixture_machine("gpu-b", {dup}));
  ASSERT_EQ(a->notes.back().set_aside_size(), 1);
  EXPECT_EQ(submit(one_gpu("one")).state(), "Waiting");
  auto gone = fixture_machine("gpu-b", {dup});
  gone.set_down(true);
  gone.set_schedulable(false);
  snapshot(gone);
  EXPECT_EQ(a->notes.back().set_aside_size(), 0);
  auto one = ask<v1::Run>(sched_actor, atom::get_v, std::string{"one"});
  ASSERT_EQ(one.state(), "Placed") << one.ShortDebugString();
  EXPECT_EQ(one.workers(0).machine(), "gpu-a");
  snapshot(fixture_machine("gpu-b", {dup}));
  ASSERT_EQ(a->notes.back().set_aside_size(), 1) << "back Up, it claims the GPU again";
}

TEST_F(SchedulerMachines, ABadGpuListNeverHidesTheMachinesLabels) {
  // A GPU with unknown health used to drop the whole snapshot, labels too.
  auto m = fixture_machine("gpu-a", {"0000:01:00.0", "0000:02:00.0"});
  (*m.mutable_labels())["probe"] = "yes";
  m.mutable_gpus(1)->set_health("Sparkly");
  auto log = attach("gpu-a");
  snapshot(m);
  auto spec = one_gpu("probe-run");
  (*spec.mutable_labels())["probe"] = "yes";
  auto r = submit(spec);
  ASSERT_EQ(r.state(), "Placed") << r.ShortDebugString();
  EXPECT_EQ(r.workers(0).gpu_ids(0), "0000:01:00.0");
  ASSERT_EQ(log->notes.size(), 1u);
  EXPECT_EQ(log->notes[0].set_aside(0).id(), "0000:02:00.0");
}

// issue 22: a run that asks for RDMA waits for machines with an RDMA port up,
// and says so; once one has, it is placed there. The worker carries its GPU
// ids, and what its agent reports of its cores, NUMA nodes and RDMA devices.
TEST_F(SchedulerMachines, ARunAskingForRdmaWaitsForAnRdmaPortUp) {
  attach("gpu-a");
  snapshot(fixture_machine("gpu-a", {"GPU-aaaa"}));
  auto spec = one_gpu("ib");
  spec.set_rdma(true);
  auto waiting = submit(spec);
  ASSERT_EQ(waiting.state(), "Waiting") << waiting.ShortDebugString();
  EXPECT_NE(waiting.waiting_reason().find("waiting: needs RDMA; no machine"), std::string::npos)
    << waiting.waiting_reason();
  EXPECT_NE(waiting.waiting_reason().find("has an RDMA port up"), std::string::npos)
    << waiting.waiting_reason();
  // A run without the ask is placed on the same machine meanwhile.
  EXPECT_EQ(submit(one_gpu("plain")).state(), "Placed");
  ask<v1::Run>(sched_actor, atom::remove_v, std::string{"plain"});
  // Its GPU is free once its agent no longer holds its worker (issue 23).
  v1::WorkerStatuses none;
  none.set_machine("gpu-a");
  (*self)->send(sched_actor, none);
  run();
  auto up = fixture_machine("gpu-a", {"GPU-aaaa"});
  up.set_rdma_up(true);
  snapshot(up);
  auto placed = ask<v1::Run>(sched_actor, atom::get_v, std::string{"ib"});
  ASSERT_EQ(placed.state(), "Placed") << placed.ShortDebugString();
  ASSERT_EQ(placed.workers_size(), 1);
  const auto& w = placed.workers(0);
  // Kept once, as gpu_ids: for_display gives them the seed's name too.
  EXPECT_EQ(w.assigned_gpu_ids_size(), 0);
  EXPECT_EQ(w.gpu_ids(0), "GPU-aaaa");
  v1::WorkerStatuses held;
  held.set_machine("gpu-a");
  auto* s = held.add_workers();
  s->set_worker(w.name());
  s->set_run("ib");
  s->set_state("Running");
  s->set_pid(42);
  s->set_cpus("0-15");
  s->set_mems("0");
  s->add_rdma_devices("/dev/infiniband/uverbs0");
  s->add_rdma_devices("/dev/infiniband/rdma_cm");
  (*self)->send(sched_actor, std::move(held));
  run();
  auto running = ask<v1::Run>(sched_actor, atom::get_v, std::string{"ib"});
  ASSERT_EQ(running.workers_size(), 1);
  EXPECT_EQ(running.workers(0).cpus(), "0-15");
  EXPECT_EQ(running.workers(0).mems(), "0");
  ASSERT_EQ(running.workers(0).rdma_devices_size(), 2);
  EXPECT_EQ(running.workers(0).rdma_devices(1), "/dev/infiniband/rdma_cm");
}

TEST_F(SchedulerMachines, ACpuRunAskingForRdmaNamesRdmaInItsWait) {
  auto m = fixture_machine("cpu-a", {});
  m.set_logical_cpus(64);
  m.set_memory_bytes(64ull << 30);
  snapshot(m);
  v1::RunSpec spec;
  spec.set_name("ib-cpu");
  spec.set_image("busybox");
  spec.add_command("true");
  spec.set_cpus_per_worker(4);
  spec.set_workers(1);
  spec.set_rdma(true);
  auto r = submit(spec);
  ASSERT_EQ(r.state(), "Waiting") << r.ShortDebugString();
  EXPECT_NE(r.waiting_reason().find("waiting: needs RDMA; no machine"), std::string::npos)
    << r.waiting_reason();
}

// A machine's labels are kept packed (issue 14: one allocation per machine):
// they answer as the map they came from did, keys that prefix one another
// and empty values included.
TEST(SchedulerMachineFacts, PackedLabelsAnswerAsTheirMapDid) {
  scheduler_state::machine_facts f;
  f.set_labels(std::map<std::string, std::string>{{"pool", "h100"},
                                                  {"pool2", ""},
                                                  {accepting_label, "true"},
                                                  {topology_label::nvlink_domain, "nvl-7"}});
  EXPECT_EQ(f.label("pool"), "h100");
  EXPECT_EQ(f.label("pool2"), "");
  EXPECT_EQ(f.label(topology_label::nvlink_domain), "nvl-7");
  EXPECT_FALSE(f.label("poo"));
  EXPECT_FALSE(f.label("rack"));
  EXPECT_TRUE(f.has_labels({{"pool", "h100"}, {"pool2", ""}}));
  EXPECT_FALSE(f.has_labels({{"pool", "h10"}}));
  EXPECT_FALSE(f.has_labels({{"pool", "h100"}, {accepting_label, "false"}}));
  EXPECT_TRUE(f.has_labels({{"pool", "h100"}, {accepting_label, "false"}}, accepting_label));
  // Any bytes read back, a NUL in a key or value included (nothing hangs
  // or splits there).
  f.set_labels(std::map<std::string, std::string>{{std::string("a\0b", 3), "x"},
                                                  {"rack", std::string("r\0", 2)},
                                                  {"pool", "l4"}});
  EXPECT_EQ(f.label(std::string("a\0b", 3)), "x");
  EXPECT_FALSE(f.label("a"));
  EXPECT_EQ(f.label("rack"), std::string_view("r\0", 2));
  EXPECT_EQ(f.label("pool"), "l4");
  f.set_labels(std::map<std::string, std::string>{});
  EXPECT_FALSE(f.label("pool"));
  EXPECT_TRUE(f.has_labels({}));
}
