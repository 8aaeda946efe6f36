// The scheduler actor: runs submitted, placed onto concrete GPUs from machine
// snapshots, deleted, completed, and resumed after a restart. Deterministic:
// CAF's test coordinator, no sleeping.

#include "actor_fixture.hpp"

#include <set>
#include <vector>

#include <caf/event_based_actor.hpp>

#include "actors/scheduler/scheduler_actor.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

/// A machine with `n` GPUs named "<name>-gpu<i>": the first half on NUMA
/// node 0, the rest on node 1; `health[i]` when given.
v1::SchedulerMachine machine_of(const std::string& name, int n,
                                std::vector<std::string> health = {}) {
  v1::SchedulerMachine m;
  m.set_name(name);
  m.set_schedulable(true);
  (*m.mutable_labels())["pool"] = "h100";
  for (int i = 0; i < n; ++i) {
    auto* g = m.add_gpus();
    g->set_id(name + "-gpu" + std::to_string(i));
    g->set_numa_node(i < n / 2 ? 0 : 1);
    g->set_health(i < static_cast<int>(health.size()) ? health[i] : "Healthy");
  }
  return m;
}

v1::RunSpec spec_of(const std::string& name, uint32_t gpus, uint32_t workers = 1) {
  v1::RunSpec s;
  s.set_name(name);
  s.set_image("ghcr.io/acme/train:1");
  s.add_command("train");
  s.set_gpus_per_worker(gpus);
  s.set_workers(workers);
  return s;
}

std::set<std::string> gpus_of(const v1::Run& run) {
  std::set<std::string> out;
  for (const auto& w : run.workers())
    out.insert(w.gpu_ids().begin(), w.gpu_ids().end());
  return out;
}

class SchedulerActor : public test::actor_test {
protected:
  SchedulerActor() {
    auto s = Store::open(dir.path() + "/controller");
    if (!s)
      ADD_FAILURE() << render_error(s.error());
    else
      db = std::shared_ptr<Store>{std::move(*s)};
  }

  /// A scheduler on `db`, with `clock` as its wall clock.
  scheduler_actor spawn_scheduler(std::shared_ptr<const wall_clock> clock = real_wall_clock()) {
    scheduler_config sc;
    sc.store = db;
    sc.clock = std::move(clock);
    auto s = spawn(scheduler, std::move(sc));
    run();
    return s;
  }

  void snapshot(const scheduler_actor& s, v1::SchedulerMachine m) {
    (*self)->send(s, std::move(m));
    run();
  }

  v1::Run submit(const scheduler_actor& s, v1::RunSpec spec) {
    return ask<v1::Run>(s, atom::submit_v, std::move(spec));
  }

  v1::Run get(const scheduler_actor& s, const std::string& name) {
    return ask<v1::Run>(s, atom::get_v, name);
  }

  /// Whether a run is stored under key `name` (issue 13: "<workspace>/<run>").
  bool in_store(const std::string& name) {
    v1::Run out;
    auto found = db->get(family::runs, name, out);
    EXPECT_TRUE(found) << render_error(found.error());
    return found && *found;
  }

  v1::Run stored(const std::string& name) {
    v1::Run out;
    auto found = db->get(family::runs, name, out);
    EXPECT_TRUE(found && *found) << "run " << name << " is not stored";
    return out;
  }

  test::temp_dir dir;
  std::shared_ptr<Store> db;
};

} // namespace

TEST_F(SchedulerActor, PlacesARunOnConcreteGpusWithNumaNodes) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 8));
  auto spec = spec_of("train", 4, 2);
  spec.set_pool("h100");
  auto run = submit(s, spec);
  ASSERT_EQ(run.state(), "Placed") << run.ShortDebugString();
  ASSERT_EQ(run.workers_size(), 2);
  EXPECT_EQ(run.leader_machine(), "gpu-01");
  EXPECT_GT(run.placed_unix_ms(), 0);
  std::set<int> numa;
  for (int r = 0; r < 2; ++r) {
    const auto& w = run.workers(r);
    EXPECT_EQ(w.rank(), static_cast<uint32_t>(r));
    EXPECT_EQ(w.group(), "default");
    EXPECT_EQ(w.machine(), "gpu-01");
    EXPECT_EQ(w.state(), "Placed");
    ASSERT_EQ(w.gpu_ids_size(), 4);
    for (const auto& id : w.gpu_ids()) {
      EXPECT_EQ(id.rfind("gpu-01-gpu", 0), 0u) << id;
      // Each worker's GPUs are on its NUMA node.
      int i = std::stoi(id.substr(10));
      EXPECT_EQ(i < 4 ? 0 : 1, w.numa_node()) << id;
    }
    numa.insert(w.numa_node());
  }
  EXPECT_EQ(numa, (std::set<int>{0, 1}));
  EXPECT_EQ(gpus_of(run).size(), 8u);
  // Stored as answered, and shown the same by get and list.
  EXPECT_EQ(stored("train").ShortDebugString(), run.ShortDebugString());
  EXPECT_EQ(get(s, "train").ShortDebugString(), run.ShortDebugString());
  auto list = ask<v1::RunList>(s, atom::runs_v);
  ASSERT_EQ(list.runs_size(), 1);
  EXPECT_EQ(list.runs(0).spec().name(), "train");
}

TEST_F(SchedulerActor, ARunThatDoesNotFitWaitsUntilTheFirstIsDeleted) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 8));
  auto a = submit(s, spec_of("big", 6));
  ASSERT_EQ(a.state(), "Placed");
  auto b = submit(s, spec_of("next", 4));
  EXPECT_EQ(b.state(), "Waiting");
  EXPECT_EQ(b.workers_size(), 0);
  EXPECT_EQ(b.waiting_reason(),
            "waiting: needs 4 GPUs on one machine; best machine has 2");
  EXPECT_EQ(stored("next").state(), "Waiting");
  auto gone = ask<v1::Run>(s, atom::remove_v, std::string{"big"});
  EXPECT_EQ(gone.state(), "Stopped");
  EXPECT_FALSE(in_store("big"));
  auto err = ask_error<v1::Run>(s, atom::get_v, std::string{"big"});
  EXPECT_EQ(err, ec::invalid_request);
  EXPECT_EQ(render_error(err), "no run named big");
  b = get(s, "next");
  EXPECT_EQ(b.state(), "Placed");
  EXPECT_TRUE(b.waiting_reason().empty());
  EXPECT_EQ(gpus_of(b).size(), 4u);
  EXPECT_EQ(stored("next").state(), "Placed");
}

// A long queue: each submission tries only what may have changed (nothing
// freed: the new run), yet every waiting run shows and stores its reason, and
// once GPUs are freed the queue moves in order and the reasons say so.
TEST_F(SchedulerActor, ALongQueueKeepsItsOrderAndReasonsThroughSubmissionsAndFrees) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 8));
  ASSERT_EQ(submit(s, spec_of("big", 6)).state(), "Placed");
  for (int i = 0; i < 40; ++i) {
    auto r = submit(s, spec_of("q" + std::to_string(i), 4));
    ASSERT_EQ(r.state(), "Waiting") << r.ShortDebugString();
    EXPECT_EQ(r.waiting_reason(), "waiting: needs 4 GPUs on one machine; best machine has 2");
  }
  // A 2-GPU run still fits beside them (nothing reserves without time limits).
  ASSERT_EQ(submit(s, spec_of("small", 2)).state(), "Placed");
  auto late = submit(s, spec_of("late", 4));
  EXPECT_EQ(late.waiting_reason(), "waiting: needs 4 GPUs on one machine; best machine has 0");
  EXPECT_EQ(stored("q39").waiting_reason(),
            "waiting: needs 4 GPUs on one machine; best machine has 2")
    << "not tried again while nothing is freed: the words of its last try";
  // small ends: every waiting run is tried again and says so.
  ask<v1::Run>(s, atom::remove_v, std::string{"small"});
  EXPECT_EQ(get(s, "q0").state(), "Waiting");
  EXPECT_EQ(get(s, "late").waiting_reason(),
            "waiting: needs 4 GPUs on one machine; best machine has 2");
  EXPECT_EQ(stored("q39").waiting_reason(),
            "waiting: needs 4 GPUs on one machine; best machine has 2");
  // big ends: the first two in the queue start, in order.
  ask<v1::Run>(s, atom::remove_v, std::string{"big"});
  EXPECT_EQ(get(s, "q0").state(), "Placed");
  EXPECT_EQ(get(s, "q1").state(), "Placed");
  EXPECT_EQ(get(s, "q2").state(), "Waiting");
  EXPECT_EQ(get(s, "q2").waiting_reason(),
            "waiting: needs 4 GPUs on one machine; best machine has 0");
  EXPECT_EQ(stored("q1").state(), "Placed");
  EXPECT_EQ(stored("late").waiting_reason(),
            "waiting: needs 4 GPUs on one machine; best machine has 0");
}

TEST_F(SchedulerActor, AFaultyGpuIsNeverAssigned) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 8, {"Faulty"}));
  auto a = submit(s, spec_of("seven", 7));
  ASSERT_EQ(a.state(), "Placed");
  EXPECT_EQ(gpus_of(a).count("gpu-01-gpu0"), 0u);
  auto b = submit(s, spec_of("one", 1));
  EXPECT_EQ(b.state(), "Waiting");
  // A later snapshot fences GPUs the first run holds: once it is deleted,
  // they are not given out either.
  snapshot(s, machine_of("gpu-01", 8, {"Faulty", "Faulty", "Faulty", "Faulty",
                                       "Faulty", "Faulty", "Faulty", "Healthy"}));
  EXPECT_EQ(get(s, "one").state(), "Waiting");
  ask<v1::Run>(s, atom::remove_v, std::string{"seven"});
  b = get(s, "one");
  ASSERT_EQ(b.state(), "Placed");
  EXPECT_EQ(gpus_of(b), (std::set<std::string>{"gpu-01-gpu7"}));
}

TEST_F(SchedulerActor, HealthyOnlyWaitsWhenOnlyAtRiskGpusAreFree) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 2, {"Healthy", "AtRisk"}));
  auto a = submit(s, spec_of("first", 1));
  ASSERT_EQ(a.state(), "Placed");
  EXPECT_EQ(gpus_of(a), (std::set<std::string>{"gpu-01-gpu0"}));
  auto strict = spec_of("strict", 1);
  strict.set_healthy_only(true);
  auto b = submit(s, strict);
  EXPECT_EQ(b.state(), "Waiting");
  EXPECT_NE(b.waiting_reason().find("healthy"), std::string::npos) << b.waiting_reason();
  // A run that accepts AtRisk GPUs takes the last one.
  auto c = submit(s, spec_of("lenient", 1));
  ASSERT_EQ(c.state(), "Placed");
  EXPECT_EQ(gpus_of(c), (std::set<std::string>{"gpu-01-gpu1"}));
  EXPECT_EQ(get(s, "strict").state(), "Waiting");
}

TEST_F(SchedulerActor, RefusesADuplicateNameAndABadSpec) {
  auto s = spawn_scheduler();
  submit(s, spec_of("train", 1));
  auto err = ask_error<v1::Run>(s, atom::submit_v, spec_of("train", 2));
  EXPECT_EQ(err, ec::invalid_request);
  EXPECT_EQ(render_error(err), "a run named train already exists");
  auto bad = spec_of("bad", 65);
  err = ask_error<v1::Run>(s, atom::submit_v, bad);
  EXPECT_EQ(err, ec::invalid_request);
  EXPECT_NE(render_error(err).find("gpus"), std::string::npos) << render_error(err);
  EXPECT_EQ(ask<v1::RunList>(s, atom::runs_v).runs_size(), 1);
}

TEST_F(SchedulerActor, CompletionFreesTheGpusForTheNextRun) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 8));
  submit(s, spec_of("a", 8));
  EXPECT_EQ(submit(s, spec_of("b", 8)).state(), "Waiting");
  (*self)->send(s, atom::complete_v, std::string{"a"});
  run();
  EXPECT_EQ(get(s, "a").state(), "Stopped");
  EXPECT_EQ(stored("a").state(), "Stopped");
  EXPECT_EQ(get(s, "b").state(), "Placed");
}

