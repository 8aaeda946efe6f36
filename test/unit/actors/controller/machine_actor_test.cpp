// The machine actor's state machine on virtual time: Idle -> Up -> Down,
// Maintenance, cordon and pressure (shared/seeds/machines.md, "States").

#include "actor_fixture.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/controller/machine_actor.hpp"
#include "messages/report_readings.hpp"
#include "runtime/process/wall_clock.hpp"
#include "store/store.hpp"

using namespace astraeus;
using namespace std::chrono_literals;
using State = v1::Machine::State;

namespace {

v1::MachineReport report_of(const std::string& name, uint64_t avail_mib = 16384) {
  v1::MachineReport r;
  r.set_machine(name);
  auto* mem = r.mutable_facts()->mutable_memory();
  mem->set_total_bytes(32ull << 30);
  mem->set_available_bytes(avail_mib << 20);
  auto* fs = r.mutable_facts()->add_filesystems();
  fs->set_mount_point("/");
  fs->set_type("ext4");
  fs->set_size_bytes(100ull << 30);
  fs->set_free_bytes(50ull << 30);
  r.mutable_facts()->mutable_cpu()->set_logical_cpus(64);
  return r;
}

class MachineActor : public test::actor_test {
protected:
  machine_actor spawn_machine(std::shared_ptr<Store> store = nullptr,
                              v1::MachineRecord rec = {}) {
    machine_config mc;
    if (rec.name().empty())
      rec.set_name("gpu-01");
    mc.record = rec;
    mc.heartbeat_lapse = 60s;
    mc.store = std::move(store);
    auto m = spawn(machine, std::move(mc));
    run();
    return m;
  }

  /// gpu-01 on `clock`, Up after one report.
  machine_actor spawn_reporting_machine(std::shared_ptr<const wall_clock> clock) {
    machine_config mc;
    mc.record.set_name("gpu-01");
    mc.heartbeat_lapse = 600s;
    mc.clock = std::move(clock);
    auto m = spawn(machine, std::move(mc));
    run();
    report(m);
    return m;
  }

  State state_of(const machine_actor& m) {
    return ask<v1::MachineView>(m, atom::get_v).state();
  }

  void report(const machine_actor& m, v1::MachineReport r = report_of("gpu-01")) {
    (*self)->send(m, std::move(r));
    run();
  }
};

} // namespace

TEST_F(MachineActor, IsIdleUntilItsFirstReport) {
  auto m = spawn_machine();
  EXPECT_EQ(state_of(m), v1::Machine::Idle);
  auto view = ask<v1::MachineView>(m, atom::get_v);
  EXPECT_FALSE(view.schedulable());
  EXPECT_EQ(view.last_report_unix_ms(), 0);
}

// Trial: `astra machine` said "Acceptance: not yet" and "New work: yes".
TEST_F(MachineActor, AnAcceptingMachineTakesNoNewWorkUntilAccepted) {
  auto m = spawn_machine();
  report(m);
  auto view = ask<v1::MachineView>(m, atom::accept_v, true, false, std::string{});
  EXPECT_EQ(view.state(), v1::Machine::Accepting);
  EXPECT_FALSE(view.schedulable());
  view = ask<v1::MachineView>(m, atom::accept_v, true, true, std::string{"burned in by hand"});
  EXPECT_EQ(view.state(), v1::Machine::Up);
  EXPECT_TRUE(view.schedulable());
}

TEST_F(MachineActor, IsUpOnAReport) {
  auto m = spawn_machine();
  report(m);
  auto view = ask<v1::MachineView>(m, atom::get_v);
  EXPECT_EQ(view.state(), v1::Machine::Up);
  EXPECT_TRUE(view.schedulable());
  EXPECT_EQ(view.facts().cpu().logical_cpus(), 64u);
  EXPECT_GT(view.last_report_unix_ms(), 0);
}

TEST_F(MachineActor, StaysUpJustBeforeTheLapseAndIsDownAtIt) {
  auto m = spawn_machine();
  report(m);
  advance(60s - 1ms);
  EXPECT_EQ(state_of(m), v1::Machine::Up);
  advance(1ms);
  EXPECT_EQ(state_of(m), v1::Machine::Down);
  EXPECT_FALSE(ask<v1::MachineView>(m, atom::get_v).schedulable());
}

TEST_F(MachineActor, EveryReportRestartsTheHeartbeat) {
  auto m = spawn_machine();
  report(m);
  advance(30s);
  report(m);  // the deadline is now 30 s + 60 s
  advance(40s);
  EXPECT_EQ(state_of(m), v1::Machine::Up) << "Down at 70 s despite a report at 30 s";
  advance(20s - 1ms);
  EXPECT_EQ(state_of(m), v1::Machine::Up);
  advance(1ms);
  EXPECT_EQ(state_of(m), v1::Machine::Down);
}

TEST_F(MachineActor, AReportAfterDownBringsItBackUp) {
  auto m = spawn_machine();
  report(m);
  advance(61s);
  ASSERT_EQ(state_of(m), v1::Machine::Down);
  report(m);
  EXPECT_EQ(state_of(m), v1::Machine::Up);
  // And the heartbeat is armed again.
  advance(60s);
  EXPECT_EQ(state_of(m), v1::Machine::Down);
}

TEST_F(MachineActor, AMachineThatNeverReportsGoesDownAfterTheLapse) {
  auto m = spawn_machine();
  advance(59s);
  EXPECT_EQ(state_of(m), v1::Machine::Idle);
  advance(1s);
  EXPECT_EQ(state_of(m), v1::Machine::Down);
}

