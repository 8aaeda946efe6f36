#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "runtime/gpu/nvidia_smi.hpp"

using namespace astraeus;
using namespace std::chrono_literals;

namespace {

std::string fixture(const std::string& name) {
  return std::string{ASTRAEUS_FIXTURES} + "/nvidia-smi/" + name;
}

const v1::Gpu* by_index(const nvidia_smi_result& r, uint32_t index) {
  auto it = std::find_if(r.gpus.begin(), r.gpus.end(),
                         [&](const v1::Gpu& g) { return g.has_index() && g.index() == index; });
  return it == r.gpus.end() ? nullptr : &*it;
}

bool has_unknown(const v1::Gpu& gpu, const std::string& prefix) {
  return std::any_of(gpu.unknown_fields().begin(), gpu.unknown_fields().end(),
                     [&](const std::string& f) { return f.rfind(prefix, 0) == 0; });
}

} // namespace

TEST(NvidiaSmi, ReadsEveryFieldOfAnEightGpuMachine) {
  auto r = read_nvidia_smi(fixture("h100x8.sh"), 10s);
  ASSERT_TRUE(r.ok) << r.detail;
  EXPECT_EQ(r.detail, "");
  EXPECT_EQ(r.driver_version, "535.129.03");
  EXPECT_EQ(r.cuda_version, "12.2");
  ASSERT_EQ(r.gpus.size(), 8u);

  const auto& g = r.gpus[0];
  EXPECT_EQ(g.id(), "GPU-5f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b");
  EXPECT_EQ(g.vendor(), "nvidia");
  EXPECT_EQ(g.model(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g.index(), 0u);
  EXPECT_EQ(g.pci_address(), "0000:18:00.0");
  EXPECT_EQ(g.memory_total_bytes(), 81559ull * 1024 * 1024);
  EXPECT_EQ(g.memory_used_bytes(), 4ull * 1024 * 1024);
  EXPECT_EQ(g.architecture(), "hopper");
  EXPECT_EQ(g.compute_capability(), "9.0");
  EXPECT_TRUE(g.data_centre());
  EXPECT_DOUBLE_EQ(g.utilization_percent(), 0.0);
  EXPECT_DOUBLE_EQ(g.temperature_c(), 31.0);
  EXPECT_DOUBLE_EQ(g.power_watts(), 69.89);
  EXPECT_DOUBLE_EQ(g.power_limit_watts(), 700.0);
  EXPECT_EQ(g.sm_clock_mhz(), 345u);
  EXPECT_EQ(g.memory_clock_mhz(), 2619u);
  EXPECT_FALSE(g.has_fan_percent());  // [N/A]: passively cooled
  EXPECT_EQ(g.ecc().volatile_uncorrectable(), 0u);
  EXPECT_TRUE(g.ecc().has_volatile_uncorrectable());
  EXPECT_EQ(g.serial(), "1654220000000");
  EXPECT_EQ(g.vbios_version(), "96.00.74.00.01");
  EXPECT_EQ(g.driver_version(), "535.129.03");
  EXPECT_EQ(g.status(), "ok");
  EXPECT_TRUE(g.has_thermal_slowdown());
  EXPECT_FALSE(g.thermal_slowdown());
  EXPECT_TRUE(g.row_remapping().has_failed());
  EXPECT_FALSE(g.row_remapping().failed());
  EXPECT_EQ(g.unknown_fields_size(), 0) << g.unknown_fields(0);

  EXPECT_EQ(r.gpus[1].pci_address(), "0000:2a:00.0");
  EXPECT_DOUBLE_EQ(r.gpus[2].utilization_percent(), 100.0);
  EXPECT_EQ(r.gpus[2].memory_used_bytes(), 79126ull * 1024 * 1024);
  EXPECT_EQ(r.gpus[3].ecc().volatile_correctable(), 12u);
  EXPECT_EQ(r.gpus[3].ecc().aggregate_correctable(), 40u);
  EXPECT_EQ(r.gpus[3].row_remapping().correctable_rows(), 2u);
  EXPECT_EQ(r.gpus[3].row_remapping().uncorrectable_rows(), 1u);
  EXPECT_TRUE(r.gpus[3].row_remapping().pending());
  EXPECT_TRUE(r.gpus[5].thermal_slowdown());
  EXPECT_EQ(r.gpus[7].pci_address(), "0000:db:00.0");
}

TEST(NvidiaSmi, TheRealH200On580ReadsWithNothingUnknown) {
  // h200_580.sh replays what nvidia-smi 580.159.04 answered on an H200 VM
  // to the agent's exact arguments: remapped rows' pending and failure as
  // "No, No" (535 printed 0), and `nvlink -s` with nothing at all (exit 0),
  // as this GPU has no NVLink.
  auto r = read_nvidia_smi(fixture("h200_580.sh"), 10s);
  ASSERT_TRUE(r.ok) << r.detail;
  EXPECT_EQ(r.detail, "");
  EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
  EXPECT_EQ(r.driver_version, "580.159.04");
  EXPECT_EQ(r.cuda_version, "13.0");
  ASSERT_EQ(r.gpus.size(), 1u);

  const auto& g = r.gpus[0];
  EXPECT_EQ(g.status(), "ok");
  EXPECT_EQ(g.id(), "GPU-f07d9499-5517-58bb-0785-0fb1950fb678");
  EXPECT_EQ(g.model(), "NVIDIA H200");
  EXPECT_EQ(g.pci_address(), "0000:00:06.0");
  EXPECT_EQ(g.memory_total_bytes(), 150'754'820'096u);  // 143771 MiB, as NVML says
  EXPECT_EQ(g.architecture(), "hopper");
  EXPECT_EQ(g.compute_capability(), "9.0");
  EXPECT_TRUE(g.data_centre());
  EXPECT_EQ(g.serial(), "1653724067311");
  EXPECT_EQ(g.vbios_version(), "96.00.A5.00.1A");
  ASSERT_TRUE(g.has_row_remapping());
  EXPECT_TRUE(g.row_remapping().has_pending());
  EXPECT_FALSE(g.row_remapping().pending());
  EXPECT_TRUE(g.row_remapping().has_failed());
  EXPECT_FALSE(g.row_remapping().failed());
  EXPECT_EQ(g.row_remapping().uncorrectable_rows(), 0u);
  EXPECT_EQ(g.ecc().volatile_uncorrectable(), 0u);
  ASSERT_TRUE(g.has_recovery_action());  // "GPU Recovery Action : None"
  EXPECT_EQ(g.recovery_action(), 0u);
  EXPECT_EQ(g.nvlinks_size(), 0);
  EXPECT_EQ(g.unknown_fields_size(), 0) << g.unknown_fields(0);
}

TEST(NvidiaSmi, UnknownMarkersAreAbsentNeverZero) {
  auto r = read_nvidia_smi(fixture("a100_na.sh"), 10s);
  ASSERT_TRUE(r.ok) << r.detail;
  ASSERT_EQ(r.gpus.size(), 2u);
  // The driver refused compute_cap; the query was repeated without it.
  EXPECT_NE(r.detail.find("compute_cap"), std::string::npos) << r.detail;
  EXPECT_EQ(r.cuda_version, "11.4");

  const auto& mig = r.gpus[0];
  EXPECT_EQ(mig.model(), "NVIDIA A100-PCIE-40GB");
  EXPECT_TRUE(mig.data_centre());
  EXPECT_EQ(mig.architecture(), "");
  EXPECT_FALSE(mig.has_memory_used_bytes());
  EXPECT_FALSE(mig.has_utilization_percent());
  EXPECT_FALSE(mig.has_fan_percent());
  EXPECT_FALSE(mig.ecc().has_volatile_correctable());
  EXPECT_FALSE(mig.ecc().has_aggregate_uncorrectable());
  EXPECT_FALSE(mig.retired_pages().has_single_bit());
  EXPECT_FALSE(mig.retired_pages().has_pending());
  EXPECT_FALSE(mig.has_thermal_slowdown());
  EXPECT_FALSE(mig.row_remapping().has_correctable_rows());
  EXPECT_FALSE(mig.row_remapping().has_failed());
  // [N/A] and [Not Supported] are not errors.
  EXPECT_EQ(mig.unknown_fields_size(), 0);
  EXPECT_EQ(mig.status(), "ok");

  const auto& bad = r.gpus[1];
  EXPECT_FALSE(bad.has_temperature_c());
  EXPECT_FALSE(bad.has_power_watts());
  EXPECT_EQ(bad.serial(), "");
  EXPECT_TRUE(has_unknown(bad, "temperature.gpu: Unknown Error"));
  EXPECT_TRUE(has_unknown(bad, "power.draw: ERR!"));
  EXPECT_TRUE(has_unknown(bad, "serial: Insufficient Permissions"));
  EXPECT_EQ(bad.status(), "ok");
  EXPECT_EQ(bad.memory_used_bytes(), 3ull * 1024 * 1024);
  EXPECT_EQ(bad.row_remapping().uncorrectable_rows(), 0u);
  EXPECT_TRUE(bad.row_remapping().has_pending());
  EXPECT_FALSE(bad.row_remapping().pending());
}

TEST(NvidiaSmi, LostGpusAreReportedAsLost) {
  auto r = read_nvidia_smi(fixture("lost.sh"), 10s);
  ASSERT_TRUE(r.ok) << r.detail;
  EXPECT_NE(r.detail.find("exited with status 15"), std::string::npos) << r.detail;
  ASSERT_EQ(r.gpus.size(), 3u);

  auto* healthy = by_index(r, 0);
  ASSERT_NE(healthy, nullptr);
  EXPECT_EQ(healthy->status(), "ok");
  EXPECT_EQ(healthy->architecture(), "ampere");

  auto* lost = by_index(r, 1);
  ASSERT_NE(lost, nullptr);
  EXPECT_EQ(lost->status(), "lost");
  EXPECT_EQ(lost->pci_address(), "0000:0f:00.0");
  EXPECT_EQ(lost->id(), "0000:0f:00.0");  // no UUID: the PCI address
  EXPECT_FALSE(lost->has_memory_total_bytes());
  EXPECT_FALSE(lost->has_temperature_c());
  EXPECT_FALSE(lost->ecc().has_volatile_uncorrectable());

  auto* no_handle = by_index(r, 2);
  ASSERT_NE(no_handle, nullptr);
  EXPECT_EQ(no_handle->status(), "lost");
  EXPECT_EQ(no_handle->pci_address(), "0000:47:00.0");
  EXPECT_NE(no_handle->status_detail().find("Unable to determine the device handle"),
            std::string::npos);
}

TEST(NvidiaSmi, DeadlineKillsAHungNvidiaSmi) {
  auto start = std::chrono::steady_clock::now();
  auto r = read_nvidia_smi(fixture("hang.sh"), 300ms);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.detail.find("did not finish within 300 ms"), std::string::npos) << r.detail;
  EXPECT_LT(took, 300ms + 1500ms);
  EXPECT_TRUE(r.gpus.empty());
}

TEST(NvidiaSmi, GarbageOutputIsNotOk) {
  auto r = read_nvidia_smi(fixture("garbage.sh"), 10s);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.gpus.empty());
  EXPECT_NE(r.detail.find("expected comma-separated fields"), std::string::npos) << r.detail;
}