TEST_F(SchedulerActor, ARestartedSchedulerResumesEveryRun) {
  std::set<std::string> held;
  {
    auto s = spawn_scheduler();
    snapshot(s, machine_of("gpu-01", 8));
    auto a = submit(s, spec_of("placed", 6));
    ASSERT_EQ(a.state(), "Placed");
    held = gpus_of(a);
    EXPECT_EQ(submit(s, spec_of("waits", 4)).state(), "Waiting");
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    run();
  }
  auto s = spawn_scheduler();
  auto a = get(s, "placed");
  EXPECT_EQ(a.state(), "Placed");
  EXPECT_EQ(gpus_of(a), held);
  EXPECT_EQ(get(s, "waits").state(), "Waiting");
  // The machine reports again: the placed run keeps its GPUs; a new run
  // cannot take them.
  snapshot(s, machine_of("gpu-01", 8));
  EXPECT_EQ(gpus_of(get(s, "placed")), held);
  EXPECT_EQ(get(s, "waits").state(), "Waiting");
  auto c = submit(s, spec_of("small", 2));
  ASSERT_EQ(c.state(), "Placed");
  for (const auto& id : gpus_of(c))
    EXPECT_EQ(held.count(id), 0u) << id;
  EXPECT_EQ(submit(s, spec_of("more", 1)).state(), "Waiting");
  // Completing the restored run frees its GPUs for the waiting one.
  (*self)->send(s, atom::complete_v, std::string{"placed"});
  run();
  EXPECT_EQ(get(s, "waits").state(), "Placed");
}

TEST_F(SchedulerActor, AMachineThatStopsTakingWorkKeepsItsRunsGpus) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 8));
  auto a = submit(s, spec_of("a", 4));
  ASSERT_EQ(a.state(), "Placed");
  auto down = machine_of("gpu-01", 8);
  down.set_schedulable(false);
  down.set_not_schedulable("is cordoned");
  snapshot(s, down);
  EXPECT_EQ(get(s, "a").ShortDebugString(), a.ShortDebugString());
  auto b = submit(s, spec_of("b", 1));
  EXPECT_EQ(b.state(), "Waiting");
  // The reason names the machine and why it takes no work (issue 13).
  EXPECT_EQ(b.waiting_reason(), "waiting: needs 1 GPU; gpu-01 has 4 free but is cordoned");
  down.set_down(true);
  snapshot(s, down);
  EXPECT_EQ(get(s, "b").waiting_reason(), "waiting: needs 1 GPU; gpu-01 has 4 free but is Down");
  down.set_down(false);
  snapshot(s, down);
  snapshot(s, machine_of("gpu-01", 8));
  b = get(s, "b");
  ASSERT_EQ(b.state(), "Placed");
  for (const auto& id : gpus_of(b))
    EXPECT_EQ(gpus_of(a).count(id), 0u) << id;
}

TEST_F(SchedulerActor, ARestartHoldsEachGpuOfARunAsSoonAsItsMachineReports) {
  std::set<std::string> held;
  {
    auto s = spawn_scheduler();
    snapshot(s, machine_of("gpu-01", 4));
    snapshot(s, machine_of("gpu-02", 4));
    auto a = submit(s, spec_of("wide", 4, 2));
    ASSERT_EQ(a.state(), "Placed") << a.ShortDebugString();
    held = gpus_of(a);
    ASSERT_EQ(held.size(), 8u);
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    run();
  }
  auto s = spawn_scheduler();
  // Only one of its machines is back: its GPUs are held for the run anyway.
  snapshot(s, machine_of("gpu-01", 4));
  EXPECT_EQ(submit(s, spec_of("new", 1)).state(), "Waiting");
  snapshot(s, machine_of("gpu-02", 4));
  EXPECT_EQ(get(s, "new").state(), "Waiting");
  EXPECT_EQ(gpus_of(get(s, "wide")), held);
  (*self)->send(s, atom::complete_v, std::string{"wide"});
  run();
  EXPECT_EQ(get(s, "wide").state(), "Stopped");
  EXPECT_EQ(get(s, "new").state(), "Placed");
}

// --- Assignments, machines going Down, arrays, MASTER_ADDR ---------------

namespace {

/// Stands in for a machine actor: keeps every worker set it is sent.
struct orders_log {
  std::vector<v1::WorkerOrders> sets;
  const v1::WorkerOrders& last() const { return sets.back(); }
};

caf::behavior orders_recorder(caf::event_based_actor*, std::shared_ptr<orders_log> log) {
  return {
    [log](atom::assign, v1::WorkerOrders& orders) { log->sets.push_back(std::move(orders)); },
  };
}

v1::WorkerStatuses holding(const std::string& machine,
                           std::vector<std::string> workers, uint64_t generation = 0) {
  v1::WorkerStatuses out;
  out.set_machine(machine);
  out.set_generation(generation);
  for (auto& w : workers) {
    auto* s = out.add_workers();
    s->set_worker(w);
    s->set_state("Assigned");
  }
  return out;
}

} // namespace

class SchedulerAssignments : public SchedulerActor {
protected:
  std::shared_ptr<orders_log> attach(const scheduler_actor& s, const std::string& machine) {
    auto log = std::make_shared<orders_log>();
    auto rec = spawn(orders_recorder, log);
    (*self)->send(s, atom::attach_v, machine, caf::actor_cast<machine_actor>(rec));
    run();
    return log;
  }

  void tell(const scheduler_actor& s, v1::WorkerStatuses st) {
    (*self)->send(s, std::move(st));
    run();
  }
};

TEST_F(SchedulerAssignments, AMachineGetsItsWorkersOnceTheyAreStoredAndTheAgentAcknowledges) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  ASSERT_EQ(log->sets.size(), 1u) << "an attached machine learns its (empty) set";
  EXPECT_EQ(log->last().workers_size(), 0);
  auto m = machine_of("gpu-01", 8);
  m.set_address("10.0.0.11");
  snapshot(s, m);
  auto run = submit(s, spec_of("train", 4, 2));
  ASSERT_EQ(run.state(), "Placed");
  ASSERT_EQ(log->sets.size(), 2u);
  const auto& set = log->last();
  EXPECT_EQ(set.machine(), "gpu-01");
  EXPECT_GT(set.generation(), log->sets[0].generation());
  ASSERT_EQ(set.workers_size(), 2);
  for (int r = 0; r < 2; ++r) {
    const auto& o = set.workers(r);
    EXPECT_EQ(o.worker(), "train-" + std::to_string(r));
    EXPECT_EQ(o.run(), "train");
    EXPECT_EQ(o.rank(), static_cast<uint32_t>(r));
    EXPECT_EQ(o.world_size(), 2u);
    EXPECT_EQ(o.master_addr(), "10.0.0.11");
    EXPECT_EQ(o.master_port(), 29500u);
    EXPECT_EQ(o.array_index(), -1);
    EXPECT_EQ(o.gpu_ids_size(), 4);
    EXPECT_EQ(o.spec().name(), "train");
  }
  // The set went out after the run was on disk.
  EXPECT_EQ(stored("train").state(), "Placed");
  EXPECT_EQ(run.master_addr(), "10.0.0.11");
  EXPECT_FALSE(run.workers(0).acknowledged());
  // The agent holds them: Assigned, stored.
  tell(s, holding("gpu-01", {"train-0", "train-1"}, set.generation()));
  auto now = get(s, "train");
  for (const auto& w : now.workers()) {
    EXPECT_TRUE(w.acknowledged()) << w.name();
    EXPECT_EQ(w.state(), "Assigned") << w.name();
  }
  EXPECT_TRUE(stored("train").workers(1).acknowledged());
  // Deleting the run hands the machine a set without them.
  ask<v1::Run>(s, atom::remove_v, std::string{"train"});
  EXPECT_EQ(log->last().workers_size(), 0);
}

TEST_F(SchedulerAssignments, MasterAddrIsTheLeaderMachinesAddress) {
  auto s = spawn_scheduler();
  for (auto [name, addr] : {std::pair{"gpu-01", "10.0.0.11"}, std::pair{"gpu-02", "10.0.0.12"}}) {
    auto m = machine_of(name, 8);
    m.set_address(addr);
    snapshot(s, m);
  }
  auto run = submit(s, spec_of("gang", 8, 2));
  ASSERT_EQ(run.state(), "Placed");
  ASSERT_EQ(run.workers_size(), 2);
  EXPECT_EQ(run.leader_machine(), run.workers(0).machine());
  EXPECT_EQ(run.master_addr(), run.leader_machine() == "gpu-01" ? "10.0.0.11" : "10.0.0.12");
  EXPECT_NE(run.workers(0).machine(), run.workers(1).machine());
}

// inside-a-worker.md: MASTER_ADDR and ASTRAEUS_LEADER_ADDRESS are "the
// address of the machine the leader runs on". Each copy of an array has its
// own leader (its rank 0): a helper's audit found every copy sent copy 0's.
TEST_F(SchedulerAssignments, EachCopyOfAnArrayRendezvousesOnItsOwnLeadersMachine) {
  auto s = spawn_scheduler();
  std::map<std::string, std::shared_ptr<orders_log>> logs;
  for (auto [name, addr] : {std::pair{"gpu-01", "10.0.0.11"}, std::pair{"gpu-02", "10.0.0.12"}}) {
    logs[name] = attach(s, name);
    auto m = machine_of(name, 8);
    m.set_address(addr);
    snapshot(s, m);
  }
  auto spec = spec_of("sweep", 8);
  spec.set_array_size(2);
  ASSERT_EQ(submit(s, spec).state(), "Placed");
  const std::map<std::string, std::string> address{{"gpu-01", "10.0.0.11"},
                                                   {"gpu-02", "10.0.0.12"}};
  std::set<int32_t> copies;
  for (const auto& [name, log] : logs) {
    ASSERT_EQ(log->last().workers_size(), 1) << name;
    const auto& o = log->last().workers(0);
    copies.insert(o.array_index());
    EXPECT_EQ(o.master_addr(), address.at(name)) << o.worker() << " on " << name;
    EXPECT_EQ(o.leader_machine(), name) << o.worker();
  }
  EXPECT_EQ(copies, (std::set<int32_t>{0, 1})) << "one copy on each machine";
}

TEST_F(SchedulerAssignments, OrdersOfAWorkspaceRunCarryItsNamespaceAndDefaultOnesNone) {
  // The cluster actor sets RunSpec.namespace from the workspace
  // (apply_workspace); the agent makes full names of it.
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 8));
  auto in_ws = spec_of("whoami", 1, 2);
  in_ws.set_workspace("vision");
  in_ws.set_namespace_("ws-7f3c2a");
  ASSERT_EQ(submit(s, in_ws).state(), "Placed");
  auto plain = spec_of("plain", 1);
  plain.set_workspace("default");
  ASSERT_EQ(submit(s, plain).state(), "Placed");
  std::map<std::string, std::string> ns_of;
  for (const auto& o : log->last().workers())
    ns_of[o.worker()] = o.namespace_();
  // Issue 13: a workspace's workers go by their full name (one per
  // machine, whatever other workspace has a run of that name).
  EXPECT_EQ(ns_of, (std::map<std::string, std::string>{{"ws-7f3c2a.whoami-0", "ws-7f3c2a"},
                                                       {"ws-7f3c2a.whoami-1", "ws-7f3c2a"},
                                                       {"plain-0", ""}}));
  for (const auto& o : log->last().workers())
    EXPECT_EQ(o.run(), o.namespace_().empty() ? "plain" : "whoami") << "the run's name";
  // Kept with the run: a restarted scheduler hands out the same names.
  caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  run();
  auto s2 = spawn_scheduler();
  auto log2 = attach(s2, "gpu-01");
  ASSERT_EQ(log2->last().workers_size(), 3);
  for (const auto& o : log2->last().workers())
    EXPECT_EQ(o.namespace_(), o.run() == "whoami" ? "ws-7f3c2a" : "") << o.worker();
}

TEST_F(SchedulerAssignments, OrdersCarryTheMachinesNvlinkDomain) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  auto m = machine_of("gpu-01", 8);
  (*m.mutable_labels())["topology.astraeus.io/nvlink-domain"] = "c0ffee/7";
  snapshot(s, m);
  ASSERT_EQ(submit(s, spec_of("nvl", 4)).state(), "Placed");
  ASSERT_EQ(log->last().workers_size(), 1);
  EXPECT_EQ(log->last().workers(0).nvlink_domain(), "c0ffee/7");
  auto log2 = attach(s, "gpu-02");
  snapshot(s, machine_of("gpu-02", 8));
  auto spec = spec_of("plain", 8);
  ASSERT_EQ(submit(s, spec).state(), "Placed");
  ASSERT_EQ(log2->last().workers_size(), 1);
  EXPECT_EQ(log2->last().workers(0).nvlink_domain(), "") << "gpu-02 is in no domain";
}