TEST_F(MachineActor, MaintenanceIgnoresReports) {
  auto m = spawn_machine();
  report(m);
  auto view = ask<v1::MachineView>(m, atom::maintenance_v, true);
  EXPECT_EQ(view.state(), v1::Machine::Maintenance);
  report(m);
  advance(10s);
  report(m);
  EXPECT_EQ(state_of(m), v1::Machine::Maintenance);
  EXPECT_FALSE(ask<v1::MachineView>(m, atom::get_v).schedulable());
  // Off again: the liveness underneath shows (reports kept it Up).
  view = ask<v1::MachineView>(m, atom::maintenance_v, false);
  EXPECT_EQ(view.state(), v1::Machine::Up);
}

TEST_F(MachineActor, MaintenanceOffShowsDownWhenReportsStopped) {
  auto m = spawn_machine();
  report(m);
  ask<v1::MachineView>(m, atom::maintenance_v, true);
  advance(120s);
  EXPECT_EQ(state_of(m), v1::Machine::Maintenance);
  EXPECT_EQ(ask<v1::MachineView>(m, atom::maintenance_v, false).state(),
            v1::Machine::Down);
}

TEST_F(MachineActor, CordonStopsNewWorkButKeepsTheState) {
  auto m = spawn_machine();
  report(m);
  auto view = ask<v1::MachineView>(m, atom::cordon_v, true);
  EXPECT_TRUE(view.cordoned());
  EXPECT_EQ(view.state(), v1::Machine::Up);
  EXPECT_FALSE(view.schedulable());
  view = ask<v1::MachineView>(m, atom::cordon_v, false);
  EXPECT_FALSE(view.cordoned());
  EXPECT_TRUE(view.schedulable());
}

TEST_F(MachineActor, MemoryPressureStopsNewWorkUntilItRecovers) {
  auto m = spawn_machine();
  report(m, report_of("gpu-01", 50));  // 50 MiB available of 32 GiB
  auto view = ask<v1::MachineView>(m, atom::get_v);
  EXPECT_EQ(view.state(), v1::Machine::Up);
  EXPECT_TRUE(view.memory_pressure());
  EXPECT_FALSE(view.schedulable());
  ASSERT_EQ(view.pressure_reasons_size(), 1);
  EXPECT_NE(view.pressure_reasons(0).find("memory available"), std::string::npos)
    << view.pressure_reasons(0);
  report(m);
  view = ask<v1::MachineView>(m, atom::get_v);
  EXPECT_FALSE(view.memory_pressure());
  EXPECT_TRUE(view.schedulable());
}

TEST_F(MachineActor, DiskPressureStopsNewWork) {
  auto m = spawn_machine();
  auto r = report_of("gpu-01");
  r.mutable_facts()->mutable_filesystems(0)->set_free_bytes(5ull << 30);  // 5 %
  report(m, r);
  auto view = ask<v1::MachineView>(m, atom::get_v);
  EXPECT_TRUE(view.disk_pressure());
  EXPECT_FALSE(view.schedulable());
  EXPECT_NE(view.pressure_reasons(0).find("disk /"), std::string::npos);
}

TEST_F(MachineActor, CordonAndMaintenanceAreStoredBeforeTheAnswer) {
  test::temp_dir dir;
  {
    auto store = Store::open(dir.path() + "/db");
    ASSERT_TRUE(store) << render_error(store.error());
    std::shared_ptr<Store> db{std::move(*store)};
    auto m = spawn_machine(db);
    report(m);
    ask<v1::MachineView>(m, atom::cordon_v, true);
    ask<v1::MachineView>(m, atom::maintenance_v, true);
    v1::MachineRecord rec;
    auto found = db->get(family::machines, "gpu-01", rec);
    ASSERT_TRUE(found && *found);
    EXPECT_TRUE(rec.cordoned());
    EXPECT_TRUE(rec.maintenance());
    EXPECT_EQ(rec.last_facts().cpu().logical_cpus(), 64u);
    caf::anon_send_exit(m, caf::exit_reason::user_shutdown);
    run();
  }
  // A new actor from the stored record starts in Maintenance, cordoned.
  auto store = Store::open(dir.path() + "/db");
  ASSERT_TRUE(store);
  std::shared_ptr<Store> db{std::move(*store)};
  v1::MachineRecord rec;
  ASSERT_TRUE(*db->get(family::machines, "gpu-01", rec));
  auto m = spawn_machine(db, rec);
  auto view = ask<v1::MachineView>(m, atom::get_v);
  EXPECT_EQ(view.state(), v1::Machine::Maintenance);
  EXPECT_TRUE(view.cordoned());
  EXPECT_EQ(view.facts().cpu().logical_cpus(), 64u) << "last facts kept";
}

TEST_F(MachineActor, ConnectedFollowsTheCurrentSessionOnly) {
  auto m = spawn_machine();
  (*self)->send(m, atom::connected_v, uint64_t{1}, true, gate_command_actor{});
  (*self)->send(m, atom::connected_v, uint64_t{2}, true, gate_command_actor{});
  // The old session's close arrives after the new one began.
  (*self)->send(m, atom::connected_v, uint64_t{1}, false, gate_command_actor{});
  run();
  EXPECT_TRUE(ask<v1::MachineView>(m, atom::get_v).connected());
  (*self)->send(m, atom::connected_v, uint64_t{2}, false, gate_command_actor{});
  run();
  EXPECT_FALSE(ask<v1::MachineView>(m, atom::get_v).connected());
}

