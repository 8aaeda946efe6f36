#pragma once
/// @file
/// The store interface: records by family (one RocksDB column family each,
/// or one etcd key prefix each), Protobuf values. Backends stay behind this
/// header, so its users need neither RocksDB nor HTTP headers. See
/// DESIGN.md, "Store" and "High availability".

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <google/protobuf/message.h>

#include "messages/error.hpp"

namespace rocksdb {
class Env;
} // namespace rocksdb

namespace astraeus {

/// The kinds of record the store holds, one RocksDB column family each
/// (named as `to_string` spells them; in etcd, one key prefix each). Families only grow: never renumber or
/// rename one.
enum class family : uint8_t {
  machines,
  gpus,
  faults,
  runs,
  workers,
  tokens,
  validations,
  audit,
  workspaces,
  /// Each GPU's history, one key per point (actors/controller/gpu_history_book.hpp).
  gpu_history,
};

/// How many families there are (`gpu_history` is the last).
inline constexpr size_t family_count = 10;

/// The column family's name, e.g. "machines".
const char* to_string(family f);

/// How errors name a record: `machines key "gpu-01"`.
std::string key_text(family f, std::string_view key);

/// Faults a test injects into a `Store`'s writes (either backend), through
/// the very calls production makes (RocksDB's own habit: faults through the interfaces in
/// use, so the code that handles a failed write is the code that runs).
/// Production never arms it. Thread-safe.
class store_faults {
public:
  /// How an injected write fails: the backend's error for an I/O error, or
  /// for a full store ("store full: ...", as a full disk or etcd's quota).
  enum class kind { io_error, disk_full };

  /// The next `count` writes (each `put`, `put_raw`, `erase`, `write`
  /// batch or `compare_and_swap` counts one) fail with `k`, before anything
  /// reaches the backend;
  /// later writes succeed again. Replaces what was armed before.
  void fail_next_writes(size_t count = 1, kind k = kind::io_error);

  /// Writes still armed to fail.
  size_t armed() const;

  /// Writes failed by this hook so far.
  size_t failed() const;

  /// For the `Store`: takes one armed fault (the kind of the write that
  /// must fail), or nullopt when the write may go ahead.
  std::optional<kind> take();

private:
  mutable std::mutex mu_;
  size_t armed_ = 0;
  size_t failed_ = 0;
  kind kind_ = kind::io_error;
};

/// A lease: keys written under it vanish when it expires (its holder stopped
/// renewing it). The number is the backend's own (etcd's lease ID); 0 is
/// "no lease".
using lease_id = int64_t;

/// One change seen by a watch: `value` set = put those bytes, unset = the
/// key was erased (or its lease expired). `revision` is the store revision
/// of the write that made it.
struct store_event {
  family f;                          ///< the key's family
  std::string key;                   ///< the key within the family
  std::optional<std::string> value;  ///< new bytes, or nullopt for an erase
  int64_t revision = 0;              ///< the write's store revision (>= 1)
};

/// The limits one `write` batch must respect in a backend, so callers can
/// split a group commit honestly (`write_chunked`) instead of failing it.
struct store_limits {
  /// Most changes in one atomic batch (etcd: 128 operations per txn).
  size_t max_batch_changes = static_cast<size_t>(-1);
  /// Most key and value bytes in one batch (etcd: 1.5 MiB per request,
  /// less room for the request's framing).
  size_t max_batch_bytes = static_cast<size_t>(-1);
  /// How many batches with no key in common are worth writing at once from
  /// several threads (`wal_syncer`): etcd answers each transaction after a
  /// round trip to its quorum, so several in flight multiply the rate
  /// (its gateway client's connections, less one for the leader lease's
  /// renewal); RocksDB writes through one log: 1.
  size_t writes_in_flight = 1;
};

/// The store interface: records by family with Protobuf values, and the
/// coordination calls the etcd backend needs (compare-and-swap, leases,
/// watch from a revision). Two backends: RocksDB (`Store::open`, the
/// embedded default, one process; store/rocksdb_store.hpp) and etcd
/// (store/etcd_store.hpp, several controllers). Both pass one conformance
/// suite (test/integration/store). Thread-safe: actors on several threads
/// may share one `Store` through a `std::shared_ptr`. Keys are arbitrary
/// bytes, ordered bytewise within a family. Nothing throws; every failure is
/// a `caf::error` whose text names the store (`path()`).
class Store {
public:
  /// Opens (creating if missing) the RocksDB database in the folder `path`,
  /// creating the folder, its parents and any missing column family. Column
  /// families found on disk that this version does not know are opened too
  /// and left alone. On a full disk (no room for a new WAL or MANIFEST) it
  /// opens read-only and refuses writes until there is room (`write_problem`).
  /// Errors: `ec::store_failure` naming `path` when the folder cannot be
  /// created or is not a folder, when another process (or another `Store`
  /// in this process) holds the database ("... is in use by another
  /// process"), or with RocksDB's status text for any other failure.
  static caf::expected<std::unique_ptr<Store>> open(const std::string& path);

