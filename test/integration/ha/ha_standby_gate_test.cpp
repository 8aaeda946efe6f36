// HA mode: standbys tell agents and astra who leads (issue 15; label "ha").
// Three controllers on a 3-member etcd on loopback. A standby's gate answers
// every agent and astra with "not the leader; the leader's gate is X"
// (actors/controller/standby_gate.hpp): an agent given only a standby's
// address is Up on the leader, and follows the next leader after a kill
// within a second of its election; `astra --addr` takes several addresses
// in any order, follows a standby to the leader, skips one that does not
// listen, and names every address it tried when none answers.

#include <gtest/gtest.h>

#include "integration/ha/ha_fixture.hpp"

namespace astraeus::itest {
namespace {

class HaStandbyGate : public ha_test {
protected:
  HaStandbyGate() : ha_test("astraeus-ha-standby") {
  }

  void SetUp() override {
    ha_test::SetUp();
    if (HasFatalFailure())
      return;
    // The owner's credentials for every gate (they share the keys folder).
    for (size_t i = 0; i < group_->size(); ++i)
      ASSERT_TRUE(use_owner_credentials(group_->gate_port(i), group_->keys()));
  }

  /// "127.0.0.1:PORT" of controller `i`'s gate.
  std::string gate(size_t i) const {
    return "127.0.0.1:" + std::to_string(group_->gate_port(i));
  }

  /// `astra --addr ADDR args...` as the owner; output files in the test's folder.
  command_result astra(const std::string& addr, std::vector<std::string> args) {
    std::vector<std::string> argv{program("astra"), "--addr", addr, "--token-file",
                                  (group_->keys() / "owner-token").string(),
                                  "--timeout", "5"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, dir_.path(), 20s);
  }
};

TEST_F(HaStandbyGate, AnAgentGivenOnlyAStandbyIsUpOnTheLeaderAndFollowsTheNext) {
  auto& g = *group_;
  auto first = *leader_;
  auto standby = (first + 1) % g.size();
  auto flags = enrol_flags(g.gate_port(first), dir_.path(), "gpu-sb");
  ASSERT_FALSE(flags.empty());
  // Only the standby's gate: it names the leader's.
  std::vector<std::string> argv{program("astraeus-agent"), "--controller", gate(standby),
                                "--data-dir", (dir_ / "agent").string(), "--name", "gpu-sb",
                                "--report-interval", "200ms"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto* agent = spawn_kept(g.kept(), dir_.path(), "agent", argv);
  auto up_and_connected = [&](size_t on) {
    auto m = get_machine(g.gate_port(on), "gpu-sb");
    return m && m->state() == v1::Machine::Up && m->connected();
  };
  ASSERT_TRUE(wait_until([&] { return up_and_connected(first); }, 15s))
    << "the agent given only the standby's gate is not Up on the leader";
  EXPECT_TRUE(contains(agent->err(), "is a standby; following the leader at " + gate(first)))
    << agent->err();
  // Kill the leader: the agent, which knows only the standby, is with the
  // new leader within a second of its election.
  g.controller(first)->kill_now();
  std::optional<size_t> next;
  ASSERT_TRUE(wait_until(
    [&] {
      next = g.leader();
      return next && *next != first;
    },
    10s, 5ms))
    << "no new leader within 10 s of the kill";
  auto elected = steady::now();
  ASSERT_TRUE(wait_until([&] { return up_and_connected(*next); }, 10s, 20ms))
    << "the agent is not with the new leader";
  auto after = seconds_since(elected);
  std::printf("agent (given only a standby's gate) with the new leader %.2f s after its "
              "election (%s the standby it was given)\n",
              after, *next == standby ? "it is" : "not");
  // The target (issue 15): within a second of the election.
  EXPECT_LT(after, 1.0);
  EXPECT_TRUE(agent->running()) << agent->err();
}

TEST_F(HaStandbyGate, AstraTakesSeveralAddressesAndFollowsAStandbyToTheLeader) {
  auto& g = *group_;
  auto first = *leader_;
  auto standby = (first + 1) % g.size();
  ASSERT_TRUE(g.write_through(first));
  ASSERT_TRUE(g.wait_gate(standby, 10s)) << "the standby's gate never answered";
  // The standby first, then the leader.
  auto both = astra(gate(standby) + "," + gate(first), {"-o", "json", "tokens", "list"});
  EXPECT_EQ(both.rc, 0) << both.err;
  // The standby alone: it names the leader.
  auto alone = astra(gate(standby), {"-o", "json", "tokens", "list"});
  EXPECT_EQ(alone.rc, 0) << alone.err;
  EXPECT_EQ(alone.out, both.out);
  // The same through `machines` (the brief's example).
  auto machines = astra(gate(standby), {"machines"});
  EXPECT_EQ(machines.rc, 0) << machines.err;
  // An address that does not listen is skipped.
  auto dead = "127.0.0.1:" + std::to_string(free_port());
  auto skipped = astra(dead + "," + gate(standby), {"machines"});
  EXPECT_EQ(skipped.rc, 0) << skipped.err;
  // None answers: exit 3, every address tried named.
  auto dead2 = "127.0.0.1:" + std::to_string(free_port());
  auto none = astra(dead + "," + dead2, {"machines"});
  EXPECT_EQ(none.rc, 3) << none.err;
  EXPECT_TRUE(contains(none.err, "no leading controller answered at " + dead + ", " + dead2))
    << none.err;
  EXPECT_TRUE(contains(none.err, "cannot reach the controller at " + dead2)) << none.err;
  // A standby naming a leader that is gone (killed; its lease has not run
  // out): astra waits for the next and is answered by it.
  g.controller(first)->kill_now();
  auto t0 = steady::now();
  auto during = astra(gate(standby), {"machines"});
  EXPECT_EQ(during.rc, 0) << during.err;
  std::printf("astra --addr <a standby> during the failover answered after %.2f s\n",
              seconds_since(t0));
}

} // namespace
} // namespace astraeus::itest