// A machine whose agent's session ended takes no new work (it stays Up
// until its heartbeat lapses): a run placed there would wait for an agent
// that may never come back. Its next session or report makes it take work.
TEST_F(MachineActor, TakesNoNewWorkWhileItsAgentIsGone) {
  auto m = spawn_machine();
  (*self)->send(m, atom::connected_v, uint64_t{1}, true, gate_command_actor{});
  report(m);
  EXPECT_TRUE(ask<v1::MachineView>(m, atom::get_v).schedulable());
  (*self)->send(m, atom::connected_v, uint64_t{1}, false, gate_command_actor{});
  run();
  auto view = ask<v1::MachineView>(m, atom::get_v);
  EXPECT_EQ(view.state(), v1::Machine::Up);
  EXPECT_FALSE(view.schedulable());
  (*self)->send(m, atom::connected_v, uint64_t{2}, true, gate_command_actor{});
  run();
  EXPECT_TRUE(ask<v1::MachineView>(m, atom::get_v).schedulable());
}

namespace {

/// Stands in for the gate and the scheduler: keeps what a machine sends.
struct machine_outbox {
  std::vector<std::pair<uint64_t, v1::WorkerOrders>> orders;  // session, set
  std::vector<v1::SchedulerMachine> snapshots;
  std::vector<v1::WorkerStatuses> statuses;
  std::vector<std::string> attached;
};

caf::behavior outbox_actor(caf::event_based_actor*, std::shared_ptr<machine_outbox> box) {
  return {
    [box](atom::assign, uint64_t session, v1::WorkerOrders& o) {
      box->orders.emplace_back(session, std::move(o));
    },
    [box](v1::SchedulerMachine& m) { box->snapshots.push_back(std::move(m)); },
    [box](v1::WorkerStatuses& s) { box->statuses.push_back(std::move(s)); },
    [box](atom::attach, std::string& name, machine_actor&) { box->attached.push_back(name); },
  };
}

/// What an agent says it holds: `worker` (of run "<worker> up to its last
/// '-'") in `state`, at `generation`.
v1::WorkerStatuses one_worker(uint64_t generation, const std::string& worker,
                              const char* state) {
  v1::WorkerStatuses s;
  s.set_generation(generation);
  auto* x = s.add_workers();
  x->set_worker(worker);
  x->set_run(worker.substr(0, worker.rfind('-')));
  x->set_state(state);
  return s;
}

v1::WorkerOrders orders_of(uint64_t generation, std::vector<std::string> workers) {
  v1::WorkerOrders o;
  o.set_machine("gpu-01");
  o.set_generation(generation);
  for (auto& w : workers)
    o.add_workers()->set_worker(w);
  return o;
}

} // namespace

class MachineWorkers : public MachineActor {
protected:
  /// Machine gpu-01 (from `rec`, kept in `store` when given) wired to the
  /// outbox as its scheduler.
  machine_actor spawn_wired(std::shared_ptr<Store> store = nullptr, v1::MachineRecord rec = {}) {
    box = std::make_shared<machine_outbox>();
    stub = spawn(outbox_actor, box);
    machine_config mc;
    mc.record = std::move(rec);
    mc.record.set_name("gpu-01");
    mc.heartbeat_lapse = 60s;
    mc.store = std::move(store);
    mc.scheduler = caf::actor_cast<scheduler_actor>(stub);
    auto m = spawn(machine, std::move(mc));
    run();
    return m;
  }
  std::shared_ptr<machine_outbox> box;
  caf::actor stub;
};

TEST_F(MachineWorkers, HandsItsAgentTheWorkerSetAndResendsUntilAcknowledged) {
  auto m = spawn_wired();
  ASSERT_EQ(box->attached, (std::vector<std::string>{"gpu-01"}));
  // Not connected: kept for later.
  (*self)->send(m, atom::assign_v, orders_of(7, {"a-0"}));
  run();
  EXPECT_TRUE(box->orders.empty());
  (*self)->send(m, atom::connected_v, uint64_t{3}, true,
                caf::actor_cast<gate_command_actor>(stub));
  run();
  ASSERT_EQ(box->orders.size(), 1u);
  EXPECT_EQ(box->orders[0].first, 3u);
  EXPECT_EQ(box->orders[0].second.generation(), 7u);
  // A report that does not show generation 7 applied: sent again.
  report(m);
  EXPECT_EQ(box->orders.size(), 2u);
  // The agent's answer: acknowledged, passed on to the scheduler.
  v1::WorkerStatuses held;
  held.set_generation(7);
  auto* w = held.add_workers();
  w->set_worker("a-0");
  w->set_state("Assigned");
  (*self)->send(m, held);
  run();
  ASSERT_EQ(box->statuses.size(), 1u);
  EXPECT_EQ(box->statuses[0].machine(), "gpu-01");
  auto r = report_of("gpu-01");
  *r.mutable_workers() = held;
  report(m, r);
  EXPECT_EQ(box->orders.size(), 2u) << "nothing resent once applied";
  EXPECT_EQ(box->statuses.size(), 1u) << "an unchanged list is not passed on again";
}