TEST(NvidiaSmi, MissingProgramIsNotOk) {
  auto r = read_nvidia_smi(fixture("does-not-exist.sh"), 2s);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.detail.find("cannot run"), std::string::npos) << r.detail;

  r = read_nvidia_smi("astraeus-no-such-nvidia-smi", 2s);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.detail.find("not found in PATH"), std::string::npos) << r.detail;
}

TEST(NvidiaSmi, DriverNotLoadedIsNotOkAndSaysWhy) {
  auto r = read_nvidia_smi(fixture("no_driver.sh"), 10s);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.gpus.empty());
  EXPECT_NE(r.detail.find("exited with status 9"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("couldn't communicate with the NVIDIA driver"), std::string::npos)
      << r.detail;
}

TEST(NvidiaSmi, ParsesRetiredPagesAndOlderBoards) {
  auto fields = nvidia_smi_gpu_fields();
  auto r = parse_nvidia_smi_csv(
      "0, GPU-11111111-2222-3333-4444-555555555555, Tesla V100-SXM2-32GB, 00000000:1A:00.0, "
      "470.82.01, 32510, 0, 0, 40, 55.10, 300.00, 135, 877, [N/A], 0, 0, 7, 0, 2, 1, Yes, "
      "0323217070000, 88.00.4F.00.09, 7.0, Not Active, [Not Supported]\n",
      fields);
  ASSERT_TRUE(r.ok) << r.detail;
  ASSERT_EQ(r.gpus.size(), 1u);
  const auto& g = r.gpus[0];
  EXPECT_EQ(g.architecture(), "volta");
  EXPECT_TRUE(g.data_centre());
  EXPECT_EQ(g.retired_pages().single_bit(), 2u);
  EXPECT_EQ(g.retired_pages().double_bit(), 1u);
  EXPECT_TRUE(g.retired_pages().pending());
  EXPECT_EQ(g.ecc().aggregate_correctable(), 7u);
  // One throttle reason unknown, the other inactive: not known to be slowed.
  EXPECT_FALSE(g.has_thermal_slowdown());
}

