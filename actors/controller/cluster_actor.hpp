#pragma once
/// @file
/// The cluster actor: the controller's front door. It keeps the machine
/// registry (name -> machine actor), registers machines on an agent's first
/// hello, restores every stored machine at start, and answers the CLI's
/// requests by asking the machine actors.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include <caf/error.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/interfaces.hpp"
#include "actors/controller/machine_pressure.hpp"
#include "messages/labels.hpp"
#include "messages/run_key.hpp"
#include "runtime/gate/tokens.hpp"
#include "runtime/process/wall_clock.hpp"

namespace astraeus {

class Store;
class token_registry;
class install_site;

/// Validated settings of the cluster actor.
struct cluster_config {
  /// The controller's store; required.
  std::shared_ptr<Store> store;
  /// Heartbeat lapse handed to every machine actor (> 0).
  caf::timespan heartbeat_lapse = std::chrono::seconds{60};
  /// Pressure thresholds handed to every machine actor.
  pressure_thresholds pressure;
  /// How long the cluster waits for a machine actor's answer.
  caf::timespan request_timeout = std::chrono::seconds{10};
  /// Shown in the welcome and by `astra`.
  std::string cluster_name = "default";
  /// The fleet's Xid policy (`astra xids`).
  v1::XidPolicyTable xid_policy;
  /// The scheduler, told of every machine's snapshot; null: none (runs are
  /// refused).
  scheduler_actor scheduler;
  /// Issue 21: the validations, answering validation requests; null: none
  /// (those requests are refused).
  validations_actor validations;
  /// Every GPU's history (actors/controller/gpu_history_actor.hpp), handed
  /// to every machine actor and asked get_gpu_history requests; null: none
  /// (those requests are refused).
  gpu_history_actor history;
  /// Join and API tokens (runtime/gate/tokens.hpp). `start_controller` always
  /// sets it: new machines then need a join token, known ones their enrolled
  /// Ed25519 key, and every request is checked against its caller's role
  /// and audited. Null: nothing is checked (an embedding control plane that
  /// authenticates its callers itself).
  std::shared_ptr<token_registry> tokens;
  /// The gate's Ed25519 public key (hex), carried in join tokens' install
  /// commands for agents to pin.
  std::string controller_key;
  /// The gate's address as machines reach it ("10.0.0.5:7450"); empty:
  /// `astra` uses the address it connected to.
  std::string advertise_address;
  /// The console's address ("https://console.example:7451", no trailing
  /// '/'): a run's answers carry its page there (Run.console_url); empty:
  /// none (`astra run` then names the cluster only).
  std::string console_url;
  /// The organisation in console addresses (api.organization).
  std::string organization = "default";
  /// Where machines fetch install.sh (the HTTP API fills it once it
  /// listens); join tokens then carry the install command that runs it.
  /// Null or an empty api_url: the command runs astraeus-agent directly.
  std::shared_ptr<install_site> install;
  /// The wall clock of audit records, enrolment, workspaces and token
  /// expiry; handed to every machine actor.
  std::shared_ptr<const wall_clock> clock = real_wall_clock();

  /// Errors: ec::invalid_config when the store or the clock is missing or a
  /// duration <= 0.
  caf::error validate() const;
};

/// The state of the cluster actor.
struct cluster_state {
  /// Actor name for CAF.
  static inline const char* name = "cluster";
  /// Settings, validated at spawn.
  cluster_config config;
  /// Every known machine by name.
  std::unordered_map<std::string, machine_actor> machines;
  /// Machine identity by name, to refuse a second identity for one name.
  std::unordered_map<std::string, std::string> identities;
  /// The Ed25519 key each machine enrolled with (family tokens,
  /// "machine/<name>"), by name.
  std::unordered_map<std::string, std::string> keys;
  /// Makes audit keys unique within one millisecond.
  uint64_t audit_seq = 0;
  /// Every workspace by name (family `workspaces`).
  std::map<std::string, v1::Workspace> workspaces;
};

/// The cluster actor's behaviour (handlers: actors/interfaces.hpp).
cluster_actor::behavior_type
cluster(cluster_actor::stateful_pointer<cluster_state> self,
        cluster_config config);

/// Checks a workspace to create and fills what the controller decides
/// (organisation "default" when empty). Errors: ec::invalid_request naming
/// the bad name or grant.
caf::error validate_workspace(v1::Workspace& ws);

/// Submits `spec` into workspace `ws` (null: the default workspace, granted
/// nothing): every grant becomes a label the run's machines must carry, and
/// `spec.namespace` becomes the workspace's namespace ("ws-7f3c2a"; empty in
/// the default workspace, whatever the client sent), so its workers' full
/// names are `<namespace>.<name>` (shared/seeds/inside-a-worker.md).
/// Errors: ec::invalid_request when the run asks for a pool or label that
/// contradicts a grant ("workspace research is granted pool=h100; the run
/// asks for pool=a100"), or for what the workspace is not granted (below).
///
/// Machine paths and privileged work (issue 16; inside-a-worker.md's
/// filesystem table: a Bind volume is "a path of the machine (in a
/// workspace, only granted paths)"): in a workspace other than the default
/// one, a Bind volume's host_path must be one of `ws.bind_grants` or under
/// one ("volumes[0]: workspace vision is not granted /srv (granted: /data;
/// an admin grants more with astra workspace grant vision --path PATH)"),
/// and `security_context.ipc_mode: host` needs `ws.allow_privileged`. The
/// default workspace (`ws` null) is the cluster's own: an admin's run there
/// (`admin`, also when the controller checks no tokens) may bind any
/// machine path and do privileged work. A member's may not: an image given
/// as a machine folder ("/srv/rootfs"; a workspace needs it granted as a
/// Bind path), a Bind volume,
/// `ipc_mode: host`, `runtime: process` or no image (a host process runs as
/// the agent, root) is refused naming the role ("runtime: process: in the
/// default workspace a host process is an admin's; you are a member: give an
/// image (--image busybox), or use a workspace an admin granted privileged
/// work"); README "roles": members read, run and stop their own runs. A
/// member's run there that names no runtime gets `runc`: a machine that
/// runs workers as host processes fails it at start rather than run it as
/// root.
caf::error apply_workspace(const v1::Workspace* ws, v1::RunSpec& spec, bool admin = true);

/// Whether machine path `path` (absolute, without "..") is `grant` or under
/// it, component by component ("/data" grants "/data/x", not "/database");
/// repeated and trailing '/' and "." components do not count.
bool path_granted(const std::string& path, const std::string& grant);


/// The console page of a run of `spec` (the seed's
/// `<console_url>/o/<org>/w/<workspace>/jobs/<cluster>/<run>`, workspace
/// "default" when the spec names none); empty when `config` has no
/// console_url.
std::string run_console_url(const cluster_config& config, const v1::RunSpec& spec);

/// Whether `name` is a valid machine name: 1-63 characters of letters,
/// digits, '-', '_' and '.', starting with a letter or digit (a hostname).
bool valid_machine_name(const std::string& name);

/// The store key (family `tokens`) of the identity machine `machine`
/// enrolled with ("machine/<name>", a v1::MachineIdentity): gone once the
/// machine is removed.
std::string machine_identity_key(const std::string& machine);

} // namespace astraeus
