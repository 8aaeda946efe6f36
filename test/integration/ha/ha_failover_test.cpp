// HA mode end to end (issue 15; label "ha"): three controllers on a
// 3-member etcd on loopback. Killing the leader makes another lead and
// accept writes (none acknowledged before is lost); a standby redirects the
// HTTP API to the leader; an agent given every gate follows the leader and
// is Up there, never Down; a leader stopped (SIGSTOP) until deposed writes
// nothing when it resumes (SIGCONT) and exits, and its agents leave it for
// the new leader while it is frozen (its keepalives stop).

#include <csignal>

#include <gtest/gtest.h>

#include "integration/ha/ha_fixture.hpp"

namespace astraeus::itest {
namespace {

/// How many times `needle` occurs in `text`.
size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    ++n;
  return n;
}

class HaFailover : public ha_test {
protected:
  HaFailover() : ha_test("astraeus-ha") {
  }

  /// Starts an agent named `name` that knows every gate (enrolled through
  /// the gate of controller `leader`); its process.
  process* start_agent(size_t leader, const std::string& name) {
    auto& g = *group_;
    auto flags = enrol_flags(g.gate_port(leader), dir_.path(), name);
    if (flags.empty())
      return nullptr;
    std::vector<std::string> argv{program("astraeus-agent"), "--controller", g.gate_list(),
                                  "--data-dir", (dir_ / name).string(), "--name", name,
                                  "--report-interval", "200ms", "--set",
                                  "reconnect.max_backoff=1s"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return spawn_kept(g.kept(), dir_.path(), name, argv);
  }
};

TEST_F(HaFailover, KilledLeaderIsReplacedAndAgentsFollow) {
  auto& g = *group_;
  auto first = *leader_;
  // Acknowledged writes before the kill.
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(g.write_through(first)) << "the leader refused a write";
  auto before = g.join_tokens(first);
  ASSERT_TRUE(before);
  // A standby points HTTP clients at the leader.
  auto standby = (first + 1) % g.size();
  httplib::Client api{"127.0.0.1", g.api_port(standby)};
  auto res = api.Get("/api/v1/orgs/default/clusters/default/machines");
  ASSERT_TRUE(res) << "the standby's API does not answer";
  EXPECT_EQ(res->status, 307);
  EXPECT_EQ(res->get_header_value("Location"),
            "http://127.0.0.1:" + std::to_string(g.api_port(first))
              + "/api/v1/orgs/default/clusters/default/machines");
  EXPECT_EQ(res->get_header_value("X-Astraeus-Leader"),
            "127.0.0.1:" + std::to_string(g.gate_port(first)));
  // In the API's error shape, saying who leads.
  EXPECT_TRUE(contains(res->body, R"("code":"NOT_LEADER")")) << res->body;
  EXPECT_TRUE(contains(res->body, R"("gate":"127.0.0.1:)" + std::to_string(g.gate_port(first))))
    << res->body;
  // The seeds' `curl -X POST .../clear-fault` sends no body and no
  // Content-Length: the same 307 (a new-user trial got an empty 400).
  {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(g.api_port(standby));
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    const std::string req = "POST /api/v1/orgs/default/clusters/default/nodes/gpu-ha/cordon "
                            "HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    std::string got;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
      got.append(buf, static_cast<size_t>(n));
    ::close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 307", 0), 0u) << got;
    EXPECT_TRUE(contains(got, R"("code":"NOT_LEADER")")) << got;
  }
  // An agent that knows every gate.
  ASSERT_TRUE(start_agent(first, "gpu-ha"));
  ASSERT_TRUE(wait_until([&] { return machine_in_state(g.gate_port(first), "gpu-ha",
                                                       v1::Machine::Up); },
                         15s))
    << "the agent is not Up on the first leader";
  // Kill the leader: another leads and accepts a write.
  auto t0 = steady::now();
  g.controller(first)->kill_now();
  auto next = g.wait_new_leader(first, 10s);
  ASSERT_TRUE(next) << "no new leader accepted a write within 10 s";
  auto failover = seconds_since(t0);
  std::printf("failover: SIGKILL of the leader -> first accepted write on the new one: "
              "%.2f s\n",
              failover);
  EXPECT_LT(failover, 5.0);
  // Nothing acknowledged was lost.
  auto after = g.join_tokens(*next);
  ASSERT_TRUE(after);
  for (const auto& id : *before)
    EXPECT_NE(std::find(after->begin(), after->end(), id), after->end())
      << "join token " << id << " was lost";
  // The agent is Up on the new leader, and was never Down there.
  bool down = false;
  auto t1 = steady::now();
  bool up = wait_until(
    [&] {
      auto m = get_machine(g.gate_port(*next), "gpu-ha");
      if (m && m->state() == v1::Machine::Down)
        down = true;
      return m && m->state() == v1::Machine::Up;
    },
    15s, 50ms);
  EXPECT_TRUE(up) << "the agent is not Up on the new leader";
  std::printf("agent Up on the new leader %.2f s after its first write\n", seconds_since(t1));
  EXPECT_FALSE(down) << "the machine went Down across the failover";
  // And stays Up for longer than a heartbeat lapse.
  std::this_thread::sleep_for(3500ms);
  auto m = get_machine(g.gate_port(*next), "gpu-ha");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->state(), v1::Machine::Up);
}

TEST_F(HaFailover, StoppedLeaderIsFencedOutWhenItResumes) {
  auto& g = *group_;
  auto first = *leader_;
  ASSERT_TRUE(g.write_through(first));
  auto* old = g.controller(first);
  old->signal(SIGSTOP);
  auto next = g.wait_new_leader(first, 10s);
  ASSERT_TRUE(next) << "no new leader while the old one was stopped";
  auto before = g.join_tokens(*next);
  ASSERT_TRUE(before);
  // The old leader resumes, its actors and gate as it left them: a write
  // sent to it now is refused (fenced), or finds it gone (it exits as soon
  // as it sees its lease is gone).
  old->signal(SIGCONT);
  auto accepted = g.write_through(first, 2s);
  EXPECT_FALSE(accepted) << "a deposed leader accepted a write";
  auto code = old->wait_exit(5s);
  ASSERT_TRUE(code) << "the deposed leader kept running";
  EXPECT_EQ(*code, 3);
  EXPECT_TRUE(contains(old->err(), "no longer the leader")) << old->err();
  // Nothing reached etcd through it.
  auto after = g.join_tokens(*next);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->size(), before->size());
}

TEST_F(HaFailover, AFrozenLeadersAgentsLeaveItForTheNewLeader) {
  auto& g = *group_;
  auto first = *leader_;
  auto* agent = start_agent(first, "gpu-frozen");
  ASSERT_TRUE(agent);
  ASSERT_TRUE(wait_until([&] { return machine_in_state(g.gate_port(first), "gpu-frozen",
                                                       v1::Machine::Up); },
                         15s))
    << "the agent is not Up on the first leader";
  // Frozen, not dead: its sockets stay open, but its keepalives stop.
  auto t0 = steady::now();
  auto* old = g.controller(first);
  old->signal(SIGSTOP);
  auto next = g.wait_new_leader(first, 10s);
  ASSERT_TRUE(next) << "no new leader while the old one was stopped";
  bool down = false;
  bool up = wait_until(
    [&] {
      auto m = get_machine(g.gate_port(*next), "gpu-frozen");
      if (m && m->state() == v1::Machine::Down)
        down = true;
      return m && m->state() == v1::Machine::Up
             && count_of(agent->err(), "connected to cluster") >= 2;
    },
    15s, 50ms);
  EXPECT_TRUE(up) << "the agent did not reach the new leader: " << agent->err();
  std::printf("frozen leader: SIGSTOP -> its agent welcomed by the new leader: %.2f s\n",
              seconds_since(t0));
  EXPECT_TRUE(contains(agent->err(), "has sent nothing for")) << agent->err();
  // Still frozen, for longer than a heartbeat lapse (3 s) since the
  // takeover: the machine stays Up on the new leader.
  std::this_thread::sleep_for(3500ms);
  auto m = get_machine(g.gate_port(*next), "gpu-frozen");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->state(), v1::Machine::Up) << agent->err();
  EXPECT_FALSE(down) << "the machine went Down while its old leader was frozen: "
                     << agent->err();
  old->signal(SIGCONT);
  auto code = old->wait_exit(5s);
  ASSERT_TRUE(code) << "the deposed leader kept running: " << old->err();
  EXPECT_EQ(*code, 3) << old->err();
}

