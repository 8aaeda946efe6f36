#include "store/rocksdb_store.hpp"
#include "runtime/process/kill_point.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <set>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <shared_mutex>
#include <system_error>

#include <sys/statvfs.h>

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/iterator.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/status.h>
#include <spdlog/spdlog.h>

namespace astraeus {

namespace {

constexpr std::array<family, family_count> all_families = {
  family::machines, family::gpus,    family::faults,      family::runs,
  family::workers,  family::tokens,  family::validations, family::audit,
  family::workspaces, family::gpu_history,
};

rocksdb::Slice slice(std::string_view x) {
  return rocksdb::Slice{x.data(), x.size()};
}

/// True when `s` says the database's LOCK file is held, by another process
/// ("While lock file: ...: Resource temporarily unavailable") or by another
/// open in this one ("lock hold by current process").
bool is_lock_conflict(const rocksdb::Status& s) {
  if (!s.IsIOError())
    return false;
  auto text = s.ToString();
  return text.find("lock file") != std::string::npos
         || text.find("lock hold") != std::string::npos
         || text.find("/LOCK") != std::string::npos;
}

/// RocksDB's info log, kept off RocksDB's own file writer: Debian's
/// RocksDB 7.8 is built with assertions, and its log writer asserts (aborts
/// the process) on the first line it logs after a write to a full disk
/// failed. Warnings and errors go to spdlog; the rest to <path>/LOG through
/// stdio, whose errors are ignored (a full disk loses log lines, nothing else).
class store_logger : public rocksdb::Logger {
public:
  explicit store_logger(const std::string& path)
    : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL), path_(path) {
    namespace fs = std::filesystem;
    std::error_code err;
    auto log = fs::path{path} / "LOG";
    // One older log kept, as RocksDB's own rotation would.
    if (fs::exists(log, err))
      fs::rename(log, fs::path{path} / "LOG.old", err);
    file_ = std::fopen(log.c_str(), "a");
  }

  ~store_logger() override {
    if (file_ != nullptr)
      std::fclose(file_);
  }

  using rocksdb::Logger::Logv;

  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }

  void Logv(const rocksdb::InfoLogLevel level, const char* format,
            va_list ap) override {
    char line[1024];
    std::vsnprintf(line, sizeof(line), format, ap);
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL)
      spdlog::error("store {}: rocksdb: {}", path_, line);
    else if (level == rocksdb::InfoLogLevel::WARN_LEVEL)
      spdlog::warn("store {}: rocksdb: {}", path_, line);
    if (file_ != nullptr) {
      std::fputs(line, file_);
      std::fputc('\n', file_);
      std::fflush(file_);
    }
  }

private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

/// True when `s` says the file system is full (ENOSPC, or RocksDB's own
/// NoSpace status).
bool is_no_space(const rocksdb::Status& s) {
  return s.IsNoSpace() || s.ToString().find("No space left") != std::string::npos;
}

caf::error store_error(const std::string& path, std::string what) {
  return caf::make_error(ec::store_failure,
                         "store " + path + ": " + std::move(what));
}

} // namespace

struct rocksdb_store::impl {
  std::string path;
  rocksdb::DB* db = nullptr;
  /// Faults a test armed (store_faults).
  store_faults faults;
  /// Reads and writes hold it shared; reopening the database, unique.
  mutable std::shared_mutex mu;
  /// Guards `problem` and `last_attempt`.
  mutable std::mutex state_mu;
  /// Why writes are refused now ("store full: ... has N bytes free");
  /// empty while the database takes writes. Set by a failed write (RocksDB
  /// then stops writes until it is resumed) or by a read-only open.
  std::string problem;
  /// The database is open read-only (it could not be opened for writing).
  bool read_only = false;
  /// When recovery was last tried (at most once per `recovery_interval`).
  std::chrono::steady_clock::time_point last_attempt{};
  static constexpr std::chrono::milliseconds recovery_interval{1000};
  /// Below this much free space no recovery is tried.
  static constexpr uint64_t recovery_min_free = 256 * 1024;
  /// Every handle opened, ours and unknown ones, destroyed on close.
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  /// Ours, indexed by `family`.
  std::array<rocksdb::ColumnFamilyHandle*, family_count> families{};
  /// The column families on disk (ours and any newer version's).
  std::vector<std::string> names;
  rocksdb::DBOptions db_opts;
  /// Plain writes hold it shared; `compare_and_swap` and lease expiry,
  /// unique (their read and write are one step to every other writer).
  std::shared_mutex order_mu;
  /// Guards the lease table, the revision and the change log.
  std::mutex log_mu;
  /// Wakes watches when a change is logged.
  std::condition_variable log_cv;
  /// The last revision handed out (0: no write since open).
  int64_t rev = 0;
  /// The last `change_log_capacity` changes, oldest first.
  std::deque<store_event> log;
  /// A granted lease: its TTL, when it expires, the keys written under it.
  struct lease_state {
    std::chrono::seconds ttl;
    std::chrono::steady_clock::time_point deadline;
    std::set<std::pair<family, std::string>> keys;
  };
  /// Granted leases by ID.
  std::map<lease_id, lease_state> leases;
  /// The last lease ID handed out.
  lease_id last_lease = 0;
  /// How many leases are granted (read without `log_mu`: reads look for
  /// expired leases only while there are some).
  std::atomic<size_t> lease_count{0};

