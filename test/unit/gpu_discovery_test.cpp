// The combining layer of GPU discovery (runtime/gpu_discovery.cpp): how the
// GPUs were read, which GPUs are listed, the machine's GPU conditions and
// capability summary, as `astra machine NAME` shows them. NVML is the
// stand-in libnvidia-ml.so (test/stand_in) on JSON fixtures, nvidia-smi the
// recorded-output scripts of test/fixtures/nvidia-smi, and the host root a
// fixture tree; nothing here sleeps.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "actor_fixture.hpp"
#include "bin/cli_format.hpp"
#include "runtime/gpu_discovery.hpp"
#include "store/store.hpp"

using namespace astraeus;
using namespace std::chrono_literals;
using astraeus::cli::format_gpu_section;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& path) {
  return std::string{ASTRAEUS_FIXTURES} + "/" + path;
}

/// Installs the recorded nvidia-smi `script` (test/fixtures/nvidia-smi) as
/// the program <dir>/nvidia-smi, replacing the one there: what a driver
/// upgrade or removal does between two passes.
std::string install_nvidia_smi(const std::string& dir, const std::string& script) {
  auto to = fs::path{dir} / "nvidia-smi";
  fs::remove(to);
  std::ofstream{to} << "#!/bin/sh\nexec '" << fixture("nvidia-smi/" + script) << "' \"$@\"\n";
  fs::permissions(to, fs::perms::owner_all);
  return to.string();
}

/// A machine without NVML (the library is not there), nvidia-smi at
/// <tmp>/nvidia-smi, and an empty host root (no PCI bus, no AMD GPU).
struct machine {
  test::temp_dir tmp;
  std::string root = tmp.path() + "/root";
  std::string smi = tmp.path() + "/nvidia-smi";

  machine() { fs::create_directories(root); }

  gpu_discovery_options options(std::shared_ptr<Store> store = nullptr) const {
    gpu_discovery_options opts;
    opts.root = root;
    opts.nvml.library = tmp.path() + "/no-such/libnvidia-ml.so.1";
    opts.nvidia_smi = smi;
    opts.nvidia_smi_deadline = 10s;
    opts.store = std::move(store);
    return opts;
  }

  /// One pass of a freshly started agent whose nvidia-smi is the recorded
  /// `script`.
  v1::GpuSection first_pass(const std::string& script, std::shared_ptr<Store> store = nullptr) {
    install_nvidia_smi(tmp.path(), script);
    gpu_discovery discovery(options(std::move(store)));
    return discovery.discover(false);
  }

  std::shared_ptr<Store> open_store() const {
    auto st = Store::open(tmp.path() + "/store");
    EXPECT_TRUE(st) << render_error(st.error());
    return st ? std::shared_ptr<Store>{std::move(*st)} : nullptr;
  }
};

const v1::Gpu* gpu_at(const v1::GpuSection& s, const std::string& pci) {
  auto it = std::find_if(s.gpus().begin(), s.gpus().end(),
                         [&](const v1::Gpu& g) { return g.pci_address() == pci; });
  return it == s.gpus().end() ? nullptr : &*it;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

// --- The last known GPUs, kept across an agent restart ---------------------

TEST(GpuDiscovery, KeptGpusAreListedAfterAnAgentRestartWhileTheDriverIsGone) {
  machine m;
  auto before = m.first_pass("h100x8.sh", m.open_store());
  ASSERT_EQ(before.read_as(), "nvidia-smi") << before.detail();
  ASSERT_EQ(before.gpus_size(), 8);
  // The agent restarts; the driver is gone meanwhile.
  auto s = m.first_pass("no_driver.sh", m.open_store());

  EXPECT_EQ(s.read_as(), "unavailable");
  EXPECT_TRUE(contains(s.detail(), "the last known GPUs are kept")) << s.detail();
  ASSERT_EQ(s.gpus_size(), 8);
  const v1::Gpu* g = gpu_at(s, "0000:2a:00.0");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->id(), "GPU-8c9a3a0e-7d2b-4a47-9c1b-3f0c7a1e5d01");
  EXPECT_EQ(g->model(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g->index(), 1u);
  EXPECT_EQ(g->memory_total_bytes(), 81559ull * 1024 * 1024);
  EXPECT_EQ(g->status(), "unavailable");
  // Identity only: no stale readings.
  EXPECT_FALSE(g->has_temperature_c());
  EXPECT_FALSE(g->has_memory_used_bytes());
  for (const auto& gpu : s.gpus())
    EXPECT_EQ(gpu.status(), "unavailable") << gpu.id();
  ASSERT_GE(s.conditions_size(), 1);
  EXPECT_EQ(s.conditions(0).reason(), "DriverUnavailable");
  EXPECT_EQ(s.capabilities().count(), 8u);
  EXPECT_TRUE(s.capabilities().data_centre());

  // What `astra machine NAME` shows.
  auto page = format_gpu_section(s);
  EXPECT_TRUE(contains(page, "Read as:   unavailable")) << page;
  EXPECT_TRUE(contains(page, "GPU-60718293-a4b5-4c6d-8f70-8192a3b4c5d6")) << page;
  EXPECT_TRUE(contains(page, "0000:db:00.0")) << page;
}

TEST(GpuDiscovery, KnownGpusAreWrittenOnlyWhenTheyChange) {
  machine m;
  auto store = m.open_store();
  ASSERT_TRUE(store);
  install_nvidia_smi(m.tmp.path(), "h100x8.sh");
  gpu_discovery discovery(m.options(store));
  ASSERT_EQ(discovery.discover(false).gpus_size(), 8);
  v1::GpuSection known;
  auto found = store->get(family::gpus, known_nvidia_gpus_key, known);
  ASSERT_TRUE(found && *found);
  ASSERT_EQ(known.gpus_size(), 8);
  EXPECT_EQ(known.gpus(5).id(), "GPU-4e5f6071-8293-4a4b-8d5e-6f708192a3b4");
  EXPECT_FALSE(known.gpus(5).has_temperature_c());

  // The same GPUs again (other readings): nothing is written.
  ASSERT_FALSE(store->erase(family::gpus, known_nvidia_gpus_key));
  ASSERT_EQ(discovery.discover(false).gpus_size(), 8);
  v1::GpuSection again;
  found = store->get(family::gpus, known_nvidia_gpus_key, again);
  ASSERT_TRUE(found);
  EXPECT_FALSE(*found);
}

TEST(GpuDiscovery, AMachineThatNeverHadAGpuStaysNoGpuAfterARestart) {
  machine m;
  auto s = m.first_pass("no_driver.sh", m.open_store());
  EXPECT_EQ(s.read_as(), "no-gpu");
  EXPECT_EQ(s.gpus_size(), 0);
}

