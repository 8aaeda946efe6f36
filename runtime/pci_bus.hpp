#pragma once
/// @file
/// Every GPU on the PCI bus, whatever its driver (shared/seeds/gpus.md,
/// "How GPUs are found": a GPU the driver does not report, because no
/// driver is bound, nouveau holds it, or it is passed to a VM through
/// vfio-pci, is still listed with what is missing). Read from
/// /sys/bus/pci/devices under a configurable root so tests run the same code
/// on fixture trees (DESIGN.md, "Host access, and how tests reach it").
///
/// Nothing here throws: a file that cannot be read leaves its field unknown
/// and adds a warning.

#include <cstdint>
#include <string>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// The GPUs found on the PCI bus.
struct bus_scan {
  /// Display controllers (class 0x03xxxx: VGA, 3D, other display) and
  /// processing accelerators (class 0x12xxxx), ordered by PCI address.
  /// reported_by_driver is always false here: the caller sets it once it
  /// knows what NVML / sysfs reported.
  std::vector<v1::BusGpu> gpus;
  /// "<path relative to root>: <what was wrong>", one per file that exists
  /// but could not be read or parsed. A device whose class or vendor cannot
  /// be read is skipped with a warning.
  std::vector<std::string> warnings;
};

/// Walks <root>/sys/bus/pci/devices/* (root "/" reads this machine) and
/// returns every GPU, skipping other devices (network cards, NVSwitches,
/// audio functions of a GPU, bridges).
///
/// Per device: vendor "nvidia" (0x10de), "amd" (0x1002), "intel" (0x8086),
/// else "other" (an ASPEED or Matrox BMC display controller is listed as
/// "other"; callers that count GPUs ignore those); vendor_id and device_id
/// as "0x10de", "0x2330"; name from the PCI database (pci_device_name());
/// driver from the DRIVER= line of the device's `uevent` (the same file on
/// real hosts and fixtures), else the basename of its `driver` symlink;
/// numa_node from `numa_node` (-1: absent); missing from pci_missing_text().
bus_scan scan_pci_gpus(const std::string& root);

/// The PCI database's name of a device, vendor then device, as libpci's
/// pci_lookup_name(PCI_LOOKUP_VENDOR | PCI_LOOKUP_DEVICE) gives it:
/// 0x10de 0x2330 -> "NVIDIA Corporation GH100 [H100 SXM5 80GB]". Read from
/// the system's pci.ids (/usr/share/misc/pci.ids on Debian) or udev's hwdb;
/// loaded once per process, thread-safe. Empty when the database does not
/// know the device (or the vendor).
std::string pci_device_name(uint16_t vendor_id, uint16_t device_id);

/// Only the device part of the PCI database's name: 0x1002 0x744c ->
/// "Navi 31 [Radeon RX 7900 XT/7900 XTX]". Empty when unknown.
std::string pci_device_only_name(uint16_t vendor_id, uint16_t device_id);

/// What is missing for a GPU of `vendor` ("nvidia", "amd", "intel",
/// "other") bound to `driver` (empty: none). Empty when nothing is:
/// nvidia on "nvidia", amd on "amdgpu", intel on "i915" or "xe", any other
/// vendor on any driver.
///  - no driver: "no driver bound: install the NVIDIA driver" (nvidia),
///    "no driver bound: load amdgpu (modprobe amdgpu) with the GPU
///    firmware" (amd), "no driver bound: load i915 or xe" (intel),
///    "no driver bound" (other);
///  - "nouveau": "held by nouveau, not the NVIDIA driver";
///  - "vfio-pci" (any vendor): "bound to vfio-pci (passed through to a VM)";
///  - another driver for nvidia/amd/intel: "bound to <driver>, not the
///    NVIDIA driver" / "..., not amdgpu" / "..., not i915 or xe".
std::string pci_missing_text(const std::string& vendor, const std::string& driver);

} // namespace astraeus