// gpus.md: NCCL_IB_DISABLE "when a multi-machine run was placed over
// Ethernet". A copy on machines of one InfiniBand fabric is not; one on two
// fabrics, or with a machine without RDMA up, is: its orders say so.
TEST_F(SchedulerAssignments, OrdersSayWhenACopySpansMachinesSharingNoFabric) {
  auto s = spawn_scheduler();
  std::map<std::string, std::shared_ptr<orders_log>> logs;
  // Two machines of each pool: one fabric; two fabrics; one without RDMA
  // up; one whose fabric is not known (no subnet reported: matches any).
  auto machine = [&](const std::string& name, const std::string& pool, const std::string& f,
                     bool up) {
    logs[name] = attach(s, name);
    auto m = machine_of(name, 8);
    (*m.mutable_labels())["pool"] = pool;
    m.set_rdma_up(up);
    if (!f.empty())
      (*m.mutable_labels())["topology.astraeus.io/fabric"] = f;
    snapshot(s, m);
  };
  machine("a1", "one", "fe80:0000:0000:00aa", true);
  machine("a2", "one", "fe80:0000:0000:00aa", true);
  machine("b1", "two", "fe80:0000:0000:00aa", true);
  machine("b2", "two", "fe80:0000:0000:00bb", true);
  machine("c1", "down", "fe80:0000:0000:00aa", true);
  machine("c2", "down", "fe80:0000:0000:00aa", false);
  machine("d1", "unknown", "fe80:0000:0000:00aa", true);
  machine("d2", "unknown", "", true);
  const std::pair<const char*, bool> cases[] = {
    {"one", false}, {"two", true}, {"down", true}, {"unknown", false}};
  for (const auto& [pool, ethernet] : cases) {
    auto spec = spec_of(std::string{"gang-"} + pool, 8, 2);
    spec.set_pool(pool);
    ASSERT_EQ(submit(s, spec).state(), "Placed") << pool;
  }
  for (const auto& [pool, ethernet] : cases)
    for (const char* n : {"1", "2"}) {
      std::string name = std::string{pool == std::string{"one"} ? "a"
                                     : pool == std::string{"two"} ? "b"
                                     : pool == std::string{"down"} ? "c" : "d"} + n;
      const auto& orders = logs[name]->last();
      ASSERT_EQ(orders.workers_size(), 1) << name;
      EXPECT_EQ(orders.workers(0).machine_count(), 2u) << name;
      EXPECT_EQ(orders.workers(0).over_ethernet(), ethernet) << pool << " on " << name;
    }
}

// Issue 12: a GPU worker placed on a machine with a degraded port is given
// it; its order leaves it out of NCCL_IB_HCA unless it is kept (the
// machine's last port); a run that sets NCCL_IB_HCA and a worker placed
// before the list came get none.
TEST_F(SchedulerAssignments, OrdersLeaveOutTheDegradedPortsOfTheirMachine) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-06");
  snapshot(s, machine_of("gpu-06", 8));
  ASSERT_EQ(submit(s, spec_of("before", 1)).state(), "Placed");
  v1::DegradedIbPortList list;
  auto* m = list.add_machines();
  m->set_machine("gpu-06");
  auto* slow = m->add_ports();
  slow->set_port("mlx5_5:1");
  slow->set_why("gpu-06 mlx5_5 trained at 200 Gb/s, its peers at 400 Gb/s");
  auto* last = m->add_ports();
  last->set_port("mlx5_7:1");
  last->set_why("gpu-06 mlx5_7 trained at 200 Gb/s, its peers at 400 Gb/s");
  last->set_kept(true);
  (*self)->send(s, list);
  run();
  auto train = submit(s, spec_of("train", 2));
  ASSERT_EQ(train.state(), "Placed");
  ASSERT_EQ(train.workers(0).degraded_ib_ports_size(), 2);
  EXPECT_EQ(train.workers(0).degraded_ib_ports(0).why(),
            "gpu-06 mlx5_5 trained at 200 Gb/s, its peers at 400 Gb/s");
  EXPECT_TRUE(train.workers(0).degraded_ib_ports(1).kept());
  EXPECT_EQ(stored("train").workers(0).degraded_ib_ports_size(), 2) << "kept with the run";
  auto own = spec_of("own", 1);
  (*own.mutable_env())["NCCL_IB_HCA"] = "=mlx5_0:1";
  ASSERT_EQ(submit(s, own).state(), "Placed");
  std::map<std::string, std::vector<std::string>> excluded;
  for (const auto& o : log->last().workers())
    excluded[o.worker()].assign(o.excluded_ib_ports().begin(), o.excluded_ib_ports().end());
  EXPECT_EQ(excluded, (std::map<std::string, std::vector<std::string>>{
                        {"before-0", {}}, {"train-0", {"mlx5_5:1"}}, {"own-0", {}}}));
  // A new list replaces the last: the port was reseated.
  (*self)->send(s, v1::DegradedIbPortList{});
  run();
  ASSERT_EQ(submit(s, spec_of("after", 1)).state(), "Placed");
  EXPECT_EQ(get(s, "after").workers(0).degraded_ib_ports_size(), 0);
}

TEST_F(SchedulerAssignments, WorkersOfADownMachineAreDownAndKeepTheirGpusUntilItIsBack) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 8));
  auto a = submit(s, spec_of("a", 4));
  tell(s, holding("gpu-01", {"a-0"}, log->last().generation()));
  auto down = machine_of("gpu-01", 8);
  down.set_schedulable(false);
  down.set_down(true);
  snapshot(s, down);
  auto seen = get(s, "a");
  EXPECT_EQ(seen.workers(0).state(), "Down");
  EXPECT_EQ(gpus_of(seen), gpus_of(a));
  EXPECT_EQ(stored("a").workers(0).state(), "Down");
  // Back: the agent still holds it.
  snapshot(s, machine_of("gpu-01", 8));
  EXPECT_EQ(get(s, "a").workers(0).state(), "Down") << "until the agent says";
  tell(s, holding("gpu-01", {"a-0"}, log->last().generation()));
  EXPECT_EQ(get(s, "a").workers(0).state(), "Assigned");
  EXPECT_EQ(get(s, "a").state(), "Placed");
}

TEST_F(SchedulerAssignments, AWorkerTheMachineNoLongerHoldsFailsItsRunAndFreesItsGpus) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 8));
  submit(s, spec_of("a", 8));
  EXPECT_EQ(submit(s, spec_of("b", 8)).state(), "Waiting");
  tell(s, holding("gpu-01", {"a-0"}, log->last().generation()));
  auto down = machine_of("gpu-01", 8);
  down.set_schedulable(false);
  down.set_down(true);
  snapshot(s, down);
  snapshot(s, machine_of("gpu-01", 8));
  // It came back with an empty data folder: a-0 is gone.
  tell(s, holding("gpu-01", {}));
  auto a = get(s, "a");
  EXPECT_EQ(a.state(), "Failed");
  EXPECT_NE(a.waiting_reason().find("worker a-0 was lost"), std::string::npos)
    << a.waiting_reason();
  EXPECT_EQ(stored("a").state(), "Failed");
  EXPECT_EQ(get(s, "b").state(), "Placed") << "a's GPUs are free again";
  ASSERT_FALSE(log->sets.empty());
  ASSERT_EQ(log->last().workers_size(), 1);
  EXPECT_EQ(log->last().workers(0).worker(), "b-0");
}

TEST_F(SchedulerAssignments, AnArrayPlacesEachCopyOnItsOwn) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 2));
  auto spec = spec_of("sweep", 1);
  spec.set_array_size(3);
  auto sweep = submit(s, spec);
  EXPECT_EQ(sweep.state(), "Placed");
  EXPECT_EQ(sweep.copies_placed(), 2u);
  ASSERT_EQ(sweep.workers_size(), 2);
  std::set<std::string> names;
  for (const auto& w : sweep.workers())
    names.insert(w.name());
  EXPECT_EQ(names, (std::set<std::string>{"sweep[0]-0", "sweep[1]-0"}));
  EXPECT_EQ(sweep.waiting_reason().rfind("1 of 3 copies waiting: ", 0), 0u)
    << sweep.waiting_reason();
  // A restart keeps the placed copies and queues the third again.
  caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  run();
  auto s2 = spawn_scheduler();
  snapshot(s2, machine_of("gpu-01", 3));
  auto again = get(s2, "sweep");
  ASSERT_EQ(again.workers_size(), 3) << again.ShortDebugString();
  EXPECT_EQ(again.copies_placed(), 3u);
  EXPECT_EQ(again.waiting_reason(), "");
  EXPECT_EQ(gpus_of(again).size(), 3u);
}

TEST_F(SchedulerAssignments, ARestartedSchedulerHandsEachMachineItsWorkersAgain) {
  {
    auto s = spawn_scheduler();
    snapshot(s, machine_of("gpu-01", 8));
    submit(s, spec_of("a", 2));
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    run();
  }
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  ASSERT_EQ(log->sets.size(), 1u);
  ASSERT_EQ(log->last().workers_size(), 1);
  EXPECT_EQ(log->last().workers(0).worker(), "a-0");
}

TEST(SchedulerNames, QueueAndWorkerNames) {
  v1::RunSpec spec;
  spec.set_name("sweep");
  EXPECT_EQ(queue_names_of(spec), (std::vector<std::string>{"sweep"}));
  spec.set_array_size(2);
  EXPECT_EQ(queue_names_of(spec), (std::vector<std::string>{"sweep[0]", "sweep[1]"}));
  EXPECT_EQ(parse_queue_name("sweep[12]"), (std::pair<std::string, int32_t>{"sweep", 12}));
  EXPECT_EQ(parse_queue_name("train"), (std::pair<std::string, int32_t>{"train", -1}));
  EXPECT_EQ(parse_queue_name("odd[x]"), (std::pair<std::string, int32_t>{"odd[x]", -1}));
  EXPECT_EQ(worker_name("train", -1, 3), "train-3");
  EXPECT_EQ(worker_name("sweep", 2, 0), "sweep[2]-0");
}

// --- CPU-only runs ---------------------------------------------------------

namespace {

v1::SchedulerMachine cpu_machine(const std::string& name, uint32_t cpus, uint64_t mem_gib,
                                 int gpus = 0) {
  auto m = machine_of(name, gpus);
  m.set_logical_cpus(cpus);
  m.set_memory_bytes(mem_gib << 30);
  return m;
}

v1::RunSpec cpu_spec(const std::string& name, double cpus, uint64_t mem_mib,
                     uint32_t workers = 1) {
  auto s = spec_of(name, 0, workers);
  s.set_cpus_per_worker(cpus);
  s.set_memory_bytes_per_worker(mem_mib << 20);
  return s;
}

} // namespace

TEST_F(SchedulerActor, ACpuOnlyRunGoesWhereItsCoresAndMemoryFitAndSpreads) {
  auto s = spawn_scheduler();
  snapshot(s, cpu_machine("cpu-01", 4, 8));
  snapshot(s, cpu_machine("cpu-02", 8, 8));
  auto whoami = submit(s, cpu_spec("whoami", 1, 256));
  ASSERT_EQ(whoami.state(), "Placed") << whoami.ShortDebugString();
  ASSERT_EQ(whoami.workers_size(), 1);
  EXPECT_EQ(whoami.workers(0).machine(), "cpu-02") << "the most cores left";
  EXPECT_EQ(whoami.workers(0).gpu_ids_size(), 0);
  EXPECT_EQ(whoami.leader_machine(), "cpu-02");
  EXPECT_EQ(stored("whoami").state(), "Placed");
  // A gang of 3 x 3 cores: 7 left on cpu-02 and 4 on cpu-01 -> 2 + 1.
  auto gang = submit(s, cpu_spec("gang", 3, 1024, 3));
  ASSERT_EQ(gang.state(), "Placed") << gang.ShortDebugString();
  std::map<std::string, int> per;
  for (const auto& w : gang.workers())
    ++per[w.machine()];
  EXPECT_EQ(per, (std::map<std::string, int>{{"cpu-01", 1}, {"cpu-02", 2}}));
  // Nothing has 2 cores left now... cpu-01 has 1, cpu-02 has 1: it waits.
  auto big = submit(s, cpu_spec("big", 2, 256));
  EXPECT_EQ(big.state(), "Waiting");
  EXPECT_NE(big.waiting_reason().find("needs 1 CPU-only worker(s) of 2 core(s)"),
            std::string::npos)
    << big.waiting_reason();
  // Deleting the gang frees its cores.
  ask<v1::Run>(s, atom::remove_v, std::string{"gang"});
  EXPECT_EQ(get(s, "big").state(), "Placed");
}

