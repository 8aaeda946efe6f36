#pragma once
/// @file
/// The GPU actor: one per GPU on the controller, spawned by its machine
/// actor. It holds the GPU's last reported facts, its health (`Healthy`,
/// `AtRisk`, `Faulty`, `Foreign`, with reasons) and the worker that holds it.
/// Source: shared/DESIGN.md ("Actors"), shared/seeds/gpus.md ("Health").

#include <cstdint>
#include <string>
#include <vector>

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/controller/gpu_health.hpp"
#include "actors/controller/gpu_read_errors.hpp"
#include "actors/interfaces.hpp"
#include "messages/astraeus.pb.h"
#include "runtime/process/wall_clock.hpp"

namespace astraeus {

/// The state of one GPU actor.
struct gpu_state {
  /// Actor name for CAF.
  static inline const char* name = "gpu";
  /// The machine it is in.
  std::string machine;
  /// The last facts reported.
  v1::Gpu facts;
  /// Wall-clock time of the last facts, Unix ms.
  int64_t last_seen_unix_ms = 0;
  /// Whether its machine is Up.
  bool machine_up = false;
  /// The worker holding it; empty = free.
  std::string holder;
  /// Counter samples over the last 24 h, on the actor clock.
  gpu_health_history history;
  /// Health and why, from the last facts.
  health_verdict verdict;
  /// Fields nvidia-smi keeps reading as [Unknown Error], and the at-risk
  /// reasons they give now (issue 18, rule 6).
  gpu_read_errors read_errors;
  std::vector<std::string> read_error_reasons;
  /// Its machine actor, told when the health changes.
  machine_actor machine_handle;
  /// The wall clock of `last_seen_unix_ms` and of the incidents' 24 h
  /// window (the machine's).
  std::shared_ptr<const wall_clock> clock;

  /// The GPU as `astra gpus` shows it.
  v1::GpuView view() const;
};

/// The GPU actor's behaviour; `facts` are its first facts (id required).
/// `machine_handle` is told (atom::health) whenever the health changes;
/// `clock` (null: the system's) dates what it is told.
gpu_actor::behavior_type gpu(gpu_actor::stateful_pointer<gpu_state> self,
                             std::string machine, v1::Gpu facts,
                             bool machine_up, machine_actor machine_handle,
                             std::shared_ptr<const wall_clock> clock);

} // namespace astraeus
