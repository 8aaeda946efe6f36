#pragma once
/// @file
/// The gate's secure channel (issue 7; shared/DESIGN.md, "The gate"):
/// mutual authentication with Ed25519 identities on both sides, ephemeral
/// X25519 keys exchanged with libsodium's `crypto_kx` (forward secrecy), and
/// every frame after the handshake sealed with ChaCha20-Poly1305 (IETF) under
/// a per-direction key and numbered by an implicit counter, so that a
/// replayed, reordered, dropped or tampered frame fails to open and ends the
/// session.
///
/// The handshake (client C, server S = the gate), on the gate's
/// length-prefixed frames (runtime/gate/frame_codec.hpp):
///   1. C -> S, clear:  ChannelHello  {version, C's ephemeral key}
///   2. S -> C, clear:  ChannelAccept {version, S's ephemeral key, S's
///      Ed25519 key, S's signature of the transcript}
///   3. C -> S, sealed: ChannelAuth   {C's Ed25519 key, C's signature of the
///      transcript}
/// The transcript hash binds the version and both ephemeral keys and S's
/// identity, so a signature from another session or another machine never
/// verifies. From 3 on, every record each way is a sealed `v1::Frame`.
///
/// The classes here do no I/O: the gate (a CAF broker), the agent and the
/// blocking `gate_client` feed them records and write what they return.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// The gate protocol with the secure channel: a peer speaking version 1
/// (plain frames) is refused with `ec::incompatible_protocol`.
constexpr uint32_t channel_protocol_version = 2;

/// Largest record accepted before the handshake is complete, in bytes: a
/// ChannelHello or a sealed ChannelAuth is under 200 bytes. Checked on the
/// length prefix, before anything is allocated.
constexpr uint32_t handshake_record_cap = 1024;

/// An Ed25519 public key (32 bytes).
using public_key = std::array<uint8_t, 32>;

/// An Ed25519 key pair: a machine's or the gate's identity. The secret key
/// is wiped when the pair is destroyed.
struct identity_keypair {
  public_key public_bytes{};
  std::array<uint8_t, 64> secret_bytes{};

  /// A fresh random key pair.
  static identity_keypair generate();

  /// The public key as 64 lower-case hex digits.
  std::string public_hex() const;

  identity_keypair() = default;
  identity_keypair(const identity_keypair&) = default;
  identity_keypair& operator=(const identity_keypair&) = default;
  ~identity_keypair();
};

/// Loads the key pair kept at `path` (its 32-byte seed as 64 hex digits,
/// mode 0600), creating it (and its folder) on first use.
/// Errors: ec::store_failure naming the path when it cannot be read or
/// written; ec::invalid_config when the file does not hold a key.
caf::expected<identity_keypair> load_or_create_keypair(const std::string& path);

/// `bytes` as lower-case hex.
std::string to_hex(std::string_view bytes);

/// `key` as 64 lower-case hex digits.
std::string to_hex(const public_key& key);

/// Parses 64 hex digits (surrounding blanks ignored) into a public key.
/// Errors: ec::invalid_config saying what `what` ("controller.public_key")
/// held instead.
caf::expected<public_key> parse_public_key(std::string_view hex,
                                           std::string_view what);

/// A short, readable fingerprint of a key for logs: its first 16 hex digits.
std::string fingerprint(const public_key& key);

/// Seals and opens records under the session keys of one side. Each record
/// carries the next number implicitly (the AEAD nonce), so `open` fails on a
/// record that was replayed, reordered, dropped before it, or altered.
/// After a failure the channel stays failed.
class sealed_channel {
public:
  /// Bytes a sealed record adds to its plaintext (the Poly1305 tag).
  static constexpr size_t overhead = 16;

  sealed_channel() = default;
  sealed_channel(const std::array<uint8_t, 32>& rx,
                 const std::array<uint8_t, 32>& tx);
  sealed_channel(const sealed_channel&) = default;
  sealed_channel& operator=(const sealed_channel&) = default;
  ~sealed_channel();

  /// Seals `plaintext` as the next record this side sends.
  std::string seal(std::string_view plaintext);

  /// Opens the next record from the peer. Errors: ec::channel_broken ("sealed
  /// frame 7 did not open: tampered, replayed, reordered or one was
  /// dropped").
  caf::expected<std::string> open(const char* data, size_t size);

