#pragma once
/// @file
/// `GET /metrics`: the Prometheus text format (version 0.0.4), written by
/// hand (a few dozen lines; prometheus-cpp would add a registry we would
/// refill from the view on every scrape).
///
/// GPU series carry dcgm-exporter's names and labels, so its Grafana
/// dashboards work unchanged: DCGM_FI_DEV_GPU_UTIL (%), _FB_USED and _FB_FREE
/// (MiB), _GPU_TEMP (C), _POWER_USAGE (W), _SM_CLOCK and _MEM_CLOCK (MHz),
/// _XID_ERRORS (the last Xid), _PCIE_REPLAY_COUNTER, _ECC_SBE_VOL_TOTAL,
/// _ECC_DBE_VOL_TOTAL, _CORRECTABLE_REMAPPED_ROWS,
/// _UNCORRECTABLE_REMAPPED_ROWS, _ROW_REMAP_FAILURE,
/// _NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL; labels gpu, UUID, pci_bus_id
/// (00000000:3B:00.0), device (nvidiaN), modelName, Hostname. A value the
/// agent could not read is left out, never written as 0.
///
/// Beyond dcgm-exporter: astraeus_gpu_health{health} (1 for the GPU's
/// health), astraeus_gpu_held{holder} (held GPUs only),
/// astraeus_gpu_latched_faults, astraeus_machine_state{machine,state},
/// astraeus_machine_cordoned, astraeus_machine_connected (gate sessions),
/// astraeus_scheduler_runs{state}, astraeus_scheduler_waiting_runs and
/// astraeus_api_view_index.

#include <string>

namespace astraeus {

struct api_view;

/// The Prometheus text of `view`; with `machine` set, of that machine's
/// GPUs and state only (`/metrics?machine=NAME`, what dcgm-exporter on that
/// machine would serve).
std::string render_prometheus_metrics(const api_view& view, const std::string& machine = {});

/// As above, appended to `out` (whose capacity is reused: a buffer kept
/// from an earlier render costs no page faults).
void render_prometheus_metrics(std::string& out, const api_view& view,
                               const std::string& machine = {});

/// A label value escaped for the text format (\\, \" and \n).
std::string prometheus_escape(const std::string& value);

/// dcgm-exporter's spelling of a PCI address: "0000:3b:00.0" ->
/// "00000000:3B:00.0".
std::string dcgm_pci_bus_id(const std::string& pci_address);

} // namespace astraeus
