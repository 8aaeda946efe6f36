// The NVIDIA prober (runtime/gpu/nvml.cpp) run against the stand-in
// libnvidia-ml.so (test/stand_in/nvml_stand_in.cpp) and the JSON fixtures in
// test/fixtures/nvml/. Each test sets ASTRAEUS_NVML_FIXTURE and uses a
// fresh prober.

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "runtime/gpu/nvml.hpp"

using namespace astraeus;
using namespace std::chrono_literals;

namespace {

using status = nvml_result::driver_status;
using steady = std::chrono::steady_clock;

std::string fixture(const std::string& name) {
  return std::string{ASTRAEUS_FIXTURES} + "/nvml/" + name;
}

/// A temporary directory, removed with everything in it.
struct scratch_dir {
  std::string path;
  scratch_dir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "astraeus-nvml-XXXXXX").string();
    if (::mkdtemp(tmpl.data()))
      path = tmpl;
  }
  ~scratch_dir() {
    std::error_code err;
    if (!path.empty())
      std::filesystem::remove_all(path, err);
  }
};

void write_file(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

/// Points the stand-in at a fixture; clears the hang release file.
void use_fixture(const std::string& path) {
  ::setenv("ASTRAEUS_NVML_FIXTURE", path.c_str(), 1);
  ::unsetenv("ASTRAEUS_NVML_HANG_RELEASE");
}

nvml_options stand_in(const char* library = ASTRAEUS_NVML_STAND_IN) {
  nvml_options opts;
  opts.library = library;
  return opts;
}

/// How often the stand-in served `fn` for GPU `gpu` since its last init
/// (-1 when the stand-in is not loaded).
int stand_in_calls(const char* library, const char* fn, unsigned gpu) {
  void* handle = ::dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  if (!handle)
    return -1;
  using calls_fn = int (*)(const char*, unsigned);
  auto calls = reinterpret_cast<calls_fn>(::dlsym(handle, "astraeus_stand_in_calls"));
  int n = calls ? calls(fn, gpu) : -1;
  ::dlclose(handle);
  return n;
}

bool has_line(const v1::Gpu& gpu, const std::string& line) {
  const auto& lines = gpu.unknown_fields();
  return std::find(lines.begin(), lines.end(), line) != lines.end();
}

std::string lines(const v1::Gpu& gpu) {
  std::string out;
  for (const auto& line : gpu.unknown_fields())
    out += line + "\n";
  return out;
}

long long ms_since(steady::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count();
}

/// Probes until `done(result)` or 5 s pass; returns the last result.
template <class Done>
nvml_result probe_until(nvml_prober& prober, Done done) {
  auto t0 = steady::now();
  nvml_result r = prober.probe();
  while (!done(r) && steady::now() - t0 < 5s) {
    std::this_thread::sleep_for(10ms);
    r = prober.probe();
  }
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

TEST(Nvml, NormalisesPciAddresses) {
  EXPECT_EQ(nvml::normalise_pci_address("00000000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(nvml::normalise_pci_address("0000:3b:00.0"), "0000:3b:00.0");
  EXPECT_EQ(nvml::normalise_pci_address("3B:00.1"), "0000:3b:00.1");
  EXPECT_EQ(nvml::normalise_pci_address(" 00000008:01:00.0\n"), "0008:01:00.0");
  EXPECT_EQ(nvml::normalise_pci_address("00010000:01:00.0"), "10000:01:00.0");
  EXPECT_EQ(nvml::normalise_pci_address(""), "");
  EXPECT_EQ(nvml::normalise_pci_address("garbage"), "");
  EXPECT_EQ(nvml::normalise_pci_address("0000:3b:00"), "");
  EXPECT_EQ(nvml::normalise_pci_address("0000:3g:00.0"), "");
  EXPECT_EQ(nvml::normalise_pci_address("0000:3b:20.0"), "");   // device > 0x1f
  EXPECT_EQ(nvml::normalise_pci_address("0000:3b:00.8"), "");   // function > 7
  EXPECT_EQ(nvml::normalise_pci_address("0000:13b:00.0"), "");  // bus > 0xff
}

TEST(Nvml, MapsComputeCapabilityToArchitecture) {
  EXPECT_EQ(nvml::architecture_from_compute_capability(7, 0), "volta");
  EXPECT_EQ(nvml::architecture_from_compute_capability(7, 5), "turing");
  EXPECT_EQ(nvml::architecture_from_compute_capability(8, 0), "ampere");
  EXPECT_EQ(nvml::architecture_from_compute_capability(8, 6), "ampere");
  EXPECT_EQ(nvml::architecture_from_compute_capability(8, 7), "ampere");
  EXPECT_EQ(nvml::architecture_from_compute_capability(8, 9), "ada");
  EXPECT_EQ(nvml::architecture_from_compute_capability(9, 0), "hopper");
  EXPECT_EQ(nvml::architecture_from_compute_capability(10, 0), "blackwell");
  EXPECT_EQ(nvml::architecture_from_compute_capability(12, 0), "blackwell");
  EXPECT_EQ(nvml::architecture_from_compute_capability(8, 4), "");
  EXPECT_EQ(nvml::architecture_from_compute_capability(42, 0), "");
}

TEST(Nvml, KnowsDataCentreBoards) {
  for (const char* name :
       {"NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA H800", "NVIDIA A100-SXM4-80GB",
        "NVIDIA A800 80GB PCIe", "NVIDIA A30", "NVIDIA A10", "NVIDIA A10G", "NVIDIA A40",
        "NVIDIA L40S", "NVIDIA L4", "NVIDIA B200", "NVIDIA GB200", "NVIDIA GH200 480GB",
        "Tesla V100-SXM2-32GB", "Tesla V100S-PCIE-32GB", "Tesla T4", "NVIDIA B100"})
    EXPECT_TRUE(nvml::is_data_centre_model(name)) << name;
  for (const char* name : {"NVIDIA GeForce RTX 4090", "NVIDIA RTX A4000", "NVIDIA RTX A6000",
                           "NVIDIA GeForce GTX 1080 Ti", "Quadro RTX 8000", ""})
    EXPECT_FALSE(nvml::is_data_centre_model(name)) << name;
}

TEST(Nvml, FormatsCudaVersions) {
  EXPECT_EQ(nvml::cuda_version_text(12040), "12.4");
  EXPECT_EQ(nvml::cuda_version_text(12080), "12.8");
  EXPECT_EQ(nvml::cuda_version_text(11080), "11.8");
  EXPECT_EQ(nvml::cuda_version_text(0), "");
  EXPECT_EQ(nvml::driver_status_name(status::unresponsive), "unresponsive");
}

// ---------------------------------------------------------------------------
// Probing the stand-in
// ---------------------------------------------------------------------------

TEST(Nvml, ReadsEightH100s) {
  use_fixture(fixture("h100x8.json"));
  nvml_prober prober(stand_in());
  nvml_result r = prober.probe();

  ASSERT_EQ(r.status, status::ok) << r.detail;
  EXPECT_EQ(r.detail, "");
  EXPECT_EQ(r.driver_version, "550.54.15");
  EXPECT_EQ(r.cuda_version, "12.4");
  ASSERT_EQ(r.gpus.size(), 8u);

  const char* uuids[] = {
      "GPU-5f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b", "GPU-8c9a3a0e-7d2b-4a47-9c1b-3f0c7a1e5d01",
      "GPU-1b7e4c2a-93d5-4f6e-8a21-6c0d9e8f7b32", "GPU-a4d2e9f1-5c3b-47a8-b6e0-2f9c8d7a1e43",
      "GPU-3e8f7a6b-2d1c-4b9e-a0f5-7c6d5e4b3a54", "GPU-c2b1a0f9-8e7d-46c5-b4a3-9f8e7d6c5b65",
      "GPU-7d6c5b4a-3f2e-41d0-9c8b-a7f6e5d4c376", "GPU-e9f8d7c6-b5a4-4392-8170-6f5e4d3c2b87"};
  const char* addresses[] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                             "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"};
  for (unsigned i = 0; i < 8; ++i) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    const v1::Gpu& g = r.gpus[i];
    EXPECT_EQ(g.status(), "ok");
    EXPECT_EQ(g.status_detail(), "");
    EXPECT_EQ(g.id(), uuids[i]);
    EXPECT_EQ(g.vendor(), "nvidia");
    EXPECT_EQ(g.model(), "NVIDIA H100 80GB HBM3");
    ASSERT_TRUE(g.has_index());
    EXPECT_EQ(g.index(), i);
    EXPECT_EQ(g.pci_address(), addresses[i]);
    ASSERT_TRUE(g.has_numa_node());
    EXPECT_EQ(g.numa_node(), i < 4 ? 0 : 1);
    EXPECT_EQ(g.memory_total_bytes(), 81559ull * 1024 * 1024);
    EXPECT_TRUE(g.has_memory_used_bytes());
    EXPECT_EQ(g.architecture(), "hopper");
    EXPECT_EQ(g.compute_capability(), "9.0");
    EXPECT_TRUE(g.data_centre());
    EXPECT_EQ(g.driver_version(), "550.54.15");
    EXPECT_EQ(g.vbios_version(), "96.00.74.00.01");
    EXPECT_EQ(g.serial().size(), 13u);
    EXPECT_TRUE(g.has_utilization_percent());
    EXPECT_TRUE(g.has_temperature_c());
    EXPECT_DOUBLE_EQ(g.power_limit_watts(), 700.0);
    EXPECT_GT(g.power_watts(), 60.0);
    EXPECT_EQ(g.memory_clock_mhz(), 2619u);
    EXPECT_TRUE(g.has_sm_clock_mhz());
    EXPECT_FALSE(g.has_fan_percent());  // SXM boards have no fan of their own
    EXPECT_TRUE(g.ecc().has_volatile_uncorrectable());
    EXPECT_EQ(g.ecc().volatile_uncorrectable(), 0u);
    EXPECT_EQ(g.ecc().aggregate_correctable(), 0u);
    EXPECT_FALSE(g.has_retired_pages());  // Hopper remaps rows instead
    ASSERT_TRUE(g.has_row_remapping());
    EXPECT_FALSE(g.row_remapping().failed());
    EXPECT_EQ(g.row_remapping().uncorrectable_rows(), 0u);
    EXPECT_EQ(g.pcie_replays(), 0u);
    ASSERT_TRUE(g.has_thermal_slowdown());
    EXPECT_FALSE(g.thermal_slowdown());
    ASSERT_TRUE(g.has_fabric());
    EXPECT_EQ(g.fabric().state(), "not-supported");
    ASSERT_EQ(g.nvlinks_size(), 18);
    for (int l = 0; l < 18; ++l) {
      const auto& link = g.nvlinks(l);
      EXPECT_EQ(link.link(), static_cast<uint32_t>(l));
      EXPECT_TRUE(link.active());
      EXPECT_EQ(link.remote_kind(), "switch");
      EXPECT_EQ(link.remote_pci_address(), "0008:00:00.0");
      EXPECT_EQ(link.replay_errors(), 0u);
      EXPECT_TRUE(link.has_crc_errors());
    }
    EXPECT_EQ(g.unknown_fields_size(), 0) << lines(g);
  }
}

TEST(Nvml, ReusesItsWorkersBetweenPasses) {
  use_fixture(fixture("h100x8.json"));
  nvml_prober prober(stand_in());
  ASSERT_EQ(prober.probe().status, status::ok);
  EXPECT_EQ(prober.threads_started(), 9u);  // the driver's and one per GPU
  nvml_result again = prober.probe();
  ASSERT_EQ(again.status, status::ok);
  EXPECT_EQ(again.gpus.size(), 8u);
  EXPECT_EQ(prober.threads_started(), 9u);
  // nvmlInit_v2 ran once: the call counts were not reset by a second init.
  EXPECT_EQ(stand_in_calls(ASTRAEUS_NVML_STAND_IN, "nvmlDeviceGetMemoryInfo", 0), 2);
}

TEST(Nvml, MissingLibraryIsNotLoaded) {
  use_fixture(fixture("h100x8.json"));
  nvml_options opts;
  opts.library = "/nonexistent/libnvidia-ml.so.1";
  nvml_prober prober(opts);
  nvml_result r = prober.probe();
  EXPECT_EQ(r.status, status::not_loaded);
  EXPECT_NE(r.detail.find("dlopen /nonexistent/libnvidia-ml.so.1: "), std::string::npos)
      << r.detail;
  EXPECT_NE(r.detail.find("No such file or directory"), std::string::npos) << r.detail;
  EXPECT_TRUE(r.gpus.empty());
  EXPECT_EQ(prober.threads_started(), 0u);
  // And again on the next pass, without crashing.
  EXPECT_EQ(prober.probe().status, status::not_loaded);
}

TEST(Nvml, LibraryWithoutNvmlIsNotLoaded) {
  nvml_options opts;
  opts.library = "libm.so.6";
  nvml_prober prober(opts);
  nvml_result r = prober.probe();
  EXPECT_EQ(r.status, status::not_loaded);
  EXPECT_NE(r.detail.find("nvmlInit_v2"), std::string::npos) << r.detail;
}

TEST(Nvml, OldDriverLeavesNewerFieldsUnknown) {
  use_fixture(fixture("h100x8.json"));
  // No nvmlDeviceGetNumaNodeId: the NUMA node comes from sysfs.
  scratch_dir sysfs;
  const char* addresses[] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                             "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"};
  for (unsigned i = 0; i < 8; ++i)
    write_file(sysfs.path + "/sys/bus/pci/devices/" + addresses[i] + "/numa_node",
               i < 4 ? "0\n" : i < 7 ? "1\n" : "-1\n");
  nvml_options opts = stand_in(ASTRAEUS_NVML_STAND_IN_OLD);
  opts.sysfs_root = sysfs.path;
  nvml_prober prober(opts);
  nvml_result r = prober.probe();

  ASSERT_EQ(r.status, status::ok) << r.detail;
  EXPECT_EQ(r.driver_version, "550.54.15");
  EXPECT_EQ(r.cuda_version, "12.4");  // from nvmlSystemGetCudaDriverVersion
  ASSERT_EQ(r.gpus.size(), 8u);
  for (unsigned i = 0; i < 8; ++i) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    const v1::Gpu& g = r.gpus[i];
    EXPECT_EQ(g.status(), "ok");
    EXPECT_FALSE(g.has_row_remapping());
    EXPECT_FALSE(g.has_fabric());
    EXPECT_TRUE(has_line(g, "row_remapping: nvmlDeviceGetRemappedRows not in this driver"))
        << lines(g);
    EXPECT_TRUE(has_line(g, "fabric: nvmlDeviceGetGpuFabricInfo not in this driver")) << lines(g);
    EXPECT_EQ(g.unknown_fields_size(), 2) << lines(g);
    if (i < 7) {
      ASSERT_TRUE(g.has_numa_node());
      EXPECT_EQ(g.numa_node(), i < 4 ? 0 : 1);
    } else {
      EXPECT_FALSE(g.has_numa_node());  // -1: no affinity, absent
    }
    // The rest is read as with a current driver.
    EXPECT_EQ(g.id().rfind("GPU-", 0), 0u);
    EXPECT_EQ(g.pci_address(), addresses[i]);
    EXPECT_EQ(g.memory_total_bytes(), 85520809984ull);
    EXPECT_EQ(g.architecture(), "hopper");
    EXPECT_EQ(g.nvlinks_size(), 18);
    EXPECT_TRUE(g.has_thermal_slowdown());  // via ...ThrottleReasons
    EXPECT_TRUE(g.ecc().has_aggregate_uncorrectable());
  }
}

