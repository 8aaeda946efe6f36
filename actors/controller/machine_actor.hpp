#pragma once
/// @file
/// The machine actor: one per machine on the controller. Its states are the
/// seed's (shared/seeds/machines.md, "States"):
/// - `Idle`: registered, has not reported yet (also after a controller
///   restart, until the agent's first report to this controller);
/// - `Up`: reporting;
/// - `Down`: no report for the heartbeat lapse (default 60 s);
/// - `Maintenance`: taken out of service by an admin; reports never end it.
/// Cordon and pressure are flags beside the state; either stops new work.

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor_clock.hpp>
#include <caf/error.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/interfaces.hpp"
#include "actors/controller/machine_pressure.hpp"
#include "messages/astraeus.pb.h"
#include "runtime/process/wall_clock.hpp"

namespace astraeus {

class Store;

/// Validated settings of one machine actor.
struct machine_config {
  /// The stored record: name, identity, cordon, maintenance, last facts.
  v1::MachineRecord record;
  /// A machine is `Down` once no report arrived for this long (> 0).
  caf::timespan heartbeat_lapse = std::chrono::seconds{60};
  /// Thresholds for memory and disk pressure.
  pressure_thresholds pressure;
  /// Where the record is kept; null keeps it in memory only (benchmarks).
  std::shared_ptr<Store> store;
  /// The scheduler, sent a snapshot whenever what it places by changes;
  /// null: none.
  scheduler_actor scheduler;
  /// Every GPU's history, sent one sample per GPU after each report; null:
  /// none.
  gpu_history_actor history;
  /// The wall clock of the times users read (state since, last report) and
  /// of the interval between stored facts; also handed to its GPU actors.
  std::shared_ptr<const wall_clock> clock = real_wall_clock();

  /// Errors: ec::invalid_config when the name is empty, the lapse <= 0 or
  /// the clock is null.
  caf::error validate() const;
};

/// The state of one machine actor.
struct machine_state {
  /// Actor name for CAF.
  static inline const char* name = "machine";
  /// Settings, validated at spawn.
  machine_config config;
  /// Liveness as the heartbeat sees it: Idle, Up or Down. The shown state is
  /// Maintenance whenever `config.record.maintenance()` is set.
  v1::Machine::State liveness = v1::Machine::Idle;
  /// When the last report arrived, on the actor clock (virtual in tests).
  caf::actor_clock::time_point last_report{};
  /// Whether a lapse timer message is in flight (at most one at a time).
  bool lapse_timer_pending = false;
  /// The current gate session of its agent; 0 = not connected.
  uint64_t session = 0;
  /// Its agent's session ended and no new one (nor a report) came since:
  /// the machine takes no new work meanwhile (a run placed there would wait
  /// for an agent that may never come back), though it stays Up until its
  /// heartbeat lapses.
  bool agent_gone = false;
  /// The gate holding that session (delivers commands such as clear-fault);
  /// null while not connected, or for a session without a gate (an
  /// embedding control plane's enrolment).
  gate_command_actor gate;
  /// Each GPU's health and reasons, as its GPU actor last said.
  std::map<std::string, std::pair<gpu_health, std::string>> gpu_verdicts;
  /// The last report's facts and derived pressure.
  v1::HostFacts facts;
  pressure_verdict pressure;
  /// Wall-clock times for display, Unix milliseconds.
  int64_t last_report_unix_ms = 0;
  /// The sequence of the last full report taken (issue 14): a readings
  /// report applies only to it (MachineReport.readings_of).
  uint64_t full_sequence = 0;
  int64_t state_since_unix_ms = 0;
  /// Wall-clock time the record was last written with facts (Unix ms): the
  /// facts are stored again once a report comes more than 10 min later.
  int64_t facts_stored_unix_ms = 0;
  /// The GPU picture last stored (read_as, ids, statuses, latches).
  std::string stored_gpu_fingerprint;
  /// The GPU picture changed (a new fault latch) and the record holding it
  /// is not written yet: it is written once a GPU actor has judged the
  /// change (atom::health), at the next report or at the lapse, whichever
  /// comes first, so the fence does not wait for the write (issue 17).
  bool gpu_copy_unstored = false;
  /// The last snapshot sent to the scheduler (to send only changes).
  std::string scheduler_snapshot;
  /// The workers the scheduler placed here (whole set) and whether any set
  /// came yet.
  v1::WorkerOrders orders;
  bool orders_known = false;
  /// The generation of orders the agent last said it applied.
  uint64_t acked_generation = 0;
  /// The agent's last worker list passed to the scheduler (wire bytes;
  /// cleared when the agent disconnects or the machine goes Down, so the
  /// first list after its return always reaches the scheduler).
  std::string last_statuses;
  /// The agent's last worker list as it reported it (kept while Down too).
  v1::WorkerStatuses reported_workers;
  /// Issue 23: GPU id -> the worker that held it and left the set (its run
  /// deleted, stopped or failed) that its agent has not reported ended yet:
  /// its process may still use the GPU (through the stop grace), so the GPU
  /// shows it as its holder ("train-0 (Stopping)"), never free.
  std::map<std::string, std::string> stopping_gpus;
  /// A drain's deadline passed and its runs were asked to stop: the drain
  /// is done once the agent reports none of its workers live (issue 13).
  bool drain_stopping = false;
  /// Whether a worker placed here, or reported by its agent, has not ended
  /// (an ordered worker the agent has not reported counts as live).
  bool workers_live() const;
  /// The GPUs the scheduler set aside, with why (its last SchedulerNotes).
  std::vector<v1::SetAsideGpu> set_aside;
  /// What the last report's GPU list had wrong (a GPU listed twice).
  std::vector<std::string> inventory_warnings;
  /// Times the machine came back Up after Down since this actor started.
  uint32_t flaps = 0;
  /// Issue 21: the latest quick check (its verdict is the QUICK badge) and
  /// whether the machine's pool requires acceptance (the validations say).
  v1::ValidationStep quick;
  bool acceptance_required = false;
  /// The acceptance validation that runs here while Accepting
  /// ("val-20261006-7f3a2c"; "" = none told yet), named in waiting reasons.
  std::string acceptance_id;
  /// How that acceptance ended without passing here ("failed", "ended
  /// Cancelled"); "" while it runs (or none was told).
  std::string acceptance_ended;
  /// Required and not accepted: shown Accepting; only checks go there.
  bool accepting() const;
  /// Only its cordon keeps it from new work (Up, its agent connected, not
  /// in Maintenance, not draining or drained, no pressure): a cordon stops
  /// user work, not the machine's own checks, so it takes a validation's
  /// checks as an Accepting machine does. A drain keeps them away too (a
  /// check there would hold up its removal).
  bool only_cordoned() const;