  /// Logs a change that reached RocksDB (its revision is the next one).
  void logged(family f, std::string_view key, std::optional<std::string> value) {
    {
      std::lock_guard<std::mutex> lock{log_mu};
      log.push_back(store_event{f, std::string{key}, std::move(value), ++rev});
      if (log.size() > change_log_capacity)
        log.pop_front();
    }
    log_cv.notify_all();
  }

  ~impl() {
    close();
  }

  void close() {
    if (db == nullptr)
      return;
    for (auto* h : handles)
      db->DestroyColumnFamilyHandle(h);
    handles.clear();
    families = {};
    (void) db->Close();
    delete db;
    db = nullptr;
  }

  /// The options of column family `name`. The scheduler rewrites a run on
  /// every change and erases it when it is deleted, in random key order,
  /// and reads the family only once, at start: a skip list memtable spent
  /// ~18 % of the scheduler's CPU on inserts (bench/RESULTS.md section 20),
  /// so `runs` keeps its memtable as a vector, appended to and sorted only
  /// when flushed or read. Point reads of `runs` (tests) sort a copy: fine
  /// for what reads it.
  static rocksdb::ColumnFamilyOptions family_options(const std::string& name) {
    rocksdb::ColumnFamilyOptions out;
    if (name == to_string(family::runs))
      out.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
    return out;
  }

  /// Opens the database (read-only when `ro`). Unique lock held, or none
  /// needed (open).
  rocksdb::Status open_db(bool ro) {
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (auto& name : names)
      descriptors.emplace_back(name, family_options(name));
    auto s = ro ? rocksdb::DB::OpenForReadOnly(db_opts, path, descriptors,
                                               &handles, &db)
                : rocksdb::DB::Open(db_opts, path, descriptors, &handles, &db);
    if (!s.ok()) {
      // On failure RocksDB leaves db null and hands back no handles.
      db = nullptr;
      handles.clear();
      return s;
    }
    read_only = ro;
    for (size_t i = 0; i < names.size(); ++i)
      for (auto f : all_families)
        if (names[i] == to_string(f))
          families[static_cast<size_t>(f)] = handles[i];
    return s;
  }

  /// Free bytes for an unprivileged writer on the store's file system.
  uint64_t free_bytes() const {
    struct statvfs vfs {};
    if (::statvfs(path.c_str(), &vfs) != 0)
      return 0;
    return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  }

  /// The text of a refused write: "store full: PATH has N bytes free" for a
  /// full disk, else the store's error with RocksDB's status.
  std::string describe(const rocksdb::Status& s) const {
    if (is_no_space(s))
      return "store full: " + path + " has " + std::to_string(free_bytes())
             + " bytes free (" + s.ToString() + ")";
    return "store " + path + ": " + s.ToString();
  }

  /// Notes a failed write: RocksDB refuses writes from now on until it is
  /// resumed; so do we, without calling into it.
  void on_write_error(const rocksdb::Status& s, bool injected) {
    auto text = describe(s);
    std::lock_guard<std::mutex> lock{state_mu};
    if (problem.empty())
      spdlog::error("{}: writes are refused until it takes them again "
                    "(retried at most every {} ms)",
                    text, recovery_interval.count());
    if (!injected) {
      problem = std::move(text);
      last_attempt = std::chrono::steady_clock::now();
    }
  }

