// The combining layer of GPU discovery (runtime/gpu/gpu_discovery.cpp): how the
// GPUs were read, which GPUs are listed, the machine's GPU conditions and
// capability summary, as `astra machine NAME` shows them. NVML is the
// stand-in libnvidia-ml.so (test/stand_in) on JSON fixtures, nvidia-smi the
// recorded-output scripts of test/fixtures/nvidia-smi, and the host root a
// fixture tree; nothing here sleeps.

#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "actor_fixture.hpp"
#include "bin/cli_format.hpp"
#include "runtime/gpu/gpu_discovery.hpp"
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

  /// The options of this machine with the stand-in NVML instead.
  gpu_discovery_options with_nvml(std::shared_ptr<Store> store = nullptr) const {
    auto opts = options(std::move(store));
    opts.nvml.library = ASTRAEUS_NVML_STAND_IN;
    return opts;
  }

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

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream{path} << text;
}

/// Puts an NVIDIA GPU on the PCI bus of the host tree `root`: a 3D
/// controller 10de:<device> at `address`, bound to `driver` (empty: none),
/// on NUMA node `numa`.
void add_pci_gpu(const std::string& root, const std::string& address, const std::string& device,
                 const std::string& driver, int numa) {
  auto dir = fs::path{root} / "sys/bus/pci/devices" / address;
  write_file(dir / "class", "0x030200\n");
  write_file(dir / "vendor", "0x10de\n");
  write_file(dir / "device", device + "\n");
  write_file(dir / "numa_node", std::to_string(numa) + "\n");
  write_file(dir / "uevent", (driver.empty() ? "" : "DRIVER=" + driver + "\n")
                                 + "PCI_SLOT_NAME=" + address + "\n");
}

/// Copies one device of the PCI fixture tree (test/fixtures/pci) into the
/// host tree `root`.
void copy_pci_fixture(const std::string& root, const std::string& address) {
  auto to = fs::path{root} / "sys/bus/pci/devices" / address;
  fs::create_directories(to);
  fs::copy(fixture("pci/sys/bus/pci/devices/" + address), to, fs::copy_options::recursive);
}

/// Points the stand-in NVML at a fixture (test/fixtures/nvml or a path).
void use_nvml_fixture(const std::string& path) {
  ::setenv("ASTRAEUS_NVML_FIXTURE", path.c_str(), 1);
  ::unsetenv("ASTRAEUS_NVML_HANG_RELEASE");
}

