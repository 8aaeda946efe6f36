#pragma once
/// @file
/// NVIDIA GPU discovery through NVML, loaded with dlopen at run time.
///
/// There is no link-time dependency on NVML and no nvml.h: runtime/gpu/nvml_abi.hpp
/// declares the few C types and function signatures it uses, matching
/// NVML's public ABI. The library path is configurable, so tests load a
/// stand-in libnvidia-ml.so built from a JSON fixture through the same code
/// (see DESIGN.md, "Host access, and how tests reach it").
///
/// Every NVML call runs on a worker thread and is waited for with a
/// deadline. A GPU whose call does not return in time is reported
/// "unresponsive" and its worker is left behind (detached): no other thread
/// is started for that GPU until the stuck call returns, and on the passes
/// in between the GPU is reported unresponsive at once. A hang in
/// nvmlInit_v2 or another driver-wide call makes the whole driver
/// unresponsive. The caller is never blocked past one deadline per GPU call
/// in flight (GPUs are read in parallel, one worker each).
///
/// Nothing here throws out of nvml_prober::probe(); bad values from the
/// library leave fields unknown (absent) rather than failing the pass.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// How the NVIDIA prober finds and calls NVML.
struct nvml_options {
  /// Library to dlopen: a file name searched the usual way, or a path.
  std::string library = "libnvidia-ml.so.1";
  /// How long one NVML call may take before its GPU (or, for init, device
  /// count and system-wide calls, the driver) is reported unresponsive.
  std::chrono::milliseconds call_deadline{2000};
  /// Prefix of /sys paths (the NUMA node fallback reads
  /// <sysfs_root>/sys/bus/pci/devices/<address>/numa_node); "/" reads this
  /// machine.
  std::string sysfs_root = "/";
};

/// What one pass over NVML found.
struct nvml_result {
  /// State of the driver as a whole.
  enum class driver_status {
    ok,            ///< NVML answered; `gpus` lists every GPU it reported.
    not_loaded,    ///< The library could not be loaded, or lacks a required
                   ///< symbol (no NVIDIA driver installed, typically).
    init_failed,   ///< nvmlInit_v2, or the device count, returned an error.
    unresponsive,  ///< nvmlInit_v2 or another driver-wide call hung.
  };
  /// How the pass went for the driver as a whole; `gpus` is empty unless ok.
  driver_status status = driver_status::not_loaded;
  /// Why, when status is not ok, e.g. "dlopen libnvidia-ml.so.1:
  /// libnvidia-ml.so.1: cannot open shared object file: No such file or
  /// directory", "nvmlInit_v2 returned NVML_ERROR_DRIVER_NOT_LOADED (9)",
  /// "nvmlInit_v2 did not return within 2000 ms". Empty when ok.
  std::string detail;
  /// nvmlSystemGetDriverVersion, e.g. "550.54.15"; empty when unknown.
  std::string driver_version;
  /// The newest CUDA version the driver supports, "12.4"; empty when unknown.
  std::string cuda_version;
  /// One entry per GPU NVML reports, in NVML index order. vendor "nvidia";
  /// status "ok", "unresponsive" (status_detail names the call and the
  /// deadline) or "lost" (NVML_ERROR_GPU_IS_LOST, or no handle could be
  /// had for the index; status_detail names the call). A field NVML could
  /// not give is absent; when that is not simply because the GPU lacks the
  /// feature (NVML_ERROR_NOT_SUPPORTED), unknown_fields has a line
  /// "<field>: <why>", e.g. "row_remapping: nvmlDeviceGetRemappedRows not
  /// in this driver". Units: bytes, watts, MHz, degrees Celsius, percent.
  std::vector<v1::Gpu> gpus;
};

/// Reads the machine's NVIDIA GPUs through NVML.
///
/// Keeps the library loaded and initialised between passes (and retries
/// loading / nvmlInit_v2 on the next pass when they failed, so GPUs appear
/// once the driver loads). probe() may be called from one thread at a time;
/// the prober may be destroyed while a call is stuck: the stuck thread is
/// left to finish on its own and the library is then never unloaded.
class nvml_prober {
 public:
  /// Loads nothing yet; the first probe() loads the library.
  explicit nvml_prober(nvml_options opts = {});
  /// Stops the idle workers, calls nvmlShutdown (with the deadline) and
  /// unloads the library unless a call is still stuck. Never blocks past
  /// one deadline.
  ~nvml_prober();
  nvml_prober(const nvml_prober&) = delete;
  nvml_prober& operator=(const nvml_prober&) = delete;

  /// One pass: every GPU's identity, metrics, errors and links. Never
  /// throws. Takes about as long as the slowest GPU's reads, and at most
  /// (reads before the hang + one call_deadline) for a GPU that hangs.
  nvml_result probe();

  /// Diagnostics: how many worker threads this prober has started so far
  /// (one for the driver-wide calls plus one per GPU, and one more each
  /// time a worker that hung came back and was replaced).
  std::size_t threads_started() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Helpers of the NVIDIA prober, public so other readers (nvidia-smi, the
/// PCI bus scan) agree with it.
namespace nvml {

/// "00000000:3B:00.0" (NVML's busId), "0000:3b:00.0" or "3b:00.0" ->
/// "0000:3b:00.0": lower case, a 4-digit domain (a domain over 0xffff is
/// kept whole, without leading zeros). Empty when `text` is not a PCI
/// address. The one PCI-address normaliser: normalize_pci_bus_id
/// (nvidia_smi.hpp) is this with the domain required.
std::string normalise_pci_address(std::string_view text);

/// Architecture name of an NVIDIA compute capability (the one table of
/// them; nvidia-smi's compute_cap goes through it too): 3.x kepler, 5.x
/// maxwell, 6.x pascal, 7.0 and 7.2 volta, 7.5 turing, 8.0/8.6/8.7 ampere,
/// 8.9 ada, 9.x hopper, 10.x to 12.x blackwell; empty when not known.
std::string architecture_from_compute_capability(int major, int minor);

/// Whether an NVIDIA model name (NVML's or nvidia-smi's) is a data-centre
/// board: the one table of them. Matches, case-insensitively, a word of the
/// name (words split at spaces, '-', '_' and '/') that is "Tesla" (every
/// Tesla-branded board, "Tesla K80" too), or that starts with one of these
/// families and does not continue with a digit: H100 H200 H800 H20 GH200
/// A100 A800 A30 A40 A10 A16 A2 L40 L20 L4 B100 B200 B300 GB200 GB300 V100
/// T4 P100 P40 P4. So "NVIDIA H100 80GB HBM3", "NVIDIA A10G", "NVIDIA L40S",
/// "Tesla V100-SXM2-32GB" match; "NVIDIA RTX A4000", "NVIDIA RTX A2000",
/// "NVIDIA GeForce RTX 4090" and "" do not.
bool is_data_centre_model(std::string_view name);

/// CUDA driver version as NVML gives it (1000 * major + 10 * minor) ->
/// "major.minor": 12040 -> "12.4". Empty when not positive.
std::string cuda_version_text(int version);

/// "ok", "not_loaded", "init_failed" or "unresponsive".
std::string_view driver_status_name(nvml_result::driver_status status);

}  // namespace nvml
}  // namespace astraeus
