#pragma once
/// @file
/// The gate's listening socket, made outside CAF for HA mode: a standby's
/// gate (actors/controller/standby_gate.hpp) answers on one until this
/// controller is elected; then the leader's gate binds a second socket on
/// the same port (SO_REUSEPORT) before the standby's closes, so the port
/// never refuses a connection during the handover (those that arrive while
/// the leader loads its state wait in the new socket's backlog).
///
/// Not one socket shared by both: CAF shuts a doorman's socket down when
/// its broker stops, which would end the listening for every descriptor of
/// it.

#include <cstdint>
#include <string>

#include <caf/expected.hpp>

namespace astraeus {

/// Binds `host:port` (SO_REUSEADDR; SO_REUSEPORT when `share_port`, so a
/// second socket of this user may bind the port while this one listens;
/// non-blocking, backlog SOMAXCONN) and listens. Returns the socket; the
/// caller owns it until it hands it to a gate. Errors: ec::invalid_config
/// "cannot listen on HOST:PORT: ..." naming the system's reason (the port is
/// in use, the address is not this machine's).
caf::expected<int> listen_tcp(const std::string& host, uint16_t port,
                              bool share_port = false);

} // namespace astraeus
