#pragma once
// The client's side of the secure channel's handshake done by hand
// (libsodium directly), so that an attack test can seal whatever ChannelAuth
// it likes as the first sealed record: a key it does not hold, a signature
// from another session.

#include <array>
#include <cstdlib>
#include <string>

#include <sodium.h>

#include "messages/error.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/secure_channel.hpp"

namespace astraeus::test {

class forged_client {
public:
  forged_client() {
    if (sodium_init() < 0)
      std::abort();
    crypto_kx_keypair(pk_.data(), sk_.data());
  }

  /// The length-prefixed ChannelHello to send first.
  std::string hello() const {
    v1::Frame f;
    f.mutable_channel_hello()->set_protocol_version(channel_protocol_version);
    f.mutable_channel_hello()->set_ephemeral_key(
      std::string(reinterpret_cast<const char*>(pk_.data()), pk_.size()));
    return encode_frame(f);
  }

  /// The session's channel from the gate's ChannelAccept (its record body),
  /// without checking the gate's signature: what an attacker can always do.
  caf::expected<sealed_channel> on_accept(const char* data, size_t size) const {
    auto frame = decode_frame_body(data, size);
    if (!frame)
      return frame.error();
    const auto& eph = frame->channel_accept().ephemeral_key();
    if (eph.size() != 32)
      return caf::make_error(ec::handshake_failed, "no channel accept");
    std::array<uint8_t, 32> rx{}, tx{};
    if (crypto_kx_client_session_keys(rx.data(), tx.data(), pk_.data(), sk_.data(),
                                      reinterpret_cast<const uint8_t*>(eph.data()))
        != 0)
      return caf::make_error(ec::handshake_failed, "bad key");
    return sealed_channel{rx, tx};
  }

  /// A ChannelAuth naming `key` with `signature`.
  static v1::Frame auth(const public_key& key, const std::string& signature) {
    v1::Frame f;
    f.mutable_channel_auth()->set_identity_key(
      std::string(reinterpret_cast<const char*>(key.data()), key.size()));
    f.mutable_channel_auth()->set_signature(signature);
    return f;
  }

  /// A signature by `keys` of a transcript of another session.
  static std::string foreign_signature(const identity_keypair& keys) {
    std::string msg = std::string{"astraeus gate: client signs"} + std::string(32, '\x42')
                      + std::string(reinterpret_cast<const char*>(keys.public_bytes.data()), 32);
    std::string sig(crypto_sign_BYTES, '\0');
    crypto_sign_detached(reinterpret_cast<uint8_t*>(sig.data()), nullptr,
                         reinterpret_cast<const uint8_t*>(msg.data()), msg.size(),
                         keys.secret_bytes.data());
    return sig;
  }

private:
  std::array<uint8_t, 32> pk_{};
  std::array<uint8_t, 32> sk_{};
};

} // namespace astraeus::test