// sbatch --nodes=N: each worker on a machine of its own, as Slurm
// allocates nodes; packed on the machine with most cores otherwise.
TEST_F(SchedulerActor, ACpuOnlyRunAskingOneWorkerPerMachineGetsMachinesOfItsOwn) {
  auto s = spawn_scheduler();
  snapshot(s, cpu_machine("cpu-01", 4, 8));
  snapshot(s, cpu_machine("cpu-02", 64, 8));
  auto spec = cpu_spec("nodes", 1, 64, 2);
  spec.set_one_worker_per_machine(true);
  auto nodes = submit(s, spec);
  ASSERT_EQ(nodes.state(), "Placed") << nodes.ShortDebugString();
  ASSERT_EQ(nodes.workers_size(), 2);
  EXPECT_NE(nodes.workers(0).machine(), nodes.workers(1).machine());
  auto three = cpu_spec("three", 1, 64, 3);
  three.set_one_worker_per_machine(true);
  auto waits = submit(s, three);
  EXPECT_EQ(waits.state(), "Waiting");
  EXPECT_NE(waits.waiting_reason().find("needs 3 CPU-only worker(s) of 1 core(s) and 64 MiB, one per "
                                        "machine, on any machine; only 2 fit now"),
            std::string::npos)
    << waits.waiting_reason();
}

TEST_F(SchedulerActor, ACpuOnlyRunWaitsForAMachineWithItsPoolAndSurvivesARestart) {
  {
    auto s = spawn_scheduler();
    auto spec = cpu_spec("batch", 1, 64);
    spec.set_pool("cpu");
    auto batch = submit(s, spec);
    EXPECT_EQ(batch.state(), "Waiting");
    EXPECT_EQ(batch.waiting_reason(), "waiting: no machine carrying pool=cpu takes new work");
    auto m = cpu_machine("cpu-01", 2, 4);
    (*m.mutable_labels())["pool"] = "cpu";
    snapshot(s, m);
    ASSERT_EQ(get(s, "batch").state(), "Placed");
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    run();
  }
  auto s = spawn_scheduler();
  auto again = get(s, "batch");
  EXPECT_EQ(again.state(), "Placed");
  auto m = cpu_machine("cpu-01", 2, 4);
  (*m.mutable_labels())["pool"] = "cpu";
  snapshot(s, m);
  // Its core still counts: a 2-core run does not fit the 2-core machine.
  auto two = cpu_spec("two", 2, 64);
  two.set_pool("cpu");
  EXPECT_EQ(submit(s, two).state(), "Waiting");
  (*self)->send(s, atom::complete_v, std::string{"batch"});
  run();
  EXPECT_EQ(get(s, "batch").state(), "Stopped");
  EXPECT_EQ(get(s, "two").state(), "Placed");
}

// --- The placement rules, through the actor --------------------------------

TEST_F(SchedulerActor, TwoGpusOfAWorkerAreJoinedByNvlinkWhereThereIsAPair) {
  auto s = spawn_scheduler();
  auto m = machine_of("gpu-01", 8);
  // NVLink joins 1-2 and 5-6 only.
  for (auto [a, b] : {std::pair{1, 2}, std::pair{5, 6}}) {
    m.mutable_gpus(a)->add_nvlink_peers(static_cast<uint32_t>(b));
    m.mutable_gpus(b)->add_nvlink_peers(static_cast<uint32_t>(a));
  }
  snapshot(s, m);
  auto run = submit(s, spec_of("pair", 2));
  ASSERT_EQ(run.state(), "Placed");
  auto ids = gpus_of(run);
  EXPECT_TRUE(ids == (std::set<std::string>{"gpu-01-gpu1", "gpu-01-gpu2"})
              || ids == (std::set<std::string>{"gpu-01-gpu5", "gpu-01-gpu6"}))
    << run.ShortDebugString();
}

TEST_F(SchedulerActor, AGangNeverSpansSitesAndPrefersOneRack) {
  auto s = spawn_scheduler();
  auto at = [](const std::string& name, const std::string& site, const std::string& rack) {
    auto m = machine_of(name, 8);
    (*m.mutable_labels())[topology_label::site] = site;
    (*m.mutable_labels())[topology_label::rack] = rack;
    return m;
  };
  snapshot(s, at("ams-1", "ams", "r1"));
  snapshot(s, at("fra-1", "fra", "r9"));
  auto gang = submit(s, spec_of("gang", 8, 2));
  EXPECT_EQ(gang.state(), "Waiting") << "one free machine per site is not a gang";
  // A second machine in ams (another rack): placed there at once.
  snapshot(s, at("ams-2", "ams", "r2"));
  gang = get(s, "gang");
  ASSERT_EQ(gang.state(), "Placed") << gang.ShortDebugString();
  auto machines_of = [](const v1::Run& r) {
    std::set<std::string> out;
    for (const auto& w : r.workers())
      out.insert(w.machine());
    return out;
  };
  EXPECT_EQ(machines_of(gang), (std::set<std::string>{"ams-1", "ams-2"}));
  // With a third machine in rack r1, a new gang takes one rack.
  ask<v1::Run>(s, atom::remove_v, std::string{"gang"});
  snapshot(s, at("ams-3", "ams", "r1"));
  auto again = submit(s, spec_of("again", 8, 2));
  ASSERT_EQ(again.state(), "Placed");
  EXPECT_EQ(machines_of(again), (std::set<std::string>{"ams-1", "ams-3"})) << "one rack (r1) first";
}

TEST_F(SchedulerActor, AtRiskGpusOnlyWhenNoHealthyOnesFit) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 2, {"AtRisk", "Healthy"}));
  auto first = submit(s, spec_of("first", 1));
  EXPECT_EQ(gpus_of(first), (std::set<std::string>{"gpu-01-gpu1"})) << "the healthy one first";
  auto second = submit(s, spec_of("second", 1));
  EXPECT_EQ(gpus_of(second), (std::set<std::string>{"gpu-01-gpu0"}))
    << "AtRisk when nothing healthy is left";
}

TEST_F(SchedulerActor, ABigGangAtTheHeadIsNotStarvedBySmallRuns) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 8));
  auto small = spec_of("small", 4);
  small.set_time_limit_seconds(3600);
  ASSERT_EQ(submit(s, small).state(), "Placed");
  // The head run needs the whole machine: it waits with a reservation at
  // small's end (in an hour).
  auto big = spec_of("big", 8);
  EXPECT_EQ(submit(s, big).state(), "Waiting");
  // A run that would still hold GPUs then is not backfilled onto them...
  auto endless = spec_of("endless", 2);
  EXPECT_EQ(submit(s, endless).state(), "Waiting");
  // ...one that ends before the reservation is.
  auto quick = spec_of("quick", 2);
  quick.set_time_limit_seconds(600);
  EXPECT_EQ(submit(s, quick).state(), "Placed");
  (*self)->send(s, atom::complete_v, std::string{"small"});
  (*self)->send(s, atom::complete_v, std::string{"quick"});
  run();
  EXPECT_EQ(get(s, "big").state(), "Placed") << "the head goes first once the GPUs are free";
  EXPECT_EQ(get(s, "endless").state(), "Waiting");
}

// --- Workers' outcomes: a run completes, or fails and stops its gang --------

namespace {

v1::WorkerStatuses in_states(const std::string& machine,
                             std::vector<std::tuple<std::string, std::string, std::string>> ws) {
  v1::WorkerStatuses out;
  out.set_machine(machine);
  for (auto& [w, state, detail] : ws) {
    auto* s = out.add_workers();
    s->set_worker(w);
    s->set_state(state);
    s->set_detail(detail);
  }
  return out;
}

} // namespace

TEST_F(SchedulerAssignments, ARunIsRunningWhenAllItsWorkersRunAndStoppedWhenAllExitedZero) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 8));
  auto a = submit(s, spec_of("a", 2, 2));
  EXPECT_EQ(log->last().workers(0).machine_count(), 1u);
  tell(s, in_states("gpu-01", {{"a-0", "Running", ""}, {"a-1", "Assigned", ""}}));
  EXPECT_EQ(get(s, "a").state(), "Placed") << "one worker still starting";
  tell(s, in_states("gpu-01", {{"a-0", "Running", ""}, {"a-1", "Running", ""}}));
  EXPECT_EQ(get(s, "a").state(), "Running");
  tell(s, in_states("gpu-01", {{"a-0", "Exited", ""}, {"a-1", "Running", ""}}));
  EXPECT_EQ(get(s, "a").state(), "Running") << "rank 1 still runs";
  tell(s, in_states("gpu-01", {{"a-0", "Exited", ""}, {"a-1", "Exited", ""}}));
  auto done = get(s, "a");
  EXPECT_EQ(done.state(), "Stopped");
  EXPECT_EQ(done.waiting_reason(), "completed: every worker exited with code 0");
  EXPECT_EQ(stored("a").state(), "Stopped");
  EXPECT_EQ(log->last().workers_size(), 0) << "the machine lets them go";
  // Its GPUs are free again: another run takes all 8.
  EXPECT_EQ(submit(s, spec_of("b", 8)).state(), "Placed");
}

TEST_F(SchedulerAssignments, AFailedWorkerFailsItsRunAndItsGangIsStopped) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 8));
  submit(s, spec_of("g", 2, 2));
  tell(s, in_states("gpu-01", {{"g-0", "Running", ""}, {"g-1", "Running", ""}}));
  tell(s, in_states("gpu-01", {{"g-0", "Running", ""},
                               {"g-1", "OOMKilled",
                                "OOMKilled: the container exceeded its memory limit"}}));
  auto failed = get(s, "g");
  EXPECT_EQ(failed.state(), "Failed");
  EXPECT_EQ(failed.waiting_reason(),
            "worker g-1 OOMKilled: the container exceeded its memory limit");
  EXPECT_EQ(log->last().workers_size(), 0)
    << "the machine's set no longer holds g-0: its agent stops it";
}

TEST_F(SchedulerActor, ARunIsStoppedAtItsTimeLimitAndItsGpusGoToTheNext) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 8));
  auto a = spec_of("a", 8);
  a.set_time_limit_seconds(60);
  ASSERT_EQ(submit(s, a).state(), "Placed");
  EXPECT_EQ(submit(s, spec_of("b", 8)).state(), "Waiting");
  advance(std::chrono::seconds{59});
  EXPECT_EQ(get(s, "a").state(), "Placed");
  advance(std::chrono::seconds{2});
  auto done = get(s, "a");
  EXPECT_EQ(done.state(), "Stopped");
  EXPECT_EQ(done.waiting_reason(), "time limit of 1m reached");
  EXPECT_EQ(stored("a").state(), "Stopped");
  EXPECT_EQ(get(s, "b").state(), "Placed");
}

TEST_F(SchedulerActor, EachArrayCopyEndsAtItsOwnTimeLimit) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 1));
  auto spec = spec_of("sweep", 1);
  spec.set_array_size(2);
  spec.set_time_limit_seconds(10);
  auto sweep = submit(s, spec);
  EXPECT_EQ(sweep.copies_placed(), 1u);
  advance(std::chrono::seconds{11});
  sweep = get(s, "sweep");
  EXPECT_EQ(sweep.state(), "Placed") << "copy 1 took the GPU copy 0 left";
  EXPECT_EQ(sweep.copies_placed(), 2u);
  advance(std::chrono::seconds{11});
  sweep = get(s, "sweep");
  EXPECT_EQ(sweep.state(), "Stopped") << sweep.ShortDebugString();
  EXPECT_EQ(sweep.waiting_reason(), "every copy stopped: time limit of 10s reached");
  ASSERT_EQ(submit(s, spec_of("next", 1)).state(), "Placed") << "the GPU is free";
}

// --- Array copies that end, worker states kept as reported -----------------

// Fifth new-user trial: copies stopped at their time limit showed "Stopped,
// exit 0" though their agent reported them Cancelled (SIGTERM, 143); a whole
// run at its limit showed "Cancelled 143". The agent's words are kept.
TEST_F(SchedulerAssignments, ACopyStoppedAtItsTimeLimitKeepsHowItsAgentSaidItEnded) {
  auto s = spawn_scheduler();
  attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 2));
  auto spec = spec_of("atl", 1);
  spec.set_array_size(2);
  spec.set_time_limit_seconds(4);
  EXPECT_EQ(submit(s, spec).copies_placed(), 2u);
  tell(s, in_states("gpu-01", {{"atl[0]-0", "Running", ""}, {"atl[1]-0", "Running", ""}}));
  advance(std::chrono::seconds{5});
  auto atl = get(s, "atl");
  EXPECT_EQ(atl.state(), "Stopped") << atl.ShortDebugString();
  auto ended = in_states("gpu-01", {{"atl[0]-0", "Cancelled", "stopped"},
                                    {"atl[1]-0", "Cancelled", "stopped"}});
  for (auto& w : *ended.mutable_workers()) {
    w.set_run("atl");  // as the agent reports it (WorkerStatus.run)
    w.set_exit_code(143);
  }
  tell(s, ended);
  atl = get(s, "atl");
  for (const auto& w : atl.workers()) {
    EXPECT_EQ(w.state(), "Cancelled") << w.name();
    EXPECT_EQ(w.exit_code(), 143) << w.name();
    EXPECT_EQ(w.detail(), "stopped") << w.name();
  }
  EXPECT_EQ(atl.state(), "Stopped") << "the run's own end stays";
  EXPECT_EQ(stored("atl").workers(0).state(), "Cancelled");
}

