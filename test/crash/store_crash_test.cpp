// The crash suite's store tests (issue 23): a full file system (a small
// tmpfs in a private mount namespace) and simulated power cuts. Each prints
// its figures: cycles, acknowledged writes, lost writes.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>

#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <rocksdb/env.h>

#include "crash/power_cut_fs.hpp"
#include "messages/astraeus.pb.h"
#include "messages/error.hpp"
#include "store/store.hpp"

namespace fs = std::filesystem;
using namespace astraeus;

namespace {

/// A fresh folder under /tmp, removed afterwards.
struct scratch {
  fs::path path;
  /// `base`: where; the power-cut test uses /dev/shm when there is one
  /// (its fsyncs cost nothing there, so 100+ cycles stay short on 2 cores).
  explicit scratch(const std::string& base = "/tmp") {
    std::string tmpl = (fs::is_directory(base) ? base : std::string{"/tmp"})
                       + "/astraeus-crash-XXXXXX";
    path = ::mkdtemp(tmpl.data());
  }
  ~scratch() {
    std::error_code err;
    fs::remove_all(path, err);
  }
};

v1::MachineRecord record(const std::string& name, size_t pad) {
  v1::MachineRecord rec;
  rec.set_name(name);
  rec.set_machine_id(std::string(pad, 'x'));
  return rec;
}

/// Enters a private mount namespace and mounts a tmpfs of `size` on `dir`;
/// returns why it could not ("" on success).
std::string private_tmpfs(const fs::path& dir, const std::string& size) {
  if (::geteuid() != 0)
    return "not root: a private mount namespace needs root";
  if (::unshare(CLONE_NEWNS) != 0)
    return std::string{"unshare(CLONE_NEWNS) failed: "} + std::strerror(errno);
  if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string{"making / private failed: "} + std::strerror(errno);
  auto opts = "size=" + size;
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0)
    return std::string{"mounting a tmpfs failed: "} + std::strerror(errno);
  return {};
}

/// Writes records until one is refused; returns how many were acknowledged.
size_t fill(Store& st, std::map<std::string, size_t>& acked, const std::string& prefix,
            caf::error& refusal) {
  size_t n = 0;
  for (size_t i = 0; i < 100000; ++i) {
    auto key = prefix + std::to_string(i);
    if (auto err = st.put(family::machines, key, record(key, 4000))) {
      refusal = err;
      return n;
    }
    acked[key] = 4000;
    ++n;
  }
  return n;
}

/// Polls (this is the crash suite, not a unit test) until a write goes
/// through; returns the seconds it took, or -1.
double until_writes_resume(Store& st) {
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds{15}) {
    if (!st.put(family::machines, "probe", record("probe", 10)))
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }
  return -1;
}

size_t count_lost(Store& st, const std::map<std::string, size_t>& acked) {
  size_t lost = 0;
  for (const auto& [key, pad] : acked) {
    v1::MachineRecord rec;
    auto found = st.get(family::machines, key, rec);
    if (!found || !*found || rec.machine_id().size() != pad)
      ++lost;
  }
  return lost;
}

} // namespace

