// The agent broker given only a standby controller's gate (HA mode, issue
// 15), on CAF's test multiplexer: connections, bytes and timers are
// simulated, so how it follows "not the leader; the leader's gate is X" and
// waits out "no leader yet" runs deterministically, on virtual time. Source:
// actors/agent/agent.hpp, actors/agent/gate_targets.hpp,
// actors/controller/standby_gate.hpp.

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <caf/actor_registry.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include "actors/agent/agent.hpp"
#include "actors/controller/standby_gate.hpp"
#include "io_fixture.hpp"
#include "messages/error.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/secure_channel.hpp"

using namespace astraeus;
using namespace std::chrono_literals;
using caf::io::connection_handle;

namespace {

class AgentAndStandby : public test::io_test {
protected:
  ~AgentAndStandby() override {
    // The probe (GPU discovery) runs on a thread of its own: its first pass
    // is answered before the agent stops (an answer that reaches the agent
    // after it stopped keeps the probe alive on CAF 0.17's test multiplexer,
    // and the actor system never shuts down).
    for (int i = 0; i < 60; ++i) {
      exec_all();
      std::this_thread::sleep_for(5ms);
    }
    if (agent)
      caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
    agent = agent_actor{};
    // Timers still pending in the virtual clock hold the agent; let them
    // fire into the void, while the probe's last messages land.
    auto deadline = std::chrono::steady_clock::now() + 5s;
    int quiet = 0;
    do {
      advance(std::chrono::hours{2});
      quiet = sys.registry().running() == 0 ? quiet + 1 : 0;
      std::this_thread::sleep_for(5ms);
    } while (quiet < 20 && std::chrono::steady_clock::now() < deadline);
  }

  /// Spawns the agent given only `127.0.0.1:port` (and, with `more`, the
  /// gates at those ports after it); it connects at once.
  void start(uint16_t port, std::vector<uint16_t> more = {}) {
    agent_config c;
    c.controller_host = "127.0.0.1";
    c.controller_port = port;
    if (!more.empty()) {
      c.controllers.emplace_back("127.0.0.1", port);
      for (auto p : more)
        c.controllers.emplace_back("127.0.0.1", p);
    }
    c.identity = agent_identity{"gpu-01", std::string(32, 'a')};
    c.key = std::make_shared<const identity_keypair>(identity_keypair::generate());
    c.pinned = gate_key->public_bytes;
    c.enrolled = true;
    c.kmsg_path.clear();
    c.host.root = dir;
    c.gpu.root = dir;
    c.gpu.nvml.library = "/nonexistent/libnvidia-ml.so.1";
    c.gpu.nvidia_smi = "/nonexistent/nvidia-smi";
    c.report_interval = 1h;
    auto spawned = spawn_agent(sys, std::move(c));
    ASSERT_TRUE(spawned) << render_error(spawned.error());
    agent = *spawned;
    exec_all();
  }

  /// Whether the agent opened the secure channel on `conn` (its
  /// ChannelHello, in the clear).
  bool said_hello(connection_handle conn) {
    auto recs = records(conn);
    if (recs.size() != 1)
      return false;
    auto frame = decode_frame_body(recs[0].data(), recs[0].size());
    return frame && frame->has_channel_hello();
  }

  /// The standby on `conn` answers as actors/controller/standby_gate.cpp does.
  void standby_answers(connection_handle conn, const std::string& leader) {
    v1::Frame frame;
    *frame.mutable_refusal() = standby_refusal(leader);
    send(conn, encode_frame(frame));
  }

  /// The leader's gate on `conn` completes the handshake and welcomes the
  /// agent, announcing keepalives every `keepalive`; the gate's end of the
  /// channel is kept in `server` (sealed frames: `server->encode`).
  void leader_welcomes(connection_handle conn, std::chrono::milliseconds keepalive) {
    server = std::make_unique<channel_server>(gate_key);
    auto recs = records(conn);
    ASSERT_EQ(recs.size(), 1u) << log_text();
    auto accept = server->on_record(recs[0].data(), recs[0].size());
    ASSERT_TRUE(accept) << render_error(accept.error());
    send(conn, accept->reply);
    recs = records(conn);
    ASSERT_EQ(recs.size(), 2u) << "its ChannelAuth and its hello";
    for (auto& r : recs)
      ASSERT_TRUE(server->on_record(r.data(), r.size()));
    v1::Frame welcome;
    welcome.mutable_welcome()->set_cluster("ha");
    welcome.mutable_welcome()->set_keepalive_interval_ms(
      static_cast<uint64_t>(keepalive.count()));
    send(conn, server->encode(welcome));
  }

  std::unique_ptr<channel_server> server;
  std::string dir = ::testing::TempDir();
  agent_actor agent;
  std::shared_ptr<const identity_keypair> gate_key =
    std::make_shared<const identity_keypair>(identity_keypair::generate());
};

} // namespace