TEST(Nvml, OldDriverWithoutSysfsNotesTheNumaNodeUnknown) {
  use_fixture(fixture("h100x8.json"));
  scratch_dir empty_root;
  nvml_options opts = stand_in(ASTRAEUS_NVML_STAND_IN_OLD);
  opts.sysfs_root = empty_root.path;
  nvml_prober prober(opts);
  nvml_result r = prober.probe();
  ASSERT_EQ(r.status, status::ok) << r.detail;
  ASSERT_FALSE(r.gpus.empty());
  const v1::Gpu& g = r.gpus[0];
  EXPECT_FALSE(g.has_numa_node());
  EXPECT_TRUE(has_line(g, "numa_node: nvmlDeviceGetNumaNodeId not in this driver, and " +
                              empty_root.path +
                              "/sys/bus/pci/devices/0000:18:00.0/numa_node cannot be read"))
      << lines(g);
}

TEST(Nvml, HungGpuIsUnresponsiveWithinTheDeadline) {
  scratch_dir tmp;
  std::string release = tmp.path + "/release";
  use_fixture(fixture("hung_gpu.json"));
  ::setenv("ASTRAEUS_NVML_HANG_RELEASE", release.c_str(), 1);
  nvml_options opts = stand_in();
  opts.call_deadline = 200ms;
  {
    nvml_prober prober(opts);

    auto t0 = steady::now();
    nvml_result r = prober.probe();
    auto took = ms_since(t0);
    ASSERT_EQ(r.status, status::ok) << r.detail;
    EXPECT_GE(took, 200);
    EXPECT_LT(took, 1000);
    ASSERT_EQ(r.gpus.size(), 4u);
    for (unsigned i : {0u, 1u, 3u}) {
      SCOPED_TRACE("GPU " + std::to_string(i));
      EXPECT_EQ(r.gpus[i].status(), "ok");
      EXPECT_EQ(r.gpus[i].memory_total_bytes(), 34089730048ull);
      EXPECT_EQ(r.gpus[i].architecture(), "volta");
      EXPECT_EQ(r.gpus[i].nvlinks_size(), 6);
    }
    const v1::Gpu& hung = r.gpus[2];
    EXPECT_EQ(hung.status(), "unresponsive");
    EXPECT_EQ(hung.status_detail(), "nvmlDeviceGetMemoryInfo did not return within 200 ms");
    // What it told before the hang identifies it.
    EXPECT_EQ(hung.id(), "GPU-2f3e4d5c-6b7a-8f9e-adbc-2b3c4d5e6f03");
    EXPECT_EQ(hung.pci_address(), "0000:88:00.0");
    EXPECT_EQ(hung.index(), 2u);
    EXPECT_FALSE(hung.has_memory_total_bytes());
    EXPECT_EQ(prober.threads_started(), 5u);

    // Next pass: still stuck; reported at once, no new thread, no new call.
    t0 = steady::now();
    nvml_result again = prober.probe();
    took = ms_since(t0);
    ASSERT_EQ(again.status, status::ok) << again.detail;
    EXPECT_LT(took, 180);
    ASSERT_EQ(again.gpus.size(), 4u);
    EXPECT_EQ(again.gpus[2].status(), "unresponsive");
    EXPECT_NE(again.gpus[2].status_detail().find("nvmlDeviceGetMemoryInfo has not returned for"),
              std::string::npos)
        << again.gpus[2].status_detail();
    EXPECT_EQ(again.gpus[2].id(), "GPU-2f3e4d5c-6b7a-8f9e-adbc-2b3c4d5e6f03");
    EXPECT_EQ(again.gpus[0].status(), "ok");
    EXPECT_EQ(again.gpus[3].status(), "ok");
    EXPECT_EQ(prober.threads_started(), 5u);
    EXPECT_EQ(stand_in_calls(ASTRAEUS_NVML_STAND_IN, "nvmlDeviceGetMemoryInfo", 2), 1);
    EXPECT_EQ(stand_in_calls(ASTRAEUS_NVML_STAND_IN, "nvmlDeviceGetMemoryInfo", 0), 2);

    // The call returns: the GPU gets a new worker and is read again.
    write_file(release, "");
    nvml_result after = probe_until(prober, [](const nvml_result& x) {
      return x.gpus.size() == 4 && x.gpus[2].status() == "ok";
    });
    ASSERT_EQ(after.gpus.size(), 4u);
    EXPECT_EQ(after.gpus[2].status(), "ok");
    EXPECT_EQ(after.gpus[2].memory_total_bytes(), 34089730048ull);
    EXPECT_EQ(prober.threads_started(), 6u);
  }
  ::unsetenv("ASTRAEUS_NVML_HANG_RELEASE");
}

