#pragma once
/// @file
/// The agent actor: runs on every machine. It connects out to the
/// controller's gate (reconnecting by itself with exponential back-off),
/// says hello with the machine's name and identity, then sends a report of
/// the host's facts at once and every report interval.
/// Source: shared/seeds/machines.md ("What it reports"), shared/DESIGN.md.

#include <chrono>
#include <cstdint>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/fwd.hpp>
#include <caf/io/broker.hpp>
#include <caf/io/connection_handle.hpp>
#include <caf/io/typed_broker.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/agent/gate_targets.hpp"
#include "actors/interfaces.hpp"
#include "runtime/gpu/gpu_discovery.hpp"
#include "runtime/gate/secure_channel.hpp"
#include "runtime/faults/fault_latch.hpp"
#include "store/wal_syncer.hpp"
#include "runtime/host/host_facts.hpp"
#include "runtime/host/rdma_fabric.hpp"
#include "runtime/host/numa_facts.hpp"
#include "runtime/faults/kmsg.hpp"
#include "runtime/process/boot_clock.hpp"
#include "runtime/process/wall_clock.hpp"
#include "runtime/workers/worker_ledger.hpp"
#include "runtime/workers/worker_supervisor.hpp"

namespace astraeus {

class Store;

/// The identity an agent keeps in its data folder, so that a restarted or
/// reinstalled agent keeps its name and identity.
struct agent_identity {
  std::string name;        ///< machine name: --name, else the stored one, else the hostname
  std::string machine_id;  ///< 32 hex digits, random, created on first start
};

/// Loads the identity from `data_dir` (files `machine-id` and `name`, mode
/// 0600), creating the folder and the files on first start. (The Ed25519
/// key, `identity.key`, is loaded by `start_agent` with
/// `load_or_create_keypair`.) A non-empty
/// `requested_name` (the agent's --name) wins over the stored name and is
/// stored. Errors: ec::store_failure naming the path when the folder or a
/// file cannot be created, read or written; ec::invalid_config when a
/// stored machine-id is not 32 hex digits.
caf::expected<agent_identity>
load_or_create_identity(const std::string& data_dir,
                        const std::string& requested_name,
                        const std::string& hostname);

/// Validated settings of the agent actor.
struct agent_config {
  std::string controller_host = "127.0.0.1";  ///< the gate's host (the one tried now)
  uint16_t controller_port = 7450;            ///< the gate's port (the one tried now)
  /// Every controller's gate, HOST and port, for HA mode (several
  /// controllers, one leads; a standby's gate names the leader's): a
  /// connection that fails moves on to the next one at once, and back-off
  /// starts only after all failed (actors/agent/gate_targets.hpp). Empty:
  /// `controller_host`/`port` only (which may be a standby's too).
  std::vector<std::pair<std::string, uint16_t>> controllers;
  agent_identity identity;                    ///< name and machine id
  /// The machine's Ed25519 key pair (identity.key in the data folder); required.
  std::shared_ptr<const identity_keypair> key;
  /// The gate key to insist on; nullopt: trust the first one seen, then
  /// keep it (`pin_file`).
  std::optional<public_key> pinned;
  /// Where the gate's key is kept once the agent has enrolled
  /// (controller.pub in the data folder); empty: not kept (tests).
  std::string pin_file;
  /// The agent has enrolled before (it connects with its identity alone).
  bool enrolled = false;
  /// A join token to present once (from enrol.token_file); empty: none.
  /// An agent that enrolled before presents it too: the controller ignores
  /// it while the machine's identity is bound, and enrols the machine again
  /// with it after `astra machine remove` (same identity key and machine
  /// id; a machine of that name with another id is still refused).
  std::string join_token;
  caf::timespan report_interval = std::chrono::seconds{10};
  caf::timespan reconnect_min = std::chrono::milliseconds{500};
  caf::timespan reconnect_max = std::chrono::seconds{30};
  uint64_t frame_cap_bytes = 1u << 20;        ///< largest frame accepted, bytes
  HostReaderOptions host;                     ///< where host facts are read
  gpu_discovery_options gpu;                  ///< where GPUs are looked for
  /// The agent's store (fault latches, the last known GPUs); required.
  std::shared_ptr<Store> store;
  /// The address other machines reach this one by; empty: the source
  /// address of the route to the controller (`route_source_address`).
  std::string advertise_address;
  /// The kernel log to watch for GPU faults; empty: none.
  std::string kmsg_path = "/dev/kmsg";
  /// How long the first discovery pass waits at most for the kernel log's
  /// backlog to be read (it starts as soon as it is).
  caf::timespan kmsg_catch_up_bound = std::chrono::seconds{2};
  /// How workers are run (runtime/workers/worker_supervisor.hpp); an empty
  /// `data_dir` runs none (workers stay Assigned).
  supervisor_options workers;
  /// How often the supervisor checks its workers (workers.poll_interval).
  caf::timespan worker_poll = std::chrono::milliseconds{250};
  /// Issue 20: the machine's data location (config key `data_dir`, the
  /// installer's --data-dir), sent in every report; "" = not chosen yet.
  std::string data_location;
  /// Issue 20/21: the installer's --accept (validation.request_acceptance),
  /// sent in every report.
  bool request_acceptance = false;
  /// The wall clock of reports' send times, fault latches and worker
  /// records; never of a timer (those run on the actor clock).
  std::shared_ptr<const wall_clock> clock = real_wall_clock();
  /// The boot clock (suspend included, the same across an agent restart)
  /// that times the workers' stop grace from their stored records.
  std::shared_ptr<const boot_clock> boot = real_boot_clock();

