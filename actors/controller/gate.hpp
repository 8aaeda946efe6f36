#pragma once
/// @file
/// The gate: a CAF `io::broker` that agents and the CLI connect to. It reads
/// length-prefixed Protobuf frames (runtime/gate/frame_codec.hpp), checks each
/// frame's length against the cap before allocating for it, runs the secure
/// channel (runtime/gate/secure_channel.hpp: mutual Ed25519 authentication,
/// crypto_kx, every later frame sealed and numbered), and turns frames into
/// typed messages: an agent's reports go only to its own machine actor; the
/// CLI's requests go to the cluster actor, stamped with the principal its
/// API token names. A garbage, truncated, oversized, tampered or replayed
/// frame, a wrong protocol version, a bad signature, or a peer that has not
/// finished its handshake and hello before the deadline gets its connection
/// closed with a log line naming the peer and the reason; every other
/// connection is untouched. A source address may hold only so many
/// connections that have not yet been welcomed.
/// Source: shared/DESIGN.md ("The gate"), issue 7.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

#include <caf/expected.hpp>
#include <caf/fwd.hpp>
#include <caf/io/broker.hpp>
#include <caf/io/connection_handle.hpp>
#include <caf/io/typed_broker.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/interfaces.hpp"
#include "runtime/gate/secure_channel.hpp"

namespace astraeus {

/// Validated settings of the gate.
struct gate_config {
  /// Address to listen on: "0.0.0.0" (default: every interface), "127.0.0.1", "::".
  std::string listen_address = "0.0.0.0";
  /// TCP port; 0 picks a free one (tests).
  uint16_t port = 7450;
  /// A listening socket to accept on instead of binding
  /// `listen_address:port` (HA mode binds it beside its standby gate's,
  /// runtime/gate/gate_listener.hpp), owned by the gate from then on; -1: bind.
  int listen_socket = -1;
  /// Largest frame accepted, in bytes (1 KiB .. 64 MiB).
  uint64_t frame_cap_bytes = 1u << 20;
  /// A peer that has not sent its hello by then is disconnected.
  caf::timespan hello_timeout = std::chrono::seconds{10};
  /// How long the gate waits for the cluster's answer to a request.
  caf::timespan request_timeout = std::chrono::seconds{10};
  /// Report interval agents are told in the welcome, in seconds.
  uint32_t report_interval_seconds = 10;
  /// The heartbeat lapse and the longest report interval agents may use,
  /// told in the welcome (issue 18, rule 10); zero: not told.
  caf::timespan heartbeat_lapse{0};
  caf::timespan report_interval{0};
  /// HA mode (issue 15): how often each welcomed agent that was sent
  /// nothing else gets a Keepalive frame, announced in the welcome; agents
  /// leave a gate silent for three of these (a frozen leader). Zero (one
  /// controller): none.
  caf::timespan keepalive_interval{0};
  /// Cluster name sent in the welcome.
  std::string cluster_name = "default";
  /// The fleet's Xid policy, sent to agents in the welcome.
  v1::XidPolicyTable xid_policy;
  /// The cluster actor; required.
  cluster_actor cluster;
  /// The gate's Ed25519 identity; required.
  std::shared_ptr<const identity_keypair> identity;
  /// Connections from one source address that may be open at once without
  /// having been welcomed (1..100000); more are closed at once.
  uint32_t max_unauthenticated_per_address = 32;

  /// Errors: ec::invalid_config naming the bad field.
  caf::error validate() const;
};

/// Connections counted per source address against a limit: the gate's
/// connections not yet welcomed, a standby gate's open ones
/// (gate.max_unauthenticated_per_address), so one address cannot hold
/// every socket.
class address_counts {
public:
  /// Counts one more from `address`, unless it holds `limit` already
  /// (then false, nothing counted).
  bool try_add(const std::string& address, uint32_t limit);
  /// Counts one less from `address` (forgotten at zero).
  void remove(const std::string& address);
  /// How many from `address` are counted.
  uint32_t count(const std::string& address) const;

private:
  std::unordered_map<std::string, uint32_t> counts_;
};

/// One peer connection as the gate tracks it.
struct gate_connection {
  std::string peer;                 ///< "127.0.0.1:53422"
  std::string address;              ///< "127.0.0.1": the source address
  uint64_t session = 0;             ///< unique per connection
  uint32_t pending_body = 0;        ///< bytes of the body being read; 0 = header
  bool hello_seen = false;          ///< a hello arrived (enrolment may pend)
  bool welcomed = false;            ///< hello accepted
  v1::PeerRole role = v1::PEER_ROLE_UNSPECIFIED;
  std::string machine;              ///< agents: the machine it speaks for
  machine_actor machine_handle;     ///< agents: the only actor it may address
  std::shared_ptr<channel_server> channel;  ///< the secure channel
  v1::Principal principal;          ///< the CLI: who its API token names
  bool sent_since_tick = false;     ///< a frame went out since the keepalive tick
};

/// The gate's state.
struct gate_state {
  /// Actor name for CAF.
  static inline const char* name = "gate";
  gate_config config;
  std::map<caf::io::connection_handle, gate_connection> connections;
  /// Connections not yet welcomed, by source address (the limit of
  /// `gate_config::max_unauthenticated_per_address`).
  address_counts unwelcomed_by_address;
  uint64_t next_session = 1;
  /// A command to an agent waiting for its answer.
  template <class Reply>
  struct pending_command {
    uint64_t session;
    caf::typed_response_promise<Reply> promise;
  };
  /// Clear-fault commands by id.
  std::map<uint64_t, pending_command<v1::ClearFaultReply>> pending_clears;
  /// Logs commands by id (ids shared with pending_clears).
  std::map<uint64_t, pending_command<v1::LogsReply>> pending_logs;
  uint64_t next_command = 1;
};

/// The gate's behaviour (its handlers: `gate_actor` in actors/interfaces.hpp);
/// see `spawn_gate`.
gate_actor::behavior_type gate(gate_actor::stateful_broker_pointer<gate_state> self,
                               gate_config config, caf::io::doorman_ptr doorman);

/// The listening end of a gate: `listen_socket` when it is >= 0 (a socket
/// made by runtime/gate/gate_listener.hpp, owned by the doorman from then
/// on), else `address:port` bound here. Errors: ec::invalid_config "cannot
/// listen on ADDRESS:PORT: the port is in use ... or the address is not
/// this machine's".
caf::expected<caf::io::doorman_ptr> gate_doorman(caf::actor_system& sys,
                                                 const std::string& address,
                                                 uint16_t port, int listen_socket);

/// Binds `config.listen_address:config.port` (or takes
/// `config.listen_socket`) and spawns the gate on it.
/// Returns the gate and the port it listens on. Errors: ec::invalid_config
/// for a bad config; the bind failure ("cannot listen on 127.0.0.1:7450:
/// address in use") otherwise.
caf::expected<std::pair<gate_actor, uint16_t>>
spawn_gate(caf::actor_system& sys, gate_config config);

} // namespace astraeus
