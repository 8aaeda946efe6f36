#pragma once
/// @file
/// The controller's HTTP API (shared/DESIGN.md, "HTTP API and console";
/// issue 19): HTTPS on cpp-httplib with OpenSSL (plain HTTP only on a
/// loopback address), at the seeds' paths, for one organisation and
/// cluster whose names are settings:
///
///   /api/v1/orgs/{org}/clusters/{cluster}/...   (machines.md, gpus.md)
///   /v1/organizations/{org}/clusters/{cluster}/... (bring-up-a-gpu-cluster.md)
///
/// Every answer is JSON: objects through the protobuf JSON mapping
/// (messages/json.hpp, the same objects as `astra -o json`), errors as
/// {"code","message"} with the code in the seeds' spelling (NOT_CONNECTED,
/// ENROLLMENT_USED, NO_SUCH_MACHINE) and the status it means: 400 a bad
/// body or parameter (naming it), 401 no or a bad token, 403 a role that may
/// not, 404 an unknown thing (NO_ROUTE: an unknown route), 405 a known path with another method,
/// 409 a conflict (name in use, machine not connected; FAILED_PRECONDITION: the
/// cluster's state refuses it, e.g. revoking the last owner token), 413 a body over
/// api.body_cap, 429 too many requests waiting, 501 not built yet, 504 the
/// cluster did not answer in time. Creates answer 201 with Location. Lists
/// page with `?limit=N&cursor=C` (the next cursor in X-Next-Cursor) and
/// watch with `?index=N&wait=30s` (Nomad's blocking query; the view's index
/// in X-Astraeus-Index). `GET /api/v1/openapi.json` lists every route.
/// `GET /metrics`: runtime/http/prometheus_metrics.hpp.
///
/// HTTP threads call the backend (runtime/http/api_backend.hpp); no actor
/// ever blocks on a socket.

#include <cstdint>
#include <memory>
#include <string>

#include <caf/expected.hpp>

#include "runtime/http/api_backend.hpp"

namespace astraeus {

/// How the API server runs.
struct api_server_config {
  /// Address and port to listen on (port 0: any free one, see `port()`).
  std::string host = "0.0.0.0";
  uint16_t port = 7451;
  /// Plain HTTP instead of HTTPS; refused unless `host` is loopback.
  bool plain_http = false;
  /// PEM certificate and key (HTTPS).
  std::string certificate_path;
  std::string private_key_path;
  /// The names in the paths.
  std::string organization = "default";
  std::string cluster = "default";
  /// HOST:PORT of the gate for install commands; a HOST of "" is replaced
  /// by the host the client reached the API at.
  std::string gate_address;
  /// The gate's public key (hex), for install.sh and install commands.
  std::string gate_key_hex;
  /// The folder /releases/ serves (runtime/http/install_server.hpp).
  std::string releases_dir;
  /// curl's --pinnedpubkey of the certificate when self-signed; empty: none.
  std::string curl_pin;
  /// The API's URL as machines reach it (api.advertise_url); empty: the
  /// scheme and the Host the client reached the API at.
  std::string advertise_url;
  /// Largest request body (larger: 413).
  uint64_t body_cap_bytes = 1 << 20;
  /// HTTP worker threads; requests beyond 4 per thread waiting get 429.
  uint32_t threads = 8;
  /// /metrics without a token (dev mode on loopback).
  bool metrics_open = false;
  /// A client silent for this long is cut off.
  std::chrono::milliseconds read_timeout{10000};
  /// How long one request may wait for the cluster.
  std::chrono::milliseconds request_timeout{10000};

  /// Checks the settings. Errors: ec::invalid_config naming the key.
  caf::error validate() const;
};

/// A running API server (its own threads); stopped when destroyed.
class api_server {
public:
  /// Binds and starts serving. Errors: the config's, ec::invalid_config
  /// when the address cannot be bound or the certificate not loaded.
  static caf::expected<std::unique_ptr<api_server>>
  start(api_server_config cfg, std::shared_ptr<api_backend> backend);

  ~api_server();
  api_server(const api_server&) = delete;
  api_server& operator=(const api_server&) = delete;

  /// The port it listens on.
  uint16_t port() const;
  /// "https" or "http".
  const char* scheme() const;
  /// Stops accepting and waits for the serving thread.
  void stop();

  struct impl;

private:
  explicit api_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// Splits "HOST:PORT" ("[::1]:7451" too). Errors: ec::invalid_config naming
/// `key`.
caf::expected<std::pair<std::string, uint16_t>> parse_host_port(const std::string& text,
                                                                const std::string& key);

/// Whether `host` is a loopback address or "localhost".
bool is_loopback_host(const std::string& host);

} // namespace astraeus
