#pragma once
/// @file
/// A small client of etcd 3.4's JSON gateway (`POST /v3/...`, the gRPC API
/// mapped to JSON): keys and values travel base64-encoded, int64s as
/// strings, errors as `{"error","message","code"}`; `watch` and
/// `lease/keepalive` answer with newline-delimited `{"result": ...}`
/// objects over one POST. See shared/notes/anchors/ha-anchors.md and the
/// README's HA section for why the gateway and not gRPC.

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

namespace astraeus {

/// `bytes` in standard base64 with padding (what the gateway expects).
std::string base64_encode(std::string_view bytes);

/// The bytes of standard base64 `text`; nullopt when it is not base64.
std::optional<std::string> base64_decode(std::string_view text);

/// The end of the key range that holds exactly the keys starting with
/// `prefix`: the prefix with its last byte below 0xff incremented (etcd's
/// `range_end`). "\0" (every key) for an empty or all-0xff prefix.
std::string prefix_range_end(std::string_view prefix);

/// A client of one etcd cluster's JSON gateway. Thread-safe: a pool of
/// `connections` keep-alive connections per endpoint, so calls from several
/// threads (the lease's renewal, a group commit's transactions, the API's
/// reads) run side by side instead of waiting for each other; a call waits
/// only when every connection is busy. On a connection failure a call moves
/// on to the next endpoint (every member of the cluster answers every
/// call), and keeps the one that answered for the next call.
class etcd_gateway {
public:
  /// Connections per endpoint by default.
  static constexpr size_t default_connections = 4;

  /// `endpoints`: "HOST:PORT" or "http://HOST:PORT" (at least one);
  /// `timeout`: how long one call may take, connecting included;
  /// `connections`: calls in flight at once (at least 1).
  etcd_gateway(std::vector<std::string> endpoints, std::chrono::milliseconds timeout,
               size_t connections = default_connections);

  /// How many calls may be in flight at once.
  size_t connections() const;
  ~etcd_gateway();

  etcd_gateway(const etcd_gateway&) = delete;
  etcd_gateway& operator=(const etcd_gateway&) = delete;

  /// POSTs `body` to `path` ("/v3/kv/range") and returns etcd's JSON answer.
  /// Errors: `ec::unreachable` "etcd: no endpoint answered (ENDPOINT:
  /// REASON; ...)"; `ec::store_failure` "etcd ENDPOINT PATH: MESSAGE" for an
  /// error etcd returned (its message as etcd wrote it, e.g.
  /// "etcdserver: mvcc: database space exceeded").
  caf::expected<nlohmann::json> call(const std::string& path, const nlohmann::json& body);

  /// POSTs `body` to a streaming `path` ("/v3/watch") and calls `on_result`
  /// with every `result` object as it arrives, until it returns false, the
  /// server ends the stream, or nothing arrives for `idle` (then returns
  /// without error: the caller decides whether to stream again).
  /// Errors: as for `call`.
  caf::error stream(const std::string& path, const nlohmann::json& body,
                    const std::function<bool(const nlohmann::json&)>& on_result,
                    std::chrono::milliseconds idle);

  /// The endpoint the last call used (for messages).
  std::string endpoint() const;

  /// Every endpoint, comma-separated (for messages).
  std::string endpoints() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace astraeus
