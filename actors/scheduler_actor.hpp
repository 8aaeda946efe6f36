#pragma once
/// @file
/// The scheduler actor: keeps every run (store family `runs`, key = run
/// name, value = `v1::Run`) and places waiting runs onto concrete GPUs with
/// the placement engine (actors/placement.hpp): one `placement_index` fed
/// from machine snapshots (`v1::SchedulerMachine`) and one `scheduler_queue`.
///
/// - A schedule pass runs after every submit, snapshot, completion and
///   delete, with `now` from the actor clock (virtual in tests). Placed runs
///   are stored with sync before any answer.
/// - Waiting runs carry the engine's waiting reason.
/// - At start every stored run is loaded: waiting runs queue again in their
///   submission order; placed runs re-adopt their GPUs as soon as the
///   snapshots of their machines name them (each GPU is held for the run
///   the moment it appears, so no new run can take it meanwhile).
/// Not wired to the machine actors or the CLI yet.

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/interfaces.hpp"
#include "actors/placement.hpp"
#include "messages/astraeus.pb.h"

namespace astraeus {

class Store;

/// The run states (`v1::Run.state`).
namespace run_state {
inline constexpr const char* waiting = "Waiting";
inline constexpr const char* placed = "Placed";
inline constexpr const char* running = "Running";
inline constexpr const char* stopping = "Stopping";
inline constexpr const char* stopped = "Stopped";
inline constexpr const char* failed = "Failed";
} // namespace run_state

/// Validated settings of the scheduler actor.
struct scheduler_config {
  /// The controller's store; required.
  std::shared_ptr<Store> store;
  /// Options of the placement engine.
  placement_options placement;
  /// Options of the queue.
  queue_options queue;

  /// Errors: ec::invalid_config when the store is missing.
  caf::error validate() const;
};

/// A stored placed run whose GPUs are not all known yet (after a restart):
/// the GPUs that appeared are held piecewise until every one is there.
struct run_restore {
  /// GPU ids not held yet.
  std::set<std::string> missing;
  /// Holds on the GPUs that appeared so far.
  std::vector<allocation_id> pieces;
};

/// The state of the scheduler actor.
struct scheduler_state {
  /// Actor name for CAF.
  static inline const char* name = "scheduler";
  /// Settings, validated at spawn.
  scheduler_config config;
  /// The machines and GPUs. Declared before `queue`, which refers to it.
  std::unique_ptr<placement_index> index;
  /// The waiting and running runs.
  std::unique_ptr<scheduler_queue> queue;
  /// Every run by name.
  std::map<std::string, v1::Run> runs;
  /// Placed runs still re-adopting their GPUs after a restart.
  std::map<std::string, run_restore> restoring;
};

/// The scheduler actor's behaviour (handlers: actors/interfaces.hpp).
scheduler_actor::behavior_type
scheduler(scheduler_actor::stateful_pointer<scheduler_state> self,
          scheduler_config config);

/// The engine's request for a run spec: groups in rank order (leader group
/// first), `pool` and `labels` as required labels, healthy_only, time limit.
placement_request placement_request_of(const v1::RunSpec& spec);

/// The engine's machine for a snapshot. Health words as `parse_gpu_health`
/// reads them (empty = Healthy). Errors: ec::invalid_request for an unknown
/// health word or an NVLink peer index out of range.
caf::expected<machine_spec> machine_spec_of(const v1::SchedulerMachine& m);

} // namespace astraeus
