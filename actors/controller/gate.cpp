#include "actors/controller/gate.hpp"

#include <algorithm>

#include <caf/actor_system.hpp>
#include <caf/io/doorman.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/multiplexer.hpp>
#include <caf/io/system_messages.hpp>
#include <spdlog/spdlog.h>

#include "messages/error.hpp"
#include "messages/type_ids.hpp"
#include "runtime/gate/frame_codec.hpp"

namespace astraeus {

using caf::io::connection_handle;
using caf::io::receive_policy;

caf::error gate_config::validate() const {
  if (!cluster)
    return caf::make_error(ec::invalid_config, "gate: no cluster actor");
  if (frame_cap_bytes < 1024 || frame_cap_bytes > (64u << 20))
    return caf::make_error(ec::invalid_config,
                           "gate.frame_cap: must be between 1 KiB and 64 MiB");
  if (hello_timeout.count() <= 0 || request_timeout.count() <= 0)
    return caf::make_error(ec::invalid_config,
                           "gate: timeouts must be positive");
  if (keepalive_interval.count() < 0)
    return caf::make_error(ec::invalid_config,
                           "gate.keepalive_interval: must not be negative");
  if (!identity)
    return caf::make_error(ec::invalid_config, "gate: no identity key");
  if (max_unauthenticated_per_address == 0)
    return caf::make_error(ec::invalid_config,
                           "gate.max_unauthenticated_per_address: must be at "
                           "least 1");
  return caf::none;
}

bool address_counts::try_add(const std::string& address, uint32_t limit) {
  auto& n = counts_[address];
  if (n >= limit)
    return false;
  ++n;
  return true;
}

void address_counts::remove(const std::string& address) {
  if (auto i = counts_.find(address); i != counts_.end() && --i->second == 0)
    counts_.erase(i);
}

uint32_t address_counts::count(const std::string& address) const {
  auto i = counts_.find(address);
  return i == counts_.end() ? 0 : i->second;
}

namespace {

using gate_ptr = gate_actor::stateful_broker_pointer<gate_state>;

/// Writes bytes as they are (a handshake reply, an encoded frame).
void write_bytes(gate_ptr self, connection_handle hdl, const std::string& bytes) {
  auto& buf = self->wr_buf(hdl);
  auto first = reinterpret_cast<const char*>(bytes.data());
  buf.insert(buf.end(), first, first + bytes.size());
  self->flush(hdl);
}

/// Writes a frame: sealed once the peer's channel is established, in the
/// clear before (only a refusal is ever sent so).
void write_frame(gate_ptr self, connection_handle hdl, const v1::Frame& frame) {
  auto i = self->state.connections.find(hdl);
  if (i == self->state.connections.end() || !i->second.channel)
    return;
  i->second.sent_since_tick = true;
  write_bytes(self, hdl, i->second.channel->encode(frame));
}

/// The connection was welcomed: it no longer counts against its address's
/// limit of unauthenticated connections.
void mark_welcomed(gate_ptr self, gate_connection& conn) {
  if (conn.welcomed)
    return;
  conn.welcomed = true;
  self->state.unwelcomed_by_address.remove(conn.address);
}

/// Fails every command of `conn`'s session still waiting in `pending`.
template <class Map>
void fail_session(Map& pending, const gate_connection& conn) {
  for (auto p = pending.begin(); p != pending.end();) {
    if (p->second.session == conn.session) {
      p->second.promise.deliver(caf::make_error(
        ec::not_connected, "machine " + conn.machine + " disconnected before answering"));
      p = pending.erase(p);
    } else {
      ++p;
    }
  }
}

/// Fails command `id` of `pending` with ec::timeout (`what` says which).
template <class Map>
void expire(Map& pending, uint64_t id, const char* what) {
  auto p = pending.find(id);
  if (p == pending.end())
    return;
  p->second.promise.deliver(caf::make_error(ec::timeout, what));
  pending.erase(p);
}

/// Ends a peer's session: tells its machine actor, forgets the connection.
void forget(gate_ptr self, connection_handle hdl) {
  auto i = self->state.connections.find(hdl);
  if (i == self->state.connections.end())
    return;
  mark_welcomed(self, i->second); // no longer pending either way
  if (i->second.machine_handle)
    self->send(i->second.machine_handle, atom::connected_v, i->second.session,
               false, gate_command_actor{});
  // Commands still waiting for this agent's answer fail now.
  fail_session(self->state.pending_clears, i->second);
  fail_session(self->state.pending_logs, i->second);
  self->state.connections.erase(i);
}

/// Closes a connection after telling the peer why, and logs it.
void refuse(gate_ptr self, connection_handle hdl, ec code,
            const std::string& reason) {
  auto i = self->state.connections.find(hdl);
  if (i == self->state.connections.end())
    return;
  spdlog::warn("gate: closing {}{}: {}", i->second.peer,
               i->second.machine.empty() ? "" : " (machine " + i->second.machine + ")",
               reason);
  v1::Frame frame;
  frame.mutable_refusal()->set_code(to_string(code));
  frame.mutable_refusal()->set_reason(reason);
  write_frame(self, hdl, frame);
  forget(self, hdl);
  self->close(hdl);
}

void refuse(gate_ptr self, connection_handle hdl, const caf::error& err) {
  auto code = err.category() == caf::atom("astraeus")
                ? static_cast<ec>(err.code())
                : ec::protocol_violation;
  refuse(self, hdl, code, render_error(err));
}

void welcome(gate_ptr self, connection_handle hdl) {
  auto& cfg = self->state.config;
  v1::Frame frame;
  auto* w = frame.mutable_welcome();
  w->set_protocol_version(protocol_version);
  w->set_controller_version(ASTRAEUS_VERSION);
  w->set_cluster(cfg.cluster_name);
  w->set_report_interval_seconds(cfg.report_interval_seconds);
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  w->set_heartbeat_lapse_ms(
    static_cast<uint64_t>(duration_cast<milliseconds>(cfg.heartbeat_lapse).count()));
  w->set_report_interval_ms(
    static_cast<uint64_t>(duration_cast<milliseconds>(cfg.report_interval).count()));
  w->set_keepalive_interval_ms(
    static_cast<uint64_t>(duration_cast<milliseconds>(cfg.keepalive_interval).count()));
  *w->mutable_xid_policy() = cfg.xid_policy;
  w->set_takes_readings(true);  // issue 14: readings reports are applied
  auto i = self->state.connections.find(hdl);
  if (i != self->state.connections.end() && i->second.role == v1::CLI)
    *w->mutable_principal() = i->second.principal;
  write_frame(self, hdl, frame);
}

/// The connection of welcomed session `session`, or end().
auto welcomed_session(gate_state& st, uint64_t session) {
  return std::find_if(st.connections.begin(), st.connections.end(),
                      [&](const auto& kv) {
                        return kv.second.session == session && kv.second.welcomed;
                      });
}

/// Sends the agent of `session` a command frame (`fill` writes it, given
/// the command's id, and arms its timeout) and keeps the answer's promise
/// in `pending`. Fails with ec::not_connected when the session is gone.
template <class Reply, class Map, class Fill>
caf::result<Reply> send_command(gate_ptr self, uint64_t session, Map& pending,
                                Fill fill) {
  auto& st = self->state;
  auto i = welcomed_session(st, session);
  if (i == st.connections.end())
    return caf::make_error(ec::not_connected, "the machine's agent is not connected");
  auto id = st.next_command++;
  auto rp = self->make_response_promise<Reply>();
  pending.emplace(id, gate_state::pending_command<Reply>{session, rp});
  v1::Frame frame;
  fill(frame, id);
  write_frame(self, i->first, frame);
  return rp;
}

void on_hello(gate_ptr self, connection_handle hdl, gate_connection& conn,
              v1::Hello& hello) {
  conn.hello_seen = true;
  if (hello.protocol_version() != protocol_version) {
    refuse(self, hdl, ec::incompatible_protocol,
           "protocol version " + std::to_string(hello.protocol_version())
             + " is not supported: this controller (" ASTRAEUS_VERSION
               ") speaks version "
             + std::to_string(protocol_version)
             + "; install the controller's version of the agent and astra");
    return;
  }
  conn.role = hello.role();
  // Who the peer is comes from the channel, never from what it says.
  const auto& key = conn.channel->peer_key();
  hello.set_identity_key(std::string{reinterpret_cast<const char*>(key.data()),
                                     key.size()});
  switch (hello.role()) {
    case v1::CLI: {
      auto session = conn.session;
      auto token = std::move(*hello.mutable_api_token());
      self
        ->request(self->state.config.cluster,
                  self->state.config.request_timeout, atom::login_v,
                  std::move(token))
        .then(
          [self, hdl, session](v1::Principal& who) {
            auto i = self->state.connections.find(hdl);
            if (i == self->state.connections.end()
                || i->second.session != session)
              return;
            i->second.principal = std::move(who);
            mark_welcomed(self, i->second);
            welcome(self, hdl);
          },
          [self, hdl](caf::error& err) { refuse(self, hdl, err); });
      return;
    }
    case v1::AGENT: {
      conn.machine = hello.machine_name();
      auto session = conn.session;
      self
        ->request(self->state.config.cluster,
                  self->state.config.request_timeout, atom::enrol_v,
                  std::move(hello), session, gate_command_actor{self})
        .then(
          [self, hdl, session](machine_actor& handle) {
            auto i = self->state.connections.find(hdl);
            if (i == self->state.connections.end()
                || i->second.session != session) {
              // Gone while enrolling.
              self->send(handle, atom::connected_v, session, false,
                         gate_command_actor{});
              return;
            }
            i->second.machine_handle = handle;
            // A machine removed by an admin (`astra machine remove`) stops
            // its actor: its agent is refused then (issue 13, item 6).
            self->monitor(handle);
            mark_welcomed(self, i->second);
            spdlog::info("gate: machine {} connected from {} (key {})",
                         i->second.machine, i->second.peer,
                         fingerprint(i->second.channel->peer_key()));
            welcome(self, hdl);
          },
          [self, hdl](caf::error& err) { refuse(self, hdl, err); });
      return;
    }
    default:
      refuse(self, hdl, ec::protocol_violation,
             "hello names no known role (agent or cli)");
  }
}

void on_frame(gate_ptr self, connection_handle hdl, gate_connection& conn,
              v1::Frame& frame) {
  if (!conn.hello_seen) {
    if (!frame.has_hello()) {
      refuse(self, hdl, ec::protocol_violation,
             "sent a " + std::string{frame_kind(frame)}
               + " frame before its hello");
      return;
    }
    on_hello(self, hdl, conn, *frame.mutable_hello());
    return;
  }
  if (!conn.welcomed) {
    refuse(self, hdl, ec::protocol_violation,
           "sent a " + std::string{frame_kind(frame)}
             + " frame before its hello was answered");
    return;
  }
  if (conn.role == v1::AGENT && frame.has_clear_fault_reply()) {
    const auto& reply = frame.clear_fault_reply();
    auto& pending = self->state.pending_clears;
    auto p = pending.find(reply.id());
    if (p == pending.end() || p->second.session != conn.session) {
      refuse(self, hdl, ec::protocol_violation,
             "answered a clear-fault command it was not sent");
      return;
    }
    p->second.promise.deliver(reply);
    pending.erase(p);
    return;
  }
  if (conn.role == v1::AGENT && frame.has_logs_reply()) {
    auto& reply = *frame.mutable_logs_reply();
    auto& pending = self->state.pending_logs;
    auto p = pending.find(reply.id());
    if (p == pending.end() || p->second.session != conn.session) {
      // Late (timed out) or never sent: dropped.
      spdlog::debug("gate: machine {} answered logs command {} that is not "
                    "pending", conn.machine, reply.id());
      return;
    }
    p->second.promise.deliver(std::move(reply));
    pending.erase(p);
    return;
  }
  if (conn.role == v1::AGENT && frame.has_worker_statuses()) {
    auto& statuses = *frame.mutable_worker_statuses();
    if (!statuses.machine().empty() && statuses.machine() != conn.machine) {
      refuse(self, hdl, ec::protocol_violation,
             "sent worker statuses for machine '" + statuses.machine()
               + "' but is connected as '" + conn.machine + "'");
      return;
    }
    self->send(conn.machine_handle, std::move(statuses));
    return;
  }
  if (conn.role == v1::AGENT && frame.has_report()) {
    auto& report = *frame.mutable_report();
    if (report.machine() != conn.machine) {
      // A machine may speak only for itself.
      refuse(self, hdl, ec::protocol_violation,
             "sent a report for machine '" + report.machine()
               + "' but is connected as '" + conn.machine + "'");
      return;
    }
    self->send(conn.machine_handle, std::move(report));
    return;
  }
  if (conn.role == v1::CLI && frame.has_request()) {
    // The caller is the session's principal, whatever the client wrote.
    *frame.mutable_request()->mutable_caller() = conn.principal;
    auto id = frame.request().id();
    auto session = conn.session;
    self
      ->request(self->state.config.cluster, self->state.config.request_timeout,
                std::move(*frame.mutable_request()))
      .then(
        [self, hdl, session](v1::Response& resp) {
          auto i = self->state.connections.find(hdl);
          if (i == self->state.connections.end() || i->second.session != session)
            return;
          v1::Frame out;
          *out.mutable_response() = std::move(resp);
          write_frame(self, hdl, out);
        },
        [self, hdl, session, id](caf::error& err) {
          auto i = self->state.connections.find(hdl);
          if (i == self->state.connections.end() || i->second.session != session)
            return;
          v1::Frame out;
          auto* resp = out.mutable_response();
          resp->set_id(id);
          resp->mutable_error()->set_code(
            err.category() == caf::atom("astraeus")
              ? to_string(static_cast<ec>(err.code()))
              : "unavailable");
          resp->mutable_error()->set_message(
            err == caf::sec::request_timeout
              ? "the controller did not answer in time"
              : render_error(err));
          write_frame(self, hdl, out);
        });
    return;
  }
  refuse(self, hdl, ec::protocol_violation,
         "sent an unexpected " + std::string{frame_kind(frame)} + " frame");
}

} // namespace

gate_actor::behavior_type gate(gate_actor::stateful_broker_pointer<gate_state> self,
                               gate_config config, caf::io::doorman_ptr doorman) {
  self->state.config = std::move(config);
  self->add_doorman(std::move(doorman));
  self->set_down_handler([self](caf::down_msg& msg) {
    // Only a removal says so in its exit reason; a machine actor that stops
    // with the controller leaves its agent to reconnect to the next one.
    if (msg.reason.category() != caf::atom("astraeus")
        || msg.reason.code() != static_cast<uint8_t>(ec::enrollment_required))
      return;
    std::vector<connection_handle> gone;
    for (const auto& [hdl, conn] : self->state.connections)
      if (conn.machine_handle && conn.machine_handle.address() == msg.source)
        gone.push_back(hdl);
    for (auto hdl : gone) {
      auto name = self->state.connections[hdl].machine;
      self->state.connections[hdl].machine_handle = machine_actor{};
      refuse(self, hdl, ec::enrollment_required,
             "machine " + name + " was removed from the cluster; enrol it again with a "
             "new join token (astra tokens create)");
    }
  });
  if (self->state.config.keepalive_interval.count() > 0)
    self->delayed_send(self, self->state.config.keepalive_interval, atom::tick_v);
  return {
    [self](atom::tick) {
      // Each welcomed agent sent nothing since the last tick hears "alive".
      auto& st = self->state;
      v1::Frame keepalive;
      keepalive.mutable_keepalive();
      for (auto& [hdl, conn] : st.connections) {
        if (conn.welcomed && conn.role == v1::AGENT && !conn.sent_since_tick)
          write_frame(self, hdl, keepalive);
        conn.sent_since_tick = false;
      }
      self->delayed_send(self, st.config.keepalive_interval, atom::tick_v);
    },
    [self](const caf::io::new_connection_msg& msg) {
      auto& st = self->state;
      auto address = self->remote_addr(msg.handle);
      if (!st.unwelcomed_by_address.try_add(address,
                                            st.config.max_unauthenticated_per_address)) {
        // Refused before anything is read or allocated for it.
        spdlog::warn("gate: closing {}:{}: {} connections from {} have not "
                     "finished their handshake (gate.max_unauthenticated_per_"
                     "address)",
                     address, self->remote_port(msg.handle),
                     st.unwelcomed_by_address.count(address), address);
        self->close(msg.handle);
        return;
      }
      auto& conn = st.connections[msg.handle];
      conn.address = address;
      conn.peer = address + ":" + std::to_string(self->remote_port(msg.handle));
      conn.session = st.next_session++;
      conn.channel = std::make_shared<channel_server>(st.config.identity);
      self->configure_read(msg.handle, receive_policy::exactly(frame_header_size));
      self->delayed_send(self, self->state.config.hello_timeout,
                         atom::hello_due_v, msg.handle, conn.session);
      spdlog::debug("gate: connection from {}", conn.peer);
    },
    [self](caf::io::new_data_msg& msg) {
      auto hdl = msg.handle;
      auto i = self->state.connections.find(hdl);
      if (i == self->state.connections.end())
        return;
      auto& conn = i->second;
      const char* data = reinterpret_cast<const char*>(msg.buf.data());
      if (conn.pending_body == 0) {
        // Before the handshake only small records are taken.
        auto cap = conn.channel->record_cap(self->state.config.frame_cap_bytes);
        auto len = decode_frame_length(data, cap);
        if (!len) {
          refuse(self, hdl, len.error());
          return;
        }
        conn.pending_body = *len;
        self->configure_read(hdl, receive_policy::exactly(*len));
        return;
      }
      conn.pending_body = 0;
      self->configure_read(hdl, receive_policy::exactly(frame_header_size));
      auto step = conn.channel->on_record(data, msg.buf.size());
      if (!step) {
        refuse(self, hdl, step.error());
        return;
      }
      if (!step->reply.empty())
        write_bytes(self, hdl, step->reply);
      if (step->frame)
        on_frame(self, hdl, conn, *step->frame);
    },
    [self](const caf::io::connection_closed_msg& msg) {
      auto i = self->state.connections.find(msg.handle);
      if (i != self->state.connections.end()) {
        if (i->second.pending_body > 0)
          spdlog::warn("gate: closing {}: truncated frame (its header said {} "
                       "bytes; the connection ended first)",
                       i->second.peer, i->second.pending_body);
        else
          spdlog::debug("gate: {} disconnected", i->second.peer);
      }
      forget(self, msg.handle);
    },
    [self](atom::hello_due, connection_handle hdl, uint64_t session) {
      auto i = self->state.connections.find(hdl);
      if (i == self->state.connections.end() || i->second.session != session
          || i->second.hello_seen)
        return;
      refuse(self, hdl, ec::timeout,
             "did not finish its handshake and hello within "
               + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  self->state.config.hello_timeout)
                                  .count())
               + " ms");
    },
    [self](atom::clear, uint64_t session,
           std::string& gpu) -> caf::result<v1::ClearFaultReply> {
      return send_command<v1::ClearFaultReply>(
        self, session, self->state.pending_clears, [&](v1::Frame& frame, uint64_t id) {
          frame.mutable_clear_fault()->set_id(id);
          frame.mutable_clear_fault()->set_gpu(std::move(gpu));
          // An agent that never answers must not leave the command behind.
          self->delayed_send(self, self->state.config.request_timeout,
                             atom::expire_v, id);
        });
    },
    [self](atom::assign, uint64_t session, v1::WorkerOrders& orders) {
      auto& st = self->state;
      auto i = welcomed_session(st, session);
      // Gone or not welcomed yet: the machine sends the set again after the
      // agent's next report.
      if (i == st.connections.end())
        return;
      v1::Frame frame;
      *frame.mutable_worker_orders() = std::move(orders);
      write_frame(self, i->first, frame);
    },
    [self](atom::logs, uint64_t session,
           v1::LogsCommand& cmd) -> caf::result<v1::LogsReply> {
      return send_command<v1::LogsReply>(
        self, session, self->state.pending_logs, [&](v1::Frame& frame, uint64_t id) {
          cmd.set_id(id);
          *frame.mutable_logs() = std::move(cmd);
          self->delayed_send(self, self->state.config.request_timeout,
                             atom::expire_v, id);
        });
    },
    [self](atom::expire, uint64_t id) {
      // Command ids are shared by both kinds: at most one holds `id`.
      expire(self->state.pending_logs, id,
             "the machine's agent did not send the log in time");
      expire(self->state.pending_clears, id,
             "the machine's agent did not answer the clear-fault command in time");
    },
    [self](const caf::io::acceptor_closed_msg&) {
      spdlog::error("gate: the listening socket closed");
    },
  };
}

caf::expected<caf::io::doorman_ptr> gate_doorman(caf::actor_system& sys,
                                                 const std::string& address,
                                                 uint16_t port, int listen_socket) {
  auto& backend = sys.middleman().backend();
  if (listen_socket >= 0)
    return backend.new_doorman(listen_socket);
  auto bound = backend.new_tcp_doorman(port, address.c_str(), true);
  if (!bound)
    return caf::make_error(ec::invalid_config,
                           "cannot listen on " + address + ":" + std::to_string(port)
                             + ": the port is in use (another controller or "
                               "`astraeus dev`?) or the address is not this "
                               "machine's");
  return std::move(*bound);
}

caf::expected<std::pair<gate_actor, uint16_t>>
spawn_gate(caf::actor_system& sys, gate_config config) {
  if (auto err = config.validate())
    return err;
  auto dm = gate_doorman(sys, config.listen_address, config.port, config.listen_socket);
  if (!dm)
    return dm.error();
  auto port = (*dm)->port();
  config.port = port;
  auto hdl = sys.middleman().spawn_broker(gate, std::move(config), std::move(*dm));
  return std::make_pair(std::move(hdl), port);
}

} // namespace astraeus
