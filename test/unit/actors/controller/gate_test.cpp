// The gate broker on CAF's test multiplexer (caf/io/network/test_multiplexer.hpp):
// connections, bytes and timers are simulated, so the gate's frame handling
// runs deterministically in one thread, with no socket and no sleep. A
// stand-in cluster answers its requests. Sources: shared/DESIGN.md ("The
// gate"), actors/controller/gate.hpp, issue 11 item 7.

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
#include <caf/io/network/operation.hpp>
#include <caf/io/network/test_multiplexer.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "actors/controller/gate.hpp"
#include "io_fixture.hpp"
#include "messages/error.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/process/system_setup.hpp"

using namespace astraeus;
using namespace std::chrono_literals;
using caf::io::accept_handle;
using caf::io::connection_handle;

namespace {

/// What the stand-in cluster was asked.
struct cluster_inbox {
  std::vector<std::string> logins;
  std::vector<v1::Request> requests;
};

/// Stands in for the cluster: API token "good" names alice (admin); every
/// request is kept and answered with its id.
cluster_actor::behavior_type stand_in_cluster(cluster_actor::pointer,
                                              std::shared_ptr<cluster_inbox> box) {
  return {
    [](atom::enrol, v1::Hello&, uint64_t) -> caf::result<machine_actor> {
      return caf::make_error(ec::enrollment_required, "no agents in this test");
    },
    [](atom::enrol, v1::Hello&, uint64_t, gate_command_actor&) -> caf::result<machine_actor> {
      return caf::make_error(ec::enrollment_required, "no agents in this test");
    },
    [box](v1::Request& req) -> caf::result<v1::Response> {
      box->requests.push_back(req);
      v1::Response out;
      out.set_id(req.id());
      out.mutable_machines();
      return out;
    },
    [](atom::get, std::string& name) -> caf::result<machine_actor> {
      return caf::make_error(ec::no_such_machine, "no machine named " + name);
    },
    [box](atom::login, std::string& token) -> caf::result<v1::Principal> {
      box->logins.push_back(token);
      if (token != "good")
        return caf::make_error(ec::unauthenticated, "unknown API token");
      v1::Principal who;
      who.set_name("alice");
      who.set_role("admin");
      who.set_token_id("t1");
      return who;
    },
  };
}

class Gate : public test::io_test {
protected:
  Gate() {
    box = std::make_shared<cluster_inbox>();
    cluster = sys.spawn(stand_in_cluster, box);
    gate_config gc;
    gc.listen_address = "127.0.0.1";
    gc.port = port;
    gc.cluster = cluster;
    gc.identity = gate_key;
    gc.frame_cap_bytes = 4096;
    gc.hello_timeout = 10s;
    mpx.provide_acceptor(port, acceptor);
    auto spawned = spawn_gate(sys, std::move(gc));
    EXPECT_TRUE(spawned) << render_error(spawned.error());
    if (spawned)
      gate = spawned->first;
    exec_all();
  }

  ~Gate() override {
    caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(cluster, caf::exit_reason::user_shutdown);
    exec_all();
  }

  /// A peer connects as connection `id`.
  connection_handle connect(int64_t id) {
    return io_test::connect(acceptor, id);
  }

  /// The client's side of the secure channel's handshake on `conn`.
  std::unique_ptr<channel_client> handshake(connection_handle conn) {
    auto client = std::make_unique<channel_client>(client_key, gate_key->public_bytes);
    send(conn, client->start());
    auto recs = records(conn);
    EXPECT_EQ(recs.size(), 1u) << "the gate's ChannelAccept";
    if (recs.empty())
      return client;
    auto step = client->on_record(recs[0].data(), recs[0].size());
    EXPECT_TRUE(step && step->established) << (step ? "" : render_error(step.error()));
    if (step)
      send(conn, step->reply);
    return client;
  }

  /// The frames the gate sent `client` on `conn` since the last call.
  std::vector<v1::Frame> frames(connection_handle conn, channel_client& client) {
    std::vector<v1::Frame> out;
    for (auto& rec : records(conn)) {
      auto step = client.on_record(rec.data(), rec.size());
      EXPECT_TRUE(step) << render_error(step.error());
      if (step && step->frame)
        out.push_back(std::move(*step->frame));
    }
    return out;
  }

  /// A CLI's hello with API token `token`.
  static v1::Frame cli_hello(const std::string& token) {
    v1::Frame f;
    auto* h = f.mutable_hello();
    h->set_protocol_version(protocol_version);
    h->set_role(v1::CLI);
    h->set_software_version("test");
    h->set_api_token(token);
    return f;
  }

  std::shared_ptr<cluster_inbox> box;
  cluster_actor cluster;
  gate_actor gate;
  const uint16_t port = 7450;
  const accept_handle acceptor = accept_handle::from_int(1);
  std::shared_ptr<const identity_keypair> gate_key =
    std::make_shared<const identity_keypair>(identity_keypair::generate());
  std::shared_ptr<const identity_keypair> client_key =
    std::make_shared<const identity_keypair>(identity_keypair::generate());
};

} // namespace