TEST(Nvml, ReadsPageRetirementOnVolta) {
  // The hang is released before it starts: GPU 2 answers normally.
  scratch_dir tmp;
  std::string release = tmp.path + "/release";
  write_file(release, "");
  use_fixture(fixture("hung_gpu.json"));
  ::setenv("ASTRAEUS_NVML_HANG_RELEASE", release.c_str(), 1);
  nvml_prober prober(stand_in());
  nvml_result r = prober.probe();
  ::unsetenv("ASTRAEUS_NVML_HANG_RELEASE");

  ASSERT_EQ(r.status, status::ok) << r.detail;
  EXPECT_EQ(r.cuda_version, "12.2");
  ASSERT_EQ(r.gpus.size(), 4u);
  for (const auto& g : r.gpus)
    EXPECT_EQ(g.status(), "ok");
  const v1::Gpu& g = r.gpus[0];
  EXPECT_EQ(g.model(), "Tesla V100-SXM2-32GB");
  EXPECT_TRUE(g.data_centre());
  EXPECT_EQ(g.compute_capability(), "7.0");
  ASSERT_TRUE(g.has_retired_pages());
  EXPECT_EQ(g.retired_pages().single_bit(), 2u);
  EXPECT_EQ(g.retired_pages().double_bit(), 0u);
  ASSERT_TRUE(g.retired_pages().has_pending());
  EXPECT_FALSE(g.retired_pages().pending());
  EXPECT_EQ(g.ecc().aggregate_correctable(), 3u);
  EXPECT_FALSE(g.has_row_remapping());  // Volta retires pages, no remapping
  ASSERT_TRUE(g.has_fabric());  // the call says NOT_SUPPORTED: a state, not unknown
  EXPECT_EQ(g.fabric().state(), "not-supported");
  EXPECT_FALSE(g.fabric().has_clique_id());
  EXPECT_EQ(g.nvlinks(0).remote_kind(), "gpu");
  EXPECT_EQ(g.nvlinks(0).remote_pci_address(), "0000:1c:00.0");
  EXPECT_EQ(g.unknown_fields_size(), 0) << lines(g);
}

