#pragma once
/// @file
/// What the nvidia-smi fallback reads from `nvidia-smi -q` beyond the
/// `--query-gpu` columns (issue 18, rule 6: parity with the NVML path): the
/// GPU's recovery action, so a GPU that needs a reset is fenced as on the
/// NVML path (runtime/faults/fault_latch.cpp, confirmed_by_driver).
///
/// Source of the field: `nvidia-smi -q` prints, per GPU section (a line
/// "GPU 00000000:3B:00.0"), a line "GPU Recovery Action : <None | Reset |
/// Reboot | Drain P2P | Drain and Reset>" (r550 and later), the words of
/// NVML's nvmlDeviceGpuRecoveryAction_t (NVIDIA's NVML API reference,
/// "GPU Recovery Action"; cuda-python's cuda.bindings.nvml.
/// DeviceGpuRecoveryAction lists the same values 0-7). `--query-gpu` has no
/// such column, hence `-q`.

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// The NVML recovery action (0 none, 1 GPU reset, 2 node reboot, 3 drain
/// P2P, 4 drain and reset, 5 recover IMEX domain, 6 bus reset, 7 system
/// reboot) for nvidia-smi's word: "None", "Reset" / "GPU Reset", "Reboot" /
/// "Node Reboot", "Drain P2P", "Drain and Reset" / "Drain P2P and Reset",
/// "Recover IMEX Domain", "Bus Reset", "System Reboot" (any case); nullopt
/// for anything else ("N/A", "[Unknown Error]").
std::optional<uint32_t> recovery_action_from_word(std::string_view word);

/// Applies `nvidia-smi -q` output to `gpus` (matched by PCI address,
/// "GPU 00000000:3B:00.0" -> "0000:3b:00.0"): sets `recovery_action`; a
/// value nvidia-smi cannot read ("[Unknown Error]") adds
/// "recovery_action: Unknown Error" to the GPU's `unknown_fields` (three
/// reports in a row make it at risk: actors/controller/gpu_read_errors.hpp).
/// Returns how many GPUs got a recovery action. Pure.
size_t apply_nvidia_smi_query(std::string_view text, std::vector<v1::Gpu>& gpus);

} // namespace astraeus
