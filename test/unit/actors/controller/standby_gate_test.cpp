// A standby controller's gate (HA mode, issue 15) on CAF's test multiplexer:
// connections, bytes and timers are simulated, so what a standby answers an
// agent or astra runs deterministically in one thread, with no socket and no
// sleep. Sources: actors/controller/standby_gate.hpp, README "High
// availability".

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include "actors/controller/standby_gate.hpp"
#include "io_fixture.hpp"
#include "messages/error.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/secure_channel.hpp"

using namespace astraeus;
using namespace std::chrono_literals;
using caf::io::accept_handle;
using caf::io::connection_handle;

namespace {

class StandbyGate : public test::io_test {
protected:
  ~StandbyGate() override {
    if (gate)
      caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
    exec_all();
  }

  /// Starts the standby's gate knowing `leader` ("" none).
  void start(const std::string& leader, uint32_t max_open = 32) {
    standby_gate_config c;
    c.listen_address = "127.0.0.1";
    c.port = port;
    c.leader = leader;
    c.hello_timeout = 10s;
    c.no_leader_hold = 1s;
    c.max_open_per_address = max_open;
    mpx.provide_acceptor(port, acceptor);
    auto spawned = spawn_standby_gate(sys, std::move(c));
    ASSERT_TRUE(spawned) << render_error(spawned.error());
    gate = spawned->first;
    exec_all();
  }

  connection_handle connect(int64_t id) {
    return io_test::connect(acceptor, id);
  }

  /// The peer on `conn` starts the secure channel as every client does.
  void ask(connection_handle conn) {
    channel_client client{std::make_shared<const identity_keypair>(
                            identity_keypair::generate()),
                          std::nullopt};
    send(conn, client.start());
  }

  /// The clear frames the gate wrote to `conn` since the last call.
  std::vector<v1::Frame> frames(connection_handle conn) {
    std::vector<v1::Frame> got;
    for (const auto& rec : records(conn)) {
      auto frame = decode_frame_body(rec.data(), rec.size());
      EXPECT_TRUE(frame) << render_error(frame.error());
      if (frame)
        got.push_back(std::move(*frame));
    }
    return got;
  }

  standby_gate_actor gate;
  const uint16_t port = 7451;
  const accept_handle acceptor = accept_handle::from_int(1);
};

} // namespace

TEST_F(StandbyGate, AClientIsToldTheLeadersGateInTheClearAndClosed) {
  start("10.0.0.1:7450");
  auto conn = connect(10);
  EXPECT_TRUE(frames(conn).empty()) << "nothing before the client speaks";
  ask(conn);
  auto got = frames(conn);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].has_refusal()) << got[0].ShortDebugString();
  EXPECT_EQ(got[0].refusal().code(), "not_leader");
  EXPECT_EQ(got[0].refusal().leader(), "10.0.0.1:7450");
  EXPECT_NE(got[0].refusal().reason().find("the leader's gate is 10.0.0.1:7450"),
            std::string::npos)
    << got[0].refusal().reason();
  EXPECT_TRUE(mpx.stopped_reading(conn)) << "the gate closed it";
}

TEST_F(StandbyGate, TheClientsOwnChannelTakesTheAnswerAsAClearRefusal) {
  start("10.0.0.1:7450");
  auto conn = connect(11);
  channel_client client{std::make_shared<const identity_keypair>(identity_keypair::generate()),
                        std::nullopt};
  send(conn, client.start());
  auto recs = records(conn);
  ASSERT_EQ(recs.size(), 1u);
  auto step = client.on_record(recs[0].data(), recs[0].size());
  ASSERT_TRUE(step) << render_error(step.error());
  ASSERT_TRUE(step->frame);
  EXPECT_EQ(step->frame->refusal().code(), "not_leader");
  EXPECT_FALSE(client.established());
}

