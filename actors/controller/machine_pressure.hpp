#pragma once
/// @file
/// Whether a machine is under memory or disk pressure, judged from the facts
/// its agent reported. A machine under pressure takes no new work until it
/// recovers (shared/seeds/machines.md, "States"). The default thresholds
/// follow the kubelet's hard eviction signals (memory.available < 100Mi,
/// nodefs.available < 10%), plus the kernel's PSI for memory stalls.

#include <cstdint>
#include <string>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// Thresholds for pressure; all configurable in the controller's config.
struct pressure_thresholds {
  /// Memory pressure when MemAvailable is below this many bytes ...
  uint64_t memory_available_min_bytes = 100ull << 20;
  /// ... or below this percentage of MemTotal.
  double memory_available_min_percent = 5;
  /// Memory pressure when PSI "full avg10" for memory exceeds this percent.
  double memory_psi_full_avg10_max = 20;
  /// Disk pressure when a filesystem the machine works from ("/", "/var",
  /// "/var/lib", "/var/lib/astraeus", "/tmp") has less than this % free.
  double disk_free_min_percent = 10;
};

/// The verdict on one report.
struct pressure_verdict {
  bool memory = false;               ///< under memory pressure
  bool disk = false;                 ///< under disk pressure
  std::vector<std::string> reasons;  ///< one line each, e.g. "memory available 80 MiB < 100 MiB"
};

/// Judges `facts` against `limits`. Unknown values (0 totals) never count
/// as pressure.
pressure_verdict evaluate_pressure(const v1::HostFacts& facts,
                                   const pressure_thresholds& limits);

/// Human-readable byte count with binary units: "1.5 GiB", "512 MiB", "7 B".
std::string format_bytes(uint64_t bytes);

} // namespace astraeus
