#pragma once
/// @file
/// The store: one RocksDB database per process, one column family per kind
/// of record, Protobuf values. RocksDB stays behind this header (pimpl), so
/// its users need no RocksDB headers. See DESIGN.md, "Store".

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
/// (named as `to_string` spells them). Families only grow: never renumber or
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

/// Faults a test injects into a `Store`'s writes, through the very calls
/// production makes (RocksDB's own habit: faults through the interfaces in
/// use, so the code that handles a failed write is the code that runs).
/// Production never arms it. Thread-safe.
class store_faults {
public:
  /// How an injected write fails: RocksDB's status for an I/O error, or for
  /// a full disk ("IO error: No space left on device").
  enum class kind { io_error, disk_full };

  /// The next `count` writes (each `put`, `put_raw`, `erase` or `write`
  /// batch counts one) fail with `k`, before anything reaches RocksDB;
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

/// One RocksDB database with a column family per `family`. Thread-safe:
/// actors on several threads may share one `Store` through a
/// `std::shared_ptr`. Keys are arbitrary bytes, ordered bytewise. Nothing
/// throws; every failure is a `caf::error` whose text names the store's path.
class Store {
public:
  /// Opens (creating if missing) the database in the folder `path`,
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

  /// Flushes nothing extra (every acknowledged write is already in the WAL)
  /// and closes the database, releasing its lock.
  ~Store();

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Writes `value`'s wire bytes under `key` in family `f`, replacing any
  /// value there. With `sync` (the default) the write is on disk before this
  /// returns: use it for every write a user or peer is told about.
  /// Errors: `ec::store_failure` naming the path, family and key; on a full
  /// disk "store full: PATH has N bytes free" (see `write_problem`).
  caf::error put(family f, std::string_view key,
                 const google::protobuf::Message& value, bool sync = true);

  /// Writes `bytes` as they are under `key` in family `f`. For tests and
  /// tools that must store bytes which are not a valid message (e.g. to
  /// check that readers report `ec::corrupt_record`); code that stores
  /// records uses `put`.
  /// Errors: `ec::store_failure` naming the path, family and key.
  caf::error put_raw(family f, std::string_view key, std::string_view bytes,
                     bool sync = true);

  /// Reads the value under `key` in family `f` into `out`: true when found
  /// and parsed, false when absent (`out` is then left untouched).
  /// Errors: `ec::corrupt_record` naming the family and key when the bytes
  /// do not parse as `out`'s type; `ec::store_failure` when RocksDB fails.
  caf::expected<bool> get(family f, std::string_view key,
                          google::protobuf::Message& out);

  /// Removes `key` from family `f`; removing an absent key is no error.
  /// `sync` as for `put`.
  /// Errors: `ec::store_failure` naming the path, family and key.
  caf::error erase(family f, std::string_view key, bool sync = true);

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
  /// Errors: `ec::store_failure` naming the path and the number of changes;
  /// then none of them was applied.
  caf::error write(const std::vector<change>& changes, bool sync = true);

  /// Makes every write made so far durable (one fsync of the write-ahead
  /// log): `write(changes, false)` then `sync_wal()` is as safe as a synced
  /// write once this returns, and lets the writer go on meanwhile (the
  /// scheduler's group commit syncs on a thread of its own). Thread-safe;
  /// may run beside writes.
  /// Errors: `ec::store_failure` naming the path; writes are then refused
  /// as after a failed synced write.
  caf::error sync_wal();

  /// Calls `fn(key, bytes)` for every entry of family `f` in bytewise key
  /// order, from one consistent snapshot, until `fn` returns false. The
  /// views are valid only during the call.
  /// Errors: `ec::store_failure` when RocksDB fails while iterating (the
  /// entries already visited were visited).
  caf::error
  for_each(family f,
           const std::function<bool(std::string_view key,
                                    std::string_view bytes)>& fn);

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

  /// The folder the database lives in, as given to `open`.
  const std::string& path() const;

  /// Why writes are refused now, empty while the store takes them: after a
  /// write failed on a full disk, "store full: PATH has N bytes free"
  /// (issue 23 item 1). Every write is then refused at once with that text
  /// (`ec::store_failure`), without reaching RocksDB, and at most once a
  /// second a write (or this call) tries to take writes again: when the
  /// file system has room, RocksDB is resumed, or the database is closed
  /// and opened again (RocksDB 7.8 does not resume from a failed WAL write);
  /// then writes go through as before, with no restart. Reads keep working
  /// throughout. A store opened on a full disk is opened read-only and
  /// behaves the same. Also "store full: ..." while the file system has
  /// less than 64 KiB free, before any write failed.
  std::string write_problem();

  /// The store's fault hook: a test makes the next writes fail through it
  /// (their errors are those of a real failure: `ec::store_failure` naming
  /// the path, family and key, with RocksDB's status text).
  store_faults& faults();

private:
  struct impl;

  explicit Store(std::unique_ptr<impl> ptr);

  /// The `ec::corrupt_record` error for `key` in `f` not parsing as `type`.
  caf::error corrupt(family f, std::string_view key,
                     const std::string& type) const;

  std::unique_ptr<impl> impl_;
};

} // namespace astraeus
