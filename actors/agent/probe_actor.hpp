#pragma once
/// @file
/// The probe actor: the agent's GPU discovery, on a thread of its own.
/// NVML calls inside it have their own per-call deadlines
/// (runtime/gpu/nvml.hpp); the agent additionally never waits for a pass: it
/// reports with the last section it has.

#include <memory>

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/interfaces.hpp"
#include "runtime/gpu/gpu_discovery.hpp"

namespace astraeus {

/// The probe's state: the discovery object (NVML stays loaded).
struct probe_state {
  /// Actor name for CAF.
  static inline const char* name = "probe";
  std::unique_ptr<gpu_discovery> discovery;
};

/// The probe's behaviour. Spawn it with `caf::detached`.
probe_actor::behavior_type probe(probe_actor::stateful_pointer<probe_state> self,
                                 gpu_discovery_options options);

} // namespace astraeus
