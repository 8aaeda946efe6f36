// A standby controller's gate (HA mode, issue 15) on CAF's test multiplexer:
// connections, bytes and timers are simulated, so what a standby answers an
// agent or astra runs deterministically in one thread, with no socket and no
// sleep. Sources: actors/controller/standby_gate.hpp, README "High
// availability".

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/test_multiplexer.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "actors/controller/standby_gate.hpp"
#include "messages/error.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/secure_channel.hpp"
#include "runtime/process/system_setup.hpp"

using namespace astraeus;
using namespace std::chrono_literals;
using caf::io::accept_handle;
using caf::io::connection_handle;

namespace {

class StandbyGate : public ::testing::Test {
protected:
  StandbyGate()
    : sys(init(cfg)),
      sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())),
      mpx(dynamic_cast<caf::io::network::test_multiplexer&>(sys.middleman().backend())) {
    sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
    spdlog::default_logger()->sinks().push_back(sink);
  }

  ~StandbyGate() override {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
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

  static caf::actor_system_config& init(caf::actor_system_config& c) {
    configure_actor_system(c);
    c.set("scheduler.policy", caf::atom("testing"));
    c.set("middleman.network-backend", caf::atom("testing"));
    c.set("logger.file-verbosity", caf::atom("quiet"));
    return c;
  }

  void exec_all() {
    while (sched.try_run_once() || mpx.try_exec_runnable() || mpx.read_data()) {
    }
  }

  connection_handle connect(int64_t id) {
    auto conn = connection_handle::from_int(id);
    mpx.add_pending_connect(acceptor, conn);
    mpx.accept_connection(acceptor);
    exec_all();
    return conn;
  }

  void send(connection_handle conn, const std::string& bytes) {
    caf::io::network::test_multiplexer::buffer_type buf(bytes.begin(), bytes.end());
    mpx.virtual_send(conn, buf);
    exec_all();
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
    auto& out = mpx.output_buffer(conn);
    std::vector<v1::Frame> got;
    size_t pos = 0;
    while (out.size() - pos >= frame_header_size) {
      auto len = decode_frame_length(out.data() + pos, 1u << 20);
      if (!len || out.size() - pos - frame_header_size < *len)
        break;
      auto frame = decode_frame_body(out.data() + pos + frame_header_size, *len);
      EXPECT_TRUE(frame) << render_error(frame.error());
      if (frame)
        got.push_back(std::move(*frame));
      pos += frame_header_size + *len;
    }
    out.erase(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(pos));
    return got;
  }

  std::ostringstream log;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink;
  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scheduler::test_coordinator& sched;
  caf::io::network::test_multiplexer& mpx;
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
  auto& out = mpx.output_buffer(conn);
  ASSERT_GE(out.size(), frame_header_size);
  auto len = decode_frame_length(out.data(), 1u << 20);
  ASSERT_TRUE(len);
  auto step = client.on_record(out.data() + frame_header_size, *len);
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
  auto text = log.str();
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
  EXPECT_NE(log.str().find("gate (standby): closing"), std::string::npos) << log.str();
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
