#pragma once
/// @file
/// The quick check (seed bring-up-a-gpu-cluster.md, step 2; issue 21):
/// driver loaded and answering, every NVIDIA GPU on the PCI bus seen by
/// NVML, NVML answering within its deadline, a valid NVIDIA CDI spec for
/// exactly these GPUs, and each GPU's PCIe link at its maximum width and
/// speed. Reuses the agent's readers: the PCI bus scan (runtime/host), the
/// NVML prober (runtime/gpu), the CDI registry (runtime/workers).
/// Latched faults live in the agent's store and are judged by the
/// controller, not here.

#include <string>
#include <vector>

#include "messages/astraeus.pb.h"
#include "runtime/host/pci_bus.hpp"
#include "runtime/host/pci_link.hpp"
#include "runtime/validation/check_options.hpp"
#include "runtime/validation/check_result.hpp"

namespace astraeus::validation {

/// One NVIDIA GPU's PCIe link with its name for findings.
struct gpu_link {
  std::string gpu;          ///< UUID when NVML gave one, else the PCI address
  std::string pci_address;  ///< 0000:3b:00.0
  pci_link link;
};

/// Judges the PCIe links (no I/O): per GPU a measurement of width and of
/// speed; width below quick.link_width_fraction x max: fail with a fix
/// naming the GPU and how its link trained ("reseat GPU ... or check its
/// riser and slot; its link trained at Gen4 x8, its maximum is Gen5 x16");
/// speed below max: warn (an idle GPU may lower it), folded into the fail
/// finding when the width is short too. Unknown values are
/// not judged.
void judge_links(const std::vector<gpu_link>& links, const thresholds& t, check_result& out);

/// Runs the quick check on this machine (or the fixture under
/// `o.host_root`). Never throws; what cannot be read is a finding.
check_result run_quick(const check_options& o);

}  // namespace astraeus::validation