TEST(NvidiaSmi, ParserRejectsWrongColumnCountsAndEmptyText) {
  auto r = parse_nvidia_smi_csv("1, 2, 3\n");
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.gpus.empty());
  EXPECT_NE(r.detail.find("1 line(s)"), std::string::npos) << r.detail;

  r = parse_nvidia_smi_csv("");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.detail, "no output");

  r = parse_nvidia_smi_csv("No devices were found\n");
  EXPECT_TRUE(r.ok);
  EXPECT_TRUE(r.gpus.empty());

  // An unparseable number is unknown, with a note, never 0.
  r = parse_nvidia_smi_csv(
      "0, GPU-x, NVIDIA L4, 00000000:01:00.0, 550.54.15, lots, 0, 0, 40, 20.0, 72.00, 210, "
      "6250, 0, 0, 0, 0, 0, [N/A], [N/A], [N/A], 1, 95.04, 8.9, Not Active, Not Active\n",
      nvidia_smi_gpu_fields());
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_FALSE(r.gpus[0].has_memory_total_bytes());
  EXPECT_TRUE(has_unknown(r.gpus[0], "memory.total: unexpected value 'lots'"));
  EXPECT_EQ(r.gpus[0].architecture(), "ada");
  EXPECT_TRUE(r.gpus[0].data_centre());
}

