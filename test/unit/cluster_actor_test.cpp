// The cluster actor, driven as an embedding control plane would: its actors
// spawned in our own actor system, spoken to with typed messages.

#include "actor_fixture.hpp"

#include "actors/cluster_actor.hpp"
#include "actors/machine_actor.hpp"
#include "store/store.hpp"

using namespace astraeus;
using namespace std::chrono_literals;

namespace {

v1::Hello agent_hello(const std::string& name, const std::string& id) {
  v1::Hello h;
  h.set_protocol_version(1);
  h.set_role(v1::AGENT);
  h.set_machine_name(name);
  h.set_machine_id(id);
  h.set_software_version("test");
  return h;
}

v1::MachineReport report_of(const std::string& name) {
  v1::MachineReport r;
  r.set_machine(name);
  r.mutable_facts()->mutable_cpu()->set_logical_cpus(8);
  return r;
}

class ClusterActor : public test::actor_test {
protected:
  ClusterActor() {
    open_store();
  }

  void open_store() {
    db.reset();
    auto s = Store::open(dir.path() + "/controller");
    if (!s)
      ADD_FAILURE() << render_error(s.error());
    else
      db = std::shared_ptr<Store>{std::move(*s)};
  }

  cluster_actor spawn_cluster() {
    cluster_config cc;
    cc.store = db;
    cc.heartbeat_lapse = 60s;
    auto c = spawn(cluster, std::move(cc));
    run();
    return c;
  }

  v1::Response call(const cluster_actor& c, v1::Request req) {
    return ask<v1::Response>(c, std::move(req));
  }

  v1::Request list() {
    v1::Request r;
    r.mutable_list_machines();
    return r;
  }

  v1::Request get(const std::string& name) {
    v1::Request r;
    r.mutable_get_machine()->set_name(name);
    return r;
  }

  test::temp_dir dir;
  std::shared_ptr<Store> db;
};

} // namespace

TEST_F(ClusterActor, RegistersAMachineIdleOnItsHello) {
  auto c = spawn_cluster();
  auto m = ask<machine_actor>(c, atom::enrol_v, agent_hello("gpu-01", "id1"),
                              uint64_t{1});
  ASSERT_TRUE(m);
  auto resp = call(c, get("gpu-01"));
  ASSERT_FALSE(resp.has_error()) << resp.error().message();
  EXPECT_EQ(resp.machine().state(), v1::Machine::Idle);
  EXPECT_TRUE(resp.machine().connected());
  (*self)->send(m, report_of("gpu-01"));
  run();
  EXPECT_EQ(call(c, get("gpu-01")).machine().state(), v1::Machine::Up);
}

TEST_F(ClusterActor, ListsMachinesSortedByName) {
  auto c = spawn_cluster();
  for (auto name : {"gpu-03", "gpu-01", "gpu-02"})
    ask<machine_actor>(c, atom::enrol_v, agent_hello(name, std::string{"id-"} + name),
                       uint64_t{1});
  auto resp = call(c, list());
  ASSERT_EQ(resp.machines().machines_size(), 3);
  EXPECT_EQ(resp.machines().machines(0).name(), "gpu-01");
  EXPECT_EQ(resp.machines().machines(2).name(), "gpu-03");
}

TEST_F(ClusterActor, AnEmptyClusterListsNothing) {
  auto c = spawn_cluster();
  auto resp = call(c, list());
  EXPECT_FALSE(resp.has_error());
  EXPECT_TRUE(resp.has_machines());
  EXPECT_EQ(resp.machines().machines_size(), 0);
}

TEST_F(ClusterActor, AnUnknownMachineIsNamedInTheError) {
  auto c = spawn_cluster();
  auto resp = call(c, get("gpu-09"));
  ASSERT_TRUE(resp.has_error());
  EXPECT_EQ(resp.error().code(), "no_such_machine");
  EXPECT_EQ(resp.error().message(), "no machine named gpu-09");
  v1::Request cordon;
  cordon.mutable_set_cordon()->set_name("gpu-09");
  cordon.mutable_set_cordon()->set_cordoned(true);
  EXPECT_EQ(call(c, cordon).error().code(), "no_such_machine");
  auto err = ask_error<machine_actor>(c, atom::get_v, std::string{"gpu-09"});
  EXPECT_EQ(err, ec::no_such_machine);
}

TEST_F(ClusterActor, ANameHeldByAnotherIdentityIsRefused) {
  auto c = spawn_cluster();
  ask<machine_actor>(c, atom::enrol_v, agent_hello("gpu-01", "id1"), uint64_t{1});
  auto err = ask_error<machine_actor>(c, atom::enrol_v,
                                      agent_hello("gpu-01", "other"), uint64_t{2});
  EXPECT_EQ(err, ec::identity_mismatch);
  EXPECT_NE(render_error(err).find("another machine identity"), std::string::npos);
  // The same identity may come back (a restarted agent).
  auto again = ask<machine_actor>(c, atom::enrol_v, agent_hello("gpu-01", "id1"),
                                  uint64_t{3});
  EXPECT_TRUE(again);
}

TEST_F(ClusterActor, MalformedNamesAreRefused) {
  auto c = spawn_cluster();
  for (auto bad : {"", "-leading-dash", "has space", "a/b",
                   std::string(64, 'x').c_str()}) {
    auto err = ask_error<machine_actor>(c, atom::enrol_v,
                                        agent_hello(bad, "id"), uint64_t{1});
    EXPECT_EQ(err, ec::invalid_request) << "name '" << bad << "'";
  }
  EXPECT_EQ(call(c, list()).machines().machines_size(), 0);
}

