#pragma once
/// @file
/// The copies check (issue 21): host-to-device and device-to-host (pinned)
/// bandwidth, device-local copy and peer copy per GPU, through the CUDA
/// driver API (cuMemcpy*Async timed by cuEvent*). Host copies are judged
/// against the PCIe link they cross (the link's raw rate at its maximum
/// width and speed x copies.pcie_efficiency: Gen5 x16 -> 48 GB/s, Azure's
/// anchor), peer copies over NVSwitch against copies.nvswitch_floor_gbs
/// (335 GB/s), and every figure against the machine's best GPU
/// (copies.peer_fraction). A finding's fix names the link as it trained
/// under load ("reseat GPU ... or check its riser; its link trained at Gen4
/// x8").

#include <optional>
#include <string>
#include <vector>

#include "runtime/host/pci_link.hpp"
#include "runtime/validation/check_options.hpp"
#include "runtime/validation/check_result.hpp"

namespace astraeus::validation {

/// What was measured on one GPU, in GB/s (10^9 bytes per second).
struct copy_figures {
  std::string gpu;          ///< UUID (else PCI address)
  std::string pci_address;  ///< 0000:3b:00.0
  std::optional<double> h2d, d2h, d2d;
  /// The peer copy to the next GPU (ordinal + 1, wrapping), when there is one.
  std::optional<double> peer;
  std::string peer_gpu;     ///< the GPU copied to
  bool nvswitch = false;    ///< both GPUs reach each other over NVSwitch (NVML)
  /// The PCIe link read during the host copies (current = trained under load).
  pci_link link;
};

/// The floor of a host copy over `link` (GB/s): raw rate at the link's
/// maximum width and speed x `t.copies_pcie_efficiency`; nullopt when the
/// maximum is unknown.
std::optional<double> host_copy_floor(const pci_link& link, const thresholds& t);

/// Judges the figures (no I/O): see the file comment. One finding per GPU
/// and figure: below the floor fails, within the warn margin or below the
/// best GPU x copies.peer_fraction warns.
void judge_copies(const std::vector<copy_figures>& gpus, const thresholds& t, check_result& out);

/// Runs the copies check: loads `o.cuda_lib`, measures every GPU in turn
/// (so GPUs behind one PCIe switch do not share it), judges. A CUDA error
/// is a fail finding naming the call; no CUDA driver: fail. Never throws.
check_result run_copies(const check_options& o);

}  // namespace astraeus::validation
