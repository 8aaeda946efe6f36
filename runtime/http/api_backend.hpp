#pragma once
/// @file
/// What the HTTP API needs of the controller, as a plain interface: the
/// HTTP threads call it, never an actor. The controller's implementation is
/// the bridge (actors/controller/api_bridge.hpp): it sends typed requests
/// with deadlines to the cluster actor and keeps the read-only view; tests
/// and the benchmark may pass their own.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"
#include "runtime/http/api_view.hpp"

namespace astraeus {

/// The controller as the HTTP API reaches it. Every member is called from
/// many HTTP threads at once.
class api_backend {
public:
  virtual ~api_backend() = default;

  /// Who holds API token `token` (the same tokens as `astra`'s). Errors:
  /// ec::unauthenticated ("unknown API token", "API token X was revoked",
  /// ...), ec::timeout when the cluster does not answer in time.
  virtual caf::expected<v1::Principal> authenticate(const std::string& token) = 0;

  /// Answers `req` (its `caller` set by the API from the token) through the
  /// cluster's request table, the same path as `astra`'s requests: roles,
  /// audit and errors alike. A deadline that passes gives a Response whose
  /// error code is "timeout".
  virtual v1::Response call(v1::Request req) = 0;

  /// The current view; the first call waits for the first view.
  virtual std::shared_ptr<const api_view> view() = 0;

  /// A view whose index is above `index`, waiting at most `wait` for one
  /// (a blocking query); the current view when none came in time.
  virtual std::shared_ptr<const api_view> wait_view(uint64_t index,
                                                    std::chrono::milliseconds wait) = 0;

  /// Something was changed through the API: returns once a view built after
  /// this call is current (at most the request deadline), so the caller's
  /// next read sees its write.
  virtual void refresh() = 0;

  /// Forgets what `authenticate` remembers of tokens (after a revocation).
  virtual void forget_tokens() = 0;
};

} // namespace astraeus