TEST(Nvml, LostGpuIsLostAlone) {
  use_fixture(fixture("lost_gpu.json"));
  nvml_prober prober(stand_in());
  nvml_result r = prober.probe();
  ASSERT_EQ(r.status, status::ok) << r.detail;
  ASSERT_EQ(r.gpus.size(), 4u);

  const v1::Gpu& lost = r.gpus[1];
  EXPECT_EQ(lost.status(), "lost");
  EXPECT_EQ(lost.status_detail(), "nvmlDeviceGetUUID returned NVML_ERROR_GPU_IS_LOST (15)");
  EXPECT_EQ(lost.index(), 1u);
  EXPECT_EQ(lost.vendor(), "nvidia");
  EXPECT_FALSE(lost.has_memory_total_bytes());
  // NVML was asked nothing more once the GPU was lost.
  EXPECT_EQ(stand_in_calls(ASTRAEUS_NVML_STAND_IN, "nvmlDeviceGetMemoryInfo", 1), 0);

  for (unsigned i : {0u, 2u, 3u}) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    const v1::Gpu& g = r.gpus[i];
    EXPECT_EQ(g.status(), "ok");
    EXPECT_EQ(g.model(), "NVIDIA A100-SXM4-80GB");
    EXPECT_EQ(g.architecture(), "ampere");
    EXPECT_EQ(g.memory_total_bytes(), 85899345920ull);
    EXPECT_EQ(g.nvlinks_size(), 12);
  }
  EXPECT_EQ(r.gpus[0].numa_node(), 3);
  EXPECT_EQ(r.gpus[2].row_remapping().correctable_rows(), 1u);
  // An unexpected error leaves that one field unknown, with the reason.
  const v1::Gpu& g3 = r.gpus[3];
  EXPECT_FALSE(g3.has_temperature_c());
  EXPECT_TRUE(has_line(g3, "temperature_c: nvmlDeviceGetTemperature returned "
                           "NVML_ERROR_UNKNOWN (999)"))
      << lines(g3);
  EXPECT_EQ(g3.unknown_fields_size(), 1) << lines(g3);
}

