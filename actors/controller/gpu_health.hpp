#pragma once
/// @file
/// A GPU's health as the scheduler acts on it (shared/seeds/gpus.md,
/// "Health", "At risk", "Used outside Astraeus"; machines.md, "GPU health"):
/// - `Faulty`: a fault is latched on its machine (fenced: never assigned),
///   or it does not answer its driver (`lost`, `unresponsive`,
///   `unavailable`: "unresponsive: <why>"; never "Healthy (unresponsive)");
/// - `Foreign`: more than 10 % of its memory in use while Astraeus has not
///   assigned it (not assigned until freed);
/// - `AtRisk`: over the last 24 h more than 50 correctable memory errors,
///   more than 100 PCIe replays, more than 10 NVLink errors, or more than
///   10 minutes slowed down by heat; or 87 °C or more now; or a memory row
///   waiting to be remapped; or an Xid the policy marks at-risk (avoided
///   while healthy GPUs are free; never for `healthy_only`);
/// - `Healthy` otherwise.
/// Historical scars that were repaired (aggregate ECC counts, retired pages,
/// some NVLink links down) count for nothing.

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "messages/astraeus.pb.h"
#include "messages/gpu_health_state.hpp"

namespace astraeus {

/// The seed's thresholds.
struct health_thresholds {
  uint64_t correctable_ecc_24h = 50;          ///< more than this -> AtRisk
  uint64_t pcie_replays_24h = 100;            ///< more than this -> AtRisk
  uint64_t nvlink_errors_24h = 10;            ///< more than this -> AtRisk
  std::chrono::seconds thermal_slowdown_24h{600};  ///< more than this -> AtRisk
  double temperature_c = 87;                  ///< this or more -> AtRisk
  double foreign_memory_percent = 10;         ///< more than this, unassigned -> Foreign
  std::chrono::hours window{24};              ///< the look-back window
};

/// Counter samples of one GPU over the look-back window.
class gpu_health_history {
public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Adds the counters of `gpu` read at `now` and forgets samples that fell
  /// out of `window` (one older sample is kept as the baseline).
  void add(const v1::Gpu& gpu, time_point now, std::chrono::hours window);

  /// Growth of each counter within the window: the sum of increases between
  /// consecutive samples (a counter that went down, e.g. after a driver
  /// reload, restarts from its new value).
  uint64_t correctable_ecc() const;
  uint64_t pcie_replays() const;
  uint64_t nvlink_errors() const;
  /// Time spent slowed down by heat within the window (between a sample
  /// that said so and the next).
  std::chrono::seconds thermal_slowdown() const;
  /// Samples kept (runs of equal samples keep their first and last only).
  size_t size() const {
    return samples_.size();
  }

private:
  struct sample {
    time_point at;
    std::optional<uint64_t> ecc, replays, nvlink;
    bool thermal = false;
  };
  uint64_t growth(std::optional<uint64_t> sample::*field) const;
  std::deque<sample> samples_;
  time_point window_start_{};
};

/// Health and why.
struct health_verdict {
  gpu_health health = gpu_health::healthy; ///< Healthy | AtRisk | Faulty | Foreign
  std::vector<std::string> reasons;        ///< of the health shown
};

/// Judges one GPU: its facts (with latches and incidents), its history,
/// whether Astraeus assigned it, and `now_unix_ms` for the incidents'
/// 24 h window.
health_verdict evaluate_health(const v1::Gpu& gpu,
                               const gpu_health_history& history,
                               bool assigned, int64_t now_unix_ms,
                               const health_thresholds& limits = {});

} // namespace astraeus