  /// Nothing when the database takes writes (recovering it first if it
  /// stopped and the disk has room again), else why not.
  std::optional<std::string> writable() {
    {
      std::lock_guard<std::mutex> lock{state_mu};
      if (problem.empty())
        return std::nullopt;
      auto now = std::chrono::steady_clock::now();
      if (now - last_attempt < recovery_interval)
        return problem;
      last_attempt = now;
    }
    auto free = free_bytes();
    if (free < recovery_min_free) {
      std::lock_guard<std::mutex> lock{state_mu};
      problem = "store full: " + path + " has " + std::to_string(free) + " bytes free";
      return problem;
    }
    std::unique_lock<std::shared_mutex> lock{mu};
    rocksdb::Status s;
    if (db != nullptr && !read_only)
      s = db->Resume();
    if (db == nullptr || read_only || !s.ok()) {
      // RocksDB 7.8 does not resume from a failed WAL write by itself: the
      // database is closed and opened again (what a restart would do).
      auto was_read_only = read_only;
      close();
      s = open_db(false);
      if (!s.ok()) {
        auto again = open_db(true);
        if (!again.ok())
          s = open_db(was_read_only);
        std::lock_guard<std::mutex> g{state_mu};
        problem = describe(s);
        return problem;
      }
    }
    std::lock_guard<std::mutex> g{state_mu};
    spdlog::info("store {}: takes writes again ({} bytes free)", path, free);
    problem.clear();
    return std::nullopt;
  }

  /// The status of a write: refused while the store is stopped, an armed
  /// fault's, else `write()`'s (whose failure stops the store).
  template <class Write>
  rocksdb::Status checked(Write&& write) {
    if (auto why = writable())
      return rocksdb::Status::Aborted(*why);
    if (auto k = faults.take()) {
      auto s = *k == store_faults::kind::disk_full
                 ? rocksdb::Status::NoSpace("injected by the store's fault hook")
                 : rocksdb::Status::IOError("injected by the store's fault hook");
      on_write_error(s, true);
      return s;
    }
    std::shared_lock<std::shared_mutex> lock{mu};
    if (db == nullptr)
      return rocksdb::Status::Aborted("store " + path + " is not open");
    auto s = write();
    if (!s.ok())
      on_write_error(s, false);
    return s;
  }

  /// The bytes under `key` in `f`, nullopt when absent (no lease expiry:
  /// callers may hold `order_mu`).
  caf::expected<std::optional<std::string>> read(family f, std::string_view key) {
    std::string bytes;
    std::shared_lock<std::shared_mutex> lock{mu};
    if (db == nullptr)
      return store_error(path, "is not open (a reopen after a full disk failed)");
    auto s = db->Get(rocksdb::ReadOptions{}, handle(f), slice(key), &bytes);
    if (s.IsNotFound())
      return std::optional<std::string>{};
    if (!s.ok())
      return store_error(path, "cannot read " + where(f, key) + ": " + s.ToString());
    return std::optional<std::string>{std::move(bytes)};
  }

  rocksdb::ColumnFamilyHandle* handle(family f) const {
    return families[static_cast<size_t>(f)];
  }

  std::string where(family f, std::string_view key) const {
    return key_text(f, key);
  }

  /// A write's error text: a refusal (the store is stopped) as it is,
  /// else "cannot <what>: <status>" ("store full: ..." for a full disk).
  std::string failure(const std::string& what, const rocksdb::Status& s) const {
    if (s.IsAborted())
      return s.getState() != nullptr ? s.getState() : s.ToString();
    if (is_no_space(s))
      return describe(s) + ": cannot " + what;
    return "store " + path + ": cannot " + what + ": " + s.ToString();
  }
};

