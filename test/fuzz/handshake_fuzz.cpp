// libFuzzer target: both sides of the secure channel's handshake
// (runtime/gate/secure_channel.hpp) fed arbitrary records, and an established
// channel fed arbitrary sealed records. Invariants: no crash, no sanitizer
// report, and nothing the fuzzer makes ever completes a handshake or opens
// as a sealed frame (it cannot sign for a key nor seal without the session
// keys). Issue 7.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/secure_channel.hpp"

using namespace astraeus;

namespace {

std::shared_ptr<const identity_keypair> keys() {
  static auto k = std::make_shared<const identity_keypair>(identity_keypair::generate());
  return k;
}

std::shared_ptr<const identity_keypair> other_keys() {
  static auto k = std::make_shared<const identity_keypair>(identity_keypair::generate());
  return k;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  auto mode = data[0] % 3;
  frame_reader reader{1u << 16};
  reader.feed(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode == 0) {
    // The gate's side, from its first record on.
    channel_server server{keys()};
    for (;;) {
      auto r = reader.next_record();
      if (!r || !*r)
        break;
      auto step = server.on_record((*r)->data(), (*r)->size());
      if (!step)
        break;
      if (step->established || step->frame)
        std::abort(); // a forged client was accepted
    }
  } else if (mode == 1) {
    // The connecting side, pinned to the gate's key.
    channel_client client{other_keys(), keys()->public_bytes};
    (void) client.start();
    for (;;) {
      auto r = reader.next_record();
      if (!r || !*r)
        break;
      auto step = client.on_record((*r)->data(), (*r)->size());
      if (!step)
        break;
      if (step->established)
        std::abort(); // a forged gate was accepted
    }
  } else {
    // A real handshake, then the fuzzer's bytes as sealed records.
    channel_server server{keys()};
    channel_client client{other_keys(), keys()->public_bytes};
    auto hello = client.start();
    auto accept = server.on_record(hello.data() + 4, hello.size() - 4);
    if (!accept)
      std::abort();
    auto auth = client.on_record(accept->reply.data() + 4, accept->reply.size() - 4);
    if (!auth)
      std::abort();
    if (!server.on_record(auth->reply.data() + 4, auth->reply.size() - 4))
      std::abort();
    for (;;) {
      auto r = reader.next_record();
      if (!r || !*r)
        break;
      auto step = server.on_record((*r)->data(), (*r)->size());
      if (step)
        std::abort(); // the fuzzer sealed a frame without the keys
      break;
    }
  }
  return 0;
}