TEST_F(AgentAndStandby, AnAgentGivenOnlyAStandbyGoesToTheLeaderItNamesAtOnce) {
  auto standby = connection_handle::from_int(1);
  auto leader = connection_handle::from_int(2);
  mpx.provide_scribe("127.0.0.1", 7451, standby);
  mpx.provide_scribe("127.0.0.1", 7450, leader);
  start(7451);
  ASSERT_TRUE(said_hello(standby));
  standby_answers(standby, "127.0.0.1:7450");
  // No timer in between: the leader's gate is asked at once, and the
  // agent completes the handshake with it (the key it pins) and says hello.
  auto recs = records(leader);
  ASSERT_EQ(recs.size(), 1u) << log_text();
  channel_server server{gate_key};
  auto accept = server.on_record(recs[0].data(), recs[0].size());
  ASSERT_TRUE(accept) << render_error(accept.error());
  send(leader, accept->reply);
  recs = records(leader);
  ASSERT_EQ(recs.size(), 2u) << "its ChannelAuth and its hello";
  auto auth = server.on_record(recs[0].data(), recs[0].size());
  ASSERT_TRUE(auth && auth->established);
  auto hello = server.on_record(recs[1].data(), recs[1].size());
  ASSERT_TRUE(hello && hello->frame && hello->frame->has_hello());
  EXPECT_EQ(hello->frame->hello().machine_name(), "gpu-01");
  EXPECT_NE(log_text().find("the controller at 127.0.0.1:7451 is a standby; following the "
                           "leader at 127.0.0.1:7450"),
            std::string::npos)
    << log_text();
}

TEST_F(AgentAndStandby, WhileNoneLeadsTheAgentAsksTheStandbyAgainAfterAShortPause) {
  auto first = connection_handle::from_int(3);
  auto second = connection_handle::from_int(4);
  mpx.provide_scribe("127.0.0.1", 7451, first);
  start(7451);
  ASSERT_TRUE(said_hello(first));
  standby_answers(first, "");
  mpx.provide_scribe("127.0.0.1", 7451, second);
  // 250 ms (+-20 % jitter), not the back-off of a controller that is down.
  advance(190ms);
  EXPECT_FALSE(said_hello(second)) << "too early";
  advance(120ms);
  EXPECT_TRUE(said_hello(second)) << log_text();
}

TEST_F(AgentAndStandby, AStandbyNamingALeaderThatIsGoneMakesAPauseNotALoop) {
  auto standby = connection_handle::from_int(5);
  mpx.provide_scribe("127.0.0.1", 7451, standby);
  start(7451);
  ASSERT_TRUE(said_hello(standby));
  // Nothing listens at 7450 (the leader died; its lease has not run out,
  // so the standby still names it): back to the standby at once.
  auto again = connection_handle::from_int(6);
  mpx.provide_scribe("127.0.0.1", 7451, again);
  standby_answers(standby, "127.0.0.1:7450");
  ASSERT_TRUE(said_hello(again)) << log_text();
  // It names the dead leader again: now a pause, not a tight loop.
  auto later = connection_handle::from_int(7);
  mpx.provide_scribe("127.0.0.1", 7451, later);
  standby_answers(again, "127.0.0.1:7450");
  EXPECT_FALSE(said_hello(later)) << "no attempt before the pause";
  advance(310ms);
  EXPECT_TRUE(said_hello(later)) << log_text();
  // Meanwhile another controller was elected: followed at once.
  auto next = connection_handle::from_int(8);
  mpx.provide_scribe("127.0.0.1", 7452, next);
  standby_answers(later, "127.0.0.1:7452");
  EXPECT_TRUE(said_hello(next)) << log_text();
}

TEST_F(AgentAndStandby, AnAgentLeavesALeaderThatFallsSilentForThreeKeepalives) {
  // Gates at 7460 (the leader) and 7461 (a standby). The leader announces a
  // keepalive every second, sends them for a while, then freezes (SIGSTOP:
  // its kernel keeps the socket open, so nothing closes).
  auto leader = connection_handle::from_int(11);
  auto standby = connection_handle::from_int(12);
  mpx.provide_scribe("127.0.0.1", 7460, leader);
  start(7460, {7461});
  leader_welcomes(leader, 1000ms);
  ASSERT_NE(log_text().find("connected to cluster 'ha'"), std::string::npos) << log_text();
  mpx.provide_scribe("127.0.0.1", 7461, standby);
  v1::Frame keepalive;
  keepalive.mutable_keepalive();
  for (int i = 0; i < 5; ++i) {
    advance(1000ms);
    send(leader, server->encode(keepalive));
  }
  records(leader);
  EXPECT_TRUE(records(standby).empty()) << "an alive leader is not left";
  // Frozen: two intervals of silence are not enough...
  advance(2500ms);
  EXPECT_TRUE(records(standby).empty()) << "left too early";
  // ...three are: the agent goes to the next gate at once.
  advance(600ms);
  EXPECT_TRUE(said_hello(standby)) << log_text();
  EXPECT_NE(log_text().find("the controller at 127.0.0.1:7460 has sent nothing for"),
            std::string::npos)
    << log_text();
  // The standby still names the frozen leader (its lease has not run
  // out): not followed back; a pause, then the standby is asked again.
  auto again = connection_handle::from_int(13);
  mpx.provide_scribe("127.0.0.1", 7461, again);
  standby_answers(standby, "127.0.0.1:7460");
  advance(310ms);
  // The silent leader is skipped: the standby is asked again, and, elected
  // meanwhile, it is the leader now: it welcomes.
  leader_welcomes(again, 1000ms);
  auto text = log_text();
  auto first = text.find("connected to cluster 'ha'");
  EXPECT_NE(text.find("connected to cluster 'ha'", first + 1), std::string::npos) << text;
}

TEST_F(AgentAndStandby, AGateWithoutKeepalivesIsNeverTakenForFrozen) {
  // One controller (not HA): its welcome announces no keepalives, and a
  // quiet hour means nothing.
  auto only = connection_handle::from_int(14);
  mpx.provide_scribe("127.0.0.1", 7462, only);
  start(7462);
  leader_welcomes(only, 0ms);
  records(only);
  advance(std::chrono::minutes{10});
  EXPECT_EQ(log_text().find("has sent nothing"), std::string::npos) << log_text();
}
