#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <stdlib.h>

#include "runtime/host/pci_bus.hpp"

using namespace astraeus;

namespace {

std::string fixture() {
  return std::string{ASTRAEUS_FIXTURES} + "/pci";
}

const v1::BusGpu* at(const bus_scan& scan, const std::string& address) {
  auto it = std::find_if(scan.gpus.begin(), scan.gpus.end(),
                         [&](const v1::BusGpu& g) { return g.pci_address() == address; });
  return it == scan.gpus.end() ? nullptr : &*it;
}

// A fresh directory under the system's temp dir, removed afterwards.
struct scratch_dir {
  std::string path;
  scratch_dir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "astraeus-pci-XXXXXX").string();
    if (::mkdtemp(tmpl.data()))
      path = tmpl;
  }
  ~scratch_dir() {
    std::error_code err;
    if (!path.empty())
      std::filesystem::remove_all(path, err);
  }
};

void write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream{path} << text;
}

} // namespace

TEST(PciBus, ListsDisplayControllersAndSkipsOtherDevices) {
  auto scan = scan_pci_gpus(fixture());
  EXPECT_TRUE(scan.warnings.empty()) << scan.warnings.front();
  std::vector<std::string> addresses;
  for (const auto& g : scan.gpus)
    addresses.push_back(g.pci_address());
  // The ConnectX-7 at 0000:41:00.0 (class 0x0200) is not a GPU.
  EXPECT_EQ(addresses, (std::vector<std::string>{"0000:00:02.0", "0000:03:00.0", "0000:18:00.0",
                                                 "0000:2a:00.0", "0000:3b:00.0", "0000:5e:00.0",
                                                 "0000:c1:00.0"}));
}

TEST(PciBus, ReadsVendorDriverAndNumaNode) {
  auto scan = scan_pci_gpus(fixture());
  auto* h100 = at(scan, "0000:18:00.0");
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(h100->vendor(), "nvidia");
  EXPECT_EQ(h100->vendor_id(), "0x10de");
  EXPECT_EQ(h100->device_id(), "0x2330");
  EXPECT_EQ(h100->driver(), "nvidia");
  EXPECT_EQ(h100->missing(), "");
  EXPECT_EQ(h100->numa_node(), 0);
  EXPECT_FALSE(h100->reported_by_driver());

  auto* amd = at(scan, "0000:c1:00.0");
  ASSERT_NE(amd, nullptr);
  EXPECT_EQ(amd->vendor(), "amd");
  EXPECT_EQ(amd->driver(), "amdgpu");
  EXPECT_EQ(amd->missing(), "");
  EXPECT_EQ(amd->numa_node(), 1);

  auto* intel = at(scan, "0000:00:02.0");
  ASSERT_NE(intel, nullptr);
  EXPECT_EQ(intel->vendor(), "intel");
  EXPECT_EQ(intel->driver(), "i915");
  EXPECT_EQ(intel->missing(), "");
  EXPECT_FALSE(intel->has_numa_node());  // -1

  auto* bmc = at(scan, "0000:03:00.0");
  ASSERT_NE(bmc, nullptr);
  EXPECT_EQ(bmc->vendor(), "other");
  EXPECT_EQ(bmc->driver(), "ast");
  EXPECT_EQ(bmc->missing(), "");
}

TEST(PciBus, TheRealH200VmHasItsGpuAtItsAddressWithNoNumaNode) {
  // hosts/h200-vm: a real capture (capture-host.sh) of a VM with one H200
  // passed through; its other PCI devices are virtio. sysfs says numa_node
  // -1 for the GPU, as VMs do: no node, and no warning.
  auto scan = scan_pci_gpus(std::string{ASTRAEUS_FIXTURES} + "/hosts/h200-vm");
  EXPECT_TRUE(scan.warnings.empty()) << scan.warnings.front();
  ASSERT_EQ(scan.gpus.size(), 1u);
  const auto& h200 = scan.gpus[0];
  EXPECT_EQ(h200.pci_address(), "0000:00:06.0");
  EXPECT_EQ(h200.vendor(), "nvidia");
  EXPECT_EQ(h200.vendor_id(), "0x10de");
  EXPECT_EQ(h200.device_id(), "0x2335");
  EXPECT_EQ(h200.driver(), "nvidia");
  EXPECT_EQ(h200.missing(), "");
  EXPECT_FALSE(h200.has_numa_node());
}

TEST(PciBus, SaysWhatIsMissing) {
  auto scan = scan_pci_gpus(fixture());
  auto* unbound = at(scan, "0000:2a:00.0");
  ASSERT_NE(unbound, nullptr);
  EXPECT_EQ(unbound->driver(), "");
  EXPECT_EQ(unbound->missing(), "no driver bound: install the NVIDIA driver");

  auto* nouveau = at(scan, "0000:3b:00.0");
  ASSERT_NE(nouveau, nullptr);
  EXPECT_EQ(nouveau->driver(), "nouveau");
  EXPECT_EQ(nouveau->missing(), "held by nouveau, not the NVIDIA driver");

  auto* vfio = at(scan, "0000:5e:00.0");
  ASSERT_NE(vfio, nullptr);
  EXPECT_EQ(vfio->driver(), "vfio-pci");
  EXPECT_EQ(vfio->missing(), "bound to vfio-pci (passed through to a VM)");
  EXPECT_EQ(vfio->numa_node(), 1);
}