TEST_F(SchedulerAssignments, AnArrayCopyThatExitedZeroFreesItsCoresAndLeavesItsMachine) {
  auto s = spawn_scheduler();
  auto log = attach(s, "cpu-01");
  snapshot(s, cpu_machine("cpu-01", 2, 8));
  auto spec = cpu_spec("arr", 1, 64);
  spec.set_array_size(3);
  auto arr = submit(s, spec);
  ASSERT_EQ(arr.copies_placed(), 2u) << arr.ShortDebugString();
  tell(s, in_states("cpu-01", {{"arr[0]-0", "Running", ""}, {"arr[1]-0", "Running", ""}}));
  EXPECT_EQ(get(s, "arr").state(), "Running");
  tell(s, in_states("cpu-01", {{"arr[0]-0", "Exited", ""}, {"arr[1]-0", "Running", ""}}));
  arr = get(s, "arr");
  EXPECT_EQ(arr.copies_placed(), 3u) << "copy 2 takes the core copy 0 gave back";
  EXPECT_EQ(arr.waiting_reason(), "");
  std::set<std::string> ordered;
  for (const auto& o : log->last().workers())
    ordered.insert(o.worker());
  EXPECT_EQ(ordered, (std::set<std::string>{"arr[1]-0", "arr[2]-0"}))
    << "copy 0 left the machine's set";
  // The agent still lists the ended copy for a while: it changes nothing.
  tell(s, in_states("cpu-01", {{"arr[0]-0", "Cancelled", ""}, {"arr[1]-0", "Running", ""},
                               {"arr[2]-0", "Running", ""}}));
  EXPECT_EQ(get(s, "arr").state(), "Running");
  EXPECT_EQ(submit(s, cpu_spec("other", 1, 64)).state(), "Waiting") << "both cores held";
  tell(s, in_states("cpu-01", {{"arr[1]-0", "Exited", ""}, {"arr[2]-0", "Exited", ""}}));
  arr = get(s, "arr");
  EXPECT_EQ(arr.state(), "Stopped") << arr.ShortDebugString();
  EXPECT_EQ(arr.waiting_reason(), "completed: every worker exited with code 0");
  for (const auto& w : arr.workers())
    EXPECT_EQ(w.state(), "Exited") << w.name();
  EXPECT_EQ(get(s, "other").state(), "Placed");
}

// Copies are independent, as Slurm's array tasks are: a failed copy ends
// alone and the copies after it still run (a fifth new-user trial: one
// failed copy stopped the whole sweep and left the rest unrun).
TEST_F(SchedulerAssignments, AnArrayCopyThatExitedZeroFreesItsGpuAndAFailedCopyEndsAlone) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 1));
  auto spec = spec_of("garr", 1);
  spec.set_array_size(3);
  EXPECT_EQ(submit(s, spec).copies_placed(), 1u);
  tell(s, in_states("gpu-01", {{"garr[0]-0", "Running", ""}}));
  tell(s, in_states("gpu-01", {{"garr[0]-0", "Exited", ""}}));
  auto garr = get(s, "garr");
  EXPECT_EQ(garr.copies_placed(), 2u) << "copy 1 holds the GPU copy 0 gave back";
  ASSERT_EQ(log->last().workers_size(), 1);
  EXPECT_EQ(log->last().workers(0).worker(), "garr[1]-0");
  tell(s, in_states("gpu-01", {{"garr[1]-0", "Running", ""}}));
  tell(s, in_states("gpu-01", {{"garr[1]-0", "Failed", "exited with code 3"}}));
  garr = get(s, "garr");
  EXPECT_NE(garr.state(), "Failed") << "copy 2 has yet to run";
  EXPECT_EQ(garr.copies_placed(), 3u) << "copy 2 takes the GPU copy 1 gave back";
  ASSERT_EQ(log->last().workers_size(), 1);
  EXPECT_EQ(log->last().workers(0).worker(), "garr[2]-0");
  ASSERT_EQ(garr.copy_ends_size(), 2) << garr.ShortDebugString();
  EXPECT_EQ(garr.copy_ends(0).copy(), 0);
  EXPECT_EQ(garr.copy_ends(0).state(), "Stopped");
  EXPECT_EQ(garr.copy_ends(1).copy(), 1);
  EXPECT_EQ(garr.copy_ends(1).state(), "Failed");
  EXPECT_EQ(garr.copy_ends(1).reason(), "worker garr[1]-0 Failed: exited with code 3");
  tell(s, in_states("gpu-01", {{"garr[2]-0", "Running", ""}}));
  tell(s, in_states("gpu-01", {{"garr[2]-0", "Exited", ""}}));
  garr = get(s, "garr");
  EXPECT_EQ(garr.state(), "Failed");
  EXPECT_EQ(garr.waiting_reason(),
            "1 of 3 copies failed: worker garr[1]-0 Failed: exited with code 3");
  EXPECT_EQ(stored("garr").copy_ends_size(), 3) << "kept over a restart";
  EXPECT_EQ(submit(s, spec_of("next", 1)).state(), "Placed") << "the GPU is free";
}

// A copy of several workers is a gang: one of its workers failing stops
// the others of that copy, not those of the other copies.
TEST_F(SchedulerAssignments, AFailedWorkerStopsItsOwnCopyOnly) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 4));
  auto spec = spec_of("mw", 1, 2);
  spec.set_array_size(2);
  EXPECT_EQ(submit(s, spec).copies_placed(), 2u);
  tell(s, in_states("gpu-01", {{"mw[0]-0", "Running", ""}, {"mw[0]-1", "Running", ""},
                               {"mw[1]-0", "Running", ""}, {"mw[1]-1", "Running", ""}}));
  EXPECT_EQ(get(s, "mw").state(), "Running");
  tell(s, in_states("gpu-01", {{"mw[0]-0", "Running", ""},
                               {"mw[0]-1", "Failed", "exited with code 3"},
                               {"mw[1]-0", "Running", ""}, {"mw[1]-1", "Running", ""}}));
  auto mw = get(s, "mw");
  EXPECT_EQ(mw.state(), "Running") << mw.ShortDebugString();
  std::map<std::string, std::string> states;
  for (const auto& w : mw.workers())
    states[w.name()] = w.state();
  EXPECT_EQ(states["mw[0]-0"], "Stopped") << "its copy's gang is stopped";
  EXPECT_EQ(states["mw[0]-1"], "Failed");
  EXPECT_EQ(states["mw[1]-0"], "Running");
  EXPECT_EQ(states["mw[1]-1"], "Running");
  std::set<std::string> sent;
  for (const auto& o : log->last().workers())
    sent.insert(o.worker());
  EXPECT_EQ(sent, (std::set<std::string>{"mw[1]-0", "mw[1]-1"}))
    << "the machine is told to stop copy 0's other worker";
  EXPECT_EQ(submit(s, spec_of("two", 1, 2)).state(), "Placed") << "copy 0's GPUs are free";
  tell(s, in_states("gpu-01", {{"mw[0]-0", "Cancelled", "stopped"},
                               {"mw[1]-0", "Exited", ""}, {"mw[1]-1", "Exited", ""}}));
  mw = get(s, "mw");
  EXPECT_EQ(mw.state(), "Failed");
  EXPECT_EQ(mw.waiting_reason(),
            "1 of 2 copies failed: worker mw[0]-1 Failed: exited with code 3");
}

// A copy whose worker its machine lost fails alone.
TEST_F(SchedulerAssignments, ALostWorkerFailsItsCopyOnly) {
  auto s = spawn_scheduler();
  attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 2));
  auto spec = spec_of("lst", 1);
  spec.set_array_size(2);
  EXPECT_EQ(submit(s, spec).copies_placed(), 2u);
  tell(s, in_states("gpu-01", {{"lst[0]-0", "Running", ""}, {"lst[1]-0", "Running", ""}}));
  tell(s, in_states("gpu-01", {{"lst[1]-0", "Running", ""}}));
  auto lst = get(s, "lst");
  EXPECT_EQ(lst.state(), "Running") << lst.ShortDebugString();
  ASSERT_EQ(lst.copy_ends_size(), 1);
  EXPECT_EQ(lst.copy_ends(0).reason(), "worker lst[0]-0 was lost: machine gpu-01 no longer "
                                       "holds it");
  tell(s, in_states("gpu-01", {{"lst[1]-0", "Exited", ""}}));
  lst = get(s, "lst");
  EXPECT_EQ(lst.state(), "Failed");
  EXPECT_EQ(lst.waiting_reason(), "1 of 2 copies failed: worker lst[0]-0 was lost: machine "
                                  "gpu-01 no longer holds it");
}

// Fifth new-user trial: a copy placed beside a running copy of its array,
// on GPUs another run's stopping worker gave back, was never sent to the
// agent ("agent has it: not yet" for good): the machine was marked only when
// the run first came to it.
TEST_F(SchedulerAssignments, ACopyPlacedBesideAnEarlierCopyIsSentToItsMachine) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 2));
  EXPECT_EQ(submit(s, spec_of("a3", 1)).state(), "Placed");
  tell(s, in_states("gpu-01", {{"a3-0", "Running", ""}}));
  auto spec = spec_of("arr3", 1);
  spec.set_array_size(2);
  EXPECT_EQ(submit(s, spec).copies_placed(), 1u);
  tell(s, in_states("gpu-01", {{"a3-0", "Running", ""}, {"arr3[0]-0", "Running", ""}}));
  ask<v1::Run>(s, atom::remove_v, std::string{"a3"});
  // a3-0 ends: its GPU goes to copy 1, beside copy 0.
  tell(s, in_states("gpu-01", {{"a3-0", "Cancelled", "stopped"}, {"arr3[0]-0", "Running", ""}}));
  tell(s, in_states("gpu-01", {{"arr3[0]-0", "Running", ""}}));
  EXPECT_EQ(get(s, "arr3").copies_placed(), 2u);
  std::set<std::string> sent;
  for (const auto& w : log->last().workers())
    sent.insert(w.worker());
  EXPECT_EQ(sent, (std::set<std::string>{"arr3[0]-0", "arr3[1]-0"}));
}

TEST_F(SchedulerAssignments, WorkersKeepTheStateTheirAgentReported) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 8));
  submit(s, spec_of("g", 1, 3));
  tell(s, in_states("gpu-01", {{"g-0", "Running", ""}, {"g-1", "Running", ""},
                               {"g-2", "Running", ""}}));
  tell(s, in_states("gpu-01", {{"g-0", "Cancelled", "stopped"},
                               {"g-1", "Failed", "exited with code 3"},
                               {"g-2", "Running", ""}}));
  auto g = get(s, "g");
  EXPECT_EQ(g.state(), "Failed");
  EXPECT_EQ(g.waiting_reason(), "worker g-1 Failed: exited with code 3")
    << "the worker that failed, not the one cancelled";
  std::map<std::string, std::string> states;
  for (const auto& w : g.workers())
    states[w.name()] = w.state();
  EXPECT_EQ(states, (std::map<std::string, std::string>{
                      {"g-0", "Cancelled"}, {"g-1", "Failed"}, {"g-2", "Stopping"}}))
    << "g-2 is stopped with its gang: Stopping until its agent reports it ended";
  // Its agent no longer lists it: nothing is left to stop.
  tell(s, in_states("gpu-01", {{"g-0", "Cancelled", "stopped"},
                               {"g-1", "Failed", "exited with code 3"}}));
  EXPECT_EQ(get(s, "g").workers(2).state(), "Stopped");
  // Deleted: a worker that exited keeps Exited, the other is Stopping
  // until its agent says how it ended (issue 23 item 6).
  submit(s, spec_of("d", 1, 2));
  tell(s, in_states("gpu-01", {{"d-0", "Running", ""}, {"d-1", "Running", ""}}));
  tell(s, in_states("gpu-01", {{"d-0", "Exited", ""}, {"d-1", "Running", ""}}));
  auto d = ask<v1::Run>(s, atom::remove_v, std::string{"d"});
  ASSERT_EQ(d.workers_size(), 2);
  EXPECT_EQ(d.workers(0).state(), "Exited");
  EXPECT_EQ(d.workers(1).state(), "Stopping");
}