TEST_F(StandbyGate, WhileNoneLeadsAClientIsHeldAndToldTheLeaderOnceElected) {
  start("");
  auto conn = connect(12);
  ask(conn);
  EXPECT_TRUE(frames(conn).empty()) << "held while no one leads";
  sched.clock().advance_time(500ms);
  exec_all();
  EXPECT_TRUE(frames(conn).empty());
  caf::anon_send(gate, atom::leader_v, std::string{"10.0.0.3:7450"});
  exec_all();
  auto got = frames(conn);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].refusal().code(), "not_leader");
  EXPECT_EQ(got[0].refusal().leader(), "10.0.0.3:7450");
  EXPECT_TRUE(mpx.stopped_reading(conn));
  // The hold's timer finds the connection gone.
  sched.clock().advance_time(1s);
  exec_all();
  EXPECT_TRUE(frames(conn).empty());
}

TEST_F(StandbyGate, WhileNoneLeadsAHeldClientIsToldSoAtTheHoldsEndOnVirtualTime) {
  start("");
  auto conn = connect(13);
  ask(conn);
  sched.clock().advance_time(999ms);
  exec_all();
  EXPECT_TRUE(frames(conn).empty());
  sched.clock().advance_time(1ms);
  exec_all();
  auto got = frames(conn);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].refusal().code(), "no_leader");
  EXPECT_TRUE(got[0].refusal().leader().empty());
  EXPECT_NE(got[0].refusal().reason().find("no controller leads yet"), std::string::npos);
  EXPECT_TRUE(mpx.stopped_reading(conn));
}

TEST_F(StandbyGate, ALeaderThatGoesAwayIsNoLongerNamed) {
  start("10.0.0.1:7450");
  caf::anon_send(gate, atom::leader_v, std::string{});
  exec_all();
  auto conn = connect(14);
  ask(conn);
  EXPECT_TRUE(frames(conn).empty()) << "held: no one leads";
  caf::anon_send(gate, atom::leader_v, std::string{"10.0.0.2:7450"});
  exec_all();
  auto got = frames(conn);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].refusal().leader(), "10.0.0.2:7450");
  auto text = log_text();
  EXPECT_NE(text.find("sent to the leader's gate 10.0.0.2:7450"), std::string::npos) << text;
}

TEST_F(StandbyGate, AGarbageOrOversizedFirstRecordIsRefusedWithItsReason) {
  start("10.0.0.1:7450");
  auto garbage = connect(15);
  send(garbage, frame_length_prefix(16) + std::string(16, '\xff'));
  auto got = frames(garbage);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].refusal().code(), "malformed_frame");
  EXPECT_TRUE(mpx.stopped_reading(garbage));
  auto big = connect(16);
  send(big, frame_length_prefix(64u << 20));
  got = frames(big);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].refusal().code(), "frame_too_large");
  EXPECT_TRUE(mpx.stopped_reading(big));
  EXPECT_NE(log_text().find("gate (standby): closing"), std::string::npos) << log_text();
}

TEST_F(StandbyGate, APeerThatSaysNothingIsClosedAtTheHelloTimeout) {
  start("10.0.0.1:7450");
  auto conn = connect(17);
  sched.clock().advance_time(10s);
  exec_all();
  auto got = frames(conn);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].refusal().code(), "timeout");
  EXPECT_TRUE(mpx.stopped_reading(conn));
}

TEST_F(StandbyGate, OneSourceAddressMayHoldOnlySoManyConnections) {
  start("", 2);
  auto a = connect(18);
  auto b = connect(19);
  auto c = connect(20);
  EXPECT_FALSE(mpx.stopped_reading(a));
  EXPECT_FALSE(mpx.stopped_reading(b));
  EXPECT_TRUE(mpx.stopped_reading(c)) << "the third from one address is closed";
  // Once one is answered, its place is free again.
  ask(a);
  caf::anon_send(gate, atom::leader_v, std::string{"10.0.0.1:7450"});
  exec_all();
  auto d = connect(21);
  EXPECT_FALSE(mpx.stopped_reading(d));
}