TEST(PciBus, MissingTextsPerVendor) {
  EXPECT_EQ(pci_missing_text("amd", ""),
            "no driver bound: load amdgpu (modprobe amdgpu) with the GPU firmware");
  EXPECT_EQ(pci_missing_text("amd", "radeon"), "bound to radeon, not amdgpu");
  EXPECT_EQ(pci_missing_text("amd", "vfio-pci"), "bound to vfio-pci (passed through to a VM)");
  EXPECT_EQ(pci_missing_text("nvidia", "pci-stub"), "bound to pci-stub, not the NVIDIA driver");
  EXPECT_EQ(pci_missing_text("intel", ""), "no driver bound: load i915 or xe");
  EXPECT_EQ(pci_missing_text("intel", "xe"), "");
  EXPECT_EQ(pci_missing_text("other", ""), "no driver bound");
  EXPECT_EQ(pci_missing_text("other", "ast"), "");
}

TEST(PciBus, NamesComeFromThePciDatabase) {
  auto scan = scan_pci_gpus(fixture());
  auto* h100 = at(scan, "0000:18:00.0");
  ASSERT_NE(h100, nullptr);
  EXPECT_NE(h100->name().find("NVIDIA Corporation"), std::string::npos) << h100->name();
  EXPECT_NE(h100->name().find("H100 SXM5"), std::string::npos) << h100->name();
  auto* t4 = at(scan, "0000:3b:00.0");
  ASSERT_NE(t4, nullptr);
  EXPECT_NE(t4->name().find("Tesla T4"), std::string::npos) << t4->name();
  EXPECT_NE(pci_device_only_name(0x1002, 0x744c).find("Radeon RX 7900"), std::string::npos);
  // An id the database does not know gives no name rather than a number.
  EXPECT_EQ(pci_device_name(0x10de, 0xfffe), "");
}

TEST(PciBus, BrokenFilesAreWarningsNotFailures) {
  scratch_dir dir;
  ASSERT_FALSE(dir.path.empty());
  auto devices = std::filesystem::path{dir.path} / "sys/bus/pci/devices";
  write(devices / "0000:01:00.0/class", "garbage\n");
  write(devices / "0000:02:00.0/class", "0x030200\n");
  write(devices / "0000:02:00.0/vendor", "0x10de\n");
  write(devices / "0000:02:00.0/device", "0x2330\n");
  write(devices / "0000:02:00.0/numa_node", "zero\n");
  write(devices / "0000:02:00.0/uevent", "PCI_SLOT_NAME=0000:02:00.0\n");
  // No uevent: the driver symlink is read instead.
  write(devices / "0000:03:00.0/class", "0x030000\n");
  write(devices / "0000:03:00.0/vendor", "0x1002\n");
  write(devices / "0000:03:00.0/device", "0x744c\n");
  std::filesystem::create_directories(std::filesystem::path{dir.path} / "drivers/amdgpu");
  std::filesystem::create_directory_symlink(std::filesystem::path{dir.path} / "drivers/amdgpu",
                                            devices / "0000:03:00.0/driver");

  auto scan = scan_pci_gpus(dir.path);
  ASSERT_EQ(scan.gpus.size(), 2u);
  EXPECT_EQ(scan.gpus[0].pci_address(), "0000:02:00.0");
  EXPECT_FALSE(scan.gpus[0].has_numa_node());
  EXPECT_EQ(scan.gpus[1].driver(), "amdgpu");
  EXPECT_EQ(scan.gpus[1].missing(), "");
  ASSERT_EQ(scan.warnings.size(), 2u);
  EXPECT_EQ(scan.warnings[0], "/sys/bus/pci/devices/0000:01:00.0/class: not a hex number 'garbage'");
  EXPECT_EQ(scan.warnings[1], "/sys/bus/pci/devices/0000:02:00.0/numa_node: not a number 'zero'");
}

TEST(PciBus, NoPciBusIsEmptyWithoutWarnings) {
  auto scan = scan_pci_gpus(std::string{ASTRAEUS_FIXTURES} + "/pci/does-not-exist");
  EXPECT_TRUE(scan.gpus.empty());
  EXPECT_TRUE(scan.warnings.empty());
}

TEST(PciBus, NumaNodeOfOneDevice) {
  auto h100 = read_pci_numa_node(fixture(), "0000:18:00.0");
  EXPECT_EQ(h100.node.value_or(-2), 0);
  EXPECT_EQ(h100.error, "");
  // -1: the platform gives the device no node; absent, and no error.
  auto intel = read_pci_numa_node(fixture(), "0000:00:02.0");
  EXPECT_FALSE(intel.node);
  EXPECT_EQ(intel.error, "");
  auto none = read_pci_numa_node(fixture(), "0000:99:00.0");
  EXPECT_FALSE(none.node);
  EXPECT_TRUE(none.absent);
  EXPECT_EQ(none.error, "/sys/bus/pci/devices/0000:99:00.0/numa_node: missing");

  scratch_dir dir;
  ASSERT_FALSE(dir.path.empty());
  write(std::filesystem::path{dir.path} / "sys/bus/pci/devices/0000:02:00.0/numa_node", "1x\n");
  auto bad = read_pci_numa_node(dir.path, "0000:02:00.0");
  EXPECT_FALSE(bad.node);
  EXPECT_FALSE(bad.absent);
  EXPECT_EQ(bad.error, "/sys/bus/pci/devices/0000:02:00.0/numa_node: not a number '1x'");
}
