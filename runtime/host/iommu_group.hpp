#pragma once
/// @file
/// A GPU bound to vfio-pci can be passed to a VM only when every device of
/// its IOMMU group is free of host drivers (issue 18, rule 8): the devices
/// that still hold one are named on the machine's GPU condition.

#include <string>
#include <vector>

namespace astraeus {

/// The other devices of the IOMMU group of PCI device `pci_address`, read
/// under `root` (`<root>/sys/bus/pci/devices/<address>/iommu_group/
/// devices`), that are bound to a host driver, as "0000:01:00.1
/// (snd_hda_intel)". No driver, `vfio-pci`, `pci-stub` and PCIe bridges
/// (`pcieport`) do not stop a pass-through. Empty when the group cannot be
/// read (no IOMMU) or holds no such device.
std::vector<std::string> iommu_group_host_devices(const std::string& root,
                                                  const std::string& pci_address);

} // namespace astraeus