TEST_F(MachineWorkers, GoingDownTellsTheSchedulerAndTheFirstListAfterReachesIt) {
  auto m = spawn_wired();
  auto r = report_of("gpu-01");
  r.set_address("10.0.0.11");
  auto* w = r.mutable_workers()->add_workers();
  w->set_worker("a-0");
  report(m, r);
  ASSERT_FALSE(box->snapshots.empty());
  EXPECT_FALSE(box->snapshots.back().down());
  EXPECT_EQ(box->snapshots.back().address(), "10.0.0.11");
  EXPECT_EQ(box->statuses.size(), 1u);
  advance(61s);
  EXPECT_EQ(state_of(m), v1::Machine::Down);
  EXPECT_TRUE(box->snapshots.back().down());
  EXPECT_FALSE(box->snapshots.back().schedulable());
  report(m, r);
  EXPECT_FALSE(box->snapshots.back().down());
  EXPECT_EQ(box->statuses.size(), 2u) << "the same list, after Down, is passed on again";
}

TEST(MachinePressure, UnknownValuesAreNoPressure) {
  v1::HostFacts facts;
  auto verdict = evaluate_pressure(facts, pressure_thresholds{});
  EXPECT_FALSE(verdict.memory);
  EXPECT_FALSE(verdict.disk);
}

TEST(MachinePressure, PsiMemoryStallsArePressure) {
  v1::HostFacts facts;
  facts.mutable_memory()->set_total_bytes(64ull << 30);
  facts.mutable_memory()->set_available_bytes(32ull << 30);
  auto* psi = facts.mutable_memory()->mutable_pressure();
  psi->set_present(true);
  psi->set_full_avg10(35.0);
  auto verdict = evaluate_pressure(facts, pressure_thresholds{});
  EXPECT_TRUE(verdict.memory);
  EXPECT_NE(verdict.reasons.at(0).find("PSI"), std::string::npos);
}

TEST(MachinePressure, SharedAndUnwatchedFilesystemsDoNotCount) {
  v1::HostFacts facts;
  auto* nfs = facts.add_filesystems();
  nfs->set_mount_point("/");
  nfs->set_shared(true);
  nfs->set_size_bytes(100);
  nfs->set_free_bytes(1);
  auto* boot = facts.add_filesystems();
  boot->set_mount_point("/boot/efi");
  boot->set_size_bytes(100);
  boot->set_free_bytes(1);
  EXPECT_FALSE(evaluate_pressure(facts, pressure_thresholds{}).disk);
}

TEST(MachinePressure, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512ull << 20), "512 MiB");
  EXPECT_EQ(format_bytes(1536ull << 20), "1.5 GiB");
}

TEST(SplitOrders, ALargeWorkerSetGoesInPartsThatEachFitAndKeepEveryWorker) {
  v1::WorkerOrders orders;
  orders.set_machine("gpu-01");
  orders.set_generation(42);
  for (int i = 0; i < 20; ++i) {
    auto* w = orders.add_workers();
    w->set_worker("big-" + std::to_string(i));
    (*w->mutable_spec()->mutable_env())["BLOB"] = std::string(60000, 'x');
  }
  auto parts = split_orders(orders, 256u << 10);
  ASSERT_GT(parts.size(), 4u);
  int seen = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].part(), i);
    EXPECT_EQ(parts[i].parts(), parts.size());
    EXPECT_EQ(parts[i].generation(), 42u);
    EXPECT_LE(parts[i].ByteSizeLong(), (256u << 10) + 128);
    seen += parts[i].workers_size();
  }
  EXPECT_EQ(seen, 20);
  // A small set goes whole.
  v1::WorkerOrders small;
  small.add_workers()->set_worker("a-0");
  auto whole = split_orders(small, 256u << 10);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].parts(), 0u);
}

TEST_F(MachineWorkers, LabelsAreStoredAndTheSchedulerPlacesByThem) {
  test::temp_dir dir;
  auto store = std::shared_ptr<Store>{std::move(*Store::open(dir.path() + "/c"))};
  auto m = spawn_wired(store);
  v1::SetLabels req;
  (*req.mutable_set())["pool"] = "h100";
  (*req.mutable_set())["topology.astraeus.io/rack"] = "r12";
  auto view = ask<v1::MachineView>(m, req);
  EXPECT_EQ(view.labels().at("pool"), "h100");
  ASSERT_FALSE(box->snapshots.empty());
  EXPECT_EQ(box->snapshots.back().labels().at("pool"), "h100");
  v1::MachineRecord rec;
  ASSERT_TRUE(*store->get(family::machines, "gpu-01", rec));
  EXPECT_EQ(rec.labels().at("topology.astraeus.io/rack"), "r12");
  // Remove one; a bad value is refused and changes nothing.
  v1::SetLabels drop;
  drop.add_remove("topology.astraeus.io/rack");
  EXPECT_EQ(ask<v1::MachineView>(m, drop).labels().count("topology.astraeus.io/rack"), 0u);
  v1::SetLabels bad;
  (*bad.mutable_set())["pool"] = "has space";
  auto err = ask_error<v1::MachineView>(m, bad);
  EXPECT_EQ(render_error(err), "label pool='has space': use 1-63 letters, digits, '-', '_' and '.'");
  EXPECT_EQ(ask<v1::MachineView>(m, atom::get_v).labels().at("pool"), "h100");
}

