#include "runtime/validation/disk_direct_io.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "messages/error.hpp"

namespace astraeus::validation {

namespace {

using steady = std::chrono::steady_clock;
constexpr size_t block = 1 << 20;
constexpr size_t small_block = 4096;
constexpr int random_threads = 32;

caf::error io_error(const std::string& what, int err) {
  std::string why = std::strerror(err);
  if (err == EINVAL)
    why = "O_DIRECT is not supported here (EINVAL)";
  return caf::make_error(ec::host_read_failure, what + ": " + why);
}

struct aligned_free {
  void operator()(void* p) const { std::free(p); }
};

std::unique_ptr<char, aligned_free> aligned(size_t size) {
  void* p = nullptr;
  if (::posix_memalign(&p, 4096, size) != 0)
    return nullptr;
  std::memset(p, 0x5a, size);
  return std::unique_ptr<char, aligned_free>{static_cast<char*>(p)};
}

double seconds_since(steady::time_point t) {
  return std::chrono::duration<double>(steady::now() - t).count();
}

}  // namespace

caf::expected<disk_figures> direct_io_test(const std::string& file, uint64_t bytes,
                                           double seconds) {
  disk_figures out;
  out.tool = "built-in O_DIRECT";
  bytes = std::max<uint64_t>(bytes / block, 1) * block;
  auto buf = aligned(block);
  if (!buf)
    return caf::make_error(ec::host_read_failure, "no memory for the test buffer");
  int fd = ::open(file.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0)
    return io_error("open " + file, errno);
  auto t0 = steady::now();
  for (uint64_t off = 0; off < bytes; off += block)
    if (::pwrite(fd, buf.get(), block, static_cast<off_t>(off)) != static_cast<ssize_t>(block)) {
      int e = errno;
      ::close(fd);
      return io_error("write " + file, e ? e : ENOSPC);
    }
  ::fdatasync(fd);
  out.seq_write_mbs = static_cast<double>(bytes) / seconds_since(t0) / 1e6;
  t0 = steady::now();
  for (uint64_t off = 0; off < bytes; off += block)
    if (::pread(fd, buf.get(), block, static_cast<off_t>(off)) != static_cast<ssize_t>(block)) {
      int e = errno;
      ::close(fd);
      return io_error("read " + file, e ? e : EIO);
    }
  out.seq_read_mbs = static_cast<double>(bytes) / seconds_since(t0) / 1e6;

  std::atomic<uint64_t> reads{0};
  std::atomic<int> error{0};
  auto until = steady::now() + std::chrono::duration<double>(std::max(1.0, seconds / 3));
  auto blocks = bytes / small_block;
  t0 = steady::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < random_threads; ++i)
    threads.emplace_back([&, i] {
      auto b = aligned(small_block);
      std::mt19937_64 rng(static_cast<uint64_t>(i) * 7919 + 1);
      while (b && steady::now() < until && error == 0) {
        auto off = (rng() % blocks) * small_block;
        if (::pread(fd, b.get(), small_block, static_cast<off_t>(off)) != static_cast<ssize_t>(small_block)) {
          error = errno ? errno : EIO;
          return;
        }
        ++reads;
      }
    });
  for (auto& t : threads)
    t.join();
  auto took = seconds_since(t0);
  ::close(fd);
  if (error != 0)
    return io_error("random read " + file, error);
  out.rand_read_iops = static_cast<double>(reads) / took;
  return out;
}

}  // namespace astraeus::validation
