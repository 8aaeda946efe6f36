#pragma once
/// @file
/// A blocking client of the controller's gate, for `astra`, scripts and
/// integration tests: connect, run the secure channel's handshake
/// (runtime/gate/secure_channel.hpp), say hello, then send requests and read the
/// responses, one at a time. Every frame after the handshake is sealed. Not
/// for use inside an actor.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/secure_channel.hpp"

namespace astraeus {

/// Default gate address that `astra` uses (override: `--addr`, `ASTRAEUS_ADDR`).
constexpr const char* default_gate_address = "127.0.0.1:7450";

/// A host and a TCP port.
struct gate_address {
  std::string host;   ///< name or IP literal; "[::1]" brackets are removed
  uint16_t port = 0;  ///< 1-65535
};

/// Parses "HOST:PORT", "HOST" (default port 7450) or "[V6]:PORT".
/// Errors: `ec::invalid_request` naming the text when the port is not
/// 1-65535, or when an unbracketed host holds ':', ';', ',', '/' or a blank
/// (two addresses run together: "A:1;B:2").
caf::expected<gate_address> parse_gate_address(const std::string& text);

/// "HOST:PORT" (brackets around an IPv6 literal).
std::string to_string(const gate_address& addr);

/// Parses a comma-separated list of gate addresses, "A,B,C" (blanks around
/// each ignored), as `parse_gate_address` each: HA mode's controllers.
/// Errors: `ec::invalid_request` naming the bad entry, or saying the list
/// holds no address.
caf::expected<std::vector<gate_address>> parse_gate_addresses(const std::string& text);

/// Who the client is and whom it trusts.
struct gate_credentials {
  /// This side's Ed25519 key pair; null: a fresh one for this connection
  /// (the CLI, which authenticates with its API token instead).
  std::shared_ptr<const identity_keypair> identity;
  /// The only gate key accepted; nullopt: any key that signs the handshake
  /// (the connection is still sealed; `server_key()` says which it was).
  std::optional<public_key> pinned;
  /// The CLI's API token, sent in its hello (sealed).
  std::string api_token;
};

/// One connection to the gate. Move-only; closes the socket when destroyed.
class gate_client {
public:
  gate_client(gate_client&& other) noexcept;
  gate_client& operator=(gate_client&& other) noexcept;
  gate_client(const gate_client&) = delete;
  gate_client& operator=(const gate_client&) = delete;
  ~gate_client();

  /// Connects to `addr` and completes the secure channel's handshake, but
  /// sends no hello (tests send what they like next). Errors:
  /// `ec::unreachable` ("cannot reach the controller at HOST:PORT:
  /// connection refused") when the TCP connection fails or `timeout` passes;
  /// `ec::handshake_failed` (e.g. the gate's key is not the pinned one);
  /// when the gate refuses, `ec::protocol_violation` with its reason, except
  /// a standby's answer in HA mode (actors/controller/standby_gate.hpp):
  /// `ec::not_leader` ("the controller at HOST:PORT is a standby; the
  /// leader's gate is L"), `ec::no_leader` (an election is under way).
  /// `refused`, when given, receives the gate's refusal (its `leader`).
  static caf::expected<gate_client> open(const gate_address& addr,
                                         const gate_credentials& creds,
                                         std::chrono::milliseconds timeout,
                                         v1::Refusal* refused = nullptr);

  /// Sends `hello` on an open channel and waits for the welcome. Errors:
  /// the refusal's code and reason; `ec::timeout`; `ec::unreachable`.
  caf::error hello(const v1::Hello& hello, std::chrono::milliseconds timeout);

  /// `open`, then `hello`.
  static caf::expected<gate_client> connect(const gate_address& addr,
                                            const v1::Hello& hello,
                                            std::chrono::milliseconds timeout,
                                            const gate_credentials& creds = {},
                                            v1::Refusal* refused = nullptr);

  /// Connects as the CLI (role `CLI`, this build's protocol version, the
  /// API token of `creds`).
  static caf::expected<gate_client> connect_cli(const gate_address& addr,
                                                std::chrono::milliseconds timeout,
                                                const gate_credentials& creds = {},
                                                v1::Refusal* refused = nullptr);

  /// Connects as the CLI to the controller that leads, given any of an HA
  /// group's gates in any order (one is enough: a standby names the
  /// leader), or a single controller's. Tries `addrs` in order, each for at
  /// most max(timeout / addrs, 1 s); a standby's `not_leader` answer sends
  /// it to the gate that answer names next. While a standby says none leads
  /// yet, or names a leader that does not answer yet (its lease has not run
  /// out), it tries again every 250 ms until `timeout`. Errors: one that is
  /// the leader's answer (a refused token, a key that is not the pinned
  /// one) at once, as `connect_cli` returns it; with one address tried
  /// once, that attempt's error as it is; otherwise `ec::unreachable`
  /// naming every address tried and the last thing each answered, one per
  /// line.
  static caf::expected<gate_client>
  connect_cli_leader(const std::vector<gate_address>& addrs,
                     std::chrono::milliseconds timeout, const gate_credentials& creds = {});

  /// The address this client is connected to, "HOST:PORT".
  const std::string& peer() const {
    return peer_;
  }

  /// The gate's Ed25519 key, as the handshake proved it.
  const public_key& server_key() const {
    return channel_->server_key();
  }

  /// The controller's welcome.
  const v1::Welcome& welcome() const {
    return welcome_;
  }

  /// Sends `req` (its id is assigned here) and waits up to `timeout` for the
  /// matching response. A response carrying `error` is returned as a value;
  /// transport failures are errors (`ec::unreachable`, `ec::timeout`,
  /// `ec::malformed_frame`).
  caf::expected<v1::Response> call(v1::Request req,
                                   std::chrono::milliseconds timeout);

  /// Sends one frame, sealed.
  caf::error send(const v1::Frame& frame);

  /// Sends bytes as they are (tests: a tampered or replayed record).
  caf::error send_raw(const std::string& bytes);

  /// Waits up to `timeout` for the next frame (opened).
  caf::expected<v1::Frame> receive(std::chrono::milliseconds timeout);

private:
  explicit gate_client(int fd, std::string peer);
  /// The next record's bytes, waiting up to `deadline`.
  caf::expected<std::string> receive_record(std::chrono::steady_clock::time_point deadline,
                                            std::chrono::milliseconds timeout);
  int fd_ = -1;
  std::string peer_;
  uint64_t next_id_ = 1;
  /// Its cap follows the session: the handshake's, then 64 MiB for answers.
  frame_reader reader_;
  std::unique_ptr<channel_client> channel_;
  v1::Welcome welcome_;
  /// The refusal that answered the last `hello`, if one did.
  v1::Refusal last_refusal_;
};

} // namespace astraeus
