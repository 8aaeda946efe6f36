#pragma once
/// @file
/// The RocksDB backend of the store interface: one database per process, one
/// column family per `family`, the embedded default (one controller, and
/// every agent). RocksDB stays behind this header (pimpl). `Store::open`
/// opens one; this header is for code that needs the backend by name.

#include <memory>
#include <string>

#include "store/store.hpp"

namespace astraeus {

/// The RocksDB backend (see `Store` for every call's contract). Leases live
/// in this process's memory, counted on the steady clock: a key written
/// under one is erased when it expires, and a lease ends with the process.
/// Revisions count this process's writes from 1 at open; a watch can resume
/// from any of the last `change_log_capacity` changes, older ones are
/// "compacted".
class rocksdb_store final : public Store {
public:
  /// How many recent changes a watch can resume from.
  static constexpr size_t change_log_capacity = 4096;

  /// See `Store::open(path, env)`; `env` may be null (RocksDB's default).
  static caf::expected<std::unique_ptr<Store>> open(const std::string& path,
                                                    rocksdb::Env* env);

  /// Closes the database, releasing its lock.
  ~rocksdb_store() override;

  /// `Store::put_raw` on RocksDB (store/store.hpp).
  caf::error put_raw(family f, std::string_view key, std::string_view bytes,
                     bool sync = true) override;
  /// `Store::get_raw` on RocksDB (store/store.hpp).
  caf::expected<std::optional<std::string>> get_raw(family f,
                                                    std::string_view key) override;
  /// `Store::erase` on RocksDB (store/store.hpp).
  caf::error erase(family f, std::string_view key, bool sync = true) override;
  /// `Store::write` on RocksDB (store/store.hpp).
  caf::error write(const std::vector<change>& changes, bool sync = true) override;
  /// `Store::sync_wal` on RocksDB: one fsync of the write-ahead log.
  caf::error sync_wal() override;
  /// `Store::for_each` on RocksDB (store/store.hpp).
  caf::error
  for_each(family f, const std::function<bool(std::string_view key,
                                              std::string_view bytes)>& fn) override;
  /// `Store::compare_and_swap` on RocksDB (store/store.hpp).
  caf::expected<bool> compare_and_swap(family f, std::string_view key,
                                       const std::optional<std::string>& expected,
                                       const std::optional<std::string>& desired,
                                       lease_id lease = 0) override;
  /// `Store::grant_lease` on RocksDB (store/store.hpp).
  caf::expected<lease_id> grant_lease(std::chrono::seconds ttl) override;
  /// `Store::keep_alive` on RocksDB (store/store.hpp).
  caf::expected<int64_t> keep_alive(lease_id lease) override;
  /// `Store::revoke_lease` on RocksDB (store/store.hpp).
  caf::error revoke_lease(lease_id lease) override;
  /// `Store::revision` on RocksDB (store/store.hpp).
  caf::expected<int64_t> revision() override;
  /// `Store::watch` on RocksDB (store/store.hpp).
  caf::error watch(family f, int64_t from,
                   const std::function<bool(const store_event&)>& fn,
                   const std::function<bool()>& stop,
                   std::chrono::milliseconds poll) override;
  /// `Store::path` on RocksDB (store/store.hpp).
  const std::string& path() const override;
  /// `Store::write_problem` on RocksDB (store/store.hpp).
  std::string write_problem() override;
  /// `Store::faults` on RocksDB (store/store.hpp).
  store_faults& faults() override;

private:
  struct impl;

  explicit rocksdb_store(std::unique_ptr<impl> ptr);

  std::unique_ptr<impl> impl_;
};

} // namespace astraeus
