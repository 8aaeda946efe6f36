// The IOMMU group of a GPU bound to vfio-pci (issue 18, rule 8).

#include "runtime/host/iommu_group.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <system_error>

#include <filesystem>

namespace astraeus {

namespace fs = std::filesystem;

namespace {

std::string prefix(const std::string& root) {
  return root.empty() || root == "/" ? std::string{} : root;
}

/// The driver bound to PCI device `dir`: its uevent's DRIVER, else the
/// name its `driver` link points to; "" when none.
std::string driver_of(const std::string& dir) {
  std::ifstream in{dir + "/uevent"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("DRIVER=", 0) == 0)
      return line.substr(7);
  std::error_code err;
  auto target = fs::read_symlink(dir + "/driver", err);
  return err ? std::string{} : target.filename().string();
}

} // namespace

std::vector<std::string> iommu_group_host_devices(const std::string& root,
                                                  const std::string& pci_address) {
  const auto devices = prefix(root) + "/sys/bus/pci/devices/";
  std::vector<std::string> names;
  std::error_code err;
  for (const auto& e : fs::directory_iterator(devices + pci_address + "/iommu_group/devices", err))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::vector<std::string> out;
  for (const auto& name : names) {
    if (name == pci_address)
      continue;
    auto driver = driver_of(devices + name);
    if (driver.empty() || driver == "vfio-pci" || driver == "pci-stub" || driver == "pcieport")
      continue;
    out.push_back(name + " (" + driver + ")");
  }
  return out;
}

} // namespace astraeus
