#pragma once
/// @file
/// HA mode's leader election on etcd (DESIGN.md "High availability"): the
/// leader holds the key `<prefix>control/leader` under a lease (TTL 2 s by
/// default) and renews it; when it stops renewing (crash, SIGSTOP, cut off
/// from etcd) the key vanishes with the lease and a standby creates it. The
/// key's value names the leader (id, API URL, gate address) and its unique
/// lease, and is the fence of every write the leader makes
/// (`etcd_store::fence_on`): a deposed leader writes nothing.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "store/etcd_store.hpp"

namespace astraeus {

/// Who leads, as the leader key says.
struct leader_info {
  std::string id;       ///< the controller's id (HOST:GATE_PORT unless configured)
  std::string api_url;  ///< its HTTP API's base URL ("http://10.0.0.5:7451"); may be empty
  std::string gate;     ///< HOST:PORT of its gate (agents, astra)
  lease_id lease = 0;   ///< the lease the key lives under (unique per term)

  /// The key's value: a JSON object with these four fields.
  std::string to_value() const;

  /// Parses `to_value`'s text. Errors: `ec::corrupt_record` naming the text.
  static caf::expected<leader_info> from_value(const std::string& text);
};

/// Settings of one controller's candidacy.
struct election_config {
  std::shared_ptr<etcd_store> store;  ///< the cluster's etcd store (required)
  std::string id;                     ///< this controller's id (non-empty)
  std::string api_url;                ///< this controller's API base URL
  std::string gate;                   ///< this controller's gate HOST:PORT
  std::chrono::seconds ttl{2};        ///< the leader lease's TTL (etcd's minimum is 2 s)
  std::chrono::milliseconds poll{100};  ///< how often a standby looks at the leader key

  /// Errors: `ec::invalid_config` naming the field (no store, empty id, a
  /// TTL under 1 s or a poll under 10 ms).
  caf::error validate() const;
};

/// One controller's candidacy: `campaign` until it leads, then
/// `keep_leading` renews the lease on a thread of its own. Thread-safe.
class leader_election {
public:
  /// Errors of `config` show up in `campaign`.
  explicit leader_election(election_config config);

  /// Stops renewing; does not resign (call `resign` for a clean handover).
  ~leader_election();

  leader_election(const leader_election&) = delete;
  leader_election& operator=(const leader_election&) = delete;

  /// Blocks until this controller leads (true) or `stop()` (false), reading
  /// the leader key every `poll` and calling `on_leader` whenever the
  /// leader it sees changes (nullopt: none). On success the store is fenced
  /// on the leader key (`etcd_store::fence_on`). etcd being unreachable is
  /// retried, not an error; once it has not answered for longer than the
  /// lease TTL, `on_leader(nullopt)` says no leader is known (the one seen
  /// last cannot have renewed its lease either), until it answers again.
  /// Errors: the config's.
  caf::expected<bool>
  campaign(const std::function<bool()>& stop,
           const std::function<void(const std::optional<leader_info>&)>& on_leader = {});

  /// After a won `campaign`: renews the lease every TTL/4 on a thread; when
  /// the lease is gone (expired while this process was stopped, revoked)
  /// or cannot be renewed for a whole TTL, calls `on_lost(why)` once and
  /// stops.
  void keep_leading(std::function<void(const std::string& why)> on_lost);

  /// Ends the term now: stops renewing and revokes the lease, so a standby
  /// leads at once. Errors: etcd's.
  caf::error resign();

  /// This controller's record while it leads (its lease set), else nullopt.
  std::optional<leader_info> self() const;

  /// The leader the last look at the key saw (nullopt: none, or not looked).
  std::optional<leader_info> last_seen() const;

private:
  election_config config_;
  mutable std::mutex mu_;
  std::optional<leader_info> self_;
  std::optional<leader_info> seen_;
  std::atomic<bool> stopping_{false};
  std::thread renewer_;
};

} // namespace astraeus