TEST(Nvml, ReadsTheGb200Fabric) {
  use_fixture(fixture("gb200.json"));
  nvml_prober prober(stand_in());
  nvml_result r = prober.probe();
  ASSERT_EQ(r.status, status::ok) << r.detail;
  EXPECT_EQ(r.driver_version, "570.124.06");
  EXPECT_EQ(r.cuda_version, "12.8");
  ASSERT_EQ(r.gpus.size(), 4u);
  const char* addresses[] = {"0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"};
  for (unsigned i = 0; i < 4; ++i) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    const v1::Gpu& g = r.gpus[i];
    EXPECT_EQ(g.status(), "ok");
    EXPECT_EQ(g.model(), "NVIDIA GB200");
    EXPECT_TRUE(g.data_centre());
    EXPECT_EQ(g.architecture(), "blackwell");
    EXPECT_EQ(g.compute_capability(), "10.0");
    EXPECT_EQ(g.pci_address(), addresses[i]);
    ASSERT_TRUE(g.has_fabric());
    EXPECT_EQ(g.fabric().state(), "completed");
    ASSERT_TRUE(g.fabric().has_status());
    EXPECT_EQ(g.fabric().status(), 0u);
    EXPECT_EQ(g.fabric().cluster_uuid(), "1c6a7e2b-93d4-4f5a-8b6c-7d8e9fa0b1c2");
    ASSERT_TRUE(g.fabric().has_clique_id());
    EXPECT_EQ(g.fabric().clique_id(), 32766u);
    EXPECT_EQ(g.fabric().health(), i == 3 ? "route-unhealthy" : "healthy");
    EXPECT_EQ(g.thermal_slowdown(), i == 2);
    ASSERT_EQ(g.nvlinks_size(), 18);
    EXPECT_EQ(g.nvlinks(0).remote_kind(), "switch");
    EXPECT_FALSE(g.nvlinks(0).has_replay_errors());  // counters not supported
    EXPECT_EQ(g.unknown_fields_size(), 0) << lines(g);
  }
}

