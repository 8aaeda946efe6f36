#pragma once
/// @file
/// The burn-in (issue 21; seed bring-up-a-gpu-cluster.md, step 3): every
/// GPU runs the handwritten PTX kernel (burn_kernel.hpp) through the CUDA
/// driver API for the burn's duration (10 min by default) while NVML is
/// watched (nvml_watch.hpp). Fails on an Xid or a CUDA error, on wrong
/// results, on a GPU more than 10 % slower than its peers at equal clocks
/// (work per MHz below burn.peer_fraction x the best), or on clocks held
/// back for reasons other than power and thermal limits.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/validation/check_options.hpp"
#include "runtime/validation/check_result.hpp"

namespace astraeus::validation {

/// NVML clock-event reason bits (nvmlClocksEventReason*).
namespace clock_reason {
inline constexpr uint64_t gpu_idle = 0x1;
inline constexpr uint64_t applications_clocks = 0x2;
inline constexpr uint64_t sw_power_cap = 0x4;
inline constexpr uint64_t hw_slowdown = 0x8;
inline constexpr uint64_t sync_boost = 0x10;
inline constexpr uint64_t sw_thermal = 0x20;
inline constexpr uint64_t hw_thermal = 0x40;
inline constexpr uint64_t hw_power_brake = 0x80;
inline constexpr uint64_t display_clocks = 0x100;
/// The reasons a burn-in accepts: power cap, thermal slowdown (software
/// and hardware), sync boost and idle (between launches).
inline constexpr uint64_t allowed = gpu_idle | sw_power_cap | sync_boost | sw_thermal | hw_thermal;
}  // namespace clock_reason

/// "HW slowdown, HW power brake" for the bits of `reasons`.
std::string clock_reason_text(uint64_t reasons);

/// What one GPU did during the burn-in.
struct burn_figures {
  std::string gpu;                 ///< UUID (else PCI address)
  std::optional<double> tflops;    ///< FP32 work rate, 10^12 operations per second
  std::optional<double> mean_sm_clock_mhz;
  std::optional<double> max_temperature_c;
  std::optional<double> mean_power_w;
  uint64_t reasons_seen = 0;       ///< OR of the clock-event reasons sampled
  std::vector<uint64_t> xids;      ///< Xids NVML reported for this GPU
  std::string cuda_error;          ///< the first CUDA error, named; empty when none
  bool wrong_results = false;      ///< a pass wrote other values than the first
  uint64_t launches = 0;
};

/// Judges the figures (no I/O). `watch_problem`: why NVML could not be
/// watched (a warn finding), empty when it was.
void judge_burn(const std::vector<burn_figures>& gpus, const std::string& watch_problem,
                const thresholds& t, check_result& out);

/// Runs the burn-in for `o.duration` (else burn.duration_s).
check_result run_burn(const check_options& o);

}  // namespace astraeus::validation
