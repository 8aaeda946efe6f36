#pragma once
/// @file
/// The etcd backend of the store interface, for HA mode (several
/// controllers on one etcd cluster; DESIGN.md "High availability"). Talks
/// to etcd 3.4 through its JSON gateway (store/etcd_gateway.hpp).
///
/// Keys: `<prefix><family>/<key>` (prefix "/astraeus/<cluster>/" by
/// default), the leader election's under `<prefix>control/`. Values are the
/// same bytes RocksDB holds. Family `gpu_history` (telemetry) is kept out of
/// etcd: writes to it are refused, reads find nothing.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/etcd_gateway.hpp"
#include "store/store.hpp"

namespace astraeus {

/// How to reach the etcd cluster and where our keys live.
struct etcd_options {
  /// Members' client URLs, "HOST:PORT" or "http://HOST:PORT" (at least one).
  std::vector<std::string> endpoints;
  /// Every key starts with it ("/astraeus/<cluster>/"); must end in '/'.
  std::string prefix = "/astraeus/default/";
  /// How long one call to etcd may take, connecting included.
  std::chrono::milliseconds timeout{2000};
  /// Connections to etcd per endpoint: calls in flight at once (the lease's
  /// renewal, the group commit's transactions, the API's reads); 1 runs
  /// every call one after the other.
  size_t connections = etcd_gateway::default_connections;

  /// Errors: `ec::invalid_config` naming what is wrong (no endpoint, a
  /// prefix that does not start and end with '/', a timeout under 10 ms).
  caf::error validate() const;
};

/// The etcd backend (see `Store` for every call's contract). Every write is
/// one etcd transaction; once `fence_on` is called, each also requires the
/// fence key to hold the fence value, so a deposed leader writes nothing:
/// its writes fail with "not the leader: ...". `sync` is ignored: etcd
/// commits every write to a quorum's disks before it answers.
class etcd_store final : public Store {
public:
  /// etcd's limits (etcd 3.4 defaults: --max-txn-ops 128,
  /// --max-request-bytes 1.5 MiB); a batch keeps 64 KiB for framing.
  static constexpr size_t max_txn_ops = 128;
  static constexpr size_t max_request_bytes = 1572864;

  /// Connects to the cluster and checks that it answers (a read of the
  /// prefix). Errors: the options' (`ec::invalid_config`); `ec::unreachable`
  /// when no endpoint answers, naming each endpoint's failure.
  static caf::expected<std::unique_ptr<etcd_store>> open(etcd_options opts);

  /// Closes the connections to etcd (a lease this store granted is not
  /// revoked: it ends with its TTL).
  ~etcd_store() override;

  /// `Store::put_raw` on etcd (store/store.hpp).
  caf::error put_raw(family f, std::string_view key, std::string_view bytes,
                     bool sync = true) override;
  /// `Store::get_raw` on etcd (store/store.hpp).
  caf::expected<std::optional<std::string>> get_raw(family f,
                                                    std::string_view key) override;
  /// `Store::erase` on etcd (store/store.hpp).
  caf::error erase(family f, std::string_view key, bool sync = true) override;
  /// `Store::write` on etcd (store/store.hpp).
  caf::error write(const std::vector<change>& changes, bool sync = true) override;
  /// `Store::write_chunked` on etcd (store/store.hpp): when no key is in two
  /// of its transactions they go out side by side, up to one per
  /// connection, so a group commit of 512 runs costs about one round trip to
  /// the quorum instead of four; otherwise one after the other.
  caf::error write_chunked(const std::vector<change>& changes, bool sync = true) override;
  /// `Store::limits` on etcd (store/store.hpp).
  store_limits limits() const override;
  /// `Store::for_each` on etcd (store/store.hpp).
  caf::error
  for_each(family f, const std::function<bool(std::string_view key,
                                              std::string_view bytes)>& fn) override;
  /// `Store::compare_and_swap` on etcd (store/store.hpp).
  caf::expected<bool> compare_and_swap(family f, std::string_view key,
                                       const std::optional<std::string>& expected,
                                       const std::optional<std::string>& desired,
                                       lease_id lease = 0) override;
  /// `Store::grant_lease` on etcd (store/store.hpp).
  caf::expected<lease_id> grant_lease(std::chrono::seconds ttl) override;
  /// `Store::keep_alive` on etcd (store/store.hpp).
  caf::expected<int64_t> keep_alive(lease_id lease) override;
  /// `Store::revoke_lease` on etcd (store/store.hpp).
  caf::error revoke_lease(lease_id lease) override;
  /// `Store::revision` on etcd (store/store.hpp).
  caf::expected<int64_t> revision() override;
  /// `Store::watch` on etcd (store/store.hpp).
  caf::error watch(family f, int64_t from,
                   const std::function<bool(const store_event&)>& fn,
                   const std::function<bool()>& stop,
                   std::chrono::milliseconds poll) override;
  /// `Store::path` on etcd (store/store.hpp).
  const std::string& path() const override;
  /// `Store::write_problem` on etcd (store/store.hpp).
  std::string write_problem() override;
  /// `Store::faults` on etcd (store/store.hpp).
  store_faults& faults() override;

  /// The full etcd key of control record `name` (`<prefix>control/<name>`).
  std::string control_key(std::string_view name) const;

  /// The bytes under the full etcd key `key` and its create revision;
  /// nullopt when absent. Errors: as for `get_raw`.
  caf::expected<std::optional<std::pair<std::string, int64_t>>>
  get_key(const std::string& key);

  /// Creates the full etcd key `key` with `value` under `lease` when it is
  /// absent: true when created. Errors: as for `compare_and_swap`.
  caf::expected<bool> create_key(const std::string& key, const std::string& value,
                                 lease_id lease);

  /// From now on every write also requires the full etcd key `key` to hold
  /// `value` (the leader key and this controller's campaign value, which
  /// names its unique lease). A write whose fence fails writes nothing and
  /// returns `ec::store_failure` "... not the leader: KEY no longer holds
  /// this controller's value (deposed)".
  void fence_on(std::string key, std::string value);

  /// Compacts etcd's history up to `revision` (physical: waits until done).
  /// Errors: etcd's (e.g. "required revision has been compacted").
  caf::error compact(int64_t revision);

  /// Defragments the member the gateway talks to now (frees the space
  /// compaction released; the member blocks while it runs).
  /// Errors: the member's failure.
  caf::error defragment();

private:
  struct impl;

  explicit etcd_store(std::unique_ptr<impl> ptr);

  std::unique_ptr<impl> impl_;
};

} // namespace astraeus