  /// `frame` serialized, sealed and length-prefixed: ready for the socket.
  std::string seal_frame(const v1::Frame& frame);

  /// Opens a record and parses it as a frame. Errors: as `open`, and those
  /// of `decode_frame_body`.
  caf::expected<v1::Frame> open_frame(const char* data, size_t size);

  /// Records sealed / opened so far.
  uint64_t sent() const {
    return sent_;
  }
  uint64_t received() const {
    return received_;
  }

private:
  std::array<uint8_t, 32> rx_{};
  std::array<uint8_t, 32> tx_{};
  uint64_t sent_ = 0;
  uint64_t received_ = 0;
  bool failed_ = false;
};

/// What feeding a record to one side of the channel produced.
struct channel_step {
  /// Bytes to write to the peer now (length-prefixed), possibly empty.
  std::string reply;
  /// A frame for the application (only once the channel is established).
  std::optional<v1::Frame> frame;
  /// The handshake completed with this record.
  bool established = false;
};

/// The gate's side of the channel.
class channel_server {
public:
  /// `identity`: the gate's key pair (shared, read-only).
  explicit channel_server(std::shared_ptr<const identity_keypair> identity);

  /// Feeds one record (the bytes after a length prefix). Before the
  /// handshake completes it must be the next handshake message; after, a
  /// sealed frame, returned in `frame`. Errors end the session:
  /// ec::incompatible_protocol (a version 1 peer, or another version),
  /// ec::protocol_violation (a frame out of order), ec::malformed_frame,
  /// ec::handshake_failed (bad key or signature), ec::channel_broken.
  caf::expected<channel_step> on_record(const char* data, size_t size);

  /// `frame` sealed for the peer (once established) or in the clear (before:
  /// only a refusal is ever sent so).
  std::string encode(const v1::Frame& frame);

  /// The handshake completed.
  bool established() const {
    return state_ == state::established;
  }

  /// Largest record to accept next, given the gate's cap for sealed frames.
  uint64_t record_cap(uint64_t frame_cap) const {
    return established() ? frame_cap + sealed_channel::overhead
                         : handshake_record_cap;
  }

  /// The peer's Ed25519 key as it proved it (valid once established).
  const public_key& peer_key() const {
    return peer_;
  }

private:
  enum class state { awaiting_hello, awaiting_auth, established, failed };
  std::shared_ptr<const identity_keypair> identity_;
  state state_ = state::awaiting_hello;
  std::array<uint8_t, 32> transcript_{};
  public_key peer_{};
  sealed_channel channel_;
};

/// The connecting side of the channel (an agent, `astra`).
class channel_client {
public:
  /// `identity`: this side's key pair. `pinned`: the only gate key accepted;
  /// nullopt accepts any correctly signed key (see `server_key`).
  channel_client(std::shared_ptr<const identity_keypair> identity,
                 std::optional<public_key> pinned);
  ~channel_client();
  channel_client(const channel_client&) = delete;
  channel_client& operator=(const channel_client&) = delete;

  /// The first record to send: a length-prefixed ChannelHello.
  std::string start();

  /// Feeds one record from the gate. The first must be its ChannelAccept:
  /// on success `reply` holds the sealed ChannelAuth and `established` is
  /// set. Then every record is a sealed frame, returned in `frame`; except
  /// that a clear Refusal before the handshake is returned as it is.
  /// Errors: ec::handshake_failed (the gate's key is not the pinned one, a
  /// bad signature), ec::incompatible_protocol, ec::channel_broken,
  /// ec::malformed_frame.
  caf::expected<channel_step> on_record(const char* data, size_t size);

  /// `frame` sealed and length-prefixed; only once established.
  std::string encode(const v1::Frame& frame);

  bool established() const {
    return established_;
  }

  /// The gate's Ed25519 key (valid once established).
  const public_key& server_key() const {
    return server_;
  }

  /// Largest record to accept next, given the cap for sealed frames.
  uint64_t record_cap(uint64_t frame_cap) const {
    return established_ ? frame_cap + sealed_channel::overhead
                        : handshake_record_cap;
  }

private:
  std::shared_ptr<const identity_keypair> identity_;
  std::optional<public_key> pinned_;
  std::array<uint8_t, 32> eph_pk_{};
  std::array<uint8_t, 32> eph_sk_{};
  bool started_ = false;
  bool established_ = false;
  public_key server_{};
  sealed_channel channel_;
};

} // namespace astraeus