TEST_F(SchedulerAssignments, OutputsOfAWorkerStoppedWithItsRunAreKept) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 8));
  submit(s, spec_of("g", 1, 2));
  tell(s, in_states("gpu-01", {{"g-0", "Running", ""}, {"g-1", "Running", ""}}));
  // g-1 fails: the run fails and g-0 is stopped by its agent...
  tell(s, in_states("gpu-01", {{"g-0", "Running", ""}, {"g-1", "Failed", "exited with code 3"}}));
  ASSERT_EQ(get(s, "g").state(), "Failed");
  // ...which reads what g-0 wrote to $ASTRAEUS_OUTPUTS once it has ended.
  auto late = in_states("gpu-01", {{"g-0", "Cancelled", "stopped"}});
  late.mutable_workers(0)->set_run("g");
  (*late.mutable_workers(0)->mutable_outputs())["loss"] = "0.25";
  tell(s, late);
  auto g = get(s, "g");
  ASSERT_EQ(g.workers_size(), 2);
  ASSERT_EQ(g.workers(0).outputs().count("loss"), 1u);
  EXPECT_EQ(g.workers(0).outputs().at("loss"), "0.25");
  EXPECT_EQ(g.state(), "Failed") << "outputs change nothing else";
}

TEST_F(SchedulerAssignments, ARunSubmittedAgainUnderItsNameIsNotEndedByTheOldWorkersStatus) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 8));
  submit(s, spec_of("same", 1));
  tell(s, in_states("gpu-01", {{"same-0", "Running", ""}}));
  ask<v1::Run>(s, atom::remove_v, std::string{"same"});
  EXPECT_EQ(submit(s, spec_of("same", 1)).state(), "Placed");
  // The agent still stops the old same-0 and reports it under that name.
  tell(s, in_states("gpu-01", {{"same-0", "Stopping", ""}}));
  tell(s, in_states("gpu-01",
                    {{"same-0", "Cancelled", "stopped: killed after the stop grace"}}));
  auto again = get(s, "same");
  EXPECT_EQ(again.state(), "Placed") << again.ShortDebugString();
  EXPECT_NE(again.waiting_reason().find("still holds an earlier worker named same-0"),
            std::string::npos)
    << again.waiting_reason();
  EXPECT_EQ(again.workers(0).state(), "Placed");
  // Once the agent holds the new worker, its statuses count.
  tell(s, in_states("gpu-01", {{"same-0", "Assigned", ""}}));
  tell(s, in_states("gpu-01", {{"same-0", "Running", ""}}));
  EXPECT_EQ(get(s, "same").state(), "Running");
  tell(s, in_states("gpu-01", {{"same-0", "Exited", ""}}));
  EXPECT_EQ(get(s, "same").state(), "Stopped");
}

TEST_F(SchedulerActor, ARunThatCannotFitAnywhereSaysSoAtOnce) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 8));
  auto big = submit(s, spec_of("big", 16));
  EXPECT_EQ(big.state(), "Waiting");
  EXPECT_EQ(big.waiting_reason(),
            "cannot fit anywhere now: a worker needs 16 GPUs on one machine; machines have at "
            "most 8");
  auto elsewhere = spec_of("elsewhere", 1);
  elsewhere.set_pool("b200");
  EXPECT_EQ(submit(s, elsewhere).waiting_reason(),
            "cannot fit anywhere now: no machine in pool b200 (machines are in pool h100)");
}

TEST_F(SchedulerActor, RemovingAMachineIsRefusedWhileRunsHaveWorkersThere) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 8));
  ASSERT_EQ(submit(s, spec_of("train", 4)).state(), "Placed");
  v1::RemoveMachine remove;
  remove.set_name("gpu-01");
  auto err = ask_error<bool>(s, remove);
  EXPECT_EQ(render_error(err),
            "machine gpu-01 still has workers of run train; stop them first (astra delete "
            "RUN) or drain it (astra drain gpu-01)");
  ask<v1::Run>(s, atom::remove_v, std::string{"train"});
  EXPECT_TRUE(ask<bool>(s, remove));
  // Its GPUs are gone: a new run cannot fit anywhere now.
  EXPECT_EQ(submit(s, spec_of("next", 1)).waiting_reason(),
            "cannot fit anywhere now: the cluster has no machines");
}

TEST_F(SchedulerActor, ACpuOnlyRunLargerThanEveryMachineCannotFitAnywhereNow) {
  auto s = spawn_scheduler();
  snapshot(s, cpu_machine("cpu-01", 4, 8));
  snapshot(s, cpu_machine("cpu-02", 64, 256));
  EXPECT_EQ(submit(s, cpu_spec("cores", 512, 64)).waiting_reason(),
            "cannot fit anywhere now: a worker asks for 512 CPU cores; the largest machine "
            "has 64");
  EXPECT_EQ(submit(s, cpu_spec("memory", 1, 1u << 20)).waiting_reason(),
            "cannot fit anywhere now: a worker asks for 1024 GiB; the largest machine has "
            "256 GiB");
}

// --- Issue 13: run names per workspace --------------------------------------

namespace {

/// A run of `gpus` GPUs in workspace `ws` (namespace `ns`), as the
/// controller hands it over.
v1::RunSpec spec_in(const std::string& ws, const std::string& ns, const std::string& name,
                    uint32_t gpus) {
  auto s = spec_of(name, gpus);
  s.set_workspace(ws);
  s.set_namespace_(ns);
  return s;
}

} // namespace

TEST_F(SchedulerActor, TwoWorkspacesEachHaveARunOfTheSameName) {
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 8));
  auto a = submit(s, spec_in("wa", "ws-aaaaaa", "t", 2));
  auto b = submit(s, spec_in("wb", "ws-bbbbbb", "t", 2));
  ASSERT_EQ(a.state(), "Placed");
  ASSERT_EQ(b.state(), "Placed");
  // Their workers carry their namespace: one name each on the machine.
  EXPECT_EQ(a.workers(0).name(), "ws-aaaaaa.t-0");
  EXPECT_EQ(b.workers(0).name(), "ws-bbbbbb.t-0");
  EXPECT_EQ(render_error(ask_error<v1::Run>(s, atom::submit_v,
                                            spec_in("wb", "ws-bbbbbb", "t", 1))),
            "a run named t in workspace wb already exists");
  // Each found in its workspace, stored under its own key.
  EXPECT_EQ(get(s, "wa/t").spec().workspace(), "wa");
  EXPECT_EQ(get(s, "wb/t").spec().workspace(), "wb");
  EXPECT_EQ(stored("wa/t").spec().workspace(), "wa");
  EXPECT_EQ(stored("wb/t").spec().workspace(), "wb");
  EXPECT_EQ(ask<v1::RunList>(s, atom::runs_v).runs_size(), 2);
  // A bare name is the default workspace's, else the only workspace's.
  EXPECT_EQ(render_error(ask_error<v1::Run>(s, atom::get_v, std::string{"t"})),
            "no run named t in workspace default; runs named t are in workspaces wa, wb: "
            "name one with --workspace");
  EXPECT_EQ(render_error(ask_error<v1::Run>(s, atom::get_v, std::string{"default/t"})),
            "no run named t in workspace default (it is in workspaces wa, wb)");
  EXPECT_EQ(render_error(ask_error<v1::Run>(s, atom::get_v, std::string{"wc/t"})),
            "no run named t in workspace wc (it is in workspaces wa, wb)");
  // Deleting one leaves the other, GPUs and all.
  auto gone = ask<v1::Run>(s, atom::remove_v, std::string{"wa/t"});
  EXPECT_EQ(gone.spec().workspace(), "wa");
  EXPECT_EQ(render_error(ask_error<v1::Run>(s, atom::get_v, std::string{"wa/t"})),
            "no run named t in workspace wa (it is in workspace wb)");
  EXPECT_FALSE(in_store("wa/t"));
  auto left = get(s, "wb/t");
  EXPECT_EQ(gpus_of(left), gpus_of(b));
  EXPECT_EQ(get(s, "t").spec().workspace(), "wb") << "the only workspace with a t";
  // The default workspace may have its own t as well.
  EXPECT_EQ(submit(s, spec_of("t", 1)).state(), "Placed");
  EXPECT_EQ(get(s, "t").spec().workspace(), "");
  EXPECT_EQ(get(s, "t").workers(0).name(), "t-0");
}

TEST_F(SchedulerActor, RunsOfOneNameInTwoWorkspacesSurviveARestart) {
  std::set<std::string> held_a, held_b;
  {
    auto s = spawn_scheduler();
    snapshot(s, machine_of("gpu-01", 8));
    held_a = gpus_of(submit(s, spec_in("wa", "ws-aaaaaa", "t", 4)));
    held_b = gpus_of(submit(s, spec_in("wb", "ws-bbbbbb", "t", 4)));
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    run();
  }
  auto s = spawn_scheduler();
  snapshot(s, machine_of("gpu-01", 8));
  EXPECT_EQ(gpus_of(get(s, "wa/t")), held_a);
  EXPECT_EQ(gpus_of(get(s, "wb/t")), held_b);
  EXPECT_EQ(get(s, "wa/t").state(), "Placed");
  EXPECT_EQ(submit(s, spec_of("more", 1)).state(), "Waiting") << "both re-adopted their GPUs";
}

TEST_F(SchedulerActor, RunsStoredByTheirBareNameLoadInTheirWorkspace) {
  // As the previous version stored them: key = the run's name.
  for (auto [ws, name] : {std::pair{"wb", "old"}, std::pair{"default", "plain"},
                          std::pair{"", "older"}}) {
    v1::Run r;
    *r.mutable_spec() = spec_in(ws, "", name, 1);
    r.set_state("Waiting");
    ASSERT_FALSE(db->put(family::runs, name, r, true));
  }
  auto s = spawn_scheduler();
  EXPECT_EQ(get(s, "wb/old").spec().name(), "old");
  EXPECT_EQ(get(s, "old").spec().workspace(), "wb");
  EXPECT_EQ(get(s, "plain").spec().workspace(), "default");
  EXPECT_EQ(get(s, "default/older").spec().name(), "older");
  // Moved to its key in the store; the default workspace's keep theirs.
  EXPECT_EQ(stored("wb/old").spec().name(), "old");
  EXPECT_FALSE(in_store("old"));
  EXPECT_EQ(stored("plain").spec().name(), "plain");
  EXPECT_EQ(stored("older").spec().name(), "older");
  // And they still place.
  snapshot(s, machine_of("gpu-01", 8));
  EXPECT_EQ(get(s, "wb/old").state(), "Placed");
}

// --- Issue 23 item 6: a deleted run's workers stop --------------------------

TEST_F(SchedulerAssignments, ADeletedRunsWorkersShowStoppingUntilTheirAgentSaysHowTheyEnded) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 8));
  submit(s, spec_of("d", 1, 2));
  tell(s, in_states("gpu-01", {{"d-0", "Running", ""}, {"d-1", "Running", ""}}));
  auto d = ask<v1::Run>(s, atom::remove_v, std::string{"d"});
  EXPECT_EQ(d.state(), "Stopped");
  EXPECT_TRUE(d.deleted());
  EXPECT_EQ(d.workers(0).state(), "Stopping");
  EXPECT_EQ(d.workers(1).state(), "Stopping");
  EXPECT_EQ(log->last().workers_size(), 0) << "its agent is told to stop them";
  EXPECT_TRUE(stored("d").deleted()) << "kept over a restart while they stop";
  // A second delete says it is under way.
  EXPECT_EQ(render_error(ask_error<v1::Run>(s, atom::remove_v, std::string{"d"})),
            "run d is already stopping: its workers d-0 on gpu-01, d-1 on gpu-01 have not "
            "ended yet");
  // The agent reports them stopping, then how each ended.
  tell(s, in_states("gpu-01", {{"d-0", "Stopping", ""}, {"d-1", "Stopping", ""}}));
  EXPECT_EQ(get(s, "d").workers(0).state(), "Stopping");
  auto ended = in_states("gpu-01", {{"d-0", "Cancelled", "stopped"}, {"d-1", "Stopping", ""}});
  ended.mutable_workers(0)->set_exit_code(143);
  tell(s, ended);
  auto now = get(s, "d");
  EXPECT_EQ(now.workers(0).state(), "Cancelled");
  EXPECT_EQ(now.workers(0).exit_code(), 143);
  EXPECT_EQ(now.workers(0).detail(), "stopped");
  EXPECT_EQ(now.workers(1).state(), "Stopping");
  auto killed = in_states("gpu-01", {{"d-1", "Cancelled", "stopped: killed after the stop grace"}});
  killed.mutable_workers(0)->set_exit_code(137);
  tell(s, killed);
  now = get(s, "d");
  EXPECT_EQ(now.workers(1).state(), "Cancelled");
  EXPECT_EQ(now.workers(1).exit_code(), 137);
  EXPECT_EQ(now.workers(1).detail(), "stopped: killed after the stop grace");
  EXPECT_EQ(now.waiting_reason(), "deleted");
  EXPECT_EQ(render_error(ask_error<v1::Run>(s, atom::remove_v, std::string{"d"})),
            "run d is already deleted: its workers have ended");
  // Shown so for a while, then forgotten.
  advance(std::chrono::minutes{9});
  EXPECT_EQ(get(s, "d").workers(1).exit_code(), 137);
  advance(std::chrono::minutes{1});
  EXPECT_EQ(render_error(ask_error<v1::Run>(s, atom::get_v, std::string{"d"})),
            "no run named d");
  EXPECT_FALSE(in_store("d"));
}

