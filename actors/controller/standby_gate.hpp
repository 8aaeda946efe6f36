#pragma once
/// @file
/// The gate of a standby controller in HA mode (issue 15; README "High
/// availability"): a CAF `io::broker` on the gate's port that serves nothing
/// but the answer "this controller is a standby; the leader's gate is
/// HOST:PORT" (a v1::Refusal with code `not_leader` and `leader` set), so
/// that an agent or `astra` given only a standby's address, or every
/// controller's in any order, finds the leader at once. While no controller
/// leads (an election is under way) a peer is held until one does, for at
/// most `no_leader_hold`, then told `no_leader` (retry shortly).
///
/// The answer is sent in the clear in place of the secure channel's
/// ChannelAccept (runtime/gate/secure_channel.hpp lets a client take a clear
/// refusal before the handshake), so a standby needs no key, and costs no
/// signature under a reconnecting fleet. It is not authenticated: a client
/// follows it only to a gate that must then prove the key the client pins,
/// so a forged answer can cost an attempt, as a dropped packet can, but
/// cannot make a client trust another controller.
/// Source: shared/DESIGN.md ("High availability": followers point clients
/// at the leader), issue 15.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include <caf/expected.hpp>
#include <caf/fwd.hpp>
#include <caf/io/broker.hpp>
#include <caf/io/connection_handle.hpp>
#include <caf/io/typed_broker.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/controller/gate.hpp"
#include "actors/interfaces.hpp"

namespace astraeus {

/// Validated settings of a standby's gate.
struct standby_gate_config {
  /// Address and port to bind when `listen_socket` is -1 (tests).
  std::string listen_address = "0.0.0.0";
  uint16_t port = 7450;
  /// A listening socket to accept on (runtime/gate/gate_listener.hpp), owned
  /// by the gate from then on; -1: bind `listen_address:port`.
  int listen_socket = -1;
  /// The leader's gate as known at start, HOST:PORT; empty: none yet.
  std::string leader;
  /// A peer that sends nothing is closed after this long.
  caf::timespan hello_timeout = std::chrono::seconds{10};
  /// While no controller leads, how long a peer waits for one before it is
  /// told `no_leader` (an election takes a few tens of ms once the old
  /// leader's lease is gone).
  caf::timespan no_leader_hold = std::chrono::seconds{1};
  /// Connections from one source address open at once (1..100000): more
  /// are closed at once (as the gate's gate.max_unauthenticated_per_address).
  uint32_t max_open_per_address = 32;

  /// Errors: ec::invalid_config naming the bad field.
  caf::error validate() const;
};

/// One peer as the standby's gate tracks it.
struct standby_peer {
  std::string peer;            ///< "127.0.0.1:53422"
  std::string address;         ///< "127.0.0.1": its source address
  uint64_t session = 0;        ///< unique per connection
  uint32_t pending_body = 0;   ///< bytes of the record being read; 0 = header
  bool asked = false;          ///< its first record arrived: it waits for a leader
};

/// The standby gate's state.
struct standby_gate_state {
  /// Actor name for CAF.
  static inline const char* name = "standby-gate";
  standby_gate_config config;
  /// Who leads now (HOST:PORT of its gate); empty: none known.
  std::string leader;
  std::map<caf::io::connection_handle, standby_peer> peers;
  /// Open connections by source address (`max_open_per_address`).
  address_counts open_by_address;
  uint64_t next_session = 1;
  /// Answers sent (leader named, none leads, refusals).
  uint64_t answered = 0;
};

/// The standby gate's behaviour (its handlers: `standby_gate_actor` in
/// actors/interfaces.hpp); see `spawn_standby_gate`.
standby_gate_actor::behavior_type
standby_gate(standby_gate_actor::stateful_broker_pointer<standby_gate_state> self,
             standby_gate_config config, caf::io::doorman_ptr doorman);

/// Spawns the standby's gate on `config.listen_socket` (or binds
/// `listen_address:port`). Returns it and the port it listens on. Errors:
/// ec::invalid_config for a bad config or a failed bind.
caf::expected<std::pair<standby_gate_actor, uint16_t>>
spawn_standby_gate(caf::actor_system& sys, standby_gate_config config);

/// The refusal a standby answers with: code `not_leader` naming `leader`,
/// or `no_leader` when `leader` is empty.
v1::Refusal standby_refusal(const std::string& leader);

} // namespace astraeus
