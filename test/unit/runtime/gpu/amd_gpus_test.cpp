#include <map>
#include <set>

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "runtime/gpu/amd_gpus.hpp"

using namespace astraeus;

namespace {

std::string fixture(const std::string& name) {
  return std::string{ASTRAEUS_FIXTURES} + "/amd/" + name;
}

std::string all(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines)
    out += line + "\n";
  return out;
}

bool has_warning(const amd_result& r, const std::string& text) {
  return std::any_of(r.warnings.begin(), r.warnings.end(),
                     [&](const std::string& w) { return w == text; });
}

} // namespace

TEST(AmdGpus, ReadsADataCentreMachine) {
  auto r = read_amd_gpus(fixture("mi300x"));
  EXPECT_TRUE(r.warnings.empty()) << all(r.warnings);
  EXPECT_EQ(r.driver_version, "6.8.5");  // amdgpu-dkms module version, not the kernel
  EXPECT_EQ(r.rocm_version, "6.2.0-66");
  ASSERT_EQ(r.gpus.size(), 2u);

  const auto& a = r.gpus[0];
  EXPECT_EQ(a.vendor(), "amd");
  EXPECT_EQ(a.id(), "AMD-a1b2c3d4e5f60718");
  EXPECT_EQ(a.model(), "AMD Instinct MI300X OAM");  // the board's product_name
  EXPECT_TRUE(a.data_centre());
  EXPECT_EQ(a.pci_address(), "0000:05:00.0");
  EXPECT_EQ(a.card(), "card0");
  EXPECT_EQ(a.index(), 0u);
  EXPECT_EQ(a.render_node(), "/dev/dri/renderD128");
  EXPECT_EQ(a.architecture(), "gfx942");
  EXPECT_EQ(a.memory_total_bytes(), 206141652992u);
  EXPECT_EQ(a.memory_used_bytes(), 283377664u);
  EXPECT_DOUBLE_EQ(a.utilization_percent(), 0.0);
  EXPECT_TRUE(a.has_utilization_percent());
  EXPECT_DOUBLE_EQ(a.temperature_c(), 38.0);  // no edge sensor: junction
  EXPECT_DOUBLE_EQ(a.power_watts(), 143.0);
  EXPECT_DOUBLE_EQ(a.power_limit_watts(), 750.0);
  EXPECT_EQ(a.sm_clock_mhz(), 132u);
  EXPECT_EQ(a.memory_clock_mhz(), 900u);
  EXPECT_FALSE(a.has_fan_percent());
  EXPECT_EQ(a.ras_uncorrectable(), 0u);
  EXPECT_TRUE(a.has_ras_uncorrectable());
  EXPECT_EQ(a.ras_correctable(), 3u);
  EXPECT_EQ(a.bad_vram_pages(), 0u);
  EXPECT_TRUE(a.has_bad_vram_pages());
  EXPECT_EQ(a.numa_node(), 0);
  EXPECT_EQ(a.driver_version(), "6.8.5");
  EXPECT_EQ(a.status(), "ok");
  EXPECT_EQ(a.reset_status(), "");

  const auto& b = r.gpus[1];
  EXPECT_EQ(b.id(), "AMD-0123456789abcdef");
  EXPECT_EQ(b.model(), "AMD Instinct MI300X");  // empty product_name: from the device id
  EXPECT_EQ(b.render_node(), "/dev/dri/renderD129");
  EXPECT_DOUBLE_EQ(b.utilization_percent(), 87.0);
  EXPECT_EQ(b.sm_clock_mhz(), 2100u);
  EXPECT_EQ(b.ras_uncorrectable(), 1u);
  EXPECT_EQ(b.bad_vram_pages(), 2u);
  EXPECT_EQ(b.numa_node(), 1);
}

TEST(AmdGpus, PartitionsAreCountedNotListedAsGpus) {
  auto r = read_amd_gpus(fixture("mi300x"));
  // card2 and card3 are amdgpu_xcp partitions: two PCI GPUs, two
  // partitions each (DPX), mapped through the KFD topology.
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].partitions(), 2u);
  EXPECT_EQ(r.gpus[1].partitions(), 2u);
}