TEST_F(MachineWorkers, TheNvlinkDomainOfItsGpusIsALabelTheSchedulerSeesAndAnAdminsLabelWins) {
  auto m = spawn_wired();
  auto r = report_of("gpu-01");
  r.mutable_facts()->mutable_gpus()->mutable_capabilities()->set_nvlink_domain("c0ffee/7");
  report(m, r);
  ASSERT_FALSE(box->snapshots.empty());
  EXPECT_EQ(box->snapshots.back().labels().at("topology.astraeus.io/nvlink-domain"),
            "c0ffee/7")
    << "shared/seeds/machines.md: found from the GPUs";
  machine_config mc;
  mc.record.set_name("gpu-02");
  (*mc.record.mutable_labels())["topology.astraeus.io/nvlink-domain"] = "rack-12";
  mc.heartbeat_lapse = 60s;
  mc.scheduler = caf::actor_cast<scheduler_actor>(stub);
  auto m2 = spawn(machine, std::move(mc));
  run();
  auto r2 = report_of("gpu-02");
  r2.mutable_facts()->mutable_gpus()->mutable_capabilities()->set_nvlink_domain("c0ffee/7");
  report(m2, r2);
  EXPECT_EQ(box->snapshots.back().name(), "gpu-02");
  EXPECT_EQ(box->snapshots.back().labels().at("topology.astraeus.io/nvlink-domain"), "rack-12");
}

// machines.md, "Topology": topology.astraeus.io/fabric is "found from the
// subnet the ports report; the label wins": the prefix most ACTIVE
// InfiniBand ports carry (a machine with RoCE alone is on "ethernet"); a
// down port says nothing of a fabric, and a port that moves to another
// subnet moves the machine.
TEST_F(MachineWorkers, TheFabricOfItsInfinibandPortsIsALabelTheSchedulerSeesAndAnAdminsLabelWins) {
  auto m = spawn_wired();
  auto port = [&](v1::MachineReport& rep, const std::string& dev, const std::string& state,
                  const std::string& layer, const std::string& prefix) {
    auto* p = rep.mutable_facts()->add_rdma_ports();
    p->set_device(dev);
    p->set_port(1);
    p->set_state(state);
    p->set_link_layer(layer);
    p->set_subnet_prefix(prefix);
  };
  // Two rails up on `rails`, three ports down on another subnet, RoCE.
  auto dgx_like = [&](const std::string& rails) {
    auto rep = report_of("gpu-01");
    port(rep, "mlx5_0", "ACTIVE", "InfiniBand", rails);
    port(rep, "mlx5_1", "ACTIVE", "InfiniBand", rails);
    for (const char* dev : {"mlx5_2", "mlx5_3", "mlx5_4"})
      port(rep, dev, "DOWN", "InfiniBand", "fe80:0000:0000:00bb");
    port(rep, "mlx5_5", "ACTIVE", "Ethernet", "fe80:0000:0000:0000");
    return rep;
  };
  report(m, dgx_like("fe80:0000:0000:00aa"));
  ASSERT_FALSE(box->snapshots.empty());
  EXPECT_EQ(box->snapshots.back().labels().at("topology.astraeus.io/fabric"),
            "fe80:0000:0000:00aa");
  // Its ports moved to another subnet: so does the machine.
  report(m, dgx_like("fe80:0000:0000:00cc"));
  EXPECT_EQ(box->snapshots.back().labels().at("topology.astraeus.io/fabric"),
            "fe80:0000:0000:00cc");
  // Another machine (an admin's fabric label when `label` is given), one
  // port reported; what the scheduler is told of its fabric.
  auto fabric_of = [&](const std::string& name, const std::string& label,
                       const std::string& layer) -> std::string {
    machine_config mc;
    mc.record.set_name(name);
    if (!label.empty())
      (*mc.record.mutable_labels())["topology.astraeus.io/fabric"] = label;
    mc.heartbeat_lapse = 60s;
    mc.scheduler = caf::actor_cast<scheduler_actor>(stub);
    auto other = spawn(machine, std::move(mc));
    run();
    auto rep = report_of(name);
    port(rep, "mlx5_0", "ACTIVE", layer, "fe80:0000:0000:00aa");
    report(other, rep);
    EXPECT_EQ(box->snapshots.back().name(), name);
    const auto& labels = box->snapshots.back().labels();
    auto f = labels.find("topology.astraeus.io/fabric");
    return f == labels.end() ? "(none)" : f->second;
  };
  EXPECT_EQ(fabric_of("gpu-03", "", "Ethernet"), "ethernet")
    << "RoCE only: Topology's ethernet fabric, never an InfiniBand one";
  EXPECT_EQ(fabric_of("gpu-02", "ib-east", "InfiniBand"), "ib-east") << "an admin's label wins";
}