  /// As `open`, with RocksDB's file access through `env` (not owned; it
  /// must outlive the store). For the crash suite's simulated power cuts
  /// (test/crash): production uses the default.
  static caf::expected<std::unique_ptr<Store>> open(const std::string& path,
                                                    rocksdb::Env* env);

  /// Closes the backend (RocksDB: releases its lock; every acknowledged
  /// write is already durable).
  virtual ~Store();

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Writes `value`'s wire bytes under `key` in family `f`, replacing any
  /// value there. With `sync` (the default) the write is durable before this
  /// returns: use it for every write a user or peer is told about.
  /// Errors: `ec::store_failure` naming the store, family and key; when the
  /// store is full (a full disk, etcd's space quota) "store full: ..." (see
  /// `write_problem`).
  caf::error put(family f, std::string_view key,
                 const google::protobuf::Message& value, bool sync = true);

  /// Writes `bytes` as they are under `key` in family `f`. For tests and
  /// tools that must store bytes which are not a valid message (e.g. to
  /// check that readers report `ec::corrupt_record`); code that stores
  /// records uses `put`.
  /// Errors: `ec::store_failure` naming the store, family and key.
  virtual caf::error put_raw(family f, std::string_view key,
                             std::string_view bytes, bool sync = true)
    = 0;

  /// Reads the value under `key` in family `f` into `out`: true when found
  /// and parsed, false when absent (`out` is then left untouched).
  /// Errors: `ec::corrupt_record` naming the family and key when the bytes
  /// do not parse as `out`'s type; `ec::store_failure` when the backend fails.
  caf::expected<bool> get(family f, std::string_view key,
                          google::protobuf::Message& out);

  /// The bytes under `key` in family `f`, nullopt when absent.
  /// Errors: `ec::store_failure` when the backend fails.
  virtual caf::expected<std::optional<std::string>>
  get_raw(family f, std::string_view key)
    = 0;

  /// Removes `key` from family `f`; removing an absent key is no error.
  /// `sync` as for `put`.
  /// Errors: `ec::store_failure` naming the store, family and key.
  virtual caf::error erase(family f, std::string_view key, bool sync = true)
    = 0;

  /// One change of a `write` batch: `value` set = put those bytes, unset =
  /// erase the key.
  struct change {
    family f;
    std::string key;
    std::optional<std::string> value;
  };

  /// Applies every change atomically, in order, with one write (and, with
  /// `sync`, one fsync): the group commit of actors that answer many
  /// requests per disk write. An empty batch writes nothing.
  /// Errors: `ec::store_failure` naming the store and the number of
  /// changes; then none of them was applied. A batch beyond `limits()` is
  /// refused whole, naming the limit (etcd: "a batch of 200 change(s)
  /// exceeds etcd's 128 operations per transaction").
  virtual caf::error write(const std::vector<change>& changes, bool sync = true)
    = 0;

  /// As `write`, split into consecutive batches within `limits()`: each
  /// batch is atomic, the whole is not (a failure leaves other batches
  /// applied). For group commits of independent records (the scheduler's
  /// runs). A backend may write the batches at once, side by side, when no
  /// key is in two of them (etcd: one transaction per connection of its
  /// pool); else in order. Errors: the first failed batch's.
  virtual caf::error write_chunked(const std::vector<change>& changes, bool sync = true);

  /// The most one `write` batch may hold in this backend.
  virtual store_limits limits() const;

  /// Makes every write made so far durable (one fsync of the write-ahead
  /// log): `write(changes, false)` then `sync_wal()` is as safe as a synced
  /// write once this returns, and lets the writer go on meanwhile (the
  /// scheduler's group commit syncs on a thread of its own). Thread-safe;
  /// may run beside writes.
  /// Errors: `ec::store_failure` naming the path; writes are then refused
  /// as after a failed synced write. A backend whose writes are durable
  /// when acknowledged (etcd) has nothing to sync: the default is none.
  virtual caf::error sync_wal();

  /// Calls `fn(key, bytes)` for every entry of family `f` in bytewise key
  /// order, from one consistent snapshot, until `fn` returns false. The
  /// views are valid only during the call.
  /// Errors: `ec::store_failure` when the backend fails while iterating (the
  /// entries already visited were visited).
  virtual caf::error
  for_each(family f,
           const std::function<bool(std::string_view key,
                                    std::string_view bytes)>& fn)
    = 0;