TEST_F(ClusterActor, ARestartedControllerKeepsMachinesCordonAndMaintenance) {
  {
    auto c = spawn_cluster();
    auto m = ask<machine_actor>(c, atom::enrol_v, agent_hello("gpu-01", "id1"),
                                uint64_t{1});
    ask<machine_actor>(c, atom::enrol_v, agent_hello("gpu-02", "id2"), uint64_t{2});
    (*self)->send(m, report_of("gpu-01"));
    run();
    v1::Request cordon;
    cordon.mutable_set_cordon()->set_name("gpu-01");
    cordon.mutable_set_cordon()->set_cordoned(true);
    EXPECT_TRUE(call(c, cordon).machine().cordoned());
    v1::Request maint;
    maint.mutable_set_maintenance()->set_name("gpu-02");
    maint.mutable_set_maintenance()->set_maintenance(true);
    EXPECT_EQ(call(c, maint).machine().state(), v1::Machine::Maintenance);
    caf::anon_send_exit(c, caf::exit_reason::user_shutdown);
    run();
  }
  open_store();
  auto c = spawn_cluster();
  auto resp = call(c, list());
  ASSERT_EQ(resp.machines().machines_size(), 2);
  const auto& one = resp.machines().machines(0);
  EXPECT_EQ(one.name(), "gpu-01");
  EXPECT_TRUE(one.cordoned());
  EXPECT_EQ(one.state(), v1::Machine::Idle) << "Idle until it reports again";
  EXPECT_EQ(one.facts().cpu().logical_cpus(), 8u) << "last facts kept";
  EXPECT_EQ(resp.machines().machines(1).state(), v1::Machine::Maintenance);
  // The agent comes back by itself: same identity, Up at its first report.
  auto m = ask<machine_actor>(c, atom::enrol_v, agent_hello("gpu-01", "id1"),
                              uint64_t{7});
  (*self)->send(m, report_of("gpu-01"));
  run();
  EXPECT_EQ(call(c, get("gpu-01")).machine().state(), v1::Machine::Up);
  // A machine that does not come back goes Down after the lapse.
  advance(60s);
  EXPECT_EQ(call(c, get("gpu-01")).machine().state(), v1::Machine::Down);
  EXPECT_EQ(call(c, get("gpu-02")).machine().state(), v1::Machine::Maintenance);
}

TEST_F(ClusterActor, AStoredRecordThatDoesNotParseIsLeftAloneAndTheRestLoad) {
  {
    v1::MachineRecord good;
    good.set_name("gpu-01");
    good.set_machine_id("id1");
    ASSERT_FALSE(db->put(family::machines, "gpu-01", good));
    ASSERT_FALSE(db->put_raw(family::machines, "gpu-02", "\xff\xff\xff"));
  }
  auto c = spawn_cluster();
  auto resp = call(c, list());
  ASSERT_EQ(resp.machines().machines_size(), 1);
  EXPECT_EQ(resp.machines().machines(0).name(), "gpu-01");
  std::string raw;
  bool found = false;
  ASSERT_FALSE(db->for_each(family::machines, [&](std::string_view k, std::string_view v) {
    if (k == "gpu-02") {
      found = true;
      raw = std::string{v};
    }
    return true;
  }));
  EXPECT_TRUE(found) << "the unreadable record must not be deleted";
  EXPECT_EQ(raw, "\xff\xff\xff");
}

TEST(Workspaces, GrantsBecomeLabelsTheRunsMachinesMustCarry) {
  v1::Workspace ws;
  ws.set_name("research");
  (*ws.mutable_grants())["pool"] = "h100";
  (*ws.mutable_grants())["site"] = "ams";
  ASSERT_FALSE(validate_workspace(ws));
  EXPECT_EQ(ws.organisation(), "default");
  v1::RunSpec spec;
  spec.set_name("train");
  spec.set_workspace("research");
  ASSERT_FALSE(apply_workspace(&ws, spec));
  EXPECT_EQ(spec.pool(), "h100");
  EXPECT_EQ(spec.labels().at("site"), "ams");
  // Asking for the granted pool again is fine; another one is not.
  ASSERT_FALSE(apply_workspace(&ws, spec));
  spec.set_pool("a100");
  auto err = apply_workspace(&ws, spec);
  EXPECT_EQ(render_error(err), "workspace research is granted pool=h100; the run asks for pool=a100");
  // The default workspace grants nothing.
  v1::RunSpec plain;
  plain.set_name("x");
  ASSERT_FALSE(apply_workspace(nullptr, plain));
  EXPECT_EQ(plain.workspace(), "default");
  EXPECT_TRUE(plain.pool().empty());
}

TEST(Workspaces, BadNamesAndGrantsAreRefused) {
  v1::Workspace ws;
  ws.set_name("no spaces");
  EXPECT_NE(render_error(validate_workspace(ws)).find("workspace name 'no spaces'"),
            std::string::npos);
  ws.set_name("ok");
  (*ws.mutable_grants())["pool"] = "";
  EXPECT_NE(render_error(validate_workspace(ws)).find("KEY=VALUE"), std::string::npos);
}
