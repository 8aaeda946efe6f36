#pragma once
/// @file
/// What the burn-in watches through NVML while it runs: each GPU's SM
/// clock, temperature, power and clock-event (throttle) reasons, and Xid
/// events (nvmlEventSetWait_v2 with nvmlEventTypeXidCriticalError). Loads
/// NVML with dlopen through the prober's ABI table (runtime/gpu/nvml_abi.hpp).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

namespace astraeus::validation {

/// One reading of one GPU.
struct gpu_sample {
  std::string uuid;
  std::optional<double> sm_clock_mhz;
  std::optional<double> temperature_c;
  std::optional<double> power_w;
  /// nvmlClocksEventReason* bits; absent when NVML does not give them.
  std::optional<uint64_t> reasons;
};

/// An Xid event.
struct xid_event {
  std::string uuid;  ///< the GPU's UUID; empty when NVML did not name the device
  uint64_t xid = 0;
};

/// NVML opened for watching. One thread at a time.
class nvml_watch {
public:
  /// Loads `library`, initialises NVML and registers every GPU for Xid
  /// events (where the driver offers events). Errors: ec::host_read_failure
  /// naming dlopen or the NVML call that failed.
  static caf::expected<std::unique_ptr<nvml_watch>> open(const std::string& library);
  ~nvml_watch();
  nvml_watch(const nvml_watch&) = delete;
  nvml_watch& operator=(const nvml_watch&) = delete;

  /// One reading of every GPU.
  std::vector<gpu_sample> sample();

  /// Waits up to `timeout_ms` for Xid events; returns those that came
  /// (empty on timeout, or at once when events are not supported).
  std::vector<xid_event> wait_xids(unsigned timeout_ms);

  /// Whether Xid events are watched (the driver offers them).
  bool watching_xids() const;

private:
  struct impl;
  explicit nvml_watch(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace astraeus::validation