/// Everything logged while it lives, as text.
struct captured_log {
  std::ostringstream text;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink =
      std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
  // At info level while it lives, whatever an earlier test set (the
  // scheduler's property test quiets the log to errors).
  spdlog::level::level_enum before = spdlog::default_logger()->level();
  captured_log() {
    spdlog::default_logger()->sinks().push_back(sink);
    spdlog::default_logger()->set_level(spdlog::level::info);
  }
  ~captured_log() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
    spdlog::default_logger()->set_level(before);
  }
  size_t count(const std::string& part) const {
    auto all = text.str();
    size_t n = 0;
    for (auto at = all.find(part); at != std::string::npos; at = all.find(part, at + 1))
      ++n;
    return n;
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

// --- A GPU lost before its first read ---------------------------------------

namespace {

/// The four A100s of test/fixtures/nvml/lost_gpu.json on the PCI bus, bound
/// to the NVIDIA driver, NUMA node 3.
void add_lost_gpu_machine_bus(const std::string& root) {
  for (const char* address : {"0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0"})
    add_pci_gpu(root, address, "0x20b2", "nvidia", 3);
}

} // namespace

TEST(GpuDiscovery, AGpuLostBeforeItsFirstReadTakesItsPlaceFromTheBus) {
  machine m;
  add_lost_gpu_machine_bus(m.root);
  use_nvml_fixture(fixture("nvml/lost_gpu.json"));
  gpu_discovery discovery(m.with_nvml());
  auto s = discovery.discover(false);

  EXPECT_EQ(s.read_as(), "driver: healthy");
  ASSERT_EQ(s.gpus_size(), 4);
  const v1::Gpu& lost = s.gpus(1);
  EXPECT_EQ(lost.status(), "lost");
  EXPECT_EQ(lost.index(), 1u);
  // NVML never named it: the nvidia-bound device it did not report.
  EXPECT_EQ(lost.pci_address(), "0000:0f:00.0");
  EXPECT_EQ(lost.id(), "0000:0f:00.0");
  EXPECT_EQ(lost.numa_node(), 3);
  for (const auto& g : s.gpus()) {
    EXPECT_FALSE(g.id().empty());
    EXPECT_FALSE(g.pci_address().empty());
  }
  for (const auto& b : s.bus())
    EXPECT_TRUE(b.reported_by_driver()) << b.pci_address();
  // Its unknown model does not make an A100 machine a non-data-centre one.
  EXPECT_EQ(s.capabilities().model(), "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(s.capabilities().count(), 4u);
  EXPECT_TRUE(s.capabilities().data_centre());

  auto page = format_gpu_section(s);
  EXPECT_TRUE(contains(page, "data-centre yes")) << page;
  EXPECT_TRUE(contains(page, "0000:0f:00.0: nvmlDeviceGetUUID returned NVML_ERROR_GPU_IS_LOST"))
      << page;
}

TEST(GpuDiscovery, AGpuLostAfterARestartKeepsItsUuidFromTheLastKnownGpus) {
  machine m;
  add_lost_gpu_machine_bus(m.root);
  // Before the restart, every GPU answered.
  std::string healthy = m.tmp.path() + "/healthy.json";
  {
    std::ifstream in{fixture("nvml/lost_gpu.json")};
    std::string text{std::istreambuf_iterator<char>{in}, {}};
    auto at = text.find("\"lost\": true");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 12, "\"lost\": false");
    write_file(healthy, text);
  }
  {
    auto store = m.open_store();
    ASSERT_TRUE(store);
    use_nvml_fixture(healthy);
    gpu_discovery before(m.with_nvml(store));
    auto s = before.discover(false);
    ASSERT_EQ(s.gpus_size(), 4);
    ASSERT_EQ(s.gpus(1).id(), "GPU-7b8c9d0e-1f2a-4b3c-9d4e-5f6a7b8c9d02");
  }
  auto store = m.open_store();
  ASSERT_TRUE(store);
  use_nvml_fixture(fixture("nvml/lost_gpu.json"));
  gpu_discovery after(m.with_nvml(store));
  auto s = after.discover(false);
  ASSERT_EQ(s.gpus_size(), 4);
  const v1::Gpu& lost = s.gpus(1);
  EXPECT_EQ(lost.status(), "lost");
  EXPECT_EQ(lost.id(), "GPU-7b8c9d0e-1f2a-4b3c-9d4e-5f6a7b8c9d02");
  EXPECT_EQ(lost.model(), "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(lost.pci_address(), "0000:0f:00.0");
  EXPECT_EQ(lost.memory_total_bytes(), 85899345920ull);
  EXPECT_TRUE(s.capabilities().data_centre());
}

TEST(GpuDiscovery, SummaryLeavesGpusWithoutAModelOutOfTheDataCentreCheck) {
  std::vector<v1::Gpu> gpus(3);
  for (auto& g : gpus) {
    g.set_vendor("nvidia");
    g.set_model("NVIDIA H100 80GB HBM3");
    g.set_data_centre(true);
  }
  gpus[2].clear_model();
  gpus[2].set_data_centre(false);
  auto caps = summarise_gpus(gpus);
  EXPECT_EQ(caps.model(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(caps.count(), 3u);
  EXPECT_TRUE(caps.data_centre());
  // No model known at all: nothing says it is a data-centre machine.
  std::vector<v1::Gpu> unknown(1);
  EXPECT_FALSE(summarise_gpus(unknown).data_centre());
}

// --- nvidia-smi output the agent did not expect -----------------------------

TEST(GpuDiscovery, NewerNvidiaSmiColumnsAreIgnoredAndAnUnusableLineShowsOnTheMachinePage) {
  machine m;
  install_nvidia_smi(m.tmp.path(), "h100x8_extra_columns.sh");
  captured_log log;
  gpu_discovery discovery(m.options());
  auto s = discovery.discover(false);
  discovery.discover(false);

  EXPECT_EQ(s.read_as(), "nvidia-smi");
  EXPECT_EQ(s.gpus_size(), 7);  // GPU 7's line is cut short
  EXPECT_TRUE(contains(s.detail(), "nvidia-smi: 1 line(s) without the 26 expected "
                                   "comma-separated fields, e.g. '7, GPU-60718293"))
      << s.detail();
  auto page = format_gpu_section(s);
  EXPECT_TRUE(contains(page, "Detail:    nvidia-smi: 1 line(s) without the 26 expected"))
      << page;
  // Each reason is logged once, however many passes see it.
  EXPECT_EQ(log.count("printed up to 28 fields per GPU line where 26 were asked for"), 1u)
      << log.text.str();
  EXPECT_EQ(log.count("printed lines without the 26 expected comma-separated fields"), 1u)
      << log.text.str();
}

// --- What the nvidia-smi fallback reads besides nvidia-smi ------------------

TEST(GpuDiscovery, NvidiaSmiFallbackHasNumaNodesFromSysfsAndNvLinks) {
  machine m;
  int i = 0;
  for (const char* address : {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                              "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"})
    add_pci_gpu(m.root, address, "0x2330", "nvidia", i++ < 4 ? 0 : 1);
  auto s = m.first_pass("h100x8.sh");

  ASSERT_EQ(s.read_as(), "nvidia-smi") << s.detail();
  ASSERT_EQ(s.gpus_size(), 8);
  EXPECT_EQ(s.gpus(0).numa_node(), 0);
  EXPECT_EQ(s.gpus(7).numa_node(), 1);
  for (const auto& g : s.gpus()) {
    EXPECT_EQ(g.nvlinks_size(), 18) << g.id();
    EXPECT_EQ(g.unknown_fields_size(), 0) << g.unknown_fields(0);
  }
  EXPECT_TRUE(s.capabilities().nvlink());
  auto page = format_gpu_section(s);
  EXPECT_TRUE(contains(page, "18/18")) << page;
}

TEST(GpuDiscovery, NvidiaSmiFallbackNamesANumaNodeItCannotRead) {
  machine m;  // an empty host tree: no numa_node files
  auto s = m.first_pass("h100x8.sh");
  ASSERT_EQ(s.gpus_size(), 8);
  EXPECT_FALSE(s.gpus(0).has_numa_node());
  ASSERT_EQ(s.gpus(0).unknown_fields_size(), 1);
  EXPECT_EQ(s.gpus(0).unknown_fields(0),
            "numa_node: /sys/bus/pci/devices/0000:18:00.0/numa_node: missing");
}

// --- How the GPUs were read -------------------------------------------------

TEST(GpuDiscovery, NvmlAnsweringIsDriverHealthy) {
  machine m;
  use_nvml_fixture(fixture("nvml/h100x8.json"));
  gpu_discovery discovery(m.with_nvml());
  auto s = discovery.discover(true);
  EXPECT_EQ(s.read_as(), "driver: healthy");
  EXPECT_EQ(s.detail(), "");
  EXPECT_EQ(s.gpus_size(), 8);
  ASSERT_GE(s.tried_size(), 1);
  EXPECT_TRUE(contains(s.tried(0), "NVML " + std::string{ASTRAEUS_NVML_STAND_IN} + ": driver "))
      << s.tried(0);
  ASSERT_GE(s.conditions_size(), 1);
  EXPECT_TRUE(s.conditions(0).status());
  EXPECT_EQ(s.conditions(0).reason(), "DriverResponding");
  EXPECT_TRUE(s.capabilities().rdma());
  EXPECT_TRUE(contains(format_gpu_section(s), "Read as:   driver: healthy"));
}

TEST(GpuDiscovery, WithoutNvmlTheGpusAreReadWithNvidiaSmi) {
  machine m;
  auto s = m.first_pass("h100x8.sh");
  EXPECT_EQ(s.read_as(), "nvidia-smi");
  EXPECT_EQ(s.gpus_size(), 8);
  ASSERT_GE(s.tried_size(), 2);
  EXPECT_TRUE(contains(s.tried(0), "libnvidia-ml.so.1: not loaded (")) << s.tried(0);
  EXPECT_EQ(s.tried(1), "nvidia-smi " + m.smi + ": 8 GPU(s)");
  EXPECT_EQ(s.conditions(0).reason(), "DriverResponding");
  EXPECT_EQ(s.conditions(0).message(), "nvidia-smi answered for 8 GPU(s)");
  EXPECT_EQ(s.capabilities().cuda_version(), "12.2");
}

TEST(GpuDiscovery, BothFailingAfterAGoodPassKeepsTheGpusAsUnavailable) {
  machine m;
  install_nvidia_smi(m.tmp.path(), "h100x8.sh");
  gpu_discovery discovery(m.options());
  ASSERT_EQ(discovery.discover(false).read_as(), "nvidia-smi");

  install_nvidia_smi(m.tmp.path(), "no_driver.sh");
  auto s = discovery.discover(false);
  EXPECT_EQ(s.read_as(), "unavailable");
  EXPECT_TRUE(contains(s.detail(), "; the last known GPUs are kept")) << s.detail();
  ASSERT_EQ(s.gpus_size(), 8);
  for (const auto& g : s.gpus())
    EXPECT_EQ(g.status(), "unavailable") << g.id();
  ASSERT_GE(s.conditions_size(), 1);
  EXPECT_FALSE(s.conditions(0).status());
  EXPECT_EQ(s.conditions(0).reason(), "DriverUnavailable");
  ASSERT_GE(s.tried_size(), 2);
  EXPECT_TRUE(contains(s.tried(1), "couldn't communicate with the NVIDIA driver")) << s.tried(1);
}

TEST(GpuDiscovery, AnNvmlInitHangIsDriverUnresponsive) {
  machine m;
  std::string release = m.tmp.path() + "/release";
  use_nvml_fixture(fixture("nvml/init_hang.json"));
  ::setenv("ASTRAEUS_NVML_HANG_RELEASE", release.c_str(), 1);
  {
    auto opts = m.with_nvml();
    opts.nvml.call_deadline = 100ms;
    gpu_discovery discovery(opts);
    auto s = discovery.discover(false);
    EXPECT_EQ(s.read_as(), "unresponsive");
    ASSERT_GE(s.conditions_size(), 1);
    EXPECT_FALSE(s.conditions(0).status());
    EXPECT_EQ(s.conditions(0).reason(), "DriverUnresponsive");
    EXPECT_EQ(s.conditions(0).message(), "nvmlInit_v2 did not return within 100 ms");
    // nvidia-smi is not tried: it would hang on the same driver.
    EXPECT_EQ(s.tried_size(), 3) << s.tried(1);
    write_file(release, "");  // lets the stuck call return
  }
  ::unsetenv("ASTRAEUS_NVML_HANG_RELEASE");
}

// Fourth new-user trial: "the driver answered for 8 GPU(s)" while GPUs were
// lost and one hung a call. One GPU's hung call is DriverUnresponsive (the
// seed's "An NVML call hangs"), and the count is of the GPUs that answered.
TEST(GpuDiscovery, OneGpusHungCallIsDriverUnresponsiveAndTheCountIsOfThoseThatAnswered) {
  machine m;
  std::string release = m.tmp.path() + "/release";
  use_nvml_fixture(fixture("nvml/hung_gpu.json"));  // GPU 2's memory call hangs
  ::setenv("ASTRAEUS_NVML_HANG_RELEASE", release.c_str(), 1);
  {
    auto opts = m.with_nvml();
    opts.nvml.call_deadline = 100ms;
    gpu_discovery discovery(opts);
    auto s = discovery.discover(false);
    ASSERT_EQ(s.gpus_size(), 4);
    ASSERT_GE(s.conditions_size(), 1);
    EXPECT_FALSE(s.conditions(0).status());
    EXPECT_EQ(s.conditions(0).reason(), "DriverUnresponsive");
    EXPECT_TRUE(contains(s.conditions(0).message(),
                         "nvmlDeviceGetMemoryInfo did not return within 100 ms; the driver "
                         "answered for 3 of 4 GPU(s), 1 unresponsive"))
      << s.conditions(0).message();
    write_file(release, "");  // lets the stuck call return
  }
  ::unsetenv("ASTRAEUS_NVML_HANG_RELEASE");
}

namespace {

/// The GPU section of a machine without a driver whose bus has the one
/// device `address` of the PCI fixture tree.
v1::GpuSection with_bus_device(const std::string& address) {
  machine m;
  copy_pci_fixture(m.root, address);
  return m.first_pass("no_driver.sh");
}

} // namespace

TEST(GpuDiscovery, AnNvidiaGpuWithoutItsDriverIsDriverNotInstalled) {
  auto s = with_bus_device("0000:2a:00.0");
  EXPECT_EQ(s.read_as(), "no-gpu");
  ASSERT_EQ(s.bus_size(), 1);
  EXPECT_FALSE(s.bus(0).reported_by_driver());
  ASSERT_GE(s.conditions_size(), 1);
  EXPECT_FALSE(s.conditions(0).status());
  EXPECT_EQ(s.conditions(0).reason(), "DriverNotInstalled");
  EXPECT_TRUE(contains(s.conditions(0).message(), "0000:2a:00.0 ("));
  EXPECT_TRUE(contains(s.conditions(0).message(), "): no driver bound: install the NVIDIA driver"))
      << s.conditions(0).message();
  auto page = format_gpu_section(s);
  EXPECT_TRUE(contains(page, "GPUs on the bus")) << page;
  EXPECT_TRUE(contains(page, "DriverNotInstalled")) << page;
}

TEST(GpuDiscovery, AnNvidiaGpuHeldByNouveauIsWrongDriverAndOneBoundToVfioIsPassedThrough) {
  auto nouveau = with_bus_device("0000:3b:00.0");
  ASSERT_GE(nouveau.conditions_size(), 1);
  EXPECT_FALSE(nouveau.conditions(0).status());
  EXPECT_EQ(nouveau.conditions(0).reason(), "WrongDriver");
  EXPECT_TRUE(contains(nouveau.conditions(0).message(), "held by nouveau, not the NVIDIA driver"))
      << nouveau.conditions(0).message();

  auto vfio = with_bus_device("0000:5e:00.0");
  ASSERT_GE(vfio.conditions_size(), 1);
  EXPECT_FALSE(vfio.conditions(0).status());
  EXPECT_EQ(vfio.conditions(0).reason(), "GPUPassedThrough");
  EXPECT_TRUE(contains(vfio.conditions(0).message(), "bound to vfio-pci (passed through to a VM)"))
      << vfio.conditions(0).message();
}

TEST(GpuDiscovery, NoGpuNamesEachPathTried) {
  machine m;  // no NVML, no nvidia-smi program, nothing on the bus
  gpu_discovery discovery(m.options());
  auto s = discovery.discover(false);
  EXPECT_EQ(s.read_as(), "no-gpu");
  EXPECT_EQ(s.gpus_size(), 0);
  const auto& d = s.detail();
  EXPECT_TRUE(contains(d, "no GPU found: NVML " + m.tmp.path() + "/no-such/libnvidia-ml.so.1: "
                          "not loaded ("))
      << d;
  EXPECT_TRUE(contains(d, "; nvidia-smi " + m.smi + ": ")) << d;
  EXPECT_TRUE(contains(d, "; amdgpu sysfs: 0 GPU(s)")) << d;
  EXPECT_TRUE(contains(d, "; PCI bus: 0 display/3D controller(s)")) << d;
  ASSERT_GE(s.conditions_size(), 1);
  EXPECT_TRUE(s.conditions(0).status());
  EXPECT_EQ(s.conditions(0).reason(), "NoGPU");
  auto page = format_gpu_section(s);
  EXPECT_TRUE(contains(page, "Discovery tried")) << page;
}

// -- Issue 17, rule 2: a GPU that vanishes between passes ---------------------

namespace {

/// Writes `doc` as the stand-in's fixture at `path` the way a test changes
/// it under a running agent: a new file renamed over the old one.
void replace_fixture(const std::string& path, const nlohmann::json& doc) {
  auto tmp = path + ".new";
  std::ofstream{tmp} << doc.dump(2);
  fs::rename(tmp, path);
}

nlohmann::json h100x8_json() {
  std::ifstream in(fixture("nvml/h100x8.json"));
  return nlohmann::json::parse(in);
}

} // namespace

TEST(GpuDiscovery, AGpuThatVanishesFromNvmlStaysListedAsLostAndTheCountsDisagree) {
  machine m;
  // The eight GPUs on the PCI bus, bound to the nvidia driver.
  for (const char* pci : {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                          "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"})
    add_pci_gpu(m.root, pci, "0x2330", "nvidia", 0);
  auto doc = h100x8_json();
  auto path = m.tmp.path() + "/nvml.json";
  replace_fixture(path, doc);
  use_nvml_fixture(path);
  gpu_discovery discovery(m.with_nvml());
  auto before = discovery.discover(false);
  ASSERT_EQ(before.gpus_size(), 8);
  for (const auto& c : before.conditions())
    EXPECT_NE(c.type(), "GPU counts agree") << "the counts agree: " << c.message();

  // NVML stops listing the GPU at 3a (the stand-in re-reads its fixture).
  auto uuid = doc["gpus"][2]["uuid"].get<std::string>();
  doc["gpus"].erase(2);
  replace_fixture(path, doc);
  captured_log log;
  auto after = discovery.discover(false);
  ASSERT_EQ(after.gpus_size(), 8) << "the vanished GPU is still listed";
  const auto* g = gpu_at(after, "0000:3a:00.0");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->id(), uuid);
  EXPECT_EQ(g->status(), "lost");
  EXPECT_EQ(g->status_detail(), "missing from NVML: on PCI at 0000:3a:00.0");
  EXPECT_EQ(after.read_as(), "driver: healthy");
  const v1::Condition* counts = nullptr;
  for (const auto& c : after.conditions())
    if (c.type() == "GPU counts agree")
      counts = &c;
  ASSERT_NE(counts, nullptr) << format_gpu_section(after);
  EXPECT_FALSE(counts->status());
  EXPECT_EQ(counts->reason(), "GPUCountMismatch");
  EXPECT_EQ(counts->message(), "PCI bus 8, nvidia driver 8, NVML 7; 0000:3a:00.0: bound to "
                               "the nvidia driver, missing from NVML");
  EXPECT_EQ(log.count("missing from NVML: on PCI at 0000:3a:00.0"), 1u);

  // The passes after still list it with what it was (model, index, serial:
  // the labels of its /metrics series), and say so once.
  const auto* was = gpu_at(before, "0000:3a:00.0");
  ASSERT_NE(was, nullptr);
  for (int pass = 0; pass < 2; ++pass) {
    auto later = discovery.discover(false);
    ASSERT_EQ(later.gpus_size(), 8) << "pass " << pass;
    g = gpu_at(later, "0000:3a:00.0");
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->id(), uuid);
    EXPECT_EQ(g->status(), "lost");
    EXPECT_EQ(g->model(), was->model());
    EXPECT_EQ(g->serial(), was->serial());
    ASSERT_TRUE(g->has_index());
    EXPECT_EQ(g->index(), was->index());
  }
  EXPECT_EQ(log.count("missing from NVML: on PCI at 0000:3a:00.0"), 1u);

  // Gone from the bus too (the driver dropped it, hot-unplug): said so.
  doc = h100x8_json();
  replace_fixture(path, doc);
  discovery.discover(false);
  fs::remove_all(fs::path{m.root} / "sys/bus/pci/devices/0000:3a:00.0");
  doc["gpus"].erase(2);
  replace_fixture(path, doc);
  auto gone = discovery.discover(false);
  g = gpu_at(gone, "0000:3a:00.0");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->status_detail(), "missing from NVML and from the PCI bus (was at 0000:3a:00.0)");

  // No bus to read at all (a container without /sys/bus/pci): a GPU gone
  // from NVML is not said to be gone from a bus nobody read (a new-user
  // trial was sent to reseat a card so).
  fs::remove_all(fs::path{m.root} / "sys/bus/pci");
  doc["gpus"].erase(0);  // 0000:18:00.0
  replace_fixture(path, doc);
  auto unread = discovery.discover(false);
  g = gpu_at(unread, "0000:18:00.0");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->status_detail(), "missing from NVML (was at 0000:18:00.0; the PCI bus was not read)");
}

