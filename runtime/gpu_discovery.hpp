#pragma once
/// @file
/// One GPU discovery pass on the agent: NVIDIA through NVML (nvidia-smi where
/// NVML cannot be loaded), AMD from the amdgpu driver's sysfs, and the PCI
/// bus for GPUs no driver reports. It decides how the GPUs were read
/// (`driver: healthy`, `nvidia-smi`, `no-gpu`, `unresponsive`, `unavailable`),
/// keeps the last known GPUs when they stop answering, and sets the machine's
/// GPU conditions and capability summary.
/// Source: shared/seeds/gpus.md ("How GPUs are found", "The machine's GPU
/// conditions"), shared/seeds/machines.md ("What it reports").

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "messages/astraeus.pb.h"
#include "runtime/nvml.hpp"

namespace astraeus {

/// Where discovery looks.
struct gpu_discovery_options {
  /// Prefix for /sys, /proc, /dev and /opt reads; "/" on a real machine.
  std::string root = "/";
  /// NVML library path and per-call deadline.
  nvml_options nvml;
  /// The nvidia-smi program used where NVML cannot be loaded.
  std::string nvidia_smi = "nvidia-smi";
  /// How long nvidia-smi may run.
  std::chrono::milliseconds nvidia_smi_deadline{10000};
};

/// Runs discovery passes; keeps NVML loaded and the last known GPUs between
/// passes. One thread at a time.
class gpu_discovery {
public:
  /// Loads nothing yet.
  explicit gpu_discovery(gpu_discovery_options opts);
  ~gpu_discovery();

  /// One pass. `rdma_up`: the machine has an active InfiniBand/RoCE port
  /// (from its host facts), for the capability summary. Never throws;
  /// takes at most about one NVML deadline longer than the reads.
  v1::GpuSection discover(bool rdma_up);

private:
  gpu_discovery_options opts_;
  std::unique_ptr<nvml_prober> nvml_;
  /// NVIDIA GPUs of the last pass where the driver answered.
  std::vector<v1::Gpu> last_nvidia_;
  /// Unknown-field reasons already logged (each is logged once).
  std::set<std::string> logged_;
};

/// The capability summary of `gpus` (vendor, model, architecture, count,
/// driver, data-centre, NVLink, NVSwitch fabric, NVLink domain).
v1::GpuCapabilities summarise_gpus(const std::vector<v1::Gpu>& gpus);

} // namespace astraeus
