#include "store/store.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <system_error>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/status.h>

namespace astraeus {

namespace {

constexpr std::array<family, family_count> all_families = {
  family::machines, family::gpus,    family::faults,      family::runs,
  family::workers,  family::tokens,  family::validations, family::audit,
  family::workspaces,
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

  /// The status of a write: an armed fault's, else `write()`'s.
  template <class Write>
  rocksdb::Status checked(Write&& write) {
    if (auto k = faults.take())
      return *k == store_faults::kind::disk_full
               ? rocksdb::Status::NoSpace("injected by the store's fault hook")
               : rocksdb::Status::IOError("injected by the store's fault hook");
    return write();
  }
  /// Every handle opened, ours and unknown ones, destroyed on close.
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  /// Ours, indexed by `family`.
  std::array<rocksdb::ColumnFamilyHandle*, family_count> families{};

  ~impl() {
    if (db == nullptr)
      return;
    for (auto* h : handles)
      db->DestroyColumnFamilyHandle(h);
    db->Close();
    delete db;
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
};

Store::Store(std::unique_ptr<impl> ptr) : impl_(std::move(ptr)) {
  // nop
}

Store::~Store() = default;

caf::expected<std::unique_ptr<Store>> Store::open(const std::string& path) {
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
  rocksdb::DBOptions db_opts;
  db_opts.create_if_missing = true;
  db_opts.create_missing_column_families = true;
  // RocksDB's own info log lives in the folder; keep a few, not hundreds.
  db_opts.keep_log_file_num = 4;
  // Families on disk: ours plus any a newer version added, which must be
  // opened too. A folder without CURRENT holds no database yet.
  std::vector<std::string> names;
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
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (auto& name : names)
    descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions{});
  auto state = std::make_unique<impl>();
  state->path = path;
  auto s = rocksdb::DB::Open(db_opts, path, descriptors, &state->handles,
                             &state->db);
  if (!s.ok()) {
    // On failure RocksDB leaves db null and hands back no handles.
    state->db = nullptr;
    state->handles.clear();
    if (is_lock_conflict(s))
      return store_error(path, "is in use by another process (another "
                               "controller or agent running?)");
    return store_error(path, "cannot open: " + s.ToString());
  }
  for (size_t i = 0; i < names.size(); ++i)
    for (auto f : all_families)
      if (names[i] == to_string(f))
        state->families[static_cast<size_t>(f)] = state->handles[i];
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
    return store_error(impl_->path, "cannot write " + impl_->where(f, key)
                                      + ": " + s.ToString());
  return caf::none;
}

caf::expected<bool> Store::get(family f, std::string_view key,
                               google::protobuf::Message& out) {
  rocksdb::PinnableSlice bytes;
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
    return store_error(impl_->path, "cannot erase " + impl_->where(f, key)
                                      + ": " + s.ToString());
  return caf::none;
}

caf::error Store::write(const std::vector<change>& changes, bool sync) {
  if (changes.empty())
    return caf::none;
  rocksdb::WriteBatch batch;
  for (const auto& c : changes) {
    auto s = c.value ? batch.Put(impl_->handle(c.f), slice(c.key), slice(*c.value))
                     : batch.Delete(impl_->handle(c.f), slice(c.key));
    if (!s.ok())
      return store_error(impl_->path, "cannot batch " + impl_->where(c.f, c.key)
                                        + ": " + s.ToString());
  }
  rocksdb::WriteOptions opts;
  opts.sync = sync;
  auto s = impl_->checked([&] { return impl_->db->Write(opts, &batch); });
  if (!s.ok())
    return store_error(impl_->path, "cannot write a batch of "
                                      + std::to_string(changes.size())
                                      + " change(s): " + s.ToString());
  return caf::none;
}

caf::error
Store::for_each(family f,
                const std::function<bool(std::string_view key,
                                         std::string_view bytes)>& fn) {
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