rocksdb_store::rocksdb_store(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

rocksdb_store::~rocksdb_store() = default;

caf::expected<std::unique_ptr<Store>> Store::open(const std::string& path) {
  return rocksdb_store::open(path, nullptr);
}

caf::expected<std::unique_ptr<Store>> Store::open(const std::string& path,
                                                  rocksdb::Env* env) {
  return rocksdb_store::open(path, env);
}

caf::expected<std::unique_ptr<Store>> rocksdb_store::open(const std::string& path,
                                                          rocksdb::Env* env) {
  namespace fs = std::filesystem;
  if (path.empty())
    return caf::make_error(ec::store_failure, "store path is empty");
  std::error_code err;
  auto status = fs::status(path, err);
  if (fs::exists(status)) {
    if (!fs::is_directory(status))
      return store_error(path, "exists and is not a folder");
  } else {
    fs::create_directories(path, err);
    if (err)
      return store_error(path, "cannot create folder: " + err.message());
  }
  auto state = std::make_unique<impl>();
  state->path = path;
  auto& db_opts = state->db_opts;
  db_opts.create_if_missing = true;
  db_opts.create_missing_column_families = true;
  // Concurrent memtable writes need skip lists in every family (`runs` has
  // a vector memtable, see family_options); writers are few and batched.
  db_opts.allow_concurrent_memtable_write = false;
  db_opts.info_log = std::make_shared<store_logger>(path);
  if (env != nullptr)
    db_opts.env = env;
  // Families on disk: ours plus any a newer version added, which must be
  // opened too. A folder without CURRENT holds no database yet.
  auto& names = state->names;
  if (fs::exists(fs::path{path} / "CURRENT", err)) {
    auto s = rocksdb::DB::ListColumnFamilies(db_opts, path, &names);
    if (s.ok()) {
      // fine
    } else if (is_lock_conflict(s)) {
      return store_error(path, "is in use by another process (another "
                               "controller or agent running?)");
    } else {
      return store_error(path, "cannot list column families: "
                                 + s.ToString());
    }
  }
  auto add = [&](const std::string& name) {
    if (std::find(names.begin(), names.end(), name) == names.end())
      names.push_back(name);
  };
  add(rocksdb::kDefaultColumnFamilyName);
  for (auto f : all_families)
    add(to_string(f));
  auto s = state->open_db(false);
  if (!s.ok() && is_no_space(s)) {
    // A full disk must not stop the process (a crash loop under a service
    // manager): open read-only, refuse writes, and open for writing again
    // once there is room (issue 23 item 1).
    auto ro = state->open_db(true);
    if (ro.ok()) {
      state->problem = state->describe(s);
      state->last_attempt = std::chrono::steady_clock::now();
      spdlog::error("{}: opened read-only; writes are refused until there is room",
                    state->problem);
      return std::unique_ptr<Store>{new rocksdb_store(std::move(state))};
    }
  }
  if (!s.ok()) {
    if (is_lock_conflict(s))
      return store_error(path, "is in use by another process (another "
                               "controller or agent running?)");
    if (is_no_space(s))
      return caf::make_error(ec::store_failure, state->describe(s) + ": cannot open");
    return store_error(path, "cannot open: " + s.ToString());
  }
  return std::unique_ptr<Store>{new rocksdb_store(std::move(state))};
}

caf::error rocksdb_store::put_raw(family f, std::string_view key,
                                  std::string_view bytes, bool sync) {
  rocksdb::WriteOptions opts;
  opts.sync = sync;
  std::shared_lock<std::shared_mutex> order{impl_->order_mu};
  auto s = impl_->checked(
    [&] { return impl_->db->Put(opts, impl_->handle(f), slice(key), slice(bytes)); });
  if (!s.ok())
    return caf::make_error(ec::store_failure,
                           impl_->failure("write " + impl_->where(f, key), s));
  impl_->logged(f, key, std::string{bytes});
  if (sync)
    kill_point("after_wal_write");
  return caf::none;
}

caf::expected<std::optional<std::string>>
rocksdb_store::get_raw(family f, std::string_view key) {
  if (impl_->lease_count > 0)
    (void) keep_alive(0);  // expires leases, erasing their keys
  return impl_->read(f, key);
}

caf::error rocksdb_store::erase(family f, std::string_view key, bool sync) {
  rocksdb::WriteOptions opts;
  opts.sync = sync;
  std::shared_lock<std::shared_mutex> order{impl_->order_mu};
  auto s = impl_->checked([&] { return impl_->db->Delete(opts, impl_->handle(f), slice(key)); });
  if (!s.ok())
    return caf::make_error(ec::store_failure,
                           impl_->failure("erase " + impl_->where(f, key), s));
  impl_->logged(f, key, std::nullopt);
  return caf::none;
}

caf::error rocksdb_store::write(const std::vector<change>& changes, bool sync) {
  if (changes.empty())
    return caf::none;
  rocksdb::WriteBatch batch;
  std::shared_lock<std::shared_mutex> order{impl_->order_mu};
  auto s = impl_->checked([&] {
    // Built under the lock: the handles change when the store is reopened.
    for (const auto& c : changes) {
      auto st = c.value ? batch.Put(impl_->handle(c.f), slice(c.key), slice(*c.value))
                        : batch.Delete(impl_->handle(c.f), slice(c.key));
      if (!st.ok())
        return rocksdb::Status::InvalidArgument("cannot batch " + impl_->where(c.f, c.key)
                                                + ": " + st.ToString());
    }
    rocksdb::WriteOptions opts;
    opts.sync = sync;
    return impl_->db->Write(opts, &batch);
  });
  if (!s.ok())
    return caf::make_error(ec::store_failure,
                           impl_->failure("write a batch of " + std::to_string(changes.size())
                                            + " change(s)", s));
  for (const auto& c : changes)
    impl_->logged(c.f, c.key, c.value);
  if (sync)
    kill_point("after_wal_write");
  return caf::none;
}

caf::error rocksdb_store::sync_wal() {
  rocksdb::Status s;
  {
    std::shared_lock<std::shared_mutex> lock{impl_->mu};
    if (impl_->db == nullptr)
      return store_error(impl_->path, "is not open (a reopen after a full disk failed)");
    s = impl_->db->SyncWAL();
  }
  if (!s.ok()) {
    impl_->on_write_error(s, false);
    return caf::make_error(ec::store_failure, impl_->failure("sync the write-ahead log", s));
  }
  kill_point("after_wal_write");
  return caf::none;
}

caf::error
rocksdb_store::for_each(family f,
                        const std::function<bool(std::string_view key,
                                                 std::string_view bytes)>& fn) {
  if (impl_->lease_count > 0)
    (void) keep_alive(0);  // expires leases, erasing their keys
  std::shared_lock<std::shared_mutex> lock{impl_->mu};
  if (impl_->db == nullptr)
    return store_error(impl_->path, "is not open (a reopen after a full disk failed)");
  std::unique_ptr<rocksdb::Iterator> it{
    impl_->db->NewIterator(rocksdb::ReadOptions{}, impl_->handle(f))};
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto k = it->key();
    auto v = it->value();
    if (!fn(std::string_view{k.data(), k.size()},
            std::string_view{v.data(), v.size()}))
      return caf::none;
  }
  if (auto s = it->status(); !s.ok())
    return store_error(impl_->path, std::string{"cannot iterate "}
                                      + to_string(f) + ": " + s.ToString());
  return caf::none;
}

