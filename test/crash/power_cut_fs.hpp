#pragma once
/// @file
/// A RocksDB file system for the crash suite that simulates a power cut:
/// it tracks, for every file written through it, how many bytes were
/// synced (Sync/Fsync); at `cut()` every later write, rename and delete is
/// dropped (the machine is off), and `apply_cut()` then truncates each file
/// to its synced length, as the disk would hold it after power returns.
/// What the process was told was durable (a `sync=true` write that
/// returned) must survive that.

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <unistd.h>

#include <rocksdb/file_system.h>

namespace astraeus::crash {

/// Per-file sizes: written so far, and synced so far (bytes).
struct tracked_file {
  uint64_t size = 0;
  uint64_t synced = 0;
};

/// The shared book of one power-cut file system.
struct power_cut_book {
  std::mutex mu;
  std::map<std::string, tracked_file> files;
  std::atomic<bool> cut{false};
};

/// A writable file that records appends and syncs in the book, and drops
/// everything after the cut.
class power_cut_file : public rocksdb::FSWritableFileOwnerWrapper {
public:
  power_cut_file(std::unique_ptr<rocksdb::FSWritableFile> f, std::string name,
                 std::shared_ptr<power_cut_book> book)
    : FSWritableFileOwnerWrapper(std::move(f)), name_(std::move(name)),
      book_(std::move(book)) {
  }

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* dbg) override {
    if (book_->cut)
      return rocksdb::IOStatus::OK();
    auto s = target()->Append(data, o, dbg);
    if (s.ok()) {
      std::lock_guard<std::mutex> lock{book_->mu};
      book_->files[name_].size += data.size();
    }
    return s;
  }

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo&,
                           rocksdb::IODebugContext* dbg) override {
    return Append(data, o, dbg);
  }

  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    return synced(target()->Sync(o, dbg));
  }

  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    return synced(target()->Fsync(o, dbg));
  }

  rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override {
    if (book_->cut)
      return rocksdb::IOStatus::OK();
    return target()->Truncate(size, o, dbg);
  }

private:
  rocksdb::IOStatus synced(rocksdb::IOStatus s) {
    if (book_->cut || !s.ok())
      return book_->cut ? rocksdb::IOStatus::OK() : s;
    std::lock_guard<std::mutex> lock{book_->mu};
    auto& f = book_->files[name_];
    f.synced = f.size;
    return s;
  }

  std::string name_;
  std::shared_ptr<power_cut_book> book_;
};

/// The file system itself (wraps the default one).
class power_cut_fs : public rocksdb::FileSystemWrapper {
public:
  power_cut_fs()
    : FileSystemWrapper(rocksdb::FileSystem::Default()),
      book_(std::make_shared<power_cut_book>()) {
  }

  const char* Name() const override {
    return "power_cut_fs";
  }

  /// Power is back: forget the book, track afresh.
  void reset() {
    std::lock_guard<std::mutex> lock{book_->mu};
    book_->files.clear();
    book_->cut = false;
  }

  /// The power goes off: nothing written from now on reaches the disk.
  void cut() {
    book_->cut = true;
  }

  /// What the disk holds after the cut: every tracked file truncated to
  /// what was synced. Returns the bytes dropped.
  uint64_t apply_cut() {
    std::lock_guard<std::mutex> lock{book_->mu};
    uint64_t dropped = 0;
    for (auto& [name, f] : book_->files) {
      if (::access(name.c_str(), F_OK) != 0)
        continue;
      if (f.size > f.synced)
        dropped += f.size - f.synced;
      (void) ::truncate(name.c_str(), static_cast<off_t>(f.synced));
    }
    return dropped;
  }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    auto s = target()->NewWritableFile(fname, o, result, dbg);
    if (!s.ok())
      return s;
    {
      std::lock_guard<std::mutex> lock{book_->mu};
      book_->files[fname] = tracked_file{};
    }
    result->reset(new power_cut_file(std::move(*result), fname, book_));
    return s;
  }

  rocksdb::IOStatus ReopenWritableFile(const std::string& fname, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override {
    auto s = target()->ReopenWritableFile(fname, o, result, dbg);
    if (!s.ok())
      return s;
    uint64_t size = 0;
    (void) target()->GetFileSize(fname, rocksdb::IOOptions{}, &size, dbg);
    {
      std::lock_guard<std::mutex> lock{book_->mu};
      book_->files[fname] = tracked_file{size, size};
    }
    result->reset(new power_cut_file(std::move(*result), fname, book_));
    return s;
  }

  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& target_name,
                               const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (book_->cut)
      return rocksdb::IOStatus::OK();
    auto s = target()->RenameFile(src, target_name, o, dbg);
    if (s.ok()) {
      std::lock_guard<std::mutex> lock{book_->mu};
      auto i = book_->files.find(src);
      if (i != book_->files.end()) {
        book_->files[target_name] = i->second;
        book_->files.erase(src);
      } else {
        book_->files.erase(target_name);
      }
    }
    return s;
  }

  rocksdb::IOStatus DeleteFile(const std::string& fname, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* dbg) override {
    if (book_->cut)
      return rocksdb::IOStatus::OK();
    auto s = target()->DeleteFile(fname, o, dbg);
    std::lock_guard<std::mutex> lock{book_->mu};
    book_->files.erase(fname);
    return s;
  }

private:
  std::shared_ptr<power_cut_book> book_;
};

} // namespace astraeus::crash
