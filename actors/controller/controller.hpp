#pragma once
/// @file
/// Starting the controller's actors (store, cluster, gate) and an agent in
/// an existing `caf::actor_system`: what `astraeus-controller`,
/// `astraeus-agent` and `astraeus dev` do, and what an embedding control
/// plane calls. The system must be configured with
/// `astraeus::configure_actor_system` (runtime/process/system_setup.hpp).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <caf/actor.hpp>
#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include "actors/interfaces.hpp"
#include "runtime/process/config.hpp"
#include "runtime/process/wall_clock.hpp"

namespace astraeus {

class Store;
class token_registry;
class install_site;
struct identity_keypair;

/// A running controller.
struct controller_handles {
  std::shared_ptr<Store> store;  ///< the open store (data_dir, or etcd in HA mode)
  std::shared_ptr<Store> history_store;  ///< GPU telemetry history's store (usually `store`)
  std::shared_ptr<const identity_keypair> identity;  ///< the gate's Ed25519 key
  std::shared_ptr<token_registry> tokens;  ///< join and API tokens (owned by the cluster)
  std::string keys_dir;          ///< where gate.key, gate.pub, token.key, owner-token are
  cluster_actor cluster;         ///< the front door
  scheduler_actor scheduler;     ///< places runs onto GPUs
  validations_actor validations; ///< validations, their checks and the Cluster Report (issue 21)
  gpu_history_actor history;     ///< every GPU's history (issue 19)
  gate_actor gate;               ///< the gate broker
  uint16_t port = 0;             ///< the port the gate listens on
  /// Where machines fetch install.sh: `start_api` fills it, join tokens
  /// read it (runtime/gate/tokens.hpp).
  std::shared_ptr<install_site> install;
};

/// Opens the store under `cfg.data_dir`, loads (or creates) the gate's
/// Ed25519 key and the token key under `cfg.keys_dir`, mints the first owner
/// API token into `<keys_dir>/owner-token` (mode 0600) when the store has no
/// API token yet, or a fresh one (logged) when the token in that file no
/// longer works or no owner token works any more (the operator on this host
/// gets back in), spawns the cluster (which restores every stored machine)
/// and binds the gate. Errors: the store's (e.g. "store
/// /var/lib/astraeus/controller is in use by another process"), a key file
/// that cannot be read or written, the gate's bind failure. `clock` dates
/// what the controller's actors store and decides every rule stated in
/// dates (token expiry, the 24 h incident window); an embedding control
/// plane or a test may pass its own.
/// `store`: the store to use instead of opening RocksDB under
/// `cfg.data_dir` (HA mode passes the leader's fenced etcd store);
/// `history_store`: where GPU telemetry history goes when it must not go to
/// `store` (HA mode: a local RocksDB, history stays out of etcd); null: `store`.
/// `gate_socket`: a listening socket for the gate to take over instead of
/// binding `listen.address:port` (HA mode binds it beside its standby
/// gate's: runtime/gate/gate_listener.hpp); -1: bind.
caf::expected<controller_handles>
start_controller(caf::actor_system& sys, const ControllerConfig& cfg,
                 std::shared_ptr<const wall_clock> clock = real_wall_clock(),
                 std::shared_ptr<Store> store = nullptr,
                 std::shared_ptr<Store> history_store = nullptr,
                 int gate_socket = -1);

/// Stops the controller's actors (gate first, so no new work arrives).
void stop_controller(caf::actor_system& sys, const controller_handles& h);

/// Loads the agent's identity from `cfg.data_dir` (name, machine-id, the
/// Ed25519 key identity.key, the pinned controller.pub once enrolled) and
/// spawns the agent. Until it has enrolled it presents `join_token` (dev
/// mode hands one over in memory), else the one in `cfg.token_file`.
/// Errors: the identity's (folder not writable, broken machine-id or key),
/// a token file that cannot be read, a malformed controller.public_key, and
/// the config's.
/// `on_final_refusal`: see agent_config (the agent program exits 1 then).
caf::expected<agent_actor>
start_agent(caf::actor_system& sys, const AgentConfig& cfg,
            const std::string& join_token = {},
            std::function<void(const std::string&)> on_final_refusal = {});

/// Where a controller with keys folder `keys_dir` writes its first owner
/// API token.
std::string owner_token_path(const std::string& keys_dir);

/// This machine's hostname (gethostname), "localhost" when it has none.
std::string local_hostname();

} // namespace astraeus
