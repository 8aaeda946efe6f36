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
#include <optional>
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

/// The NUMA node of one PCI device, as the kernel gives it.
struct pci_numa_node {
  /// The node; absent when the platform gives the device none (-1) or the
  /// file could not be read.
  std::optional<int32_t> node;
  /// Empty when the file was read (-1 included); else "<path relative to
  /// root>: <why>", e.g. "/sys/bus/pci/devices/0000:3b:00.0/numa_node:
  /// missing", "...: Input/output error", "...: not a number 'x'".
  std::string error;
  /// The file does not exist (no such device, or a tree without the file);
  /// `error` says so too.
  bool absent = false;
};

/// Reads <root>/sys/bus/pci/devices/<address>/numa_node (root "/" reads
/// this machine; `address` as sysfs names it, "0000:3b:00.0"): a decimal
/// number from -1 (no affinity) up. The one reader of it: the bus scan and
/// the nvidia-smi fallback use it. Never throws.
pci_numa_node read_pci_numa_node(const std::string& root, const std::string& address);

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