TEST(NvidiaSmi, NormalisesPciBusIds) {
  EXPECT_EQ(normalize_pci_bus_id("00000000:3B:00.0").value_or(""), "0000:3b:00.0");
  EXPECT_EQ(normalize_pci_bus_id("0000:3b:00.0").value_or(""), "0000:3b:00.0");
  EXPECT_EQ(normalize_pci_bus_id("00000001:C1:1F.7").value_or(""), "0001:c1:1f.7");
  EXPECT_EQ(normalize_pci_bus_id("00010000:01:00.0").value_or(""), "10000:01:00.0");
  EXPECT_FALSE(normalize_pci_bus_id("3B:00.0"));
  EXPECT_FALSE(normalize_pci_bus_id("0000:3B:00.8"));
  EXPECT_FALSE(normalize_pci_bus_id("[N/A]"));
}

TEST(NvidiaSmi, ArchitectureFromComputeCapability) {
  EXPECT_EQ(nvidia_architecture("7.0"), "volta");
  EXPECT_EQ(nvidia_architecture("7.5"), "turing");
  EXPECT_EQ(nvidia_architecture("8.0"), "ampere");
  EXPECT_EQ(nvidia_architecture("8.6"), "ampere");
  EXPECT_EQ(nvidia_architecture("8.7"), "ampere");
  EXPECT_EQ(nvidia_architecture("8.9"), "ada");
  EXPECT_EQ(nvidia_architecture("9.0"), "hopper");
  EXPECT_EQ(nvidia_architecture("10.0"), "blackwell");
  EXPECT_EQ(nvidia_architecture("12.0"), "blackwell");
  EXPECT_EQ(nvidia_architecture("8.5"), "");
  EXPECT_EQ(nvidia_architecture("x"), "");
}

