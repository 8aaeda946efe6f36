// A GPU bound to vfio-pci whose IOMMU group still holds devices on host
// drivers (runtime/host/iommu_group.cpp; issue 18, rule 8), on a fixture
// tree.

#include "runtime/host/iommu_group.hpp"

#include <filesystem>
#include <fstream>

#include <stdlib.h>

#include <gtest/gtest.h>

#include "runtime/host/pci_bus.hpp"

using namespace astraeus;
namespace fs = std::filesystem;

namespace {

/// A fresh folder, removed at the end.
struct scratch {
  std::string dir;
  scratch() {
    std::string pattern = (fs::temp_directory_path() / "astraeus-iommu-XXXXXX").string();
    dir = ::mkdtemp(pattern.data()) ? pattern : std::string{};
  }
  ~scratch() {
    std::error_code err;
    fs::remove_all(dir, err);
  }
  const std::string& path() const { return dir; }
};

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream{p} << text;
}

/// A host whose GPU 0000:01:00.0 is bound to vfio-pci, in an IOMMU group
/// with its audio function (on snd_hda_intel) and a PCIe bridge.
std::string vfio_host(const std::string& dir, const std::string& audio_driver) {
  auto root = dir + "/host";
  auto dev = root + "/sys/bus/pci/devices/";
  put(dev + "0000:01:00.0/class", "0x030000\n");
  put(dev + "0000:01:00.0/vendor", "0x10de\n");
  put(dev + "0000:01:00.0/device", "0x2330\n");
  put(dev + "0000:01:00.0/uevent", "DRIVER=vfio-pci\nPCI_SLOT_NAME=0000:01:00.0\n");
  put(dev + "0000:01:00.1/uevent", "DRIVER=" + audio_driver + "\n");
  put(dev + "0000:00:01.0/uevent", "DRIVER=pcieport\n");
  for (const char* member : {"0000:01:00.0", "0000:01:00.1", "0000:00:01.0"})
    fs::create_directories(dev + "0000:01:00.0/iommu_group/devices/" + member);
  return root;
}

} // namespace

TEST(IommuGroup, DevicesOnHostDriversAreNamed) {
  scratch dir;
  auto root = vfio_host(dir.path(), "snd_hda_intel");
  EXPECT_EQ(iommu_group_host_devices(root, "0000:01:00.0"),
            std::vector<std::string>{"0000:01:00.1 (snd_hda_intel)"});
  auto scan = scan_pci_gpus(root);
  ASSERT_EQ(scan.gpus.size(), 1u);
  EXPECT_NE(scan.gpus[0].missing().find("its IOMMU group still holds 0000:01:00.1 "
                                        "(snd_hda_intel) on host drivers: passing it to a "
                                        "VM would fail"),
            std::string::npos)
    << scan.gpus[0].missing();
}

TEST(IommuGroup, AGroupAllOnVfioIsFine) {
  scratch dir;
  auto root = vfio_host(dir.path(), "vfio-pci");
  EXPECT_TRUE(iommu_group_host_devices(root, "0000:01:00.0").empty());
  auto scan = scan_pci_gpus(root);
  ASSERT_EQ(scan.gpus.size(), 1u);
  EXPECT_EQ(scan.gpus[0].missing(), "bound to vfio-pci (passed through to a VM)");
  EXPECT_TRUE(iommu_group_host_devices(root, "0000:09:00.0").empty()) << "no such device";
}