// h200_vm.json is a real NVML recording (record_nvml.py, nvidia-ml-py) of an
// H200 passed through to a VM, driver 580.159.04; host h200-vm is the same
// VM's sysfs. The expected values are what the real agent reported for the
// GPU on that VM (its `astra machine` JSON), except the UUID and serial: the
// NVML recording was made on another run's GPU.
TEST(Nvml, TheRealH200RecordingReadsAsTheRealAgentSawIt) {
  use_fixture(fixture("h200_vm.json"));
  nvml_options opts = stand_in();
  opts.sysfs_root = std::string{ASTRAEUS_FIXTURES} + "/hosts/h200-vm";
  nvml_prober prober(opts);
  nvml_result r = prober.probe();

  ASSERT_EQ(r.status, status::ok) << r.detail;
  EXPECT_EQ(r.detail, "");
  EXPECT_EQ(r.driver_version, "580.159.04");
  EXPECT_EQ(r.cuda_version, "13.0");
  ASSERT_EQ(r.gpus.size(), 1u);
  const v1::Gpu& g = r.gpus[0];
  EXPECT_EQ(g.status(), "ok");
  EXPECT_EQ(g.status_detail(), "");
  EXPECT_EQ(g.id(), "GPU-cc7773bb-e770-89a5-96b9-c7ce1d6e054a");
  EXPECT_EQ(g.serial(), "1653724060311");
  EXPECT_EQ(g.vendor(), "nvidia");
  EXPECT_EQ(g.model(), "NVIDIA H200");
  EXPECT_EQ(g.index(), 0u);
  EXPECT_EQ(g.pci_address(), "0000:00:06.0");
  EXPECT_EQ(g.architecture(), "hopper");
  EXPECT_EQ(g.compute_capability(), "9.0");
  EXPECT_TRUE(g.data_centre());
  EXPECT_EQ(g.driver_version(), "580.159.04");
  EXPECT_EQ(g.vbios_version(), "96.00.A5.00.1A");
  EXPECT_EQ(g.memory_total_bytes(), 150754820096ull);
  EXPECT_EQ(g.memory_used_bytes(), 644939776ull);
  EXPECT_DOUBLE_EQ(g.power_limit_watts(), 700.0);
  EXPECT_EQ(g.memory_clock_mhz(), 3201u);
  // NVML answered NOT_SUPPORTED for the NUMA node and sysfs says -1: no
  // node, and nothing unknown about it.
  EXPECT_FALSE(g.has_numa_node());
  EXPECT_FALSE(g.has_fan_percent());
  EXPECT_FALSE(g.has_retired_pages());
  EXPECT_EQ(g.nvlinks_size(), 0);
  ASSERT_TRUE(g.has_fabric());
  EXPECT_EQ(g.fabric().state(), "not-supported");
  EXPECT_EQ(g.fabric().cluster_uuid(), "");
  EXPECT_EQ(g.fabric().health(), "unknown");
  EXPECT_EQ(g.ecc().volatile_correctable(), 0u);
  EXPECT_EQ(g.ecc().volatile_uncorrectable(), 0u);
  EXPECT_EQ(g.ecc().aggregate_correctable(), 0u);
  EXPECT_EQ(g.ecc().aggregate_uncorrectable(), 0u);
  ASSERT_TRUE(g.has_row_remapping());
  EXPECT_EQ(g.row_remapping().correctable_rows(), 0u);
  EXPECT_EQ(g.row_remapping().uncorrectable_rows(), 0u);
  EXPECT_FALSE(g.row_remapping().pending());
  EXPECT_FALSE(g.row_remapping().failed());
  EXPECT_EQ(g.pcie_replays(), 0u);
  ASSERT_TRUE(g.has_thermal_slowdown());
  EXPECT_FALSE(g.thermal_slowdown());  // clocks_event_reasons 1: idle
  ASSERT_TRUE(g.has_recovery_action());
  EXPECT_EQ(g.recovery_action(), 0u);
  EXPECT_EQ(g.unknown_fields_size(), 0) << lines(g);
}