TEST(NvidiaSmi, DataCentreBoardsFromTheModelName) {
  for (const char* name : {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H200",
                           "NVIDIA GH200 480GB", "NVIDIA B200", "NVIDIA L40S", "NVIDIA L4",
                           "NVIDIA A10G", "NVIDIA A10", "Tesla T4", "Tesla V100-SXM2-32GB",
                           "NVIDIA H100 PCIe"})
    EXPECT_TRUE(nvidia_data_centre_model(name)) << name;
  for (const char* name : {"NVIDIA GeForce RTX 4090", "NVIDIA RTX A6000", "NVIDIA RTX A2000",
                           "Quadro RTX 8000", "NVIDIA GeForce GTX 1080 Ti", ""})
    EXPECT_FALSE(nvidia_data_centre_model(name)) << name;
}

TEST(NvidiaSmi, CudaVersionFromTheQueryHeader) {
  EXPECT_EQ(parse_nvidia_smi_cuda_version("Driver Version : 550.54.15\nCUDA Version   : 12.4\n"),
            "12.4");
  EXPECT_EQ(parse_nvidia_smi_cuda_version("CUDA Version : N/A\n"), "");
  EXPECT_EQ(parse_nvidia_smi_cuda_version("garbage"), "");
}

// --- Output of a newer driver -----------------------------------

TEST(NvidiaSmi, ExtraTrailingColumnsAreIgnoredAndAShortLineIsSkippedAndNamed) {
  auto r = read_nvidia_smi(fixture("h100x8_extra_columns.sh"), 10s);
  ASSERT_TRUE(r.ok) << r.detail;
  // GPUs 0-6 carry two columns more than asked for: read as usual.
  ASSERT_EQ(r.gpus.size(), 7u);
  const auto& g = r.gpus[6];
  EXPECT_EQ(g.id(), "GPU-5f607182-93a4-4b5c-9e6f-708192a3b4c5");
  EXPECT_EQ(g.pci_address(), "0000:ba:00.0");
  EXPECT_DOUBLE_EQ(g.temperature_c(), 37.0);
  EXPECT_TRUE(g.has_thermal_slowdown());
  EXPECT_FALSE(g.thermal_slowdown());
  EXPECT_EQ(g.unknown_fields_size(), 0) << g.unknown_fields(0);
  EXPECT_TRUE(r.gpus[5].thermal_slowdown());
  // GPU 7's line is cut short: it cannot be used, and the detail says so.
  EXPECT_EQ(by_index(r, 7), nullptr);
  EXPECT_NE(r.detail.find("1 line(s) without the 26 expected comma-separated fields, e.g. '7, "
                          "GPU-60718293"),
            std::string::npos)
      << r.detail;
  // Reasons without readings, to be logged once each.
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_EQ(r.warnings[0], "nvidia-smi --query-gpu printed up to 28 fields per GPU line where 26 "
                           "were asked for (a newer driver?); the first 26 are used, the rest "
                           "ignored");
  EXPECT_EQ(r.warnings[1], "nvidia-smi --query-gpu printed lines without the 26 expected "
                           "comma-separated fields; they were skipped");
}

