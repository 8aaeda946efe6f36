#include "store/store.hpp"
#include "runtime/process/kill_point.hpp"

#include <algorithm>
#include <array>
#include <chrono>
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

const char* to_string(family f) {
  switch (f) {
    case family::machines: return "machines";
    case family::gpus: return "gpus";
    case family::faults: return "faults";
    case family::runs: return "runs";
    case family::workers: return "workers";
    case family::tokens: return "tokens";
    case family::validations: return "validations";
    case family::audit: return "audit";
    case family::workspaces: return "workspaces";
    case family::gpu_history: return "gpu_history";
  }
  return "unknown";
}

void store_faults::fail_next_writes(size_t count, kind k) {
  std::lock_guard<std::mutex> lock{mu_};
  armed_ = count;
  kind_ = k;
}

size_t store_faults::armed() const {
  std::lock_guard<std::mutex> lock{mu_};
  return armed_;
}

size_t store_faults::failed() const {
  std::lock_guard<std::mutex> lock{mu_};
  return failed_;
}

std::optional<store_faults::kind> store_faults::take() {
  std::lock_guard<std::mutex> lock{mu_};
  if (armed_ == 0)
    return std::nullopt;
  --armed_;
  ++failed_;
  return kind_;
}

struct Store::impl {
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
  /// ~18 % of the scheduler's CPU on inserts (bench/RESULTS.md section 19),
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

  rocksdb::ColumnFamilyHandle* handle(family f) const {
    return families[static_cast<size_t>(f)];
  }

  std::string where(family f, std::string_view key) const {
    std::string out = to_string(f);
    out += " key \"";
    out.append(key.data(), key.size());
    out += '"';
    return out;
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

Store::Store(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

Store::~Store() = default;

caf::expected<std::unique_ptr<Store>> Store::open(const std::string& path) {
  return open(path, nullptr);
}

caf::expected<std::unique_ptr<Store>> Store::open(const std::string& path,
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
      return std::unique_ptr<Store>{new Store(std::move(state))};
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
  return std::unique_ptr<Store>{new Store(std::move(state))};
}

caf::error Store::put(family f, std::string_view key,
                      const google::protobuf::Message& value, bool sync) {
  std::string bytes;
  if (!value.SerializeToString(&bytes))
    return store_error(impl_->path, "cannot serialize "
                                      + value.GetDescriptor()->full_name()
                                      + " for " + impl_->where(f, key));
  return put_raw(f, key, bytes, sync);
}

caf::error Store::put_raw(family f, std::string_view key,
                          std::string_view bytes, bool sync) {
  rocksdb::WriteOptions opts;
  opts.sync = sync;
  auto s = impl_->checked(
    [&] { return impl_->db->Put(opts, impl_->handle(f), slice(key), slice(bytes)); });
  if (!s.ok())
    return caf::make_error(ec::store_failure,
                           impl_->failure("write " + impl_->where(f, key), s));
  if (sync)
    kill_point("after_wal_write");
  return caf::none;
}

caf::expected<bool> Store::get(family f, std::string_view key,
                               google::protobuf::Message& out) {
  rocksdb::PinnableSlice bytes;
  std::shared_lock<std::shared_mutex> lock{impl_->mu};
  if (impl_->db == nullptr)
    return store_error(impl_->path, "is not open (a reopen after a full disk failed)");
  auto s = impl_->db->Get(rocksdb::ReadOptions{}, impl_->handle(f), slice(key),
                          &bytes);
  if (s.IsNotFound())
    return false;
  if (!s.ok())
    return store_error(impl_->path, "cannot read " + impl_->where(f, key)
                                      + ": " + s.ToString());
  if (!out.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return corrupt(f, key, out.GetDescriptor()->full_name());
  return true;
}

caf::error Store::erase(family f, std::string_view key, bool sync) {
  rocksdb::WriteOptions opts;
  opts.sync = sync;
  auto s = impl_->checked([&] { return impl_->db->Delete(opts, impl_->handle(f), slice(key)); });
  if (!s.ok())
    return caf::make_error(ec::store_failure,
                           impl_->failure("erase " + impl_->where(f, key), s));
  return caf::none;
}

caf::error Store::write(const std::vector<change>& changes, bool sync) {
  if (changes.empty())
    return caf::none;
  rocksdb::WriteBatch batch;
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
  if (sync)
    kill_point("after_wal_write");
  return caf::none;
}

caf::error Store::sync_wal() {
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
Store::for_each(family f,
                const std::function<bool(std::string_view key,
                                         std::string_view bytes)>& fn) {
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

const std::string& Store::path() const {
  return impl_->path;
}

std::string Store::write_problem() {
  if (auto why = impl_->writable())
    return *why;
  // No write failed yet, but the next one would: say so before it does.
  auto free = impl_->free_bytes();
  if (free < 64 * 1024)
    return "store full: " + impl_->path + " has " + std::to_string(free) + " bytes free";
  return {};
}

store_faults& Store::faults() {
  return impl_->faults;
}

caf::error Store::corrupt(family f, std::string_view key,
                          const std::string& type) const {
  return caf::make_error(ec::corrupt_record,
                         "store " + impl_->path + ": " + impl_->where(f, key)
                           + " does not parse as " + type);
}

} // namespace astraeus