// Issue 11: a change the store cannot take is rolled back. Through the
// store's fault hook: the caller gets the store's error, the actor's state,
// the stored record and what the scheduler was told are as before.
TEST_F(MachineWorkers, ACordonMaintenanceOrLabelsTheStoreCannotTakeChangeNothing) {
  test::temp_dir dir;
  auto store = std::shared_ptr<Store>{std::move(*Store::open(dir.path() + "/c"))};
  v1::MachineRecord rec;
  (*rec.mutable_labels())["pool"] = "a100";
  auto m = spawn_wired(store, rec);
  report(m);
  auto before = ask<v1::MachineView>(m, atom::get_v);
  ASSERT_EQ(before.state(), v1::Machine::Up);
  ASSERT_TRUE(before.schedulable());
  auto told = box->snapshots.size();
  auto unchanged = [&] {
    auto now = ask<v1::MachineView>(m, atom::get_v);
    EXPECT_EQ(now.state(), v1::Machine::Up);
    EXPECT_FALSE(now.cordoned());
    EXPECT_TRUE(now.schedulable());
    EXPECT_EQ(now.labels().size(), 1u);
    EXPECT_EQ(now.labels().at("pool"), "a100");
    EXPECT_EQ(now.state_since_unix_ms(), before.state_since_unix_ms());
    EXPECT_EQ(box->snapshots.size(), told) << "the scheduler was told nothing";
    v1::MachineRecord rec;
    ASSERT_TRUE(*store->get(family::machines, "gpu-01", rec));
    EXPECT_FALSE(rec.cordoned());
    EXPECT_FALSE(rec.maintenance());
    EXPECT_EQ(rec.labels().at("pool"), "a100");
    EXPECT_EQ(rec.labels().count("rack"), 0u);
  };
  auto names_the_store = [&](const caf::error& err, const char* status) {
    EXPECT_EQ(err, ec::store_failure);
    auto text = render_error(err);
    // "store PATH: ..." or, for a full disk, "store full: PATH has N bytes free".
    EXPECT_NE(text.find(store->path()), std::string::npos) << text;
    EXPECT_NE(text.find("store "), std::string::npos) << text;
    EXPECT_NE(text.find(status), std::string::npos) << text;
  };
  store->faults().fail_next_writes();
  names_the_store(ask_error<v1::MachineView>(m, atom::cordon_v, true), "IO error");
  unchanged();
  store->faults().fail_next_writes(1, store_faults::kind::disk_full);
  names_the_store(ask_error<v1::MachineView>(m, atom::maintenance_v, true),
                  "No space left on device");
  unchanged();
  v1::SetLabels req;
  (*req.mutable_set())["rack"] = "r12";
  (*req.mutable_set())["pool"] = "h100";
  store->faults().fail_next_writes();
  names_the_store(ask_error<v1::MachineView>(m, req), "IO error");
  unchanged();
  // The store writes again: each change goes through.
  EXPECT_TRUE(ask<v1::MachineView>(m, atom::cordon_v, true).cordoned());
  EXPECT_EQ(ask<v1::MachineView>(m, atom::maintenance_v, true).state(),
            v1::Machine::Maintenance);
  EXPECT_EQ(ask<v1::MachineView>(m, req).labels().at("rack"), "r12");
  EXPECT_EQ(store->faults().failed(), 3u);
}

// Issue 18, rule 10: each Down and back Up is a flap, counted on the machine;
// a late report never fences its GPUs.
TEST_F(MachineActor, ALateReportCountsAFlapAndNeverFencesItsGpus) {
  auto m = spawn_machine();
  auto r = report_of("gpu-01");
  auto* g = r.mutable_facts()->mutable_gpus()->add_gpus();
  g->set_id("GPU-1");
  g->set_vendor("nvidia");
  g->set_status("ok");
  r.mutable_facts()->mutable_gpus()->set_read_as("driver: healthy");
  report(m, r);
  EXPECT_EQ(ask<v1::MachineView>(m, atom::get_v).flaps(), 0u);
  for (int i = 1; i <= 2; ++i) {
    advance(61s);  // the report comes late
    ASSERT_EQ(state_of(m), v1::Machine::Down);
    report(m, r);
    auto view = ask<v1::MachineView>(m, atom::get_v);
    EXPECT_EQ(view.state(), v1::Machine::Up);
    EXPECT_EQ(view.flaps(), static_cast<uint32_t>(i));
    for (const auto& c : view.facts().gpus().conditions())
      if (c.type() == "GPUs healthy")
        EXPECT_TRUE(c.status()) << c.message();
  }
  auto gpus = ask<std::vector<v1::GpuView>>(m, atom::gpus_v);
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].health(), "Healthy");
}

// Issue 18, rule 1: a GPU listed twice by the agent is shown once, with a
// warning on the machine page.
TEST_F(MachineActor, AGpuListedTwiceIsShownOnceWithAWarning) {
  auto m = spawn_machine();
  auto r = report_of("gpu-01");
  for (int i = 0; i < 2; ++i) {
    auto* g = r.mutable_facts()->mutable_gpus()->add_gpus();
    g->set_id("0000:03:00.0");
    g->set_vendor("amd");
    g->set_status("ok");
  }
  report(m, r);
  auto view = ask<v1::MachineView>(m, atom::get_v);
  EXPECT_EQ(view.facts().gpus().gpus_size(), 1);
  ASSERT_EQ(view.inventory_warnings_size(), 1);
  EXPECT_NE(view.inventory_warnings(0).find("listed 2 times"), std::string::npos);
  EXPECT_EQ(ask<std::vector<v1::GpuView>>(m, atom::gpus_v).size(), 1u);
}

// Issue 13 item 6: a drain is done only when its workers have ended, as
// the agent reports them, not when their stops are asked.
TEST_F(MachineActor, ADrainIsDoneOnlyWhenItsAgentReportsTheWorkersEnded) {
  auto clock = std::make_shared<test_wall_clock>();
  auto m = spawn_reporting_machine(clock);
  v1::WorkerOrders orders;
  orders.set_generation(1);
  auto* w = orders.add_workers();
  w->set_worker("train-0");
  w->set_run("train");
  (*self)->send(m, atom::assign_v, orders);
  run();
  auto statuses = [&](const char* state) {
    (*self)->send(m, one_worker(1, "train-0", state));
    run();
  };
  statuses("Running");
  v1::DrainMachine drain;
  drain.set_name("gpu-01");
  drain.set_deadline_seconds(60);
  auto view = ask<v1::MachineView>(m, drain);
  EXPECT_TRUE(view.cordoned());
  EXPECT_FALSE(view.drained());
  // The deadline: stops are asked, the drain is not done yet.
  clock->advance(60s);
  advance(60s);
  EXPECT_FALSE(ask<v1::MachineView>(m, atom::get_v).drained());
  statuses("Stopping");
  EXPECT_FALSE(ask<v1::MachineView>(m, atom::get_v).drained());
  // The agent says the worker ended: now it is drained.
  statuses("Cancelled");
  view = ask<v1::MachineView>(m, atom::get_v);
  EXPECT_TRUE(view.drained());
}

