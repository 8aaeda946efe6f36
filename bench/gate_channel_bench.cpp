// The secure gate's cost (issue 7; plain main, figures in bench/RESULTS.md):
//
//   gate_channel_bench [--seconds S]
//
// - handshakes/s: a whole handshake in one process, both sides
//   (runtime/gate/secure_channel.hpp): the client's hello, the gate's accept
//   (X25519 key pair, crypto_kx, an Ed25519 signature), the client's check
//   and sealed auth (crypto_kx, a verify, a signature), the gate's check (a
//   verify). No sockets: the CPU cost of admitting one peer.
// - frames/s and MB/s for 1 KiB and 64 KiB frames (a MachineReport padded to
//   size), each frame encoded by one side and decoded by the other: unsealed
//   (encode_frame, then parse), against sealed (serialize, seal with
//   ChaCha20-Poly1305 under the session key, then open and parse).

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/secure_channel.hpp"

using namespace astraeus;
using steady = std::chrono::steady_clock;

namespace {

double seconds_since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

v1::Frame frame_of(size_t bytes) {
  v1::Frame f;
  auto* r = f.mutable_report();
  r->set_machine("gpu-0001");
  r->set_sequence(1);
  r->mutable_facts()->set_hostname(std::string(bytes, 'h'));
  // Trim the padding so the serialized frame is `bytes` long.
  auto over = f.ByteSizeLong() - bytes;
  r->mutable_facts()->set_hostname(std::string(bytes - over, 'h'));
  return f;
}

struct session {
  std::shared_ptr<const identity_keypair> gate_keys =
    std::make_shared<const identity_keypair>(identity_keypair::generate());
  std::shared_ptr<const identity_keypair> agent_keys =
    std::make_shared<const identity_keypair>(identity_keypair::generate());
  channel_server server{gate_keys};
  channel_client client{agent_keys, gate_keys->public_bytes};

  bool handshake() {
    auto hello = client.start();
    auto accept = server.on_record(hello.data() + 4, hello.size() - 4);
    if (!accept)
      return false;
    auto auth = client.on_record(accept->reply.data() + 4, accept->reply.size() - 4);
    if (!auth)
      return false;
    auto done = server.on_record(auth->reply.data() + 4, auth->reply.size() - 4);
    return done && done->established;
  }
};

} // namespace

int main(int argc, char** argv) {
  double budget = 2.0;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--seconds") == 0)
      budget = std::atof(argv[i + 1]);

  // Handshakes: fresh keys per run are not counted (a peer's identity is
  // made once); the channel objects are.
  auto gate_keys = std::make_shared<const identity_keypair>(identity_keypair::generate());
  auto agent_keys = std::make_shared<const identity_keypair>(identity_keypair::generate());
  uint64_t handshakes = 0;
  auto t0 = steady::now();
  while (seconds_since(t0) < budget) {
    channel_server server{gate_keys};
    channel_client client{agent_keys, gate_keys->public_bytes};
    auto hello = client.start();
    auto accept = server.on_record(hello.data() + 4, hello.size() - 4);
    auto auth = client.on_record(accept->reply.data() + 4, accept->reply.size() - 4);
    auto done = server.on_record(auth->reply.data() + 4, auth->reply.size() - 4);
    if (!done || !done->established) {
      std::fprintf(stderr, "handshake failed\n");
      return 1;
    }
    ++handshakes;
  }
  auto hs_s = seconds_since(t0);
  std::printf("handshakes: %llu in %.2f s = %.0f /s (%.1f us each, both sides)\n",
              static_cast<unsigned long long>(handshakes), hs_s, handshakes / hs_s,
              1e6 * hs_s / handshakes);

  for (size_t size : {size_t{1024}, size_t{64 * 1024}}) {
    auto frame = frame_of(size);
    // Unsealed: what the gate did before issue 7.
    uint64_t n = 0;
    t0 = steady::now();
    while (seconds_since(t0) < budget) {
      for (int k = 0; k < 64; ++k) {
        auto bytes = encode_frame(frame);
        auto back = decode_frame_body(bytes.data() + 4, bytes.size() - 4);
        if (!back)
          return 1;
      }
      n += 64;
    }
    auto plain_s = seconds_since(t0);
    // Sealed: the same frame through an established channel.
    session s;
    if (!s.handshake())
      return 1;
    uint64_t m = 0;
    t0 = steady::now();
    while (seconds_since(t0) < budget) {
      for (int k = 0; k < 64; ++k) {
        auto bytes = s.client.encode(frame);
        auto step = s.server.on_record(bytes.data() + 4, bytes.size() - 4);
        if (!step || !step->frame)
          return 1;
      }
      m += 64;
    }
    auto sealed_s = seconds_since(t0);
    auto mb = [&](uint64_t count, double secs) { return count * size / secs / 1e6; };
    std::printf("%5zu B frames: unsealed %9.0f frames/s %8.1f MB/s | sealed %9.0f "
                "frames/s %8.1f MB/s | sealed/unsealed %.2f\n",
                size, n / plain_s, mb(n, plain_s), m / sealed_s, mb(m, sealed_s),
                (m / sealed_s) / (n / plain_s));
  }
  return 0;
}
