#include "actors/controller/standby_gate.hpp"

#include <vector>

#include <caf/actor_system.hpp>
#include <caf/io/doorman.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/multiplexer.hpp>
#include <caf/io/system_messages.hpp>
#include <spdlog/spdlog.h>

#include "actors/controller/gate.hpp"
#include "messages/error.hpp"
#include "messages/type_ids.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/secure_channel.hpp"

namespace astraeus {

using caf::io::connection_handle;
using caf::io::receive_policy;

caf::error standby_gate_config::validate() const {
  if (hello_timeout.count() <= 0 || no_leader_hold.count() <= 0)
    return caf::make_error(ec::invalid_config,
                           "standby gate: timeouts must be positive");
  if (max_open_per_address == 0 || max_open_per_address > 100000)
    return caf::make_error(ec::invalid_config,
                           "gate.max_unauthenticated_per_address: must be from 1 to "
                           "100000");
  return caf::none;
}

v1::Refusal standby_refusal(const std::string& leader) {
  v1::Refusal out;
  if (leader.empty()) {
    out.set_code(to_string(ec::no_leader));
    out.set_reason("this controller is a standby and no controller leads yet (an "
                   "election is under way): try again shortly");
  } else {
    out.set_code(to_string(ec::not_leader));
    out.set_reason("this controller is a standby; the leader's gate is " + leader);
    out.set_leader(leader);
  }
  return out;
}

namespace {

using standby_ptr = standby_gate_actor::stateful_broker_pointer<standby_gate_state>;

/// Forgets a connection (it no longer counts against its address).
void forget(standby_ptr self, connection_handle hdl) {
  auto& st = self->state;
  auto i = st.peers.find(hdl);
  if (i == st.peers.end())
    return;
  st.open_by_address.remove(i->second.address);
  st.peers.erase(i);
}

/// Writes `refusal` in the clear, then forgets and closes the connection.
void answer(standby_ptr self, connection_handle hdl, const v1::Refusal& refusal) {
  if (self->state.peers.count(hdl) == 0)
    return;
  v1::Frame frame;
  *frame.mutable_refusal() = refusal;
  auto bytes = encode_frame(frame);
  auto& buf = self->wr_buf(hdl);
  buf.insert(buf.end(), bytes.begin(), bytes.end());
  self->flush(hdl);
  forget(self, hdl);
  ++self->state.answered;
  self->close(hdl);
}

/// A peer that broke the protocol (garbage, an oversized length) or said
/// nothing: told why, logged, closed.
void refuse(standby_ptr self, connection_handle hdl, ec code, const std::string& reason) {
  auto i = self->state.peers.find(hdl);
  if (i == self->state.peers.end())
    return;
  spdlog::warn("gate (standby): closing {}: {}", i->second.peer, reason);
  v1::Refusal refusal;
  refusal.set_code(to_string(code));
  refusal.set_reason(reason);
  answer(self, hdl, refusal);
}

/// The peer asked (its first record arrived): the leader's gate now, or,
/// while none leads, held until one does or the hold ends.
void on_asked(standby_ptr self, connection_handle hdl, standby_peer& peer) {
  auto& st = self->state;
  peer.asked = true;
  if (!st.leader.empty()) {
    answer(self, hdl, standby_refusal(st.leader));
    return;
  }
  self->delayed_send(self, st.config.no_leader_hold, atom::hello_due_v, hdl,
                     peer.session);
}

} // namespace

standby_gate_actor::behavior_type
standby_gate(standby_gate_actor::stateful_broker_pointer<standby_gate_state> self,
             standby_gate_config config, caf::io::doorman_ptr doorman) {
  self->state.config = std::move(config);
  self->state.leader = self->state.config.leader;
  self->add_doorman(std::move(doorman));
  return {
    [self](atom::leader, std::string& leader) {
      auto& st = self->state;
      if (leader == st.leader)
        return;
      st.leader = std::move(leader);
      if (st.leader.empty()) {
        spdlog::info("gate (standby): no controller leads; agents and astra are told "
                     "to retry");
        return;
      }
      spdlog::info("gate (standby): agents and astra are sent to the leader's gate {}",
                   st.leader);
      std::vector<connection_handle> held;
      for (const auto& [hdl, peer] : st.peers)
        if (peer.asked)
          held.push_back(hdl);
      auto refusal = standby_refusal(st.leader);
      for (auto hdl : held)
        answer(self, hdl, refusal);
    },
    [self](const caf::io::new_connection_msg& msg) {
      auto& st = self->state;
      auto address = self->remote_addr(msg.handle);
      if (!st.open_by_address.try_add(address, st.config.max_open_per_address)) {
        spdlog::warn("gate (standby): closing {}:{}: {} connections from {} are open "
                     "(gate.max_unauthenticated_per_address)",
                     address, self->remote_port(msg.handle),
                     st.open_by_address.count(address), address);
        self->close(msg.handle);
        return;
      }
      auto& peer = st.peers[msg.handle];
      peer.address = address;
      peer.peer = address + ":" + std::to_string(self->remote_port(msg.handle));
      peer.session = st.next_session++;
      self->configure_read(msg.handle, receive_policy::exactly(frame_header_size));
      self->delayed_send(self, st.config.hello_timeout, atom::hello_due_v, msg.handle,
                         peer.session);
    },
    [self](caf::io::new_data_msg& msg) {
      auto hdl = msg.handle;
      auto i = self->state.peers.find(hdl);
      if (i == self->state.peers.end())
        return;
      auto& peer = i->second;
      if (peer.asked)
        return;  // held: anything more it sends is not read
      const char* data = reinterpret_cast<const char*>(msg.buf.data());
      if (peer.pending_body == 0) {
        auto len = decode_frame_length(data, handshake_record_cap);
        if (!len) {
          refuse(self, hdl, static_cast<ec>(len.error().code()), render_error(len.error()));
          return;
        }
        peer.pending_body = *len;
        self->configure_read(hdl, receive_policy::exactly(*len));
        return;
      }
      peer.pending_body = 0;
      auto frame = decode_frame_body(data, msg.buf.size());
      if (!frame) {
        refuse(self, hdl, static_cast<ec>(frame.error().code()),
               render_error(frame.error()));
        return;
      }
      on_asked(self, hdl, peer);
    },
    [self](const caf::io::connection_closed_msg& msg) { forget(self, msg.handle); },
    [self](const caf::io::acceptor_closed_msg&) {
      spdlog::error("gate (standby): the listening socket closed");
    },
    [self](atom::hello_due, connection_handle hdl, uint64_t session) {
      auto i = self->state.peers.find(hdl);
      if (i == self->state.peers.end() || i->second.session != session)
        return;
      if (i->second.asked) {
        answer(self, hdl, standby_refusal(self->state.leader));
        return;
      }
      refuse(self, hdl, ec::timeout,
             "sent nothing within "
               + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  self->state.config.hello_timeout)
                                  .count())
               + " ms");
    },
  };
}

caf::expected<std::pair<standby_gate_actor, uint16_t>>
spawn_standby_gate(caf::actor_system& sys, standby_gate_config config) {
  if (auto err = config.validate())
    return err;
  auto dm = gate_doorman(sys, config.listen_address, config.port, config.listen_socket);
  if (!dm)
    return dm.error();
  auto port = (*dm)->port();
  auto hdl = sys.middleman().spawn_broker(standby_gate, std::move(config), std::move(*dm));
  return std::make_pair(std::move(hdl), port);
}

} // namespace astraeus
