#pragma once
/// @file
/// Every typed actor interface of Astraeus, in one place: a reader learns the
/// whole system's messaging here. One line per handler says what it does and
/// how it fails. Handlers fail with `astraeus::ec` errors (messages/error.hpp).

#include <cstdint>
#include <string>

#include <caf/io/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "messages/type_ids.hpp"

namespace astraeus {

/// One GPU on the controller, keyed by its id (UUID for NVIDIA, unique_id
/// or the PCI address for AMD): its facts, health and holder.
/// Source: shared/DESIGN.md ("Actors"), shared/seeds/gpus.md.
using gpu_actor = caf::typed_actor<
  // Fresh facts from its machine's report.
  caf::reacts_to<v1::Gpu>,
  // Fresh readings alone from a readings report (issue 14): use,
  // temperature, power, memory used, clocks (messages/report_readings.hpp).
  caf::reacts_to<atom::readings, v1::GpuReadings>,
  // Its machine went Up (true) or stopped being Up (false).
  caf::reacts_to<atom::machine_up, bool>,
  // The worker the scheduler placed on it (`train-0`, `sweep[3]-0`); empty =
  // free. A held GPU is never judged Foreign for the memory in use.
  caf::reacts_to<atom::assign, std::string>,
  // The GPU as `astra gpus` shows it.
  caf::replies_to<atom::get>::with<v1::GpuView>>;

/// Every GPU's history on the controller (actors/controller/gpu_history_actor.hpp):
/// raw samples for 1 h, 1-minute means for 6 h, 5-minute means for 24 h,
/// written to the store (family `gpu_history`) in one batch per flush.
/// Source: issue 19 "GPU history", issue 13 item 6 (`astra gpu show`).
using gpu_history_actor = caf::typed_actor<
  // From a machine actor after each report: one sample per GPU (point_of
  // its facts at the report's time, with the health its GPU actor last
  // judged; issue 14: computed there, not a GpuList of whole views). A
  // sample not newer than its GPU's last one, or of a GPU past the cap, is
  // dropped. Never fails.
  caf::reacts_to<v1::GpuSamples>,
  // A get_gpu_history request (from the cluster): the GPU's points, oldest
  // first. Failures in Response.error: ec::invalid_request "machine M has
  // no GPU G in its history", or naming another body.
  caf::replies_to<v1::Request>::with<v1::Response>,
  // `astra machine remove`: forgets the machine's history, stored points too.
  caf::reacts_to<atom::remove, std::string>,
  // Internal timer (every flush interval): compacts the tiers and writes
  // the pending changes in one batch (a failed write is retried next time).
  caf::reacts_to<atom::tick>>;

/// The gate, as the machine actors see it: delivers commands to an agent's
/// session and returns the agent's answer. Sent by the machine actors only
/// (each to the session its `connected` message named).
using gate_command_actor = caf::typed_actor<
  // Clears GPU `gpu` on the agent of `session`. Fails with ec::not_connected
  // when the session is gone, ec::timeout when the agent does not answer.
  caf::replies_to<atom::clear, uint64_t, std::string>::with<v1::ClearFaultReply>,
  // Hands the agent of `session` the whole set of workers its machine should
  // hold (a worker_orders frame); dropped when the session is gone (the
  // machine sends the set again when its agent reconnects).
  caf::reacts_to<atom::assign, uint64_t, v1::WorkerOrders>,
  // Reads a piece of a worker's log on the agent of `session`. Fails with
  // ec::not_connected when the session is gone, ec::timeout when the agent
  // does not answer.
  caf::replies_to<atom::logs, uint64_t, v1::LogsCommand>::with<v1::LogsReply>>;

/// The gate (actors/controller/gate.hpp), a typed CAF broker: its commands
/// for the machine actors, its internal timers and the socket events CAF's
/// middleman delivers. Nothing else reaches it.
using gate_actor = gate_command_actor::extend<
  // From the doorman: a peer connected. Closed at once (nothing read) when
  // its source address already holds gate.max_unauthenticated_per_address
  // connections that were not welcomed; else its handshake begins and its
  // hello_due timer is armed.
  caf::reacts_to<caf::io::new_connection_msg>,
  // From the peer's scribe: a frame's header or body. A garbage, oversized,
  // tampered or replayed record, a frame out of order, a wrong protocol
  // version or a report for another machine closes the connection with a
  // refusal and a log line naming the peer and the reason.
  caf::reacts_to<caf::io::new_data_msg>,
  // From the peer's scribe: the connection ended (a frame cut short is
  // logged as "truncated frame"); the machine actor is told its session
  // ended and the commands waiting for that agent fail with
  // ec::not_connected.
  caf::reacts_to<caf::io::connection_closed_msg>,
  // From the doorman: the listening socket closed (logged).
  caf::reacts_to<caf::io::acceptor_closed_msg>,
  // Internal timer (to itself, gate.hello_timeout after a connection): the
  // peer of `connection` in session `session` has not sent its hello; it is
  // refused with ec::timeout.
  caf::reacts_to<atom::hello_due, caf::io::connection_handle, uint64_t>,
  // Internal timer (to itself, gate.request_timeout after a command): the
  // clear-fault or logs command `id` is still unanswered; its requester
  // gets ec::timeout.
  caf::reacts_to<atom::expire, uint64_t>,
  // Internal timer (HA mode: every gate.keepalive_interval when it is not
  // zero): each welcomed agent that was sent nothing since the last tick
  // gets a Keepalive frame, so an agent can tell a frozen leader from a
  // quiet one.
  caf::reacts_to<atom::tick>>;

/// A standby controller's gate in HA mode (actors/controller/standby_gate.hpp),
/// a typed CAF broker: it tells every peer who leads and closes. Reached by
/// the HA controller (bin/controller_ha.cpp) and the socket events CAF's
/// middleman delivers.
using standby_gate_actor = caf::typed_actor<
  // From the HA controller whenever the leader key changes: the leader's
  // gate, HOST:PORT, or "" when none leads. Peers held for a leader are
  // answered `not_leader` with it at once.
  caf::reacts_to<atom::leader, std::string>,
  // From the doorman: a peer connected. Closed at once when its source
  // address holds max_open_per_address connections already; else its
  // hello_due timer is armed.
  caf::reacts_to<caf::io::new_connection_msg>,
  // From the peer's scribe: its first record (any frame that parses, a
  // ChannelHello from every client of this build). Answered in the clear,
  // then closed: `not_leader` naming the leader's gate, or, while none
  // leads, held until one does (`no_leader` at the hold's end). A garbage,
  // oversized or empty record is refused with its reason and closed.
  caf::reacts_to<caf::io::new_data_msg>,
  // From the peer's scribe: the connection ended; it is forgotten.
  caf::reacts_to<caf::io::connection_closed_msg>,
  // From the doorman: the listening socket closed (logged).
  caf::reacts_to<caf::io::acceptor_closed_msg>,
  // Internal timer (hello_timeout after a connection; no_leader_hold after
  // a held peer asked): a peer that sent nothing is closed with ec::timeout;
  // a held one is told `no_leader`.
  caf::reacts_to<atom::hello_due, caf::io::connection_handle, uint64_t>>;

/// The agent (actors/agent/agent.hpp), a typed CAF broker on every
/// machine: its connection to the gate, its timers, and what its own
/// helpers (the probe, the kernel-log thread, the supervisor's job actors)
/// send it. Nothing outside the agent's process reaches it; commands from
/// the controller arrive as frames on its connection.
using agent_actor = caf::typed_actor<
  // Internal timer: (re)connect to the gate now, to the gate
  // actors/agent/gate_targets.hpp picks (the given ones in turn, or the
  // leader a standby named); a failed attempt moves on at once, pauses
  // 250 ms while an HA group is between leaders, or backs off
  // exponentially (reconnect.min_backoff .. max_backoff) when no
  // controller answers.
  caf::reacts_to<atom::reconnect>,
  // Internal timer, every report interval: a heartbeat report with fresh
  // host facts, and a discovery pass.
  caf::reacts_to<atom::tick>,
  // From the probe: a discovery pass finished; latches are evaluated and a
  // changed section is reported at once.
  caf::reacts_to<v1::GpuSection>,
  // Internal timer: discovery pass `pass` is overdue; the last known GPUs
  // are reported unresponsive.
  caf::reacts_to<atom::probe_due, uint64_t>,
  // From the kernel-log thread: a GPU event (Xid, fallen off the bus, AMD
  // reset); latched durably, reported at once when it latches.
  caf::reacts_to<v1::KernelEvent>,
  // From its latch syncer's thread: the store's log was synced for the
  // latches written up to this generation (an error: they are held as not
  // durable and reported so).
  caf::reacts_to<atom::tick, uint64_t, caf::error>,
  // From the kernel-log thread, after the events of the log's backlog (and
  // as a timer, kmsg_catch_up_bound after start): the first discovery pass
  // starts; later ones do nothing.
  caf::reacts_to<atom::complete>,
  // Internal timer, every workers.poll_interval: the supervisor checks the
  // workers; a changed status is reported at once.
  caf::reacts_to<atom::supervise>,
  // From a supervisor job's detached actor: job `job` (a start, a CDI sync)
  // finished; its result is applied on the agent.
  caf::reacts_to<atom::job_done, uint64_t>,
  // Internal timer (HA mode, a gate that announced keepalives): checks
  // whether connection number `connection` has heard nothing from its gate
  // for three keepalive intervals (a frozen leader: SIGSTOP, a paused VM);
  // then it leaves that gate, avoids it a while and tries the next one.
  // Also armed at each connect: a gate that has not welcomed the agent by
  // its bound is left the same way.
  caf::reacts_to<atom::lapse, uint64_t>,
  // From its scribe: a frame's header or body from the gate; a bad one
  // drops the connection (reconnect with back-off). A standby's refusal
  // (HA mode: not_leader naming the leader's gate, or no_leader) makes it
  // connect to that leader at once, or ask again shortly
  // (actors/agent/gate_targets.hpp).
  caf::reacts_to<caf::io::new_data_msg>,
  // From its scribe: the gate closed the connection; after a welcomed
  // session the same gate is tried again at once, then the others, then
  // back-off.
  caf::reacts_to<caf::io::connection_closed_msg>>;

/// One machine on the controller (the "node actor"): the state machine
/// Idle -> Up -> Down, Maintenance, plus the cordon and pressure flags.
/// Source: shared/seeds/machines.md ("States").
using machine_actor = caf::typed_actor<
  // A report from the machine's agent: restarts the heartbeat, Idle/Down ->
  // Up (never out of Maintenance), refreshes facts and pressure.
  caf::reacts_to<v1::MachineReport>,
  // The machine as the CLI shows it.
  caf::replies_to<atom::get>::with<v1::MachineView>,
  // Sets (true) or clears (false) the cordon; stored with sync before the
  // answer. Fails with ec::store_failure when the store write fails.
  caf::replies_to<atom::cordon, bool>::with<v1::MachineView>,
  // Turns maintenance on or off; stored with sync before the answer.
  // Fails with ec::store_failure when the store write fails.
  caf::replies_to<atom::maintenance, bool>::with<v1::MachineView>,
  // The agent's gate session `session` started (true, with the gate that
  // holds it; from the cluster on enrolment) or ended (false; from the gate,
  // with a null gate).
  caf::reacts_to<atom::connected, uint64_t, bool, gate_command_actor>,
  // A GPU's health changed: id, health, reasons joined by "; ".
  caf::reacts_to<atom::health, std::string, gpu_health, std::string>,
  // Clears a GPU's fault latch on the machine (delivered to its agent).
  // Fails with ec::not_connected when the agent is not connected, and with
  // the agent's error when the clear fails there.
  caf::replies_to<atom::clear, std::string>::with<v1::ClearFaultResult>,
  // Timer: the heartbeat deadline may have passed (sent to itself).
  caf::reacts_to<atom::lapse>,
  // Its GPUs, sorted by PCI address.
  caf::replies_to<atom::gpus>::with<std::vector<v1::GpuView>>,
  // From the scheduler: the whole set of workers this machine should hold.
  // Sent to the agent now if connected, else at its next connection, and
  // again after each report until the agent acknowledges that generation.
  caf::reacts_to<atom::assign, v1::WorkerOrders>,
  // From the gate: the workers the agent holds (its answer to the orders).
  // Passed on to the scheduler when it differs from the last one.
  caf::reacts_to<v1::WorkerStatuses>,
  // Sets and removes labels; stored with sync before the answer, then the
  // scheduler places by them. Fails with ec::invalid_request naming a bad
  // key or value, ec::store_failure when the write fails (nothing changes).
  caf::replies_to<v1::SetLabels>::with<v1::MachineView>,
  // A piece of a worker's log, read by the machine's agent. Fails with
  // ec::not_connected when the agent is not connected, ec::invalid_request
  // with the agent's words when it has no such log.
  caf::replies_to<atom::logs, v1::LogsCommand>::with<v1::LogChunk>,
  // From the scheduler: the GPUs of this machine it set aside, with why
  // (the whole list each time); shown on the machine page. Never fails.
  caf::reacts_to<v1::SchedulerNotes>,
  // Issue 21, from the validations: the latest quick check's step (its
  // verdict is the machine's QUICK badge). Never fails.
  caf::reacts_to<atom::validate, v1::ValidationStep>,
  // Issue 21, from the validations: whether its pool requires acceptance,
  // whether to accept it now (it passed, or an admin accepts it anyway) and
  // the admin's reason ("" when it passed). Required and never accepted:
  // the machine is Accepting (only a validation's checks are placed there).
  // An acceptance is stored with sync before the answer; fails with
  // ec::store_failure when the write fails.
  caf::replies_to<atom::accept, bool, bool, std::string>::with<v1::MachineView>,
  // From the validations: an acceptance that ran here ended without passing
  // it (failed, or cancelled); while Accepting, the machine's waiting
  // reasons say so and what to do, not that it runs. Never fails.
  caf::reacts_to<atom::accept, v1::Validation>,
  // Issue 20, from the cluster: a request about this machine: its body
  // `set_data_location` (`astra machine data-location NAME PATH`, admins):
  // the data location an admin chose, which wins over the installer's;
  // stored with sync before the answer. Fails with ec::invalid_request
  // naming a path that is not absolute or not normal, or another body;
  // ec::store_failure when the write fails (nothing changes).
  caf::replies_to<v1::Request>::with<v1::MachineView>,
  // `astra drain` (issue 13): cordons the machine and records the drain's
  // deadline (stored with sync before the answer); at the deadline the runs
  // with workers here are stopped (their workers stop gracefully) and the
  // drain is done. Fails with ec::store_failure when the write fails.
  caf::replies_to<v1::DrainMachine>::with<v1::MachineView>,
  // Internal timer: the drain with deadline `unix ms` is due (a stale one,
  // whose deadline no longer matches, is ignored).
  caf::reacts_to<atom::drain_due, int64_t>>;

/// The agent's discovery: runs GPU discovery passes on a thread of its own
/// (spawned detached), so a slow driver never holds up the agent's heartbeat.
using probe_actor = caf::typed_actor<
  // One discovery pass; `rdma_up`: the machine has an active RDMA port.
  caf::replies_to<atom::discovered, bool>::with<v1::GpuSection>>;

/// The controller's front door: the machine registry and the CLI's requests.
using cluster_actor = caf::typed_actor<
  // An agent's hello for gate session `session` (its `identity_key` set by
  // the gate from the secure channel): a known machine must present the
  // Ed25519 key it enrolled with; a new one a join token, which it uses up
  // (its labels become the machine's). Registers the machine (Idle), marks
  // it connected, and returns its machine actor, the only actor that
  // session may address. Fails with ec::identity_mismatch when the name
  // belongs to another identity, ec::enrollment_required /
  // ec::enrollment_used / ec::enrollment_expired for a missing, used or
  // expired token, ec::invalid_request when the name is empty or malformed,
  // ec::store_failure when the registration cannot be stored. From an
  // embedding control plane: the session has no gate, so commands to the
  // machine's agent (clear-fault, logs) fail with ec::not_connected.
  caf::replies_to<atom::enrol, v1::Hello, uint64_t>::with<machine_actor>,
  // The same from the gate, which delivers the session's commands: the
  // machine actor is handed `gate` with its session.
  caf::replies_to<atom::enrol, v1::Hello, uint64_t, gate_command_actor>::with<machine_actor>,
  // A CLI request (list, show, cordon, maintenance, GPUs); failures are carried
  // in Response.error (e.g. no_such_machine: "no machine named gpu-09").
  caf::replies_to<v1::Request>::with<v1::Response>,
  // Looks up a machine actor by name. Fails with ec::no_such_machine.
  caf::replies_to<atom::get, std::string>::with<machine_actor>,
  // The principal holding API token `token` (a CLI session's hello). Fails
  // with ec::unauthenticated: no token, unknown, expired or revoked.
  caf::replies_to<atom::login, std::string>::with<v1::Principal>>;

/// The scheduler: keeps every run (family `runs`) and places waiting runs'
/// workers onto concrete GPUs, all or nothing, after every change.
/// Source: issue "The scheduler"; actors/scheduler/placement.hpp (the engine).
using scheduler_actor = caf::typed_actor<
  // Submits a run: validated, stored Waiting with sync, then a schedule pass;
  // answers the run as it is after the pass. Fails with ec::invalid_request
  // naming the problem (bad spec, a run of that name exists),
  // ec::store_failure when it cannot be stored.
  caf::replies_to<atom::submit, v1::RunSpec>::with<v1::Run>,
  // The run a reference names (as atom::remove's). Fails with
  // ec::invalid_request: "no run named X[ in workspace W]".
  caf::replies_to<atom::get, std::string>::with<v1::Run>,
  // Every run, sorted by name.
  caf::replies_to<atom::runs>::with<v1::RunList>,
  // Deletes a run (a reference: "<workspace>/<name>", or a bare name: the
  // default workspace's, else the only workspace's that has one; issue 13):
  // releases its GPUs, answers its last state (Stopped). A run whose
  // workers still go on is kept, `deleted`, its workers Stopping until
  // their agents report how they ended (issue 23 item 6); any other is
  // erased from the store with sync. Fails with ec::invalid_request (no
  // such run, one of that name in several workspaces, already deleted),
  // ec::store_failure when the write fails.
  caf::replies_to<atom::remove, std::string>::with<v1::Run>,
  // Stops a live run and keeps it listed: Stopped with `why` (its workers
  // are told to stop; their GPUs are freed), stored with the next flush;
  // answers it (an ended run as it is). Fails with ec::invalid_request (no
  // such run). A drain's deadline (issue 13): `astra run show` then says
  // why the run ended.
  caf::replies_to<atom::stop, std::string, std::string>::with<v1::Run>,
  // A machine's snapshot: adds or updates it (labels, schedulable, GPUs and
  // their health); held GPUs stay held. A bad snapshot never hides the
  // machine: only offending GPUs (a real UUID two machines report, an id
  // listed twice, unknown health, past 64) are set aside and the machine
  // actor is told which and why (v1::SchedulerNotes).
  caf::reacts_to<v1::SchedulerMachine>,
  // A run's workers finished: releases its GPUs, the run is Stopped (stored
  // with sync). An unknown or not placed run is logged and ignored.
  caf::reacts_to<atom::complete, std::string>,
  // A machine actor introduces itself: the scheduler sends it the workers
  // placed on it now and after every change.
  caf::reacts_to<atom::attach, std::string, machine_actor>,
  // A machine's agent says which workers it holds: they are acknowledged;
  // after the machine was Down, a worker it no longer holds has failed.
  caf::reacts_to<v1::WorkerStatuses>,
  // Internal: writes the runs changed since the last flush in one batch
  // with sync, then answers the requests waiting for it (group commit).
  caf::reacts_to<atom::tick>,
  // Internal (issue 14, background sync): every burst written up to number
  // `seq` is durable (or not: `err`); their answers and worker sets go out
  // (or their requests fail with the error and their runs are written again).
  caf::reacts_to<atom::tick, uint64_t, caf::error>,
  // Internal timer: the time limit of run or copy `queue name` placed with
  // token `token` is reached; it is stopped ("time limit of 1h reached").
  caf::reacts_to<atom::deadline, std::string, uint64_t>,
  // Internal timer (issue 23 item 6): deleted run `key`, submitted at
  // `submitted_unix_ms`, whose workers have all ended is forgotten (ignored
  // when the run of that key is another or not deleted).
  caf::reacts_to<atom::expire, std::string, int64_t>,
  // `astra workspace delete W` (its live runs refused before): forgets
  // every ended run of workspace W whose workers have all ended (erased
  // from the store with the next flush), so a new workspace of that name
  // starts without them. Answers how many. Never fails.
  caf::replies_to<atom::expire, std::string>::with<uint64_t>,
  // `astra machine remove` (issue 13): forgets the machine (its GPUs leave
  // the index; later snapshots from its actor are ignored) and answers
  // true. Fails with ec::invalid_request naming the runs that still have
  // workers there.
  caf::replies_to<v1::RemoveMachine>::with<bool>,
  // Issue 12 (from the validations): every machine's degraded RDMA ports,
  // replacing the last list. A GPU worker placed from now on is given its
  // machine's (WorkerAssignment.degraded_ib_ports) and its order leaves
  // those not `kept` out of NCCL_IB_HCA; placed workers keep theirs.
  caf::reacts_to<v1::DegradedIbPortList>>;

/// One validation (actors/validation/validation_actor.hpp): runs its steps,
/// one check at a time per machine, each as a run of the scheduler (a
/// worker through the normal worker path), and keeps them in the store
/// with sync. Source: shared/DESIGN.md ("Validation").
using validation_actor = caf::typed_actor<
  // Internal timer (validation.poll_interval): starts what may start, looks
  // at the runs of running steps and applies their ends.
  caf::reacts_to<atom::poll>,
  // From its owner: machine `name` is not in the cluster's list any more.
  // The validation asks the cluster; when the machine is gone (no such
  // machine), its steps that have not ended fail ("machine X was removed
  // before the check finished") and their runs are removed, so the
  // validation finishes. Never fails.
  caf::reacts_to<atom::remove, std::string>,
  // From its owner: `astra astraeus cancel` by `by` for `why` ("" = none):
  // its steps not ended are Cancelled, the runs of Running ones removed, it
  // is stored (sync) and told to its owner Cancelled, which is the answer.
  // One that ended already answers as it stands. Never fails.
  caf::replies_to<atom::stop, std::string, std::string>::with<v1::Validation>,
  // The validation as it stands.
  caf::replies_to<atom::get>::with<v1::Validation>>;

/// The validations of a controller (actors/validation/validations_actor.hpp):
/// starts them (on demand, the quick check when a machine comes Up, the
/// acceptance a pool's policy asks for), the one check slot per machine,
/// the latest result per (machine, check), pool policies and the Cluster
/// Report.
using validations_actor = caf::typed_actor<
  // The validation requests of the CLI and the HTTP API (bodies
  // start_validation .. list_validation_policies), from the cluster; failures
  // are carried in Response.error (ec::invalid_request naming what was
  // wrong: an unknown suite, no such pool or machine, a bad policy).
  caf::replies_to<v1::Request>::with<v1::Response>,
  // The cluster, once it runs (machines are looked up through it).
  caf::reacts_to<atom::attach, cluster_actor>,
  // Validation `id` asks (true) for machine `machine`'s one check slot, or
  // gives it back (false). The answer is "" when granted, else why the step
  // waits ("gpu-03: another check runs there").
  caf::replies_to<atom::slot, std::string, std::string, bool>::with<std::string>,
  // A step ended (from a validation): kept as the latest of its check on its
  // machine (stored with sync); a quick step's verdict goes to the machine.
  caf::reacts_to<atom::validate, v1::ValidationStep>,
  // A validation changed (from itself): its copy for lists and looks-ups.
  caf::reacts_to<atom::validate, v1::Validation>,
  // From the cluster: an admin cleared a latched fault of a GPU of machine
  // `name` (`astra gpus clear-fault`). A machine whose latest quick check
  // failed gets a quick check again (validation.quick_on_up), so its QUICK
  // badge and the Cluster Report's finding say what is true after the
  // repair, not what was before it. Never fails.
  caf::reacts_to<atom::clear, std::string>,
  // Internal timer: looks for machines that came Up (their quick check) or
  // that their pool's policy holds as Accepting.
  caf::reacts_to<atom::poll>>;

} // namespace astraeus