TEST(CrashStoreFullDisk, RefusesWritesKeepsReadsAndResumesWithoutARestart) {
  scratch dir;
  if (auto why = private_tmpfs(dir.path, "8m"); !why.empty())
    GTEST_SKIP() << "full-disk test skipped: " << why;
  // Room to free later: a filler the test removes.
  {
    std::ofstream filler{dir.path / "filler"};
    filler << std::string(2 << 20, 'f');
  }
  auto path = (dir.path / "store").string();
  std::map<std::string, size_t> acked;
  auto opened = Store::open(path);
  ASSERT_TRUE(opened) << render_error(opened.error());
  auto& st = **opened;
  caf::error refusal;
  auto first = fill(st, acked, "a", refusal);
  ASSERT_TRUE(refusal) << "the 8 MiB tmpfs never filled";
  auto text = render_error(refusal);
  EXPECT_NE(text.find("store full: " + path + " has "), std::string::npos) << text;
  EXPECT_NE(text.find("bytes free"), std::string::npos) << text;
  // Refused again at once, and said why; reads keep working.
  auto again = st.put(family::machines, "again", record("again", 10));
  ASSERT_TRUE(again);
  EXPECT_NE(render_error(again).find("store full"), std::string::npos) << render_error(again);
  EXPECT_NE(st.write_problem().find("store full"), std::string::npos);
  EXPECT_EQ(count_lost(st, acked), 0u);
  // Room again: writes resume without reopening the store by hand.
  fs::remove(dir.path / "filler");
  auto resumed_after = until_writes_resume(st);
  EXPECT_GE(resumed_after, 0) << "writes did not resume: " << st.write_problem();
  EXPECT_EQ(st.write_problem(), "");
  // Full again, then closed and opened while full: opened read-only, not a
  // crash, and writes come back once there is room.
  {
    std::ofstream filler{dir.path / "filler"};
    filler << std::string(1 << 20, 'f');
  }
  caf::error second_refusal;
  auto second = fill(st, acked, "b", second_refusal);
  opened->reset();
  {
    // Whatever room the close left, take it.
    std::ofstream last{dir.path / "last"};
    last << std::string(8 << 20, 'l');
  }
  auto reopened = Store::open(path);
  ASSERT_TRUE(reopened) << "a store on a full disk must open (read-only): "
                        << render_error(reopened.error());
  auto lost = count_lost(**reopened, acked);
  EXPECT_EQ(lost, 0u);
  auto while_full = (*reopened)->put(family::machines, "ro", record("ro", 10));
  EXPECT_TRUE(while_full);
  fs::remove(dir.path / "last");
  fs::remove(dir.path / "filler");
  auto resumed_again = until_writes_resume(**reopened);
  EXPECT_GE(resumed_again, 0) << (*reopened)->write_problem();
  std::printf("full disk: acknowledged %zu + %zu, lost %zu; refused with \"%s\"; writes "
              "resumed %.1f s and %.1f s (after a read-only open) after room was made\n",
              first, second, lost, text.c_str(), resumed_after, resumed_again);
}

TEST(CrashStorePowerCut, NoAcknowledgedWriteIsLostOverAHundredCuts) {
  scratch dir{"/dev/shm"};
  auto path = (dir.path / "store").string();
  auto pfs = std::make_shared<crash::power_cut_fs>();
  auto env = rocksdb::NewCompositeEnv(pfs);
  std::mt19937 rng{20261202};
  std::map<std::string, size_t> acked;
  size_t cycles = 120, unsynced = 0, lost = 0;
  uint64_t dropped = 0;
  for (size_t cycle = 0; cycle < cycles; ++cycle) {
    pfs->reset();
    auto st = Store::open(path, env.get());
    ASSERT_TRUE(st) << "cycle " << cycle << ": " << render_error(st.error());
    auto writes = 1 + rng() % 40;
    for (size_t i = 0; i < writes; ++i) {
      auto key = "c" + std::to_string(cycle) + "-" + std::to_string(i);
      size_t pad = 1 + rng() % 20000;
      if (rng() % 4 == 0) {
        // Not acknowledged (no sync): it may or may not survive.
        (void) (*st)->put(family::machines, "u" + key, record(key, pad), false);
        ++unsynced;
        continue;
      }
      if (rng() % 5 == 0) {
        std::vector<Store::change> batch;
        for (int b = 0; b < 3; ++b)
          batch.push_back({family::machines, key + "/b" + std::to_string(b),
                           record(key, pad).SerializeAsString()});
        if (!(*st)->write(batch, true))
          for (auto& c : batch)
            acked[c.key] = pad;
        continue;
      }
      if (!(*st)->put(family::machines, key, record(key, pad), true))
        acked[key] = pad;
    }
    pfs->cut();
    st->reset();  // what the process does after the cut reaches no disk
    dropped += pfs->apply_cut();
    auto after = Store::open(path);
    ASSERT_TRUE(after) << "cycle " << cycle << ": does not open after a power cut: "
                       << render_error(after.error());
    lost += count_lost(**after, acked);
  }
  EXPECT_EQ(lost, 0u);
  std::printf("power cut: %zu cycles, %zu acknowledged writes, %zu lost; %zu unsynced "
              "writes, %llu unsynced bytes dropped\n",
              cycles, acked.size(), lost, unsynced,
              static_cast<unsigned long long>(dropped));
}
