#pragma once
/// @file
/// Set-up shared by every process that hosts Astraeus actors (and by
/// embedding control planes): message types, the error category, the I/O
/// module, and CAF settings that must hold everywhere.

#include <caf/actor_system_config.hpp>

namespace astraeus {

/// Registers Astraeus' message types and error category on `cfg`, loads
/// CAF's I/O module (the gate and the agent's link are brokers) and the
/// `wake_stealing` scheduler (runtime/process/wake_stealing.hpp; CAF's own
/// when `scheduler.policy` is set to `sharing` or `testing`). Call before
/// constructing the `caf::actor_system`.
void configure_actor_system(caf::actor_system_config& cfg);

/// Like `configure_actor_system`, without the I/O module: for in-process
/// use such as tests on the deterministic coordinator.
void register_astraeus_types(caf::actor_system_config& cfg);

} // namespace astraeus