  /// Called (on the agent's thread) when the controller refuses this agent
  /// for a reason retrying cannot fix (`refusal_is_final`), with the
  /// refusal's reason; the agent program stops and exits 1 (issue 23 item
  /// 6). Empty: the agent keeps retrying slowly (embedding, tests).
  std::function<void(const std::string& reason)> on_final_refusal;

  /// Errors: ec::invalid_config naming the field.
  caf::error validate() const;
};

/// Whether a refusal with code `code` (v1::Refusal.code) is final: the join
/// token is spent ("enrollment_used") or expired, none was given or it is
/// unknown ("enrollment_required"), or the name is another machine's
/// ("identity_mismatch"). Other refusals are retried slowly.
bool refusal_is_final(const std::string& code);

/// The agent's state.
struct agent_state {
  /// Actor name for CAF.
  static inline const char* name = "agent";
  agent_config config;
  caf::io::connection_handle connection;  ///< valid while connected
  std::unique_ptr<channel_client> channel;  ///< the secure channel while connected
  bool connected = false;                 ///< TCP connection up
  bool welcomed = false;                  ///< the gate accepted the hello
  uint32_t pending_body = 0;              ///< body bytes being read; 0 = header
  uint64_t sequence = 0;                  ///< reports sent by this agent run
  /// Readings reports (issue 14): the last welcome said the controller
  /// takes them (Welcome.takes_readings).
  bool controller_takes_readings = false;
  /// The sequence of this session's last full report (0: none yet).
  uint64_t full_sequence = 0;
  /// That report's facts without their readings, serialized: a report whose
  /// static part serializes the same is sent as readings.
  std::string full_static;
  /// Readings reports sent since that full report.
  uint32_t readings_since_full = 0;
  /// The interval reports are sent at: report.interval, or the controller's
  /// longest when that is shorter (actors/agent/report_schedule.hpp).
  caf::timespan report_interval{0};
  /// When the next report is due, on the actor clock (by deadline: no drift).
  caf::actor_clock::time_point report_due{};
  caf::timespan backoff{};                ///< next reconnect delay
  /// The longest reconnect delay: reconnect.max_backoff, or a quarter of
  /// the heartbeat lapse the controller announced when that is shorter, so
  /// a live machine reconnects well within its lapse after a controller
  /// restart (issue 23 item 5).
  caf::timespan backoff_cap{};
  uint32_t failed_attempts = 0;           ///< connection attempts since last success
  /// Which gate is tried now: the given ones (`config.controllers`, or
  /// `controller_host`/`port`) and the leader a standby named.
  std::optional<gate_targets> targets;
  /// When the current session was welcomed (actor clock): a session that
  /// ends sooner than reconnect.min_backoff counts as a failed attempt.
  caf::actor_clock::time_point welcomed_at{};
  /// The leader a standby named last (logged when it changes).
  std::string named_leader;
  /// Connections made by this agent run: numbers the silence checks
  /// (atom::lapse), so a check armed for an earlier connection does nothing.
  uint64_t connection_no = 0;
  /// When the current connection last delivered anything (actor clock).
  caf::actor_clock::time_point last_heard{};
  /// HA mode: the keepalive interval the last welcome announced; zero: the
  /// gate sends none, and neither silence nor a slow welcome is acted on.
  caf::timespan keepalive_interval{0};
  /// The connection number a silence check is pending for (0: none).
  uint64_t lapse_armed_for = 0;
  probe_actor probe;                      ///< GPU discovery, on its own thread
  bool discovering = false;               ///< a discovery pass is in flight
  uint64_t pass = 0;                      ///< number of the latest pass
  bool rdma_up = false;                   ///< an RDMA port was ACTIVE in the last report
  v1::HostFacts host_facts;               ///< the host facts last read (each tick)
  cpu_use_meter cpu_use;                  ///< CPU use between heartbeats (/proc/stat)
  bool facts_known = false;               ///< host_facts has been read
  v1::GpuSection gpus;                    ///< the last discovery pass
  bool gpus_known = false;                ///< a pass has finished
  std::optional<fault_latches> latches;   ///< the machine's fault latches
  /// Syncs the store's log for new latches, which are written without sync
  /// and reported at once (issue 17: the fence need not wait for the disk).
  std::unique_ptr<wal_syncer> latch_syncer;
  uint64_t latch_sync_requested = 0;      ///< the latest generation asked for
  std::optional<worker_ledger> workers;   ///< the workers handed to this machine
  v1::WorkerOrders orders_parts;          ///< parts of a set not yet complete
  std::vector<bool> parts_seen;           ///< which parts of it arrived
  std::unique_ptr<worker_supervisor> supervisor;  ///< runs them; null: none
  /// The supervisor's blocking jobs in flight (each on a detached actor),
  /// by number: what to run on this actor when the job says it is done.
  std::map<uint64_t, std::function<void()>> jobs;
  uint64_t last_job = 0;                  ///< number of the latest job
  /// Jobs waiting for a thread: at most `max_jobs_running` run at once, so a
  /// burst of starts (a 10,000-worker run) does not ask for 10,000 threads.
  std::deque<std::pair<uint64_t, std::function<void()>>> jobs_waiting;
  size_t jobs_running = 0;
  static constexpr size_t max_jobs_running = 4;
  std::string address;                    ///< advertised in reports (MASTER_ADDR)
  std::unique_ptr<kmsg_reader> kmsg;      ///< the kernel-log reader thread
  /// The first discovery pass was started (after the kernel log's backlog).
  bool first_pass_started = false;
  /// Issue 12: the switch side of the InfiniBand ports from the last
  /// `iblinkinfo --switches-only` (LID -> switch and port), how it was found
  /// or why not ("iblinkinfo", "infiniband-diags not installed …"), when it
  /// last ran (every fabric_probe_interval while the machine has an
  /// InfiniBand port), and whether a run is in flight (on a job's thread).
  std::map<uint32_t, ib_switch_link> switch_links;
  std::string fabric_how;
  caf::actor_clock::time_point fabric_probed{};
  bool fabric_probing = false;
  /// The controller refused this agent for good (`refusal_is_final`: its
  /// machine was removed, its token spent), with the refusal's reason: no
  /// one holds its workers any more, so they are stopped (stop signal,
  /// grace, SIGKILL) and no orders are taken; `on_final_refusal` runs once
  /// none of them is left (`refusal_told`), never leaving processes behind.
  std::optional<std::string> refused_for_good;
  bool refusal_told = false;
};

/// How often the agent asks `iblinkinfo` where its InfiniBand ports are
/// cabled (a fabric scan: seconds on a large fabric, so not every report).
inline constexpr std::chrono::minutes fabric_probe_interval{10};

/// The agent's behaviour (its handlers: `agent_actor` in
/// actors/interfaces.hpp).
agent_actor::behavior_type agent(agent_actor::stateful_broker_pointer<agent_state> self,
                                 agent_config config);

/// Spawns the agent; it starts connecting at once. Errors: the config's.
caf::expected<agent_actor> spawn_agent(caf::actor_system& sys,
                                       agent_config config);

/// Readings reports between two full ones at most (issue 14): at the
/// default 10 s interval a full report at least every 5 minutes, so a
/// controller that missed one (or took over) has the whole picture soon.
inline constexpr uint32_t readings_between_full_reports = 29;

/// Makes `report` (a full report of this session) a readings report
/// (MachineReport.readings_of) when its facts differ from the last full
/// report's in readings alone (messages/report_readings.hpp) and fewer than
/// readings_between_full_reports readings followed that one; else keeps it
/// full and remembers it as the last full report. `st.full_sequence` 0 (a
/// new session) always sends it full.
void shrink_to_readings(agent_state& st, v1::MachineReport& report);

/// Builds one report from the host's facts and the last GPU section (what
/// the agent sends).
v1::MachineReport make_report(const agent_config& config, uint64_t sequence,
                              const v1::GpuSection* gpus = nullptr);

/// Whether two GPU sections differ in what a user or the scheduler acts on
/// (the GPU set, their status, how they were read, conditions), so the new
/// one is reported at once rather than at the next heartbeat.
bool gpu_section_changed(const v1::GpuSection& before, const v1::GpuSection& after);

} // namespace astraeus
