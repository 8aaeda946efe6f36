#pragma once
/// @file
/// astraeus-controller in HA mode (store.backend etcd; README "High
/// availability"): campaign for leadership on etcd while answering the HTTP
/// API with a redirect to the leader; once elected, start the cluster's
/// actors on the fenced etcd store, renew the lease, schedule etcd's
/// compaction, and exit (code 3) the moment leadership is lost.

#include <csignal>

#include <caf/fwd.hpp>

#include "runtime/process/config.hpp"

namespace astraeus::bin {

/// Runs one controller of an HA group until SIGINT/SIGTERM (in `signals`,
/// blocked by the caller) or until it loses leadership. Returns the
/// process's exit code: 0 after a stop signal, 1 when it cannot start
/// (etcd unreachable, a bad setting: logged with what was wrong), 3 when
/// it was deposed (a service manager restarts it as a standby).
int run_ha_controller(caf::actor_system& sys, const ControllerConfig& cfg,
                      const sigset_t& signals);

} // namespace astraeus::bin