// A drain of a machine that holds no worker is done at its deadline.
TEST_F(MachineActor, ADrainWithoutWorkersIsDoneAtItsDeadline) {
  auto clock = std::make_shared<test_wall_clock>();
  auto m = spawn_reporting_machine(clock);
  v1::DrainMachine drain;
  drain.set_name("gpu-01");
  EXPECT_FALSE(ask<v1::MachineView>(m, drain).drained());
  advance(1ms);
  EXPECT_TRUE(ask<v1::MachineView>(m, atom::get_v).drained());
}

// A cordon stops user work, not the machine's own checks: the scheduler sees
// a machine that only its cordon keeps from work as one that takes checks
// only (as an Accepting one), with "is cordoned" for the runs that wait; a
// drain keeps the checks away too (one there would hold up the removal).
TEST_F(MachineWorkers, ACordonedMachineStillTakesItsChecksButADrainedOneDoesNot) {
  auto m = spawn_wired();
  report(m, report_of("gpu-01"));
  ask<v1::MachineView>(m, atom::cordon_v, true);
  ASSERT_FALSE(box->snapshots.empty());
  auto s = box->snapshots.back();
  EXPECT_TRUE(s.schedulable());
  EXPECT_TRUE(s.accepting()) << "only a validation's checks go there";
  EXPECT_EQ(s.not_schedulable(), "is cordoned");
  EXPECT_FALSE(ask<v1::MachineView>(m, atom::get_v).schedulable())
    << "users still see that it takes no new work";
  v1::DrainMachine drain;
  drain.set_name("gpu-01");
  drain.set_deadline_seconds(60);
  ask<v1::MachineView>(m, drain);
  s = box->snapshots.back();
  EXPECT_FALSE(s.schedulable());
  EXPECT_FALSE(s.accepting());
}

// The trial's drain: at the deadline the scheduler hands the machine a set
// without the worker; its agent still lists it (Stopping through its stop
// grace, then Cancelled) and the drain is done only then, never while its
// process may still run.
TEST_F(MachineWorkers, ADrainWaitsForAWorkerThatLeftTheSetUntilItsAgentReportsItEnded) {
  auto clock = std::make_shared<test_wall_clock>();
  box = std::make_shared<machine_outbox>();
  stub = spawn(outbox_actor, box);
  machine_config mc;
  mc.record.set_name("gpu-01");
  mc.heartbeat_lapse = 600s;
  mc.clock = clock;
  mc.scheduler = caf::actor_cast<scheduler_actor>(stub);
  auto m = spawn(machine, std::move(mc));
  run();
  report(m);
  auto statuses = [&](uint64_t generation, const char* state) {
    (*self)->send(m, one_worker(generation, "long-0", state));
    run();
  };
  (*self)->send(m, atom::assign_v, orders_of(1, {"long-0"}));
  run();
  statuses(1, "Running");
  v1::DrainMachine drain;
  drain.set_name("gpu-01");
  EXPECT_FALSE(ask<v1::MachineView>(m, drain).drained());
  clock->advance(1ms);
  advance(1ms);
  // The scheduler stopped the run: the worker leaves the machine's set.
  (*self)->send(m, atom::assign_v, orders_of(2, {}));
  run();
  EXPECT_FALSE(ask<v1::MachineView>(m, atom::get_v).drained());
  statuses(2, "Stopping");
  EXPECT_FALSE(ask<v1::MachineView>(m, atom::get_v).drained())
    << "its process is in its stop grace";
  statuses(2, "Cancelled");
  EXPECT_TRUE(ask<v1::MachineView>(m, atom::get_v).drained());
}

// The trial: the acceptance named in a waiting reason had failed. Once the
// validations say so, the reason says it failed and what to do.
TEST_F(MachineWorkers, AFailedAcceptanceIsNamedAsFailedWithWhatToDo) {
  auto m = spawn_wired();
  report(m);
  ask<v1::MachineView>(m, atom::accept_v, true, false, std::string{"val-20261203-000b19"});
  ASSERT_FALSE(box->snapshots.empty());
  EXPECT_EQ(box->snapshots.back().not_schedulable(),
            "is Accepting (acceptance val-20261203-000b19 runs there)");
  v1::Validation v;
  v.set_id("val-20261203-000b19");
  v.set_state("Failed");
  v.add_machines("gpu-01");
  auto* step = v.add_steps();
  step->set_machine("gpu-01");
  step->set_check("dcgm");
  step->set_state("Failed");
  (*self)->send(m, atom::accept_v, v);
  run();
  EXPECT_EQ(box->snapshots.back().not_schedulable(),
            "is Accepting (acceptance val-20261203-000b19 failed: see astra astraeus validation "
            "val-20261203-000b19; astra astraeus accept gpu-01 --reason R accepts it anyway)");
  EXPECT_EQ(ask<v1::MachineView>(m, atom::get_v).state(), v1::Machine::Accepting);
  // A new acceptance runs there: named as running again.
  ask<v1::MachineView>(m, atom::accept_v, true, false, std::string{"val-20261203-1c2d3e"});
  EXPECT_EQ(box->snapshots.back().not_schedulable(),
            "is Accepting (acceptance val-20261203-1c2d3e runs there)");
}

