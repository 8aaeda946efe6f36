#pragma once
/// @file
/// The CAF scheduler every Astraeus process runs its actors on (issue 14):
/// CAF 0.17's work stealing, with idle workers woken for work they can steal.
///
/// CAF's own work stealing (`caf::policy::work_stealing`) puts a message sent
/// from an actor on a worker's own queue and wakes nobody: another worker
/// finds it only by polling. With the polling phase off (issue 17: a message
/// waited up to ~100 us per hop for the next poll, and an idle process spun
/// ~50 ms after each burst), an idle worker sleeps on its condition variable
/// and looks for work to steal once per relaxed sleep (10 ms), so two actors
/// that feed each other (a requester and the scheduler, the scheduler and its
/// machines) share one core while the other sleeps (bench/RESULTS.md 28:
/// ~1 core of 2 used, 20-24k placements/s). CAF's work sharing wakes a worker
/// for every message but loses the cache locality of a worker running the
/// actor it just sent to (RESULTS 29: the gate's ingestion 42-47k reports/s
/// in two runs of three against 55-67k, with ~20 % more memory).
///
/// `wake_stealing` keeps work stealing's queues (a message sent on a worker
/// goes to the head of that worker's queue; other workers steal from the
/// tail) and adds one shared sleep: a worker out of work spins briefly
/// (`work-stealing.aggressive-poll-attempts`, stealing every
/// `work-stealing.aggressive-steal-interval` attempts), then sleeps on the
/// coordinator's condition variable; every enqueue, from a worker or from
/// outside (the I/O multiplexer, a syncer), wakes one sleeping worker, which
/// takes its own queue's head or steals another's tail. A worker never polls
/// with sleeps in between, so an idle process does not spin, and a burst of
/// work reaches every core at once. `work-stealing.relaxed-sleep-duration`
/// bounds a sleep, as a safety net.

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

namespace astraeus {

/// Makes the actor system's scheduler module for `sys`: a
/// `caf::scheduler::coordinator` with the `wake_stealing` policy (this
/// file's comment) when `scheduler.policy` is CAF's default (`stealing`);
/// CAF's own coordinator otherwise (`sharing`, or `testing`: the
/// deterministic coordinator the tests set after `configure_actor_system`).
/// Installed by `configure_actor_system` (runtime/process/system_setup.hpp)
/// as a module factory; never returns null.
caf::actor_system::module* make_scheduler(caf::actor_system& sys);

/// Adds `make_scheduler` to `cfg`'s module factories (call before
/// constructing the `caf::actor_system`).
void use_wake_stealing(caf::actor_system_config& cfg);

} // namespace astraeus