namespace {

/// A scheduler whose run d (d-0 Running on gpu-01) was just deleted.
class DeletedRun : public SchedulerAssignments {
protected:
  scheduler_actor with_d_deleted() {
    auto s = spawn_scheduler();
    log = attach(s, "gpu-01");
    snapshot(s, machine_of("gpu-01", 8));
    submit(s, spec_of("d", 1));
    tell(s, in_states("gpu-01", {{"d-0", "Running", ""}}));
    EXPECT_EQ(ask<v1::Run>(s, atom::remove_v, std::string{"d"}).workers(0).state(),
              "Stopping");
    return s;
  }

  std::shared_ptr<orders_log> log;
};

} // namespace

TEST_F(DeletedRun, ItsWorkersAreNotWaitedForOnADownMachine) {
  auto s = with_d_deleted();
  auto down = machine_of("gpu-01", 8);
  down.set_down(true);
  down.set_schedulable(false);
  snapshot(s, down);
  auto d = get(s, "d");
  EXPECT_EQ(d.workers(0).state(), "Stopped");
  EXPECT_EQ(d.workers(0).detail(), "machine gpu-01 is Down or removed: not waited for");
  // Its name is free again at once: the new run replaces it.
  auto again = submit(s, spec_of("d", 1));
  EXPECT_EQ(again.state(), "Waiting");
  EXPECT_FALSE(again.deleted());
}

TEST_F(DeletedRun, AWorkerItsAgentNoLongerHoldsHasEnded) {
  auto s = with_d_deleted();
  tell(s, in_states("gpu-01", {}));
  auto d = get(s, "d");
  EXPECT_EQ(d.workers(0).state(), "Stopped");
  EXPECT_EQ(d.workers(0).detail(), "its agent no longer holds it");
}

TEST_F(DeletedRun, StillStoppingAfterARestartItIsSettledByItsAgent) {
  {
    auto s = with_d_deleted();
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    run();
  }
  auto s = spawn_scheduler();
  log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 8));
  EXPECT_EQ(get(s, "d").workers(0).state(), "Stopping");
  EXPECT_EQ(log->last().workers_size(), 0);
  auto ended = in_states("gpu-01", {{"d-0", "Failed", "exited with code 3"}});
  ended.mutable_workers(0)->set_exit_code(3);
  tell(s, ended);
  EXPECT_EQ(get(s, "d").workers(0).state(), "Failed");
  EXPECT_EQ(get(s, "d").workers(0).exit_code(), 3);
  // A deleted run whose workers had all ended is not loaded again.
  caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  run();
  auto s2 = spawn_scheduler();
  EXPECT_EQ(render_error(ask_error<v1::Run>(s2, atom::get_v, std::string{"d"})),
            "no run named d");
}

// --- Workers told to stop are Stopping until their agent reports them ended -

// The trial's drain: the run is stopped at the deadline (Stopped at once,
// with why), but its worker is Stopping until its agent reports it ended
// (seeds/inside-a-worker.md, "Signals on stop"), and its machine cannot be
// removed meanwhile.
TEST_F(SchedulerAssignments, AStoppedRunsWorkerIsStoppingUntilItsAgentReportsItEnded) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 8));
  submit(s, spec_of("long", 1));
  tell(s, in_states("gpu-01", {{"long-0", "Running", ""}}));
  auto stopped = ask<v1::Run>(s, atom::stop_v, std::string{"long"},
                              std::string{"machine gpu-01 was drained"});
  EXPECT_EQ(stopped.state(), "Stopped");
  EXPECT_EQ(stopped.waiting_reason(), "machine gpu-01 was drained");
  EXPECT_EQ(stopped.workers(0).state(), "Stopping");
  EXPECT_EQ(stored("long").workers(0).state(), "Stopping");
  EXPECT_EQ(log->last().workers_size(), 0) << "its agent is told to stop it";
  v1::RemoveMachine remove;
  remove.set_name("gpu-01");
  EXPECT_EQ(render_error(ask_error<bool>(s, remove)),
            "machine gpu-01 still has workers its agent is stopping (long-0 of run long); it "
            "can be removed once its agent reports them ended (at most the stop grace, then "
            "SIGKILL)");
  // Before the agent applied the new set, and through the stop grace.
  tell(s, in_states("gpu-01", {{"long-0", "Running", ""}}));
  tell(s, in_states("gpu-01", {{"long-0", "Stopping", ""}}));
  EXPECT_EQ(get(s, "long").workers(0).state(), "Stopping");
  tell(s, in_states("gpu-01", {{"long-0", "Cancelled", "stopped: killed after the stop grace"}}));
  auto ended = get(s, "long");
  EXPECT_EQ(ended.workers(0).state(), "Cancelled");
  EXPECT_EQ(ended.state(), "Stopped");
  EXPECT_EQ(ended.waiting_reason(), "machine gpu-01 was drained");
  EXPECT_EQ(stored("long").workers(0).state(), "Cancelled");
  EXPECT_TRUE(ask<bool>(s, remove));
}

// A Down machine's agent can stop nothing now: its workers are Stopped at
// once, and a machine that went Down while its agent stopped workers can be
// removed (its agent, if it ever comes back, is refused and stops them).
TEST_F(SchedulerAssignments, NoWorkerStaysStoppingOnADownOrRemovedMachine) {
  auto s = spawn_scheduler();
  auto log = attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 8));
  submit(s, spec_of("a", 1));
  submit(s, spec_of("b", 1));
  tell(s, in_states("gpu-01", {{"a-0", "Running", ""}, {"b-0", "Running", ""}}));
  ask<v1::Run>(s, atom::stop_v, std::string{"a"}, std::string{"stopped"});
  EXPECT_EQ(get(s, "a").workers(0).state(), "Stopping");
  auto down = machine_of("gpu-01", 8);
  down.set_down(true);
  down.set_schedulable(false);
  snapshot(s, down);
  EXPECT_EQ(get(s, "b").workers(0).state(), "Down");
  EXPECT_EQ(ask<v1::Run>(s, atom::stop_v, std::string{"b"}, std::string{"stopped"})
              .workers(0).state(),
            "Stopped");
  v1::RemoveMachine remove;
  remove.set_name("gpu-01");
  EXPECT_TRUE(ask<bool>(s, remove));
  EXPECT_EQ(get(s, "a").workers(0).state(), "Stopped");
  EXPECT_EQ(stored("a").workers(0).state(), "Stopped");
}

// A restarted scheduler still waits for the agent's word on a worker it
// had told to stop.
TEST_F(SchedulerAssignments, AWorkerStoppingAcrossARestartTakesItsAgentsEnd) {
  {
    auto s = spawn_scheduler();
    attach(s, "gpu-01");
    snapshot(s, machine_of("gpu-01", 8));
    submit(s, spec_of("long", 1));
    tell(s, in_states("gpu-01", {{"long-0", "Running", ""}}));
    ask<v1::Run>(s, atom::stop_v, std::string{"long"}, std::string{"stopped"});
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    run();
  }
  auto s = spawn_scheduler();
  attach(s, "gpu-01");
  snapshot(s, machine_of("gpu-01", 8));
  EXPECT_EQ(get(s, "long").workers(0).state(), "Stopping");
  tell(s, in_states("gpu-01", {{"long-0", "Cancelled", "stopped"}}));
  EXPECT_EQ(get(s, "long").workers(0).state(), "Cancelled");
}

// The trial's CPU run with the only machine Accepting names it and why.
TEST_F(SchedulerActor, ACpuOnlyRunWaitingForAnAcceptingMachineNamesIt) {
  auto s = spawn_scheduler();
  auto m = cpu_machine("cpu-01", 8, 16);
  m.set_accepting(true);
  m.set_not_schedulable("is Accepting (acceptance val-20261203-000b19 runs there)");
  snapshot(s, m);
  EXPECT_EQ(submit(s, cpu_spec("prep", 1, 64)).waiting_reason(),
            "waiting: no machine takes new work; cpu-01 is Accepting (acceptance "
            "val-20261203-000b19 runs there)");
  auto cordoned = cpu_machine("cpu-02", 8, 16);
  cordoned.set_schedulable(false);
  cordoned.set_not_schedulable("is cordoned");
  snapshot(s, cordoned);
  EXPECT_EQ(submit(s, cpu_spec("prep2", 1, 64)).waiting_reason(),
            "waiting: no machine takes new work; cpu-01 is Accepting (acceptance "
            "val-20261203-000b19 runs there), cpu-02 is cordoned");
}

// Issue 22: a GPU worker's cores and memory are placed with its GPUs, and
// one machine's cores count both kinds of worker: GPU and CPU-only, also
// after a restart (the GPU run's cores held again with its GPUs, the
// CPU-only run's counted as before) and until each run ends.
TEST_F(SchedulerActor, GpuAndCpuOnlyWorkersShareAMachinesCoresAcrossARestart) {
  const std::string short_of_cores =
    "waiting: no machine has 4 free GPUs with 16 free cores; gpu-01 has the GPUs but only 8 "
    "free cores";
  {
    auto s = spawn_scheduler();
    snapshot(s, cpu_machine("gpu-01", 64, 512, 8));
    auto train = spec_of("train", 4);
    train.set_cpus_per_worker(40);
    train.set_memory_bytes_per_worker(256ull << 30);
    ASSERT_EQ(submit(s, train).state(), "Placed");
    // A CPU-only run counts the GPU run's cores: 24 are left.
    EXPECT_EQ(submit(s, cpu_spec("batch", 32, 64)).state(), "Waiting");
    ASSERT_EQ(submit(s, cpu_spec("tool", 16, 64)).state(), "Placed");
    // A GPU run counts the CPU-only run's: 4 GPUs are free, 8 cores.
    auto more = spec_of("more", 4);
    more.set_cpus_per_worker(16);
    auto waits = submit(s, more);
    EXPECT_EQ(waits.state(), "Waiting");
    EXPECT_EQ(waits.waiting_reason(), short_of_cores);
    // More memory than the machine has: it cannot fit anywhere now.
    auto huge = spec_of("huge", 1);
    huge.set_memory_bytes_per_worker(1024ull << 30);
    EXPECT_EQ(submit(s, huge).waiting_reason(),
              "cannot fit anywhere now: a worker asks for 1024 GiB of memory; the largest "
              "machine has 512 GiB");
    ask<v1::Run>(s, atom::remove_v, std::string{"huge"});
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    run();
  }
  auto s = spawn_scheduler();
  snapshot(s, cpu_machine("gpu-01", 64, 512, 8));
  EXPECT_EQ(get(s, "train").state(), "Placed");
  EXPECT_EQ(get(s, "tool").state(), "Placed");
  // Rebuilt, neither lost nor counted twice: still 8 cores free.
  EXPECT_EQ(get(s, "more").waiting_reason(), short_of_cores);
  auto eight = spec_of("eight", 1);
  eight.set_cpus_per_worker(8);
  auto e = submit(s, eight);
  ASSERT_EQ(e.state(), "Placed") << e.waiting_reason();
  ask<v1::Run>(s, atom::remove_v, std::string{"eight"});
  // The CPU-only run is deleted: its cores go to the GPU run.
  ask<v1::Run>(s, atom::remove_v, std::string{"tool"});
  EXPECT_EQ(get(s, "more").state(), "Placed");
  EXPECT_EQ(get(s, "batch").state(), "Waiting");
  // The GPU run ends: its cores go to the CPU-only run.
  (*self)->send(s, atom::complete_v, std::string{"train"});
  run();
  EXPECT_EQ(get(s, "batch").state(), "Placed");
}

// --- Issue 23: a stopping worker keeps its GPUs until its agent says it ended