TEST(NvidiaSmi, ExtraColumnsWithoutAPciAddressAreNotAGpu) {
  std::string line = "a, b, c, d";
  for (int i = 4; i < 30; ++i)
    line += ", x";
  auto r = parse_nvidia_smi_csv(line + "\n");
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.gpus.empty());
  EXPECT_NE(r.detail.find("1 line(s)"), std::string::npos) << r.detail;
}

// --- NVLink link state ----------------------------------------------------

TEST(NvidiaSmi, ReadsEighteenNvLinksPerH100) {
  auto r = read_nvidia_smi(fixture("h100x8.sh"), 10s);
  ASSERT_TRUE(r.ok) << r.detail;
  ASSERT_EQ(r.gpus.size(), 8u);
  for (const auto& g : r.gpus) {
    SCOPED_TRACE(g.id());
    ASSERT_EQ(g.nvlinks_size(), 18);
    for (int i = 0; i < 18; ++i) {
      EXPECT_EQ(g.nvlinks(i).link(), static_cast<uint32_t>(i));
      EXPECT_TRUE(g.nvlinks(i).active());
      EXPECT_EQ(g.nvlinks(i).remote_kind(), "unknown");
      EXPECT_FALSE(g.nvlinks(i).has_replay_errors());  // not in this output: absent
    }
    EXPECT_EQ(g.unknown_fields_size(), 0) << g.unknown_fields(0);
  }
}

TEST(NvidiaSmi, NvLinkStatusParsesDownLinksAndNamesWhatItCannotRead) {
  std::vector<v1::Gpu> gpus(3);
  gpus[0].set_id("GPU-aaaa");
  gpus[0].set_index(0);
  gpus[1].set_id("GPU-bbbb");
  gpus[1].set_index(1);
  gpus[2].set_id("0000:47:00.0");
  gpus[2].set_index(2);
  auto named = apply_nvidia_smi_nvlink_status("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n"
                                              "\t Link 0: 26.562 GB/s\n"
                                              "\t Link 1: <inactive>\n"
                                              "\t Link 2: ERR!\n"
                                              "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)\n",
                                              gpus);
  EXPECT_EQ(named, 2u);
  ASSERT_EQ(gpus[0].nvlinks_size(), 2);
  EXPECT_TRUE(gpus[0].nvlinks(0).active());
  EXPECT_FALSE(gpus[0].nvlinks(1).active());
  EXPECT_TRUE(has_unknown(gpus[0], "nvlinks[2]: unexpected state 'ERR!'"));
  // Named without links: no NVLink on that GPU, nothing unknown.
  EXPECT_EQ(gpus[1].nvlinks_size(), 0);
  EXPECT_EQ(gpus[1].unknown_fields_size(), 0);
  // Not named: unknown, with the reason.
  EXPECT_TRUE(has_unknown(gpus[2], "nvlinks: not listed by nvidia-smi nvlink -s"));
}

TEST(NvidiaSmi, NvLinksAreUnknownWhenTheQueryFails) {
  // lost.sh refuses `nvlink -s` as an unknown command.
  auto r = read_nvidia_smi(fixture("lost.sh"), 10s);
  ASSERT_TRUE(r.ok) << r.detail;
  auto* healthy = by_index(r, 0);
  ASSERT_NE(healthy, nullptr);
  EXPECT_EQ(healthy->nvlinks_size(), 0);
  EXPECT_TRUE(has_unknown(*healthy, "nvlinks: " + fixture("lost.sh")
                                        + " nvlink -s exited with status 2: Invalid combination"))
      << healthy->unknown_fields_size() << " unknown field(s)";
  // A lost GPU says it is lost; its links are not listed as unknown too.
  auto* lost = by_index(r, 1);
  ASSERT_NE(lost, nullptr);
  EXPECT_FALSE(has_unknown(*lost, "nvlinks"));
}
