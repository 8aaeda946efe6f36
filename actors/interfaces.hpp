#pragma once
/// @file
/// Every typed actor interface of Astraeus, in one place: a reader learns the
/// whole system's messaging here. One line per handler says what it does and
/// how it fails. Handlers fail with `astraeus::ec` errors (messages/error.hpp).

#include <cstdint>
#include <string>

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
  // Its machine went Up (true) or stopped being Up (false).
  caf::reacts_to<atom::machine_up, bool>,
  // The worker the scheduler placed on it (`train-0`, `sweep[3]-0`); empty =
  // free. A held GPU is never judged Foreign for the memory in use.
  caf::reacts_to<atom::assign, std::string>,
  // The GPU as `astra gpus` shows it.
  caf::replies_to<atom::get>::with<v1::GpuView>>;

/// The gate, as the machine actors see it: delivers commands to an agent's
/// session and returns the agent's answer.
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
  // holds it) or ended (false).
  caf::reacts_to<atom::connected, uint64_t, bool, caf::actor>,
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
  caf::replies_to<atom::logs, v1::LogsCommand>::with<v1::LogChunk>>;

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
  // ec::store_failure when the registration cannot be stored.
  caf::replies_to<atom::enrol, v1::Hello, uint64_t>::with<machine_actor>,
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
  // The run named so. Fails with ec::invalid_request: "no run named X".
  caf::replies_to<atom::get, std::string>::with<v1::Run>,
  // Every run, sorted by name.
  caf::replies_to<atom::runs>::with<v1::RunList>,
  // Deletes a run: releases its GPUs, erases it from the store with sync,
  // answers its last state (Stopped). Fails with ec::invalid_request (no
  // such run), ec::store_failure when the erase fails.
  caf::replies_to<atom::remove, std::string>::with<v1::Run>,
  // A machine's snapshot: adds or updates it (labels, schedulable, GPUs and
  // their health); held GPUs stay held. Bad snapshots are logged and dropped.
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
  // Internal timer: the time limit of run or copy `queue name` placed with
  // token `token` is reached; it is stopped ("time limit of 1h reached").
  caf::reacts_to<atom::deadline, std::string, uint64_t>>;

} // namespace astraeus