TEST(Nvml, InitHangMakesTheDriverUnresponsive) {
  scratch_dir tmp;
  std::string release = tmp.path + "/release";
  use_fixture(fixture("init_hang.json"));
  ::setenv("ASTRAEUS_NVML_HANG_RELEASE", release.c_str(), 1);
  nvml_options opts = stand_in();
  opts.call_deadline = 200ms;
  {
    nvml_prober prober(opts);
    auto t0 = steady::now();
    nvml_result r = prober.probe();
    EXPECT_LT(ms_since(t0), 1000);
    EXPECT_EQ(r.status, status::unresponsive);
    EXPECT_EQ(r.detail, "nvmlInit_v2 did not return within 200 ms");
    EXPECT_TRUE(r.gpus.empty());
    EXPECT_EQ(prober.threads_started(), 1u);

    t0 = steady::now();
    nvml_result again = prober.probe();
    EXPECT_LT(ms_since(t0), 100);
    EXPECT_EQ(again.status, status::unresponsive);
    EXPECT_NE(again.detail.find("nvmlInit_v2 has not returned for"), std::string::npos)
        << again.detail;
    EXPECT_EQ(prober.threads_started(), 1u);

    write_file(release, "");
    nvml_result after =
        probe_until(prober, [](const nvml_result& x) { return x.status == status::ok; });
    EXPECT_EQ(after.status, status::ok) << after.detail;
    EXPECT_EQ(after.gpus.size(), 1u);
    EXPECT_EQ(prober.threads_started(), 3u);  // a new driver worker, one GPU
  }
  ::unsetenv("ASTRAEUS_NVML_HANG_RELEASE");
}