namespace {

caf::error lease_gone(const std::string& path, lease_id lease) {
  return store_error(path, "lease " + std::to_string(lease)
                             + " is not granted or has expired");
}

} // namespace

caf::expected<bool>
rocksdb_store::compare_and_swap(family f, std::string_view key,
                                const std::optional<std::string>& expected,
                                const std::optional<std::string>& desired,
                                lease_id lease) {
  // Expire first, outside `order_mu` (expiry takes it itself).
  (void) keep_alive(0);
  std::unique_lock<std::shared_mutex> order{impl_->order_mu};
  if (lease != 0) {
    std::lock_guard<std::mutex> lock{impl_->log_mu};
    if (impl_->leases.count(lease) == 0)
      return lease_gone(impl_->path, lease);
  }
  auto now = impl_->read(f, key);
  if (!now)
    return now.error();
  if (*now != expected)
    return false;
  rocksdb::WriteOptions opts;
  opts.sync = true;
  auto s = impl_->checked([&] {
    return desired ? impl_->db->Put(opts, impl_->handle(f), slice(key), slice(*desired))
                   : impl_->db->Delete(opts, impl_->handle(f), slice(key));
  });
  if (!s.ok())
    return caf::make_error(ec::store_failure,
                           impl_->failure("compare-and-swap " + impl_->where(f, key), s));
  if (lease != 0 && desired) {
    std::lock_guard<std::mutex> lock{impl_->log_mu};
    if (auto it = impl_->leases.find(lease); it != impl_->leases.end())
      it->second.keys.emplace(f, std::string{key});
  }
  impl_->logged(f, key, desired);
  kill_point("after_wal_write");
  return true;
}