TEST(AmdGpus, ReadsADesktopBoardWithoutUniqueIdOrEdgeSensor) {
  auto r = read_amd_gpus(fixture("rx7900xtx"));
  EXPECT_TRUE(r.warnings.empty()) << all(r.warnings);
  EXPECT_EQ(r.driver_version, "6.8.0-45-generic");  // the in-kernel driver
  EXPECT_EQ(r.rocm_version, "");
  // card0 is the firmware framebuffer, card1-DP-1 a connector.
  ASSERT_EQ(r.gpus.size(), 1u);
  const auto& g = r.gpus[0];
  EXPECT_EQ(g.id(), "0000:03:00.0");  // no unique_id: the PCI address
  EXPECT_EQ(g.model(), "AMD Radeon RX 7900 XTX");  // 0x744c with 24 GiB
  EXPECT_FALSE(g.data_centre());
  EXPECT_EQ(g.card(), "card1");
  EXPECT_EQ(g.index(), 1u);
  EXPECT_EQ(g.render_node(), "/dev/dri/renderD128");  // by PCI address, not card number
  EXPECT_EQ(g.architecture(), "gfx1100");
  EXPECT_DOUBLE_EQ(g.temperature_c(), 52.0);  // junction
  EXPECT_DOUBLE_EQ(g.power_watts(), 35.0);
  EXPECT_DOUBLE_EQ(g.power_limit_watts(), 327.0);
  EXPECT_EQ(g.sm_clock_mhz(), 1500u);
  EXPECT_EQ(g.memory_clock_mhz(), 96u);
  EXPECT_DOUBLE_EQ(g.fan_percent(), 33.3);  // pwm1 85 / 255
  EXPECT_FALSE(g.has_numa_node());  // -1
  EXPECT_FALSE(g.has_ras_uncorrectable());
  EXPECT_FALSE(g.has_bad_vram_pages());
  EXPECT_EQ(g.partitions(), 0u);
}

TEST(AmdGpus, PrefersTheEdgeSensor) {
  auto r = read_amd_gpus(fixture("mi210"));
  EXPECT_TRUE(r.warnings.empty()) << all(r.warnings);
  ASSERT_EQ(r.gpus.size(), 1u);
  const auto& g = r.gpus[0];
  EXPECT_DOUBLE_EQ(g.temperature_c(), 41.0);  // edge, not junction (45) or mem (48)
  EXPECT_EQ(g.model(), "AMD Instinct MI210");
  EXPECT_TRUE(g.data_centre());
  EXPECT_EQ(g.architecture(), "gfx90a");  // KFD without "domain": matched by location only
  EXPECT_DOUBLE_EQ(g.power_watts(), 42.0);  // power1_average
  EXPECT_EQ(r.driver_version, "5.14.0-427.13.1.el9_4.x86_64");
}

TEST(AmdGpus, BrokenFilesAreWarningsAndUnknowns) {
  auto r = read_amd_gpus(fixture("broken"));
  ASSERT_EQ(r.gpus.size(), 1u);
  const auto& g = r.gpus[0];
  EXPECT_EQ(g.pci_address(), "0000:0a:00.0");
  EXPECT_EQ(g.id(), "0000:0a:00.0");  // empty unique_id
  EXPECT_EQ(g.model(), "AMD Instinct MI300X");
  EXPECT_FALSE(g.has_memory_total_bytes());
  EXPECT_FALSE(g.has_memory_used_bytes());
  EXPECT_FALSE(g.has_utilization_percent());
  EXPECT_FALSE(g.has_temperature_c());
  EXPECT_FALSE(g.has_power_watts());
  EXPECT_FALSE(g.has_power_limit_watts());
  EXPECT_FALSE(g.has_sm_clock_mhz());
  EXPECT_FALSE(g.has_ras_uncorrectable());
  EXPECT_FALSE(g.has_ras_correctable());
  EXPECT_FALSE(g.has_numa_node());
  EXPECT_EQ(g.architecture(), "");
  EXPECT_EQ(r.driver_version, "");

  const std::string dev = "/sys/class/drm/card0/device/";
  for (const std::string& w : {
           dev + "mem_info_vram_total: empty",
           dev + "mem_info_vram_used: not a number '12ab'",
           dev + "gpu_busy_percent: empty",
           dev + "numa_node: not a number 'node0'",
           dev + "hwmon/hwmon0/temp1_input: not a number 'hot'",
           dev + "hwmon/hwmon0/power1_average: empty",
           dev + "hwmon/hwmon0/power1_cap: not a number '-1'",
           dev + "hwmon/hwmon0/freq1_input: not a number '1.2e9'",
           dev + "ras/umc_err_count: ue is not a number 'x'",
           dev + "ras/umc_err_count: no 'ce:' line",
           std::string{"/sys/class/drm/card1/device/uevent: amdgpu card without a valid "
                       "PCI_SLOT_NAME; skipped"},
           std::string{"/sys/class/kfd/kfd/topology/nodes/1/properties: gfx_target_version is "
                       "not a number 'nine'"},
           std::string{"/sys/class/kfd/kfd/topology/nodes/2/properties: no gfx_target_version"},
       })
    EXPECT_TRUE(has_warning(r, w)) << "missing warning: " << w << "\nwarnings:\n" << all(r.warnings);
  // The partition card cannot be mapped without a KFD node for the GPU.
  EXPECT_TRUE(std::any_of(r.warnings.begin(), r.warnings.end(), [](const std::string& w) {
    return w.find("1 compute partition card(s) (amdgpu_xcp) not mapped") != std::string::npos;
  })) << all(r.warnings);
}

