#pragma once
/// @file
/// A blocking client of the controller's gate, for `astra`, scripts and
/// integration tests: connect, say hello, then send requests and read the
/// responses, one at a time. Not for use inside an actor.

#include <chrono>
#include <cstdint>
#include <string>

#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"
#include "runtime/frame_codec.hpp"

namespace astraeus {

/// Default gate address that `astra` uses (override: `--addr`, `ASTRAEUS_ADDR`).
constexpr const char* default_gate_address = "127.0.0.1:7450";

/// A host and a TCP port.
struct gate_address {
  std::string host;   ///< name or IP literal; "[::1]" brackets are removed
  uint16_t port = 0;  ///< 1-65535
};

/// Parses "HOST:PORT", "HOST" (default port 7450) or "[V6]:PORT".
/// Errors: `ec::invalid_request` naming the text when the port is not 1-65535.
caf::expected<gate_address> parse_gate_address(const std::string& text);

/// One connection to the gate. Move-only; closes the socket when destroyed.
class gate_client {
public:
  gate_client(gate_client&& other) noexcept;
  gate_client& operator=(gate_client&& other) noexcept;
  gate_client(const gate_client&) = delete;
  gate_client& operator=(const gate_client&) = delete;
  ~gate_client();

  /// Connects to `addr`, sends `hello` and waits for the welcome.
  /// Errors: `ec::unreachable` ("cannot reach the controller at HOST:PORT:
  /// connection refused") when the TCP connection fails or `timeout` passes;
  /// the refusal's code and reason when the gate refuses the hello.
  static caf::expected<gate_client> connect(const gate_address& addr,
                                            const v1::Hello& hello,
                                            std::chrono::milliseconds timeout);

  /// Connects as the CLI (role `CLI`, this build's protocol version).
  static caf::expected<gate_client> connect_cli(const gate_address& addr,
                                                std::chrono::milliseconds timeout);

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

  /// Sends one raw frame.
  caf::error send(const v1::Frame& frame);

  /// Waits up to `timeout` for the next frame.
  caf::expected<v1::Frame> receive(std::chrono::milliseconds timeout);

private:
  explicit gate_client(int fd, std::string peer);
  int fd_ = -1;
  std::string peer_;
  uint64_t next_id_ = 1;
  /// Answers from the controller may be large (`astra runs` of a busy
  /// cluster): up to 64 MiB, the gate's own largest cap.
  frame_reader reader_{64u << 20};
  v1::Welcome welcome_;
};

} // namespace astraeus