namespace {

/// Runs on gpu-01 (8 GPUs, 64 cores, 512 GiB; its agent attached) with a
/// wall clock the test moves: the stop grace counts on it.
class StoppingHolds : public SchedulerAssignments {
protected:
  scheduler_actor start() {
    auto s = spawn_scheduler(clock);
    log = attach(s, "gpu-01");
    snapshot(s, cpu_machine("gpu-01", 64, 512, 8));
    return s;
  }

  void restart(scheduler_actor& s) {
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    run();
    s = start();
  }

  /// Whether the worker set last sent to gpu-01 has worker `name`.
  bool ordered(const std::string& name) {
    for (const auto& w : log->last().workers())
      if (w.worker() == name)
        return true;
    return false;
  }

  std::shared_ptr<test_wall_clock> clock = std::make_shared<test_wall_clock>();
  std::shared_ptr<orders_log> log;
};

} // namespace

// The trial: `astra run delete train`, and the next run in the queue was
// placed on train's GPUs while train's process still ran through its grace.
TEST_F(StoppingHolds, ARunWaitingForADeletedRunsGpusIsPlacedOnlyOnceItsAgentReportsItEnded) {
  auto s = start();
  submit(s, spec_of("train", 8));
  tell(s, in_states("gpu-01", {{"train-0", "Running", ""}}));
  EXPECT_EQ(submit(s, spec_of("next", 8)).state(), "Waiting");
  auto d = ask<v1::Run>(s, atom::remove_v, std::string{"train"});
  EXPECT_EQ(d.workers(0).state(), "Stopping");
  auto next = get(s, "next");
  EXPECT_EQ(next.state(), "Waiting");
  EXPECT_EQ(next.waiting_reason(),
            "waiting: gpu-01: 8 GPUs held by stopping workers of run train (ending within "
            "30 s)");
  // Through the grace, and past it (its agent late): still held; the next
  // pass (here: a submission) says how long is left.
  clock->advance(std::chrono::seconds{12});
  tell(s, in_states("gpu-01", {{"train-0", "Stopping", ""}}));
  EXPECT_EQ(submit(s, spec_of("one", 1)).state(), "Waiting");
  EXPECT_EQ(get(s, "next").waiting_reason(),
            "waiting: gpu-01: 8 GPUs held by stopping workers of run train (ending within "
            "18 s)");
  clock->advance(std::chrono::seconds{20});
  EXPECT_EQ(submit(s, spec_of("two", 1)).state(), "Waiting");
  EXPECT_EQ(get(s, "next").waiting_reason(),
            "waiting: gpu-01: 8 GPUs held by stopping workers of run train (past their 30 s "
            "stop grace; waiting for their agent's report)");
  EXPECT_FALSE(ordered("next-0"));
  tell(s, in_states("gpu-01", {{"train-0", "Cancelled", "stopped: killed after the stop grace"}}));
  next = get(s, "next");
  EXPECT_EQ(next.state(), "Placed") << next.waiting_reason();
  EXPECT_EQ(gpus_of(next), gpus_of(d));
  EXPECT_TRUE(ordered("next-0"));
}

// `astra run stop` and a drain hold the same way; so does a failed gang:
// the failed worker's GPUs are free at once, its stopping peer's are not.
TEST_F(StoppingHolds, AFailedGangsStoppingWorkerKeepsItsGpusItsFailedWorkerFreesThem) {
  auto s = start();
  submit(s, spec_of("gang", 4, 2));
  tell(s, in_states("gpu-01", {{"gang-0", "Running", ""}, {"gang-1", "Running", ""}}));
  EXPECT_EQ(submit(s, spec_of("wide", 8)).state(), "Waiting");
  tell(s, in_states("gpu-01",
                    {{"gang-0", "Running", ""}, {"gang-1", "Failed", "exited with code 3"}}));
  auto failed = get(s, "gang");
  EXPECT_EQ(failed.state(), "Failed");
  ASSERT_EQ(failed.workers(0).state(), "Stopping");
  EXPECT_EQ(get(s, "wide").waiting_reason(),
            "waiting: gpu-01: 4 GPUs held by stopping workers of run gang (ending within 30 s)");
  auto small = submit(s, spec_of("small", 4));
  ASSERT_EQ(small.state(), "Placed") << small.waiting_reason();
  std::set<std::string> freed(failed.workers(1).gpu_ids().begin(),
                              failed.workers(1).gpu_ids().end());
  EXPECT_EQ(gpus_of(small), freed) << "the failed worker's GPUs, never the stopping one's";
  tell(s, in_states("gpu-01", {{"gang-0", "Cancelled", ""}, {"small-0", "Running", ""}}));
  EXPECT_EQ(get(s, "wide").state(), "Waiting");
  tell(s, in_states("gpu-01", {{"small-0", "Exited", ""}}));
  EXPECT_EQ(get(s, "wide").state(), "Placed");
}

// Delete `train` and submit a new `train` at once (allowed): the old
// worker's GPUs stay held under a key of their own, also over a restart.
TEST_F(StoppingHolds, ADeletedRunResubmittedAtOnceWaitsForItsOldWorkersGpusAlsoOverARestart) {
  auto s = start();
  submit(s, spec_of("train", 8));
  tell(s, in_states("gpu-01", {{"train-0", "Running", ""}}));
  ask<v1::Run>(s, atom::remove_v, std::string{"train"});
  auto again = submit(s, spec_of("train", 8));
  EXPECT_EQ(again.state(), "Waiting");
  EXPECT_FALSE(again.deleted());
  EXPECT_EQ(again.waiting_reason(),
            "waiting: gpu-01: 8 GPUs held by stopping workers of run train (ending within "
            "30 s)");
  EXPECT_FALSE(stored("train").deleted()) << "the new run has its key";
  EXPECT_TRUE(stored("train~1").deleted()) << "the old one is kept under its own";
  EXPECT_EQ(ask<v1::RunList>(s, atom::runs_v).runs_size(), 1) << "and not listed";
  restart(s);
  EXPECT_EQ(get(s, "train").state(), "Waiting");
  EXPECT_EQ(get(s, "train").waiting_reason(),
            "waiting: gpu-01: 8 GPUs held by stopping workers of run train (ending within "
            "30 s)");
  // The agent still stops the old train-0; then reports it ended.
  tell(s, in_states("gpu-01", {{"train-0", "Stopping", ""}}));
  EXPECT_EQ(get(s, "train").state(), "Waiting");
  tell(s, in_states("gpu-01", {{"train-0", "Cancelled", "stopped"}}));
  auto placed = get(s, "train");
  EXPECT_EQ(placed.state(), "Placed") << placed.waiting_reason();
  EXPECT_FALSE(in_store("train~1"));
  restart(s);
  EXPECT_EQ(get(s, "train").state(), "Placed");
}

// The agent reports the worker ended (it exited by itself) before the
// delete is even answered: its GPUs are free at once.
TEST_F(StoppingHolds, TheAgentsReportBeforeTheDeleteIsAnsweredFreesTheGpus) {
  auto s = start();
  submit(s, spec_of("train", 8));
  tell(s, in_states("gpu-01", {{"train-0", "Running", ""}}));
  EXPECT_EQ(submit(s, spec_of("next", 8)).state(), "Waiting");
  auto rh = (*self)->request(s, caf::infinite, atom::remove_v, std::string{"train"});
  (*self)->send(s, in_states("gpu-01", {{"train-0", "Exited", ""}}));
  run();
  v1::Run answer;
  rh.receive([&](v1::Run& x) { answer = std::move(x); },
             [&](caf::error& err) { ADD_FAILURE() << render_error(err); });
  EXPECT_TRUE(answer.deleted());
  EXPECT_EQ(get(s, "next").state(), "Placed");
  EXPECT_EQ(get(s, "train").workers(0).state(), "Exited");
}

// A machine that goes Down while its workers stop: they are not waited for
// (Stopped, as before), and what they held goes with them: the machine
// takes work again once it is back, at once.
TEST_F(StoppingHolds, AStoppingWorkersGpusAreNotWaitedForOnceItsMachineIsDown) {
  auto s = start();
  submit(s, spec_of("train", 8));
  tell(s, in_states("gpu-01", {{"train-0", "Running", ""}}));
  submit(s, spec_of("next", 8));
  ask<v1::Run>(s, atom::remove_v, std::string{"train"});
  auto down = cpu_machine("gpu-01", 64, 512, 8);
  down.set_down(true);
  down.set_schedulable(false);
  snapshot(s, down);
  EXPECT_EQ(get(s, "train").workers(0).state(), "Stopped");
  EXPECT_EQ(get(s, "next").state(), "Waiting");
  snapshot(s, cpu_machine("gpu-01", 64, 512, 8));
  EXPECT_EQ(get(s, "next").state(), "Placed");
}

// Stopped (not deleted) across a restart: held again as its machine reports,
// cores and memory too.
TEST_F(StoppingHolds, AStoppingWorkersGpusCoresAndMemoryStayHeldOverARestart) {
  auto s = start();
  auto train = spec_of("train", 4);
  train.set_cpus_per_worker(48);
  submit(s, train);
  tell(s, in_states("gpu-01", {{"train-0", "Running", ""}}));
  ask<v1::Run>(s, atom::stop_v, std::string{"train"}, std::string{"stopped by alice"});
  // Its 4 GPUs may or may not be those the what-if picks; its cores are.
  const std::string in_way = " held by stopping workers of run train (ending within 30 s)";
  auto more = spec_of("more", 4);
  more.set_cpus_per_worker(32);
  auto why = submit(s, more).waiting_reason();
  EXPECT_EQ(why.rfind("waiting: gpu-01: ", 0), 0u) << why;
  EXPECT_NE(why.find(in_way), std::string::npos) << why;
  EXPECT_EQ(submit(s, cpu_spec("batch", 32, 64)).state(), "Waiting");
  restart(s);
  EXPECT_EQ(get(s, "train").workers(0).state(), "Stopping");
  EXPECT_EQ(get(s, "more").state(), "Waiting");
  EXPECT_EQ(get(s, "batch").state(), "Waiting");
  EXPECT_EQ(get(s, "more").waiting_reason(), why);
  tell(s, in_states("gpu-01", {{"train-0", "Cancelled", ""}}));
  EXPECT_EQ(get(s, "more").state(), "Placed");
  EXPECT_EQ(get(s, "batch").state(), "Placed");
}

// A drained machine: removal is refused while its agent still stops the
// run's worker, and succeeds (nothing left held) once it reported it ended.
TEST_F(StoppingHolds, ADrainedMachineIsRemovedOnceItsStoppingWorkerEnded) {
  auto s = start();
  submit(s, spec_of("long", 8));
  tell(s, in_states("gpu-01", {{"long-0", "Running", ""}}));
  auto cordoned = cpu_machine("gpu-01", 64, 512, 8);
  cordoned.set_schedulable(false);
  cordoned.set_not_schedulable("is draining");
  snapshot(s, cordoned);
  ask<v1::Run>(s, atom::stop_v, std::string{"long"}, std::string{"machine gpu-01 was drained"});
  v1::RemoveMachine remove;
  remove.set_name("gpu-01");
  EXPECT_NE(render_error(ask_error<bool>(s, remove)).find("its agent is stopping"),
            std::string::npos);
  tell(s, in_states("gpu-01", {{"long-0", "Cancelled", ""}}));
  EXPECT_TRUE(ask<bool>(s, remove));
}

// Deleted and submitted again, the new run fits beside the old worker: the
// agent may let the old worker go and run the new one of its name without
// ever reporting the old one ended. Once it has applied the set without the
// old one, a worker of that name going on is the new one: the old one's
// GPUs are free.
TEST_F(StoppingHolds, ANewWorkerOfItsNameThatItsAgentRunsEndsTheOldOnesHold) {
  auto s = start();
  submit(s, spec_of("train", 4));
  tell(s, in_states("gpu-01", {{"train-0", "Running", ""}}));
  ask<v1::Run>(s, atom::remove_v, std::string{"train"});
  auto again = submit(s, spec_of("train", 4));
  ASSERT_EQ(again.state(), "Placed") << again.waiting_reason();
  EXPECT_EQ(submit(s, spec_of("four", 4)).state(), "Waiting");
  // The agent stops the old one: still held.
  auto stopping = in_states("gpu-01", {{"train-0", "Stopping", ""}});
  stopping.set_generation(log->last().generation());
  tell(s, stopping);
  EXPECT_EQ(get(s, "four").state(), "Waiting");
  auto applied = in_states("gpu-01", {{"train-0", "Assigned", ""}});
  applied.set_generation(log->last().generation());
  tell(s, applied);
  EXPECT_EQ(get(s, "four").state(), "Placed");
  EXPECT_EQ(get(s, "train").workers(0).state(), "Assigned");
}