TEST(AmdGpus, NoAmdGpuIsEmpty) {
  auto r = read_amd_gpus(std::string{ASTRAEUS_FIXTURES} + "/pci");
  EXPECT_TRUE(r.gpus.empty());
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(r.driver_version, "");
}

TEST(AmdGpus, GfxTargetNames) {
  EXPECT_EQ(amd_gfx_target_name(90402), "gfx942");
  EXPECT_EQ(amd_gfx_target_name(90010), "gfx90a");
  EXPECT_EQ(amd_gfx_target_name(110000), "gfx1100");
  EXPECT_EQ(amd_gfx_target_name(110501), "gfx1151");
  EXPECT_EQ(amd_gfx_target_name(100300), "gfx1030");
  EXPECT_EQ(amd_gfx_target_name(0), "");
}

TEST(AmdGpus, ModelsFromDeviceIdAndMemory) {
  constexpr uint64_t gib = 1ull << 30;
  EXPECT_EQ(amd_model_from_device_id(0x744c, 25753026560ull), "AMD Radeon RX 7900 XTX");
  EXPECT_EQ(amd_model_from_device_id(0x744c, 20 * gib - (16ull << 20)), "AMD Radeon RX 7900 XT");
  EXPECT_EQ(amd_model_from_device_id(0x744c, 16 * gib), "AMD Radeon RX 7900 GRE");
  EXPECT_EQ(amd_model_from_device_id(0x744c, 0), "");  // size unknown: ambiguous
  EXPECT_EQ(amd_model_from_device_id(0x74a1, 0), "AMD Instinct MI300X");
  EXPECT_EQ(amd_model_from_device_id(0x7408, 128 * gib), "AMD Instinct MI250X");
  EXPECT_EQ(amd_model_from_device_id(0x738c, 32 * gib), "AMD Instinct MI100");
  EXPECT_EQ(amd_model_from_device_id(0x1234, 8 * gib), "");
}

// Issue 18, rule 5: every hwmon temperature by its label, all shown.
TEST(AmdGpus, EveryTemperatureIsReadByItsLabel) {
  auto r = read_amd_gpus(fixture("mi210"));
  ASSERT_EQ(r.gpus.size(), 1u);
  const auto& g = r.gpus[0];
  ASSERT_EQ(g.temperatures_size(), 3);
  std::map<std::string, double> by_label;
  for (const auto& t : g.temperatures())
    by_label[t.label()] = t.celsius();
  EXPECT_DOUBLE_EQ(by_label["edge"], 41.0);
  EXPECT_DOUBLE_EQ(by_label["junction"], 45.0);
  EXPECT_DOUBLE_EQ(by_label["mem"], 48.0);
}

// Issue 18, rule 4: a partitioned MI300X handed out whole brings every
// partition's render node (from the KFD topology's drm_render_minor), and
// its partition mode shows on the GPU.
TEST(AmdGpus, APartitionedGpuListsEveryPartitionsRenderNodeAndItsMode) {
  auto r = read_amd_gpus(fixture("mi300x"));
  ASSERT_EQ(r.gpus.size(), 2u);
  for (const auto& g : r.gpus) {
    EXPECT_EQ(g.partition_mode(), "DPX") << g.id();
    EXPECT_EQ(g.partition_render_nodes_size(), 2) << g.id();
  }
  std::set<std::string> nodes;
  for (const auto& g : r.gpus)
    nodes.insert(g.partition_render_nodes().begin(), g.partition_render_nodes().end());
  EXPECT_EQ(nodes, (std::set<std::string>{"/dev/dri/renderD128", "/dev/dri/renderD129",
                                          "/dev/dri/renderD130", "/dev/dri/renderD131"}));
}