// A user trial: with etcd's quorum lost, the leader cannot renew its lease
// (it exits), and the standbys must stop naming it: their API answers 503
// NO_LEADER until etcd is back, and then a new leader takes writes.
TEST_F(HaFailover, StandbysNameNoLeaderWhileEtcdHasNoQuorum) {
  auto& g = *group_;
  auto first = *leader_;
  ASSERT_TRUE(g.write_through(first));
  auto standby = (first + 1) % g.size();
  httplib::Client api{"127.0.0.1", g.api_port(standby)};
  api.set_read_timeout(3, 0);
  auto status = [&] {
    auto res = api.Get("/api/v1/orgs/default/clusters/default/machines");
    return res ? res->status : 0;
  };
  EXPECT_EQ(status(), 307);
  // Two of three members stopped: no quorum, no read, no lease renewal.
  g.etcd().member(1).signal(SIGSTOP);
  g.etcd().member(2).signal(SIGSTOP);
  auto t0 = steady::now();
  bool no_leader = wait_until([&] { return status() == 503; }, 15s, 100ms);
  std::printf("quorum lost: the standby answers 503 after %.2f s\n", seconds_since(t0));
  g.etcd().member(1).signal(SIGCONT);
  g.etcd().member(2).signal(SIGCONT);
  ASSERT_TRUE(no_leader) << "the standby still names the leader without a quorum";
  auto res = api.Get("/api/v1/orgs/default/clusters/default/machines");
  ASSERT_TRUE(res);
  EXPECT_TRUE(contains(res->body, "\"NO_LEADER\"")) << res->body;
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  // etcd back: some controller leads again and takes a write.
  auto next = g.wait_leader(30s);
  ASSERT_TRUE(next) << "no leader after etcd came back";
  EXPECT_TRUE(g.write_through(*next)) << "the new leader refused a write";
}

