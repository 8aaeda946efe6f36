#pragma once
/// @file
/// AMD GPUs read from the files the amdgpu driver publishes in sysfs, where
/// amd-smi and rocm-smi read them too; no ROCm library is loaded
/// (shared/seeds/gpus.md, "How GPUs are found"). Everything is read under a
/// configurable root so tests run the same code on fixture trees (DESIGN.md,
/// "Host access, and how tests reach it").
///
/// Nothing here throws or fails as a whole: a file that exists but cannot be
/// read or parsed leaves its field unknown (absent) and adds a warning; a
/// file that is simply absent (a board without a fan, an older kernel) is
/// not a warning.

#include <cstdint>
#include <string>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// The AMD GPUs of a machine.
struct amd_result {
  /// One per PCI GPU driven by amdgpu, ordered by card number. Compute
  /// partitions (amdgpu_xcp) are not extra GPUs.
  std::vector<v1::Gpu> gpus;
  /// <root>/sys/module/amdgpu/version (set by AMD's packaged amdgpu-dkms,
  /// "6.8.5"), else the kernel release <root>/proc/sys/kernel/osrelease
  /// (the in-kernel amdgpu). Empty when neither can be read. Read only when
  /// there is at least one GPU.
  std::string driver_version;
  /// First line of <root>/opt/rocm/.info/version ("6.2.0-66") when the file
  /// exists; else empty.
  std::string rocm_version;
  /// "<path relative to root>: <what was wrong>" for each file that exists
  /// but could not be read or parsed, and partitions that could not be
  /// mapped to a GPU.
  std::vector<std::string> warnings;
};

/// Reads every AMD GPU under <root> ("/" reads this machine).
///
/// GPUs: each <root>/sys/class/drm/card<N> (not renderD*, not
/// card<N>-<connector>) whose device/uevent says DRIVER=amdgpu and has a
/// PCI_SLOT_NAME. `device` may be the kernel's symlink or, in fixtures, a
/// plain directory. Cards of amdgpu_xcp platform devices (MODALIAS
/// platform:amdgpu_xcp..., or a device path named amdgpu_xcp*) are compute
/// partitions, never GPUs.
///
/// Per GPU (v1::Gpu):
///  - vendor "amd", status "ok", index N, card "card<N>", pci_address from
///    PCI_SLOT_NAME (lower case);
///  - id "AMD-<device/unique_id>" (lower-case hex, no "0x"); the PCI address
///    when unique_id is absent or empty (desktop boards);
///  - model: device/product_name; else amd_model_from_device_id(device id,
///    VRAM); else "AMD " + the PCI database's device name; else
///    "AMD GPU 0x<device id>";
///  - memory_total_bytes / memory_used_bytes: device/mem_info_vram_total,
///    mem_info_vram_used (bytes);
///  - architecture: the KFD topology node
///    (<root>/sys/class/kfd/kfd/topology/nodes/<n>/properties) whose
///    location_id equals bus << 8 | device << 3 | function and whose domain
///    (when the kernel prints one) equals the PCI domain; gfx_target_version
///    through amd_gfx_target_name();
///  - partitions: the number of KFD GPU nodes at the GPU's PCI location when
///    there are two or more (each compute partition is a KFD node with its
///    parent's location); else 0 (not partitioned, or unknown). xcp cards
///    that cannot be mapped this way (no KFD topology) are counted in a
///    warning and left out;
///  - utilization_percent: device/gpu_busy_percent;
///  - from device/hwmon/hwmon<k>/, sensors chosen by their label files:
///    temperature_c from the temp<i>_input (millidegrees C) labelled "edge",
///    else "junction", else "mem" (some boards, e.g. MI300X, have no edge
///    sensor); power_watts from power1_average, else power1_input (µW);
///    power_limit_watts from power1_cap (µW); sm_clock_mhz from the freq<i>
///    labelled "sclk", memory_clock_mhz from "mclk" (freq<i>_input, Hz);
///    fan_percent from fan1_input / fan1_max (RPM), else pwm1 / 255;
///  - ras_uncorrectable / ras_correctable: the "ue:" / "ce:" lines of
///    device/ras/umc_err_count; bad_vram_pages: the non-empty lines of
///    device/ras/gpu_vram_bad_pages;
///  - render_node "/dev/dri/renderD<M>": the <root>/sys/class/drm/renderD<M>
///    whose device has the same PCI_SLOT_NAME (never guessed from N);
///  - numa_node: device/numa_node (-1: absent);
///  - data_centre: an AMD Instinct board (model contains "Instinct", or
///    the device id is an Instinct one in the table);
///  - driver_version: the result's driver_version.
/// reset_status is left empty (the kernel log reader sets it).
amd_result read_amd_gpus(const std::string& root);

/// LLVM target name of a KFD gfx_target_version (major * 10000 + minor * 100
/// + stepping, minor and stepping as one hex digit each): 90402 ->
/// "gfx942", 90010 -> "gfx90a", 110000 -> "gfx1100", 110501 -> "gfx1151".
/// Empty for 0 (a CPU node) or a minor / stepping above 15.
std::string amd_gfx_target_name(uint64_t gfx_target_version);

/// Marketing name from the PCI device id, and the VRAM size where one id
/// covers several boards; empty when the table does not know it. The table:
///   0x74a1 AMD Instinct MI300X, 0x74a5 AMD Instinct MI325X,
///   0x74a0 AMD Instinct MI300A, 0x740f AMD Instinct MI210,
///   0x7408 AMD Instinct MI250X, 0x740c AMD Instinct MI250X/MI250,
///   0x738c and 0x738e AMD Instinct MI100,
///   0x744c: 24 GiB AMD Radeon RX 7900 XTX, 20 GiB AMD Radeon RX 7900 XT,
///           16 GiB AMD Radeon RX 7900 GRE,
///   0x7448 AMD Radeon PRO W7900.
/// VRAM is matched to the nearest GiB (the driver reports slightly less
/// than the nominal size); vram_bytes 0 means unknown, which matches only
/// the ids that need no size.
std::string amd_model_from_device_id(uint16_t device_id, uint64_t vram_bytes);

} // namespace astraeus