  /// Every entry of family `f` parsed as `T` (a generated Protobuf message),
  /// as (key, value) pairs in bytewise key order.
  /// Errors: the first value that does not parse fails the whole load with
  /// `ec::corrupt_record` naming the family and key (we never silently drop
  /// a record); `ec::store_failure` as for `for_each`.
  template <class T>
  caf::expected<std::vector<std::pair<std::string, T>>> load_all(family f) {
    std::vector<std::pair<std::string, T>> out;
    caf::error bad;
    auto err = for_each(f, [&](std::string_view key, std::string_view bytes) {
      T value;
      if (!value.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
        bad = corrupt(f, key, T::descriptor()->full_name());
        return false;
      }
      out.emplace_back(std::string{key}, std::move(value));
      return true;
    });
    if (err)
      return err;
    if (bad)
      return bad;
    return out;
  }

  /// Compare-and-swap on one key: when the bytes under `key` in family `f`
  /// equal `expected` (nullopt: the key is absent), writes `desired`
  /// (nullopt: erases the key), attached to `lease` when not 0, and returns
  /// true; else writes nothing and returns false. Always synced.
  /// Errors: `ec::store_failure` naming the store, family and key (an
  /// unknown or expired lease: "lease N is not granted or has expired").
  virtual caf::expected<bool>
  compare_and_swap(family f, std::string_view key,
                   const std::optional<std::string>& expected,
                   const std::optional<std::string>& desired, lease_id lease = 0)
    = 0;

  /// Grants a lease of `ttl` (whole seconds, at least 1; etcd grants at
  /// least 2). Keys written under it (`compare_and_swap`) are erased when it
  /// expires without `keep_alive`. RocksDB keeps leases in memory: they end
  /// with the process, and a key written under one is erased on expiry.
  /// Errors: `ec::store_failure` naming the store.
  virtual caf::expected<lease_id> grant_lease(std::chrono::seconds ttl) = 0;

  /// Renews `lease` for its full TTL from now. Returns the seconds it has
  /// left (its TTL).
  /// Errors: `ec::store_failure` "lease N is not granted or has expired".
  virtual caf::expected<int64_t> keep_alive(lease_id lease) = 0;

  /// Ends `lease` now, erasing its keys; an unknown lease is no error.
  /// Errors: `ec::store_failure` when the backend fails.
  virtual caf::error revoke_lease(lease_id lease) = 0;

  /// The store's current revision: every later write has a higher one.
  /// Errors: `ec::store_failure` when the backend fails.
  virtual caf::expected<int64_t> revision() = 0;

  /// Calls `fn` with every change to family `f` whose revision is at least
  /// `from` (changes already made first, in order, then new ones as they
  /// happen) until `fn` returns false or `stop()` is true (checked at least
  /// every `poll`), on the calling thread; returns when the watch ends. A
  /// watch resumes after a reconnect from the revision it had reached.
  /// Errors: `ec::store_failure` "revision N is compacted (oldest kept M)"
  /// when `from` is older than what the store keeps; the backend's failure.
  virtual caf::error
  watch(family f, int64_t from, const std::function<bool(const store_event&)>& fn,
        const std::function<bool()>& stop,
        std::chrono::milliseconds poll = std::chrono::milliseconds{100})
    = 0;

  /// Where the store lives, for messages: RocksDB's folder as given to
  /// `open`; "etcd ENDPOINT/PREFIX" for etcd.
  virtual const std::string& path() const = 0;

  /// Why writes are refused now, empty while the store takes them. RocksDB:
  /// after a write failed on a full disk, "store full: PATH has N bytes
  /// free" (issue 23 item 1). Every write is then refused at once with that
  /// text (`ec::store_failure`), without reaching RocksDB, and at most once
  /// a second a write (or this call) tries to take writes again: when the
  /// file system has room, RocksDB is resumed, or the database is closed
  /// and opened again (RocksDB 7.8 does not resume from a failed WAL write);
  /// then writes go through as before, with no restart. Reads keep working
  /// throughout. A store opened on a full disk is opened read-only and
  /// behaves the same. Also "store full: ..." while the file system has
  /// less than 64 KiB free, before any write failed. etcd: "store full:
  /// etcd ... space quota exceeded (...)" while its NOSPACE alarm is raised.
  virtual std::string write_problem() = 0;

  /// The store's fault hook: a test makes the next writes fail through it
  /// (their errors are those of a real failure: `ec::store_failure` naming
  /// the store, family and key, with the backend's status text).
  virtual store_faults& faults() = 0;

protected:
  Store() = default;

  /// The `ec::corrupt_record` error for `key` in `f` not parsing as `type`.
  caf::error corrupt(family f, std::string_view key,
                     const std::string& type) const;
};

} // namespace astraeus