// A user trial: a controller started without the first one's keys folder
// made a gate key of its own and could lead under it, and every agent and
// astra then refused it as an impostor. It now refuses to stand, naming
// both keys and what to copy; the group leads on undisturbed.
TEST_F(HaFailover, AControllerWithoutTheClustersKeysRefusesToStand) {
  auto& g = *group_;
  auto first = *leader_;
  std::vector<std::string> argv{program("astraeus-controller"),
                                "--listen", "127.0.0.1",
                                "--port", std::to_string(free_port()),
                                "--data-dir", (dir_ / "stranger").string(),
                                "--set", "store.backend=etcd",
                                "--set", "store.etcd.endpoints=" + g.etcd().endpoint_list(),
                                "--set", "keys.path=" + (dir_ / "stranger-keys").string(),
                                "--set", "api.listen=127.0.0.1:" + std::to_string(free_port()),
                                "--set", "api.plain_http=true"};
  auto* stranger = spawn_kept(g.kept(), dir_.path(), "stranger", argv);
  // 30 s: under the full suite on 2 cores its etcd reads took past 15 s
  // once (2026-12-08); alone it exits within 2 s.
  auto code = stranger->wait_exit(30s);
  ASSERT_TRUE(code) << "a controller with a gate key of its own stood for leadership";
  EXPECT_EQ(*code, 1);
  EXPECT_TRUE(contains(stranger->err(), "is not the cluster's")) << stranger->err();
  EXPECT_TRUE(contains(stranger->err(), "copy the first controller's keys folder"))
    << stranger->err();
  EXPECT_EQ(g.leader(), first);
  EXPECT_TRUE(g.write_through(first));
}

} // namespace
} // namespace astraeus::itest
