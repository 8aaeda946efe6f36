#pragma once
/// @file
/// The GPU history actor: one per controller. It keeps every GPU's history
/// in a `gpu_history_book` (actors/controller/gpu_history_book.hpp), fed by
/// the machine actors after each report, answers `get_gpu_history`
/// requests for the cluster, and every flush interval compacts the tiers
/// and writes what changed to the store in one batch (family
/// `gpu_history`, no fsync: a crash loses at most one interval of history).
/// At start it loads what the store kept, so a restart keeps the history.

#include <chrono>
#include <memory>

#include <caf/error.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/controller/gpu_history_book.hpp"
#include "actors/interfaces.hpp"
#include "runtime/process/wall_clock.hpp"

namespace astraeus {

class Store;

/// Validated settings of the GPU history actor.
struct gpu_history_config {
  /// Where the history is kept; null keeps it in memory only (benchmarks).
  std::shared_ptr<Store> store;
  /// The wall clock the tiers' windows are measured on (samples carry the
  /// machine actor's wall-clock report times).
  std::shared_ptr<const wall_clock> clock = real_wall_clock();
  /// How often the tiers are compacted and changes written (actor clock; > 0).
  caf::timespan flush_interval = std::chrono::seconds{10};
  /// The tiers' windows and caps.
  gpu_history_limits limits;

  /// Errors: ec::invalid_config when the clock is null, the interval <= 0,
  /// or the limits are bad (gpu_history_limits::validate).
  caf::error validate() const;
};

/// The state of the GPU history actor.
struct gpu_history_state {
  /// Actor name for CAF and logs.
  static inline const char* name = "gpu-history";
  /// Settings, validated at spawn.
  gpu_history_config config;
  /// Every GPU's tiers and the store changes not written yet.
  gpu_history_book book;
  /// Whether the last write failed (logged once until one succeeds).
  bool write_failing = false;
};

/// The GPU history actor's behaviour (handlers: actors/interfaces.hpp).
/// Loads the stored history first (a store that cannot be read is logged
/// and the history starts empty); quits with the error on a bad config.
/// On exit it writes what is pending.
gpu_history_actor::behavior_type
gpu_history(gpu_history_actor::stateful_pointer<gpu_history_state> self,
            gpu_history_config config);

/// Writes `self`'s pending changes in one batch now (also what the flush
/// timer does, after compacting). Errors: the store's; the changes then stay
/// pending for the next flush.
caf::error flush_gpu_history(gpu_history_state& st);

} // namespace astraeus
