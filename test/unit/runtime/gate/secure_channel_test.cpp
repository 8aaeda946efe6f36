// The gate's secure channel (issue 7): both sides prove their Ed25519
// identity, an agent refuses an impostor controller, and every frame after
// the handshake is sealed and numbered, so a replayed, reordered, dropped or
// tampered frame ends the session.

#include <fstream>

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "actor_fixture.hpp"
#include "channel_forgery.hpp"
#include "messages/error.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/secure_channel.hpp"

using namespace astraeus;

namespace {

using keys = std::shared_ptr<const identity_keypair>;

keys new_keys() {
  return std::make_shared<const identity_keypair>(identity_keypair::generate());
}

/// The record after the length prefix of `bytes` (one whole record).
std::string body_of(const std::string& bytes) {
  EXPECT_GE(bytes.size(), frame_header_size);
  auto len = decode_frame_length(bytes.data(), 1u << 30);
  EXPECT_TRUE(len);
  EXPECT_EQ(bytes.size(), frame_header_size + *len);
  return bytes.substr(frame_header_size);
}

/// A client and a server, handshake done.
struct pair {
  keys server_keys = new_keys();
  keys client_keys = new_keys();
  channel_server server{server_keys};
  channel_client client{client_keys, server_keys->public_bytes};
  /// What the client sent: hello, then the sealed auth.
  std::string hello_bytes, auth_bytes;

  bool handshake() {
    hello_bytes = client.start();
    auto h = body_of(hello_bytes);
    auto accept = server.on_record(h.data(), h.size());
    if (!accept) {
      ADD_FAILURE() << render_error(accept.error());
      return false;
    }
    auto a = body_of(accept->reply);
    auto auth = client.on_record(a.data(), a.size());
    if (!auth) {
      ADD_FAILURE() << render_error(auth.error());
      return false;
    }
    EXPECT_TRUE(auth->established);
    auth_bytes = auth->reply;
    auto b = body_of(auth_bytes);
    auto done = server.on_record(b.data(), b.size());
    if (!done) {
      ADD_FAILURE() << render_error(done.error());
      return false;
    }
    EXPECT_TRUE(done->established);
    return server.established() && client.established();
  }
};

v1::Frame report(const std::string& machine, uint64_t seq) {
  v1::Frame f;
  f.mutable_report()->set_machine(machine);
  f.mutable_report()->set_sequence(seq);
  return f;
}

caf::expected<v1::Frame> deliver(channel_server& server, const std::string& bytes) {
  auto b = body_of(bytes);
  auto step = server.on_record(b.data(), b.size());
  if (!step)
    return step.error();
  if (!step->frame)
    return caf::make_error(ec::protocol_violation, "no frame");
  return std::move(*step->frame);
}

} // namespace

TEST(SecureChannel, BothSidesLearnTheOthersKeyAndFramesFlowBothWays) {
  pair p;
  ASSERT_TRUE(p.handshake());
  EXPECT_EQ(p.server.peer_key(), p.client_keys->public_bytes);
  EXPECT_EQ(p.client.server_key(), p.server_keys->public_bytes);
  auto up = deliver(p.server, p.client.encode(report("gpu-01", 1)));
  ASSERT_TRUE(up) << render_error(up.error());
  EXPECT_EQ(up->report().machine(), "gpu-01");
  v1::Frame welcome;
  welcome.mutable_welcome()->set_cluster("lab");
  auto down = body_of(p.server.encode(welcome));
  auto step = p.client.on_record(down.data(), down.size());
  ASSERT_TRUE(step) << render_error(step.error());
  ASSERT_TRUE(step->frame);
  EXPECT_EQ(step->frame->welcome().cluster(), "lab");
}

TEST(SecureChannel, SealedFramesDoNotShowTheirContent) {
  pair p;
  ASSERT_TRUE(p.handshake());
  v1::Frame f;
  f.mutable_hello()->set_join_token("astj_secret-value-that-must-not-show");
  auto bytes = p.client.encode(f);
  EXPECT_EQ(bytes.find("secret-value"), std::string::npos);
}

TEST(SecureChannel, AnAgentRefusesAnImpostorController) {
  auto real = new_keys();
  auto impostor = new_keys();
  channel_server server{impostor};
  channel_client client{new_keys(), real->public_bytes};
  auto h = body_of(client.start());
  auto accept = server.on_record(h.data(), h.size());
  ASSERT_TRUE(accept);
  auto a = body_of(accept->reply);
  auto step = client.on_record(a.data(), a.size());
  ASSERT_FALSE(step);
  EXPECT_EQ(step.error(), ec::handshake_failed);
  EXPECT_NE(render_error(step.error()).find("not the pinned key"), std::string::npos)
    << render_error(step.error());
}

TEST(SecureChannel, AForgedOrSwappedServerSignatureIsRefused) {
  auto server_keys = new_keys();
  channel_server server{server_keys};
  channel_client client{new_keys(), std::nullopt};
  auto h = body_of(client.start());
  auto accept = server.on_record(h.data(), h.size());
  ASSERT_TRUE(accept);
  auto frame = decode_frame_body(accept->reply.data() + 4, accept->reply.size() - 4);
  ASSERT_TRUE(frame);
  // Another key presented with the real signature: the transcript differs.
  frame->mutable_channel_accept()->set_identity_key(
    std::string(reinterpret_cast<const char*>(new_keys()->public_bytes.data()), 32));
  auto bytes = frame->SerializeAsString();
  auto step = client.on_record(bytes.data(), bytes.size());
  ASSERT_FALSE(step);
  EXPECT_EQ(step.error(), ec::handshake_failed);
}

