#pragma once
/// @file
/// Starting the controller's actors (store, cluster, gate) and an agent in
/// an existing `caf::actor_system`: what `astraeus-controller`,
/// `astraeus-agent` and `astraeus dev` do, and what an embedding control
/// plane calls. The system must be configured with
/// `astraeus::configure_actor_system` (runtime/system_setup.hpp).

#include <cstdint>
#include <memory>
#include <string>

#include <caf/actor.hpp>
#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include "actors/interfaces.hpp"
#include "runtime/config.hpp"

namespace astraeus {

class Store;

/// A running controller.
struct controller_handles {
  std::shared_ptr<Store> store;  ///< the open store (data_dir)
  cluster_actor cluster;         ///< the front door
  scheduler_actor scheduler;     ///< places runs onto GPUs
  caf::actor gate;               ///< the gate broker
  uint16_t port = 0;             ///< the port the gate listens on
};

/// Opens the store under `cfg.data_dir`, spawns the cluster (which restores
/// every stored machine) and binds the gate. Errors: the store's (e.g. "store
/// /var/lib/astraeus/controller is in use by another process"), the gate's
/// bind failure.
caf::expected<controller_handles> start_controller(caf::actor_system& sys,
                                                   const ControllerConfig& cfg);

/// Stops the controller's actors (gate first, so no new work arrives).
void stop_controller(caf::actor_system& sys, const controller_handles& h);

/// Loads the agent's identity from `cfg.data_dir` and spawns the agent.
/// Errors: the identity's (folder not writable, broken machine-id) and the
/// config's.
caf::expected<caf::actor> start_agent(caf::actor_system& sys,
                                      const AgentConfig& cfg);

/// This machine's hostname (gethostname), "localhost" when it has none.
std::string local_hostname();

} // namespace astraeus
