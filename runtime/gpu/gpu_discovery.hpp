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
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "messages/astraeus.pb.h"
#include "runtime/gpu/nvml.hpp"
#include "runtime/host/pci_bus.hpp"
#include "store/store.hpp"

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
  /// The agent's store: the last known NVIDIA GPUs' identities
  /// (gpu_identity()) are kept there, in family `gpus` under
  /// known_nvidia_gpus_key, so an agent restarted while the driver is gone
  /// still lists them as `unavailable`. Null: kept in memory only.
  std::shared_ptr<Store> store;
};

/// The key, in family `gpus` of the agent's store, of the last known NVIDIA
/// GPUs: a v1::GpuSection whose `gpus` hold gpu_identity() of each GPU of
/// the last pass where the driver (NVML or nvidia-smi) listed GPUs. Written
/// only when that list changes; erased when NVML answers with no GPU.
inline constexpr std::string_view known_nvidia_gpus_key = "known-nvidia-gpus";

/// The facts of `gpu` that stay true while its driver is gone, kept to list
/// it when it stops answering: id, vendor, model, index, pci_address,
/// numa_node, memory_total_bytes, architecture, compute_capability,
/// data_centre, serial, vbios_version. Readings (memory used, temperature,
/// errors, links), status and unknown_fields are left out: they would be
/// stale.
v1::Gpu gpu_identity(const v1::Gpu& gpu);

/// Runs discovery passes; keeps NVML loaded and the last known GPUs between
/// passes (and, with a store, across restarts). One thread at a time.
class gpu_discovery {
public:
  /// Loads nothing yet, except the last known NVIDIA GPUs from
  /// `opts.store` (a record that cannot be read is logged and ignored).
  explicit gpu_discovery(gpu_discovery_options opts);
  ~gpu_discovery();

  /// One pass. `rdma_up`: the machine has an active InfiniBand/RoCE port
  /// (from its host facts), for the capability summary. Never throws;
  /// takes at most about one NVML deadline longer than the reads.
  v1::GpuSection discover(bool rdma_up);

private:
  gpu_discovery_options opts_;
  std::unique_ptr<nvml_prober> nvml_;
  /// Replaces the last known NVIDIA GPUs by the identities of `gpus` (those
  /// with an id), and writes them to the store when they changed.
  void keep_nvidia(const std::vector<v1::Gpu>& gpus);

  /// Gives the NVIDIA GPUs the driver listed without a UUID (lost or hung
  /// before it told it) what is known of them: the last known GPU at the
  /// same PCI address, else at the same index (id, model, address, NUMA
  /// node, memory); else, for GPUs without an address, the nvidia-bound
  /// devices of `bus` no listed GPU has, in PCI order, when there are as
  /// many. An id still unknown is the PCI address.
  void fill_identities(std::vector<v1::Gpu>& gpus, const bus_scan& bus) const;

  /// The last known NVIDIA GPUs NVML no longer lists (neither their id nor
  /// their address): status `lost`, detail "missing from NVML: on PCI at
  /// <address>" (or "... and from the PCI bus"), so they stay listed and the
  /// fault latches fence them.
  std::vector<v1::Gpu> vanished_since_last(const std::vector<v1::Gpu>& listed,
                                           const bus_scan& bus) const;

  /// Logs `text` at warning level unless it was logged before.
  void warn_once(const std::string& text);

  /// Identities (gpu_identity()) of the NVIDIA GPUs of the last pass where
  /// the driver answered, or of the store's record until then.
  std::vector<v1::Gpu> last_nvidia_;
  /// Unknown-field reasons already logged (each is logged once).
  std::set<std::string> logged_;
};

/// The "GPU counts agree" condition, false (reason GPUCountMismatch), when
/// the NVIDIA GPUs on the PCI bus, those bound to the nvidia driver and
/// those NVML listed (`nvml_count`) disagree, naming which GPU is missing
/// where; nullopt when they agree or the bus shows no NVIDIA GPU.
std::optional<v1::Condition> count_mismatch(const bus_scan& bus, const v1::GpuSection& section,
                                            size_t nvml_count);

/// The capability summary of `gpus` (vendor, model, architecture, count,
/// driver, data-centre, NVLink, NVSwitch fabric, NVLink domain). The model
/// is the most common one; GPUs whose model is not known count in `count`
/// but not in the model or the data-centre check (data_centre: every GPU
/// with a model is a data-centre board, and at least one has a model).
v1::GpuCapabilities summarise_gpus(const std::vector<v1::Gpu>& gpus);

} // namespace astraeus