// Issue 18, rule 9: a machine with two models names both.
TEST(GpuDiscovery, TheSummaryOfAMixedMachineNamesEveryModel) {
  std::vector<v1::Gpu> gpus(3);
  gpus[0].set_model("Tesla V100-SXM2-16GB");
  gpus[1].set_model("NVIDIA GeForce RTX 2080 Ti");
  gpus[2].set_model("Tesla V100-SXM2-16GB");
  for (auto& g : gpus)
    g.set_vendor("nvidia");
  EXPECT_EQ(summarise_gpus(gpus).summary(), "2x V100, 1x RTX 2080 Ti");
  gpus.pop_back();
  EXPECT_EQ(summarise_gpus(gpus).summary(), "1x RTX 2080 Ti, 1x V100");
  gpus.pop_back();
  EXPECT_EQ(summarise_gpus(gpus).summary(), "1x V100");
}

// Issue 18, rule 7: NVML installed but no NVIDIA driver loaded and no NVIDIA
// GPU on the bus (an AMD-only host): the AMD GPUs are reported normally.
TEST(GpuDiscovery, AnAmdOnlyHostWithTheNvmlLibraryIsReady) {
  machine m;
  install_nvidia_smi(m.tmp.path(), "no_driver.sh");
  use_nvml_fixture(m.tmp.path() + "/no-such-fixture.json");  // DRIVER_NOT_LOADED
  auto opts = m.with_nvml();
  opts.root = fixture("amd/rx7900xtx");
  gpu_discovery discovery(opts);
  auto s = discovery.discover(false);
  EXPECT_EQ(s.read_as(), "driver: healthy") << s.detail();
  ASSERT_EQ(s.gpus_size(), 1);
  EXPECT_EQ(s.gpus(0).vendor(), "amd");
  ASSERT_GE(s.conditions_size(), 1);
  EXPECT_TRUE(s.conditions(0).status()) << s.conditions(0).ShortDebugString();
  EXPECT_EQ(s.conditions(0).reason(), "DriverResponding");
  ::unsetenv("ASTRAEUS_NVML_FIXTURE");
}