  /// What the scheduler places by: schedulable, labels, GPUs and health.
  /// The labels are the machine's, plus topology.astraeus.io/nvlink-domain
  /// from its GPUs' capabilities when it has none of that name.
  v1::SchedulerMachine scheduler_view() const;
  /// One GPU actor per GPU id, spawned from reports (and from the stored
  /// facts at start, so a Down machine still lists its last known GPUs).
  std::map<std::string, gpu_actor> gpus;

  /// The state users see: Maintenance overrides liveness.
  v1::Machine::State shown_state() const;
  /// Whether the machine takes new work: Up, not cordoned, no pressure.
  bool schedulable() const;
  /// Why it takes no new work, as a waiting reason says it after its name
  /// ("is cordoned", "is in Maintenance", "is Down", "is draining", "is
  /// under memory pressure"); empty when it does (issue 13, item 5). An
  /// Accepting machine takes checks only: "is Accepting (acceptance val-…
  /// runs there)" although it stays schedulable for the checks (issue 21);
  /// once that acceptance failed, "is Accepting (acceptance val-… failed:
  /// see astra astraeus validation val-…)" with how to accept it anyway.
  std::string not_schedulable_why() const;
  /// The machine as `astra machine` shows it.
  v1::MachineView view() const;
};

/// The machine actor's behaviour (see actors/interfaces.hpp for handlers).
machine_actor::behavior_type
machine(machine_actor::stateful_pointer<machine_state> self,
        machine_config config);

/// Issue 20: what is wrong with `path` as a machine's data location
/// ("is not an absolute path (it must start with /)", "holds '..'", "is
/// empty: …"); nullopt when it is fine.
std::optional<std::string> data_location_problem(const std::string& path);

/// Checks a label change: keys of letters, digits, '-', '_', '.', '/' (at
/// most 253), values of at most 63 such characters (no '/'), like
/// Kubernetes labels. Errors: ec::invalid_request naming the label.
caf::error check_labels(const v1::SetLabels& req);

/// Worker sets larger than this many bytes are sent in parts, so that no
/// frame comes near the agent's frame cap (1 MiB by default).
inline constexpr size_t orders_part_bytes = 256u << 10;

/// Splits a worker set into parts of at most `part_bytes` each (a single
/// worker larger than that is a part of its own), numbered `part` of
/// `parts`; a set that fits is returned whole (parts = 0).
std::vector<v1::WorkerOrders> split_orders(const v1::WorkerOrders& orders,
                                          size_t part_bytes);

/// "Idle", "Up", "Down", "Maintenance".
const std::string& to_string(v1::Machine::State state);

} // namespace astraeus