// `astra astraeus cancel`: a cancelled acceptance has nothing to read; the
// machine's waiting reason says who cancelled it and how to run another.
TEST_F(MachineWorkers, ACancelledAcceptanceSaysWhoCancelledItAndHowToRunAnother) {
  auto m = spawn_wired();
  report(m);
  ask<v1::MachineView>(m, atom::accept_v, true, false, std::string{"val-20261207-0c0c01"});
  v1::Validation v;
  v.set_id("val-20261207-0c0c01");
  v.set_state("Cancelled");
  v.set_cancelled_by("alice");
  v.set_cancel_reason("wrong pool");
  v.add_machines("gpu-01");
  auto* step = v.add_steps();
  step->set_machine("gpu-01");
  step->set_check("burn");
  step->set_state("Cancelled");
  (*self)->send(m, atom::accept_v, v);
  run();
  EXPECT_EQ(box->snapshots.back().not_schedulable(),
            "is Accepting (acceptance val-20261207-0c0c01 was cancelled by alice (wrong pool): "
            "astra astraeus validate --suite acceptance --machine gpu-01 runs another; astra "
            "astraeus accept gpu-01 --reason R accepts it anyway)");
  EXPECT_EQ(ask<v1::MachineView>(m, atom::get_v).state(), v1::Machine::Accepting);
}

namespace {

/// gpu-01's full report `sequence` with one GPU at `temperature` degrees.
v1::MachineReport full_report(uint64_t sequence, double temperature, uint64_t avail_mib) {
  auto r = report_of("gpu-01", avail_mib);
  r.set_sequence(sequence);
  auto* section = r.mutable_facts()->mutable_gpus();
  section->set_read_as("driver: healthy");
  auto* g = section->add_gpus();
  g->set_id("GPU-1");
  g->set_vendor("nvidia");
  g->set_model("NVIDIA H200");
  g->set_status("ok");
  g->set_temperature_c(temperature);
  g->set_utilization_percent(temperature);
  g->set_memory_total_bytes(140ull << 30);
  g->set_memory_used_bytes(1ull << 30);
  return r;
}

/// The readings report the agent sends after full report `of` for `now`.
v1::MachineReport readings_report(uint64_t of, const v1::MachineReport& now) {
  auto r = now;
  *r.mutable_readings() = readings_only(now.facts());
  r.clear_facts();
  r.set_readings_of(of);
  return r;
}

} // namespace

// Issue 14: between full reports the agent sends readings alone; they land
// on the facts of the full report they follow, machine and GPU alike.
TEST_F(MachineActor, AReadingsReportUpdatesWhatChangedAndKeepsTheRest) {
  auto m = spawn_machine();
  report(m, full_report(1, 35, 16384));
  report(m, readings_report(1, full_report(2, 71, 4096)));
  auto view = ask<v1::MachineView>(m, atom::get_v);
  EXPECT_EQ(view.state(), v1::Machine::Up);
  EXPECT_EQ(view.facts().memory().available_bytes(), 4096ull << 20);
  EXPECT_EQ(view.facts().memory().total_bytes(), 32ull << 30) << "the full report's";
  ASSERT_EQ(view.facts().filesystems_size(), 1);
  EXPECT_EQ(view.facts().filesystems(0).type(), "ext4");
  ASSERT_EQ(view.facts().gpus().gpus_size(), 1);
  EXPECT_EQ(view.facts().gpus().gpus(0).temperature_c(), 71);
  EXPECT_EQ(view.facts().gpus().gpus(0).model(), "NVIDIA H200");
  auto gpus = ask<std::vector<v1::GpuView>>(m, atom::gpus_v);
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].gpu().temperature_c(), 71) << "the GPU actor has the readings";
  EXPECT_EQ(gpus[0].gpu().utilization_percent(), 71);
  EXPECT_EQ(gpus[0].gpu().model(), "NVIDIA H200");
  EXPECT_EQ(gpus[0].health(), "Healthy");
}

// Readings for a full report the controller does not hold (it restarted or
// took over mid-session), or of another shape, keep the machine alive and
// change none of its facts until the next full report.
TEST_F(MachineActor, ReadingsItCannotPlaceAreAHeartbeatOnly) {
  auto m = spawn_machine();
  report(m, full_report(1, 35, 16384));
  advance(50s);
  report(m, readings_report(7, full_report(8, 80, 1024)));  // not report 1's
  auto other = full_report(9, 80, 1024);
  other.mutable_facts()->mutable_gpus()->mutable_gpus(0)->set_id("GPU-replaced");
  advance(50s);
  report(m, readings_report(1, other));  // report 1's, but another GPU
  auto view = ask<v1::MachineView>(m, atom::get_v);
  EXPECT_EQ(view.state(), v1::Machine::Up) << "Down at 100 s despite reports at 50 and 100 s";
  EXPECT_EQ(view.facts().memory().available_bytes(), 16384ull << 20);
  EXPECT_EQ(ask<std::vector<v1::GpuView>>(m, atom::gpus_v)[0].gpu().temperature_c(), 35);
  advance(59s);
  EXPECT_EQ(state_of(m), v1::Machine::Up);
  advance(1s);
  EXPECT_EQ(state_of(m), v1::Machine::Down) << "the heartbeat restarted at 100 s";
  report(m, full_report(10, 60, 2048));  // the next full report applies at once
  EXPECT_EQ(ask<std::vector<v1::GpuView>>(m, atom::gpus_v)[0].gpu().temperature_c(), 60);
}