caf::expected<lease_id> rocksdb_store::grant_lease(std::chrono::seconds ttl) {
  if (ttl.count() < 1)
    return store_error(impl_->path, "a lease needs a TTL of at least 1 s, not "
                                      + std::to_string(ttl.count()));
  (void) keep_alive(0);
  std::lock_guard<std::mutex> lock{impl_->log_mu};
  auto id = ++impl_->last_lease;
  impl_->leases[id] = impl::lease_state{ttl, std::chrono::steady_clock::now() + ttl, {}};
  impl_->lease_count = impl_->leases.size();
  return id;
}

caf::expected<int64_t> rocksdb_store::keep_alive(lease_id lease) {
  // Expired leases go first, with their keys (lease 0 only expires).
  std::vector<std::pair<family, std::string>> doomed;
  int64_t ttl = 0;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock{impl_->log_mu};
    auto now = std::chrono::steady_clock::now();
    for (auto it = impl_->leases.begin(); it != impl_->leases.end();) {
      if (it->second.deadline <= now) {
        doomed.insert(doomed.end(), it->second.keys.begin(), it->second.keys.end());
        it = impl_->leases.erase(it);
        impl_->lease_count = impl_->leases.size();
      } else {
        ++it;
      }
    }
    if (auto it = impl_->leases.find(lease); it != impl_->leases.end()) {
      it->second.deadline = now + it->second.ttl;
      ttl = it->second.ttl.count();
      found = true;
    }
  }
  for (auto& [f, key] : doomed)
    if (auto err = erase(f, key, true))
      spdlog::warn("store {}: cannot erase {} of an expired lease: {}", impl_->path,
                   impl_->where(f, key), render_error(err));
  if (!found)
    return lease_gone(impl_->path, lease);
  return ttl;
}

caf::error rocksdb_store::revoke_lease(lease_id lease) {
  std::set<std::pair<family, std::string>> keys;
  {
    std::lock_guard<std::mutex> lock{impl_->log_mu};
    auto it = impl_->leases.find(lease);
    if (it == impl_->leases.end())
      return caf::none;
    keys = std::move(it->second.keys);
    impl_->leases.erase(it);
    impl_->lease_count = impl_->leases.size();
  }
  for (auto& [f, key] : keys)
    if (auto err = erase(f, key, true))
      return err;
  return caf::none;
}

caf::expected<int64_t> rocksdb_store::revision() {
  std::lock_guard<std::mutex> lock{impl_->log_mu};
  return impl_->rev;
}

caf::error rocksdb_store::watch(family f, int64_t from,
                                const std::function<bool(const store_event&)>& fn,
                                const std::function<bool()>& stop,
                                std::chrono::milliseconds poll) {
  int64_t next = std::max<int64_t>(from, 1);
  for (;;) {
    std::vector<store_event> batch;
    {
      std::unique_lock<std::mutex> lock{impl_->log_mu};
      auto oldest = impl_->log.empty() ? impl_->rev + 1 : impl_->log.front().revision;
      if (next < oldest && next <= impl_->rev)
        return store_error(impl_->path, "revision " + std::to_string(next)
                                          + " is compacted (oldest kept "
                                          + std::to_string(oldest) + ")");
      if (next > impl_->rev)
        impl_->log_cv.wait_for(lock, poll, [&] { return impl_->rev >= next; });
      for (const auto& e : impl_->log)
        if (e.revision >= next && e.f == f)
          batch.push_back(e);
      next = std::max(next, impl_->rev + 1);
    }
    for (const auto& e : batch)
      if (!fn(e))
        return caf::none;
    if (stop && stop())
      return caf::none;
    (void) keep_alive(0);  // expires leases, erasing their keys
  }
}

const std::string& rocksdb_store::path() const {
  return impl_->path;
}

std::string rocksdb_store::write_problem() {
  if (auto why = impl_->writable())
    return *why;
  // No write failed yet, but the next one would: say so before it does.
  auto free = impl_->free_bytes();
  if (free < 64 * 1024)
    return "store full: " + impl_->path + " has " + std::to_string(free) + " bytes free";
  return {};
}

store_faults& rocksdb_store::faults() {
  return impl_->faults;
}

} // namespace astraeus
