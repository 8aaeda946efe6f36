#pragma once
/// @file
/// CAF type IDs and atoms of Astraeus. Register them on every actor system
/// with `cfg.add_message_types<caf::id_block::astraeus>()` (see
/// runtime/process/system_setup.hpp, which does it for you).

#include <caf/type_id.hpp>

#include "messages/astraeus.pb.h"
#include "messages/gpu_health_state.hpp"
#include "messages/inspect.hpp"

CAF_BEGIN_TYPE_ID_BLOCK(astraeus, caf::first_custom_type_id)

  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::MachineReport))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::MachineView))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::MachineList))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::Hello))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::Welcome))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::Request))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::Response))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::Frame))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::Gpu))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::GpuView))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::GpuList))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::GpuSection))
  CAF_ADD_TYPE_ID(astraeus, (std::vector<astraeus::v1::GpuView>))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::ClearFaultResult))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::ClearFaultReply))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::XidPolicyTable))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::KernelEvent))

  /// Asks an actor for its current view.
  CAF_ADD_ATOM(astraeus, astraeus::atom, get, "get")
  /// Sets or clears a machine's cordon flag.
  CAF_ADD_ATOM(astraeus, astraeus::atom, cordon, "cordon")
  /// Turns a machine's maintenance on or off.
  CAF_ADD_ATOM(astraeus, astraeus::atom, maintenance, "maintenanc")
  /// Internal timer (machine -> itself): its heartbeat deadline may have passed.
  CAF_ADD_ATOM(astraeus, astraeus::atom, lapse, "lapse")
  /// An agent connected (true) or its gate session ended (false).
  CAF_ADD_ATOM(astraeus, astraeus::atom, connected, "connected")
  /// Registers a machine by name and identity.
  CAF_ADD_ATOM(astraeus, astraeus::atom, enrol, "enrol")
  /// Internal timer: the agent's report interval (agent -> itself); the
  /// scheduler's group commit (scheduler -> itself).
  CAF_ADD_ATOM(astraeus, astraeus::atom, tick, "tick")
  /// Internal timer (agent -> itself): (re)connect to the gate.
  CAF_ADD_ATOM(astraeus, astraeus::atom, reconnect, "reconnect")
  /// Asks a machine for its GPUs.
  CAF_ADD_ATOM(astraeus, astraeus::atom, gpus, "gpus")
  /// Tells a GPU actor whether its machine is Up.
  CAF_ADD_ATOM(astraeus, astraeus::atom, machine_up, "machineup")
  /// The agent's GPU discovery pass finished (probe -> agent).
  CAF_ADD_ATOM(astraeus, astraeus::atom, discovered, "discovered")
  /// Clears a GPU's fault latch (controller -> machine -> gate -> agent).
  CAF_ADD_ATOM(astraeus, astraeus::atom, clear, "clear")
  /// A GPU actor's health changed (gpu -> machine).
  CAF_ADD_ATOM(astraeus, astraeus::atom, health, "health")
  /// Internal timer (scheduler -> itself): a run's time limit is reached.
  CAF_ADD_ATOM(astraeus, astraeus::atom, deadline, "deadline")
  /// Scheduler: submits a run.
  CAF_ADD_ATOM(astraeus, astraeus::atom, submit, "submit")
  /// Scheduler: lists every run.
  CAF_ADD_ATOM(astraeus, astraeus::atom, runs, "runs")
  /// Scheduler: deletes a run, releasing its GPUs.
  CAF_ADD_ATOM(astraeus, astraeus::atom, remove, "remove")
  /// Scheduler: a run's workers finished.
  CAF_ADD_ATOM(astraeus, astraeus::atom, complete, "complete")
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::RunSpec))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::Run))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::RunList))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::SchedulerMachine))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::WorkerOrders))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::WorkerStatuses))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::SetLabels))
  /// Scheduler: a machine actor introduces itself (name, handle).
  CAF_ADD_ATOM(astraeus, astraeus::atom, attach, "attach")
  /// The workers a machine should hold (scheduler -> machine -> gate).
  CAF_ADD_ATOM(astraeus, astraeus::atom, assign, "assign")
  // The secure gate (issue 7).
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::Principal))
  /// The gate authenticates a CLI session's API token (gate -> cluster).
  CAF_ADD_ATOM(astraeus, astraeus::atom, login, "login")
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::LogsCommand))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::LogsReply))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::LogChunk))
  /// Internal timer (agent -> itself): the worker supervisor's check.
  CAF_ADD_ATOM(astraeus, astraeus::atom, supervise, "supervise")
  /// Reads a worker's log (controller -> machine -> gate -> agent).
  CAF_ADD_ATOM(astraeus, astraeus::atom, logs, "logs")
  // renov-determinism (issue 11): internal timers get atoms of their own,
  // never a command's atom with another arity.
  /// Internal timer (gate -> itself): a connection's hello deadline.
  CAF_ADD_ATOM(astraeus, astraeus::atom, hello_due, "hellodue")
  /// Internal timer (gate -> itself): a command to an agent is overdue.
  CAF_ADD_ATOM(astraeus, astraeus::atom, expire, "expire")
  /// Internal timer (agent -> itself): a GPU discovery pass is overdue.
  CAF_ADD_ATOM(astraeus, astraeus::atom, probe_due, "probedue")
  /// Internal (a supervisor job's detached actor -> agent): the job finished.
  CAF_ADD_ATOM(astraeus, astraeus::atom, job_done, "jobdone")

  // renov-vocab (issue 11): the typed vocabularies that travel between actors.
  /// A GPU's health (gpu -> machine, with atom::health).
  CAF_ADD_TYPE_ID(astraeus, (astraeus::gpu_health))

  // inventory (issue 18): GPUs the scheduler set aside (scheduler -> machine).
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::SchedulerNotes))

  // validation (issue 21): validations, their steps and pool policies.
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::Validation))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::ValidationStep))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::ValidationPolicy))
  /// Validation: a machine came Up (machine -> validations), a step's
  /// outcome (validation -> validations -> machine).
  CAF_ADD_ATOM(astraeus, astraeus::atom, validate, "validate")
  /// Internal timer (validation -> itself): look at its steps' runs.
  CAF_ADD_ATOM(astraeus, astraeus::atom, poll, "valpoll")
  /// A validation asks for (true) or gives back (false) a machine's one
  /// check slot (validation -> validations).
  CAF_ADD_ATOM(astraeus, astraeus::atom, slot, "valslot")
  /// A machine is accepted in its pool (validations -> machine).
  CAF_ADD_ATOM(astraeus, astraeus::atom, accept, "accept")
  // cli (issue 13): day-two commands.
  /// Drains a machine (cluster -> machine actor).
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::DrainMachine))
  /// Forgets a removed machine (cluster -> scheduler).
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::RemoveMachine))
  /// Internal timer (machine -> itself): a drain's deadline is reached.
  CAF_ADD_ATOM(astraeus, astraeus::atom, drain_due, "draindue")
  /// Scheduler: stops a run and keeps it listed, Stopped with a reason (a
  /// drain's deadline: "machine gpu-01 was drained").
  CAF_ADD_ATOM(astraeus, astraeus::atom, stop, "stop")
  // fabric (issue 12): the ports NCCL_IB_HCA leaves out (validations -> scheduler).
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::DegradedIbPortList))
  // HA (issue 15): who leads, told to a standby's gate.
  /// The leader's gate changed, HOST:PORT or "" for none (HA controller ->
  /// standby gate).
  CAF_ADD_ATOM(astraeus, astraeus::atom, leader, "leader")
  /// A GPU's readings from a readings report (issue 14; machine -> GPU).
  CAF_ADD_ATOM(astraeus, astraeus::atom, readings, "readings")

  /// issue 14: a GPU's readings (machine -> GPU actor); a machine's GPU
  /// samples (machine -> GPU history).
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::GpuReadings))
  CAF_ADD_TYPE_ID(astraeus, (astraeus::v1::GpuSamples))

CAF_END_TYPE_ID_BLOCK(astraeus)
