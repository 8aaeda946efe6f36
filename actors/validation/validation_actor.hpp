#pragma once
/// @file
/// One validation (`val-YYYYMMDD-xxxxxx`) as a CAF actor: its steps per
/// (machine, check), one check at a time per machine (the slot its owner,
/// the validations actor, grants), each run as a run of the scheduler (a
/// host-process worker holding the machine's GPUs at the lowest priority),
/// stored with sync under "val/<id>" on every change. Handlers:
/// actors/interfaces.hpp (validation_actor). Logic: validation_plan.hpp.

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <caf/actor_clock.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/interfaces.hpp"
#include "messages/astraeus.pb.h"
#include "runtime/process/wall_clock.hpp"

namespace astraeus {

class Store;

/// Settings of a validation actor.
struct validation_config {
  /// The controller's store (family `validations`); required.
  std::shared_ptr<Store> store;
  /// Where its checks run as runs; required.
  scheduler_actor scheduler;
  /// Machines' GPU counts and latched faults are asked of it; required.
  cluster_actor cluster;
  /// Grants the machines' check slots and keeps the latest results.
  validations_actor owner;
  /// The program that runs a check (`validation.check_program`).
  std::string check_program = "astraeus-check";
  /// How often it looks at its steps (virtual in tests).
  caf::timespan poll_interval = std::chrono::milliseconds{500};
  /// Times users read (started, finished).
  std::shared_ptr<const wall_clock> clock = real_wall_clock();
  /// The validation, new or as stored.
  v1::Validation validation;
  /// Loaded after a controller restart: Running steps wait for their runs,
  /// which went on (validation_plan.hpp, resume); one whose run is gone runs
  /// again.
  bool resumed = false;
};

/// The state of a validation actor.
struct validation_state {
  /// Actor name for CAF.
  static inline const char* name = "validation";
  /// Its settings.
  validation_config config;
  /// The validation as it stands (also stored).
  v1::Validation v;
  /// Machines with a slot request, a submit or a run look-up in flight.
  std::set<std::string> busy;
  /// Machines of the validation the cluster no longer has (removed): their
  /// steps end at the next poll that finds them not busy.
  std::set<std::string> removed;
  /// A Running all-reduce step's expected bus bandwidth (GB/s) and each
  /// rank's GPUs, by step index, from its machines' views when it started
  /// (a restarted controller runs the step again, so they are not stored).
  std::map<int, double> all_reduce_expected;
  std::map<int, std::vector<uint32_t>> all_reduce_gpus;
  /// After a controller restart: the Running steps (by index) whose run has
  /// not been looked at since; the first look says whether it went on
  /// (kept) or was gone (the step runs again, `restarted` saying so).
  std::set<int> unconfirmed;
  /// Cancelled (`astra astraeus cancel`): its last copy is stored and told;
  /// it only removes the runs of submits answered late, then quits at
  /// `linger_until` (answers to requests it sent come within their 10 s).
  bool cancelled = false;
  caf::actor_clock::time_point linger_until;
};

/// The behaviour of a validation actor: it polls at once, then every
/// poll_interval, and quits once the validation has concluded (after
/// telling its owner).
validation_actor::behavior_type
validation_behavior(validation_actor::stateful_pointer<validation_state> self,
                    validation_config config);

/// The principal the validations use for their requests to the cluster.
v1::Principal validation_principal();

/// Issue 21 rule: the quick check also fails on what only the controller
/// knows: a latched fault on one of the machine's GPUs (health Faulty) adds
/// a fail finding with the fix and makes the verdict fail.
void combine_quick(v1::ValidationStep& step, const v1::GpuList& gpus);

} // namespace astraeus