TEST_F(Gate, ARequestFrameIsAcceptedAndRoutedToTheClusterAsTheSessionsPrincipal) {
  ASSERT_TRUE(gate);
  auto conn = connect(10);
  auto client = handshake(conn);
  ASSERT_TRUE(client->established());
  send(conn, client->encode(cli_hello("good")));
  ASSERT_EQ(box->logins, std::vector<std::string>{"good"});
  auto welcome = frames(conn, *client);
  ASSERT_EQ(welcome.size(), 1u);
  ASSERT_TRUE(welcome[0].has_welcome()) << welcome[0].ShortDebugString();
  EXPECT_EQ(welcome[0].welcome().principal().name(), "alice");
  // The client claims to be an owner: the gate stamps the session's principal.
  v1::Frame req;
  req.mutable_request()->set_id(42);
  req.mutable_request()->mutable_list_machines();
  req.mutable_request()->mutable_caller()->set_name("mallory");
  req.mutable_request()->mutable_caller()->set_role("owner");
  send(conn, client->encode(req));
  ASSERT_EQ(box->requests.size(), 1u);
  EXPECT_EQ(box->requests[0].id(), 42u);
  EXPECT_TRUE(box->requests[0].has_list_machines());
  EXPECT_EQ(box->requests[0].caller().name(), "alice");
  EXPECT_EQ(box->requests[0].caller().role(), "admin");
  auto answer = frames(conn, *client);
  ASSERT_EQ(answer.size(), 1u);
  ASSERT_TRUE(answer[0].has_response());
  EXPECT_EQ(answer[0].response().id(), 42u);
  EXPECT_TRUE(answer[0].response().has_machines());
  EXPECT_EQ(log_text().find("gate: closing"), std::string::npos) << log_text();
}

TEST_F(Gate, AGarbageFrameClosesTheConnectionWithALogLineNamingTheReason) {
  ASSERT_TRUE(gate);
  auto conn = connect(11);
  auto other = connect(12);
  // A length prefix and 16 bytes that are no ChannelHello.
  send(conn, frame_length_prefix(16) + std::string(16, '\xff'));
  auto text = log_text();
  EXPECT_NE(text.find("gate: closing test:11: frame body of 16 bytes is not a valid "
                      "astraeus.v1.Frame"),
            std::string::npos)
    << text;
  // The peer is told why, in the clear (there is no channel yet).
  auto recs = records(conn);
  ASSERT_EQ(recs.size(), 1u);
  auto refusal = decode_frame_body(recs[0].data(), recs[0].size());
  ASSERT_TRUE(refusal);
  ASSERT_TRUE(refusal->has_refusal());
  EXPECT_EQ(refusal->refusal().code(), "malformed_frame");
  EXPECT_TRUE(mpx.stopped_reading(conn)) << "the gate closed it";
  // Every other connection is untouched: its handshake still completes.
  auto client = handshake(other);
  EXPECT_TRUE(client->established());
  EXPECT_FALSE(mpx.stopped_reading(other));
}

TEST_F(Gate, AnOversizedLengthIsRefusedBeforeAnythingIsAllocated) {
  ASSERT_TRUE(gate);
  auto conn = connect(13);
  send(conn, frame_length_prefix(64u << 20));
  auto text = log_text();
  EXPECT_NE(text.find("gate: closing"), std::string::npos) << text;
  auto recs = records(conn);
  ASSERT_EQ(recs.size(), 1u);
  auto refusal = decode_frame_body(recs[0].data(), recs[0].size());
  ASSERT_TRUE(refusal && refusal->has_refusal());
  EXPECT_EQ(refusal->refusal().code(), "frame_too_large");
  EXPECT_TRUE(mpx.stopped_reading(conn));
}

TEST_F(Gate, ATruncatedFrameIsLoggedWhenTheConnectionEndsBeforeItsBody) {
  ASSERT_TRUE(gate);
  auto conn = connect(14);
  // The header announces 100 bytes; 10 arrive, then the peer goes away.
  send(conn, frame_length_prefix(100) + std::string(10, 'x'));
  EXPECT_EQ(log_text().find("gate: closing"), std::string::npos)
    << "waiting for the rest is no error";
  mpx.impl_ptr(conn)->io_failure(&mpx, caf::io::network::operation::read);
  exec_all();
  auto text = log_text();
  EXPECT_NE(text.find("truncated frame (its header said 100 bytes; the connection "
                      "ended first)"),
            std::string::npos)
    << text;
}

TEST_F(Gate, APeerThatSendsNoHelloIsClosedAtTheHelloTimeoutOnVirtualTime) {
  ASSERT_TRUE(gate);
  auto conn = connect(15);
  auto client = handshake(conn);
  ASSERT_TRUE(client->established());
  sched.clock().advance_time(9s);
  exec_all();
  EXPECT_EQ(log_text().find("gate: closing"), std::string::npos) << log_text();
  sched.clock().advance_time(1s);
  exec_all();
  auto text = log_text();
  EXPECT_NE(text.find("did not finish its handshake and hello within 10000 ms"),
            std::string::npos)
    << text;
  auto refusal = frames(conn, *client);
  ASSERT_EQ(refusal.size(), 1u);
  EXPECT_EQ(refusal[0].refusal().code(), "timeout");
}
