#pragma once
/// @file
/// The bridge between the HTTP API's threads and the actors
/// (runtime/http/api_backend.hpp): each API call becomes a typed request to
/// the cluster actor with a deadline (`gate.request_timeout`), answered on
/// the calling HTTP thread through a `scoped_actor`, so the cluster answers
/// it as it answers `astra`'s: the same request table, roles and audit. No
/// actor blocks on a socket.
///
/// The read-only view (runtime/http/api_view.hpp) is rebuilt by the
/// bridge's own thread from three cluster requests (machines, GPUs, runs)
/// while the API is read and the view is older than `api.view_refresh` (or
/// four times the last rebuild, so rebuilding takes at most a fifth of a
/// core on a large cluster), at once after a write through the API, and
/// while a blocking query waits. A read that finds the view older than that
/// waits for a fresh one (a change made through `astra` shows on the next
/// read); reads within the period share the last one. An idle API costs
/// the actors nothing.
///
/// API tokens are checked with the cluster (atom::login, as the gate does)
/// and remembered for 5 s; a revocation through the API forgets them at
/// once, one through `astra` takes effect on the API within 5 s.

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include <caf/fwd.hpp>

#include "actors/interfaces.hpp"
#include "runtime/http/api_backend.hpp"
#include "runtime/http/api_server.hpp"
#include "runtime/process/config.hpp"

namespace astraeus {

/// How the bridge runs.
struct api_bridge_config {
  /// How long one request may wait for the cluster.
  std::chrono::milliseconds request_timeout{10000};
  /// How old the view may get while it is read.
  std::chrono::milliseconds view_refresh{1000};
  /// How long a checked token is remembered.
  std::chrono::milliseconds token_memory{5000};
};

/// The controller's api_backend.
class api_bridge final : public api_backend {
public:
  /// Starts the view's thread. `sys` and `cluster` must outlive the bridge.
  api_bridge(caf::actor_system& sys, cluster_actor cluster, api_bridge_config cfg);
  /// Stops the view's thread.
  ~api_bridge() override;
  api_bridge(const api_bridge&) = delete;
  api_bridge& operator=(const api_bridge&) = delete;

  caf::expected<v1::Principal> authenticate(const std::string& token) override;
  v1::Response call(v1::Request req) override;
  std::shared_ptr<const api_view> view() override;
  std::shared_ptr<const api_view> wait_view(uint64_t index,
                                            std::chrono::milliseconds wait) override;
  void refresh() override;
  void forget_tokens() override;

private:
  using steady = std::chrono::steady_clock;
  /// The view thread's loop.
  void run();
  /// Asks the cluster for machines, GPUs and runs and publishes a new view;
  /// keeps the old one (logged) when the cluster does not answer.
  void rebuild();

  caf::actor_system& sys_;
  cluster_actor cluster_;
  api_bridge_config cfg_;
  std::mutex mutex_;
  std::condition_variable changed_;      ///< a view was published or work is due
  std::shared_ptr<const api_view> view_; ///< the current view; null before the first
  steady::time_point built_at_{};        ///< when view_ was built
  steady::duration last_build_{};        ///< how long the last rebuild took
  steady::time_point last_read_{};       ///< the last view() call
  uint64_t asked_ = 0;                   ///< refreshes asked for
  uint64_t done_ = 0;                    ///< refreshes done (a build started after the ask)
  uint32_t watchers_ = 0;                ///< blocking queries waiting
  bool stopping_ = false;
  std::mutex tokens_mutex_;
  std::unordered_map<std::string, std::pair<v1::Principal, steady::time_point>> tokens_;
  std::thread thread_;
};

struct controller_handles;

/// A running HTTP API: the bridge and the server.
struct api_handles {
  std::shared_ptr<api_bridge> bridge;   ///< null when api.listen is off
  std::unique_ptr<api_server> server;   ///< null when api.listen is off
  std::string fingerprint;              ///< the certificate's SHA-256; empty on plain HTTP
  std::string address;                  ///< "https://0.0.0.0:7451"
};

/// Starts the HTTP API of controller `ctl` as `cfg`'s api.* keys say: the
/// certificate (created in the keys folder on first start unless
/// configured), the bridge and the server. api.listen "off": empty handles.
/// Errors: ec::invalid_config for a bad api.listen, plain HTTP off
/// loopback, a certificate that cannot be used, an address that cannot be
/// bound.
caf::expected<api_handles> start_api(caf::actor_system& sys, const controller_handles& ctl,
                                     const ControllerConfig& cfg);

} // namespace astraeus