TEST(Nvml, GarbageFixtureIsInitFailed) {
  scratch_dir tmp;
  std::string path = tmp.path + "/garbage.json";
  write_file(path, "{\"gpus\": [ this is not JSON");
  use_fixture(path);
  nvml_prober prober(stand_in());
  nvml_result r = prober.probe();
  EXPECT_EQ(r.status, status::init_failed);
  EXPECT_EQ(r.detail, "nvmlInit_v2 returned NVML_ERROR_UNKNOWN (999)");
  EXPECT_TRUE(r.gpus.empty());
}

TEST(Nvml, MissingFixtureIsInitFailedThenRecovers) {
  scratch_dir tmp;
  std::string path = tmp.path + "/later.json";
  use_fixture(path);
  nvml_prober prober(stand_in());
  nvml_result r = prober.probe();
  EXPECT_EQ(r.status, status::init_failed);
  EXPECT_EQ(r.detail, "nvmlInit_v2 returned NVML_ERROR_DRIVER_NOT_LOADED (9)");
  // The driver loads later: the next pass initialises and reads the GPUs.
  std::filesystem::copy_file(fixture("gb200.json"), path);
  nvml_result later = prober.probe();
  EXPECT_EQ(later.status, status::ok) << later.detail;
  EXPECT_EQ(later.gpus.size(), 4u);
}

TEST(Nvml, OddFixtureValuesNeverCrash) {
  scratch_dir tmp;
  std::string path = tmp.path + "/odd.json";
  write_file(path, R"({
    "driver_version": "550.54.15\u0001\u00ff",
    "cuda_driver_version": -5,
    "gpus": [
      {"uuid": "GPU-odd", "name": "NVIDIA \u00e9 H100",
       "pci": {"bus_id": "not-an-address"},
       "compute_capability": [99, 7],
       "memory": {"total_bytes": "oops"},
       "nvlinks": {"count": 2, "active": "yes"}},
      "not an object",
      {}
    ]})");
  use_fixture(path);
  nvml_prober prober(stand_in());
  nvml_result r = prober.probe();
  ASSERT_EQ(r.status, status::ok) << r.detail;
  EXPECT_EQ(r.driver_version, "550.54.15???");  // \x01 and two UTF-8 bytes
  EXPECT_EQ(r.cuda_version, "");
  ASSERT_EQ(r.gpus.size(), 3u);
  const v1::Gpu& g = r.gpus[0];
  EXPECT_EQ(g.status(), "ok");
  EXPECT_EQ(g.id(), "GPU-odd");
  EXPECT_EQ(g.model(), "NVIDIA ?? H100");  // UTF-8 bytes replaced
  EXPECT_EQ(g.pci_address(), "");
  EXPECT_TRUE(has_line(g, "pci_address: nvmlDeviceGetPciInfo_v3 gave no PCI address"))
      << lines(g);
  EXPECT_EQ(g.architecture(), "");
  EXPECT_TRUE(has_line(g, "architecture: compute capability 99.7 is not in the table"))
      << lines(g);
  EXPECT_FALSE(g.has_memory_total_bytes());
  EXPECT_TRUE(has_line(g, "memory: nvmlDeviceGetMemoryInfo returned NVML_ERROR_UNKNOWN (999)"))
      << lines(g);
  // Every field of the non-object GPU is unknown, but it is listed.
  EXPECT_EQ(r.gpus[1].index(), 1u);
  EXPECT_GT(r.gpus[1].unknown_fields_size(), 0);
  EXPECT_EQ(r.gpus[2].status(), "ok");
  EXPECT_EQ(r.gpus[2].unknown_fields_size(), 1) << lines(r.gpus[2]);  // numa_node: no address
}