TEST(SecureChannel, AReplayedOrReorderedOrDroppedFrameEndsTheSession) {
  for (int variant = 0; variant < 3; ++variant) {
    pair p;
    ASSERT_TRUE(p.handshake());
    auto first = p.client.encode(report("gpu-01", 1));
    auto second = p.client.encode(report("gpu-01", 2));
    if (variant == 0) { // replayed
      ASSERT_TRUE(deliver(p.server, first));
      auto again = deliver(p.server, first);
      ASSERT_FALSE(again);
      EXPECT_EQ(again.error(), ec::channel_broken);
    } else if (variant == 1) { // reordered
      auto out_of_order = deliver(p.server, second);
      ASSERT_FALSE(out_of_order);
      EXPECT_EQ(out_of_order.error(), ec::channel_broken);
    } else { // the first dropped: the second no longer opens
      auto after_drop = deliver(p.server, second);
      ASSERT_FALSE(after_drop);
    }
    // And the session stays ended: not even the right next frame opens.
    auto later = deliver(p.server, p.client.encode(report("gpu-01", 3)));
    EXPECT_FALSE(later) << "variant " << variant;
  }
}

TEST(SecureChannel, AFlippedBitAnywhereIsRefused) {
  pair p;
  ASSERT_TRUE(p.handshake());
  auto bytes = p.client.encode(report("gpu-01", 1));
  for (size_t i = frame_header_size; i < bytes.size(); i += 7) {
    pair q;
    ASSERT_TRUE(q.handshake());
    auto good = q.client.encode(report("gpu-01", 1));
    good[i] = static_cast<char>(good[i] ^ 0x01);
    auto opened = deliver(q.server, good);
    ASSERT_FALSE(opened) << "byte " << i;
    EXPECT_EQ(opened.error(), ec::channel_broken);
    EXPECT_NE(render_error(opened.error()).find("did not open"),
              std::string::npos)
      << "byte " << i << ": " << render_error(opened.error());
  }
}

TEST(SecureChannel, AChannelAuthReplayedFromAnotherSessionIsRefused) {
  // A recorded session of a real agent, replayed byte for byte to the gate:
  // the gate's ephemeral key is new, so the sealed auth does not even open.
  pair recorded;
  ASSERT_TRUE(recorded.handshake());
  channel_server fresh{recorded.server_keys};
  auto h = body_of(recorded.hello_bytes);
  ASSERT_TRUE(fresh.on_record(h.data(), h.size()));
  auto b = body_of(recorded.auth_bytes);
  auto step = fresh.on_record(b.data(), b.size());
  ASSERT_FALSE(step);
  EXPECT_FALSE(fresh.established());

  // An attacker runs its own handshake and presents the agent's key with a
  // signature the agent really made, but for another session's transcript
  // (as a controller the agent once talked to could relay it).
  auto agent = recorded.client_keys;
  channel_server gate{new_keys()};
  test::forged_client attacker;
  auto ch = body_of(attacker.hello());
  auto acc = gate.on_record(ch.data(), ch.size());
  ASSERT_TRUE(acc);
  auto ab = body_of(acc->reply);
  auto sealed = attacker.on_accept(ab.data(), ab.size());
  ASSERT_TRUE(sealed);
  auto stolen = test::forged_client::auth(
    agent->public_bytes, test::forged_client::foreign_signature(*agent));
  auto forged = deliver(gate, sealed->seal_frame(stolen));
  ASSERT_FALSE(forged);
  EXPECT_EQ(forged.error(), ec::handshake_failed) << render_error(forged.error());
  EXPECT_NE(render_error(forged.error()).find("does not verify"), std::string::npos);
  EXPECT_FALSE(gate.established());
}

TEST(SecureChannel, OnlyAChannelHelloOpensTheHandshake) {
  channel_server server{new_keys()};
  v1::Frame report_first = report("gpu-01", 1);
  auto bytes = report_first.SerializeAsString();
  auto step = server.on_record(bytes.data(), bytes.size());
  ASSERT_FALSE(step);
  EXPECT_EQ(step.error(), ec::protocol_violation);
  EXPECT_NE(render_error(step.error()).find("before the secure handshake"),
            std::string::npos);
  // A version 1 peer's plain hello is told the versions.
  channel_server server2{new_keys()};
  v1::Frame old;
  old.mutable_hello()->set_protocol_version(1);
  bytes = old.SerializeAsString();
  step = server2.on_record(bytes.data(), bytes.size());
  ASSERT_FALSE(step);
  EXPECT_EQ(step.error(), ec::incompatible_protocol);
  // Before the handshake only small records are taken.
  EXPECT_EQ(server2.record_cap(1u << 20), handshake_record_cap);
}

TEST(SecureChannel, TheKeyIsKeptPrivateAndReloaded) {
  test::temp_dir dir;
  auto path = dir.path() + "/keys/identity.key";
  auto first = load_or_create_keypair(path);
  ASSERT_TRUE(first) << render_error(first.error());
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto again = load_or_create_keypair(path);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->public_bytes, first->public_bytes);
  std::ofstream{path} << "not a key\n";
  auto broken = load_or_create_keypair(path);
  ASSERT_FALSE(broken);
  EXPECT_NE(render_error(broken.error()).find(path), std::string::npos);
}

TEST(SecureChannel, PublicKeysParseFromHexOnly) {
  auto k = identity_keypair::generate();
  auto parsed = parse_public_key(" " + k.public_hex() + "\n", "x");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(*parsed, k.public_bytes);
  auto bad = parse_public_key("abc", "controller.public_key");
  ASSERT_FALSE(bad);
  EXPECT_NE(render_error(bad.error()).find("controller.public_key"), std::string::npos);
}
