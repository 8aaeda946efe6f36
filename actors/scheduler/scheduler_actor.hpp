#pragma once
/// @file
/// The scheduler actor: keeps every run (store family `runs`, key = the
/// run's key, messages/run_key.hpp: its name, or "<workspace>/<name>"
/// outside the default workspace; value = `v1::Run`) and places waiting
/// runs onto concrete GPUs with
/// the placement engine (actors/scheduler/placement.hpp): one `placement_index` fed
/// from machine snapshots (`v1::SchedulerMachine`) and one `scheduler_queue`.
///
/// - A schedule pass runs after every submit, snapshot, completion and
///   delete, with `now` from the actor clock (virtual in tests).
/// - Group commit: every run changed while the mailbox is busy is written
///   in one store batch with sync (an `atom::tick` the actor sends itself
///   after the first change, so it runs after the messages already queued);
///   only then are the waiting requests answered and the machines sent
///   their new worker sets. A user is never told of a run that is not on
///   disk (etcd: committed by its quorum), and one fsync (one etcd round
///   trip) serves a whole burst of submissions. With `background_sync` the
///   write runs on a thread of its own while the actor gathers the next
///   burst; with etcd up to three bursts are committed at once (no run in
///   two of them) and answered in burst order.
/// - Waiting runs carry the engine's waiting reason.
/// - Every machine actor attaches itself; after each change the scheduler
///   sends it the whole set of workers placed on it (`v1::WorkerOrders`),
///   which its agent acknowledges (`v1::WorkerStatuses`): the worker is then
///   `Assigned`. A machine that goes Down (snapshot `down`) has its workers
///   shown `Down`, GPUs kept; when its agent reports again, a worker it
///   acknowledged before and no longer holds has failed, and so has its run.
/// - `array.size` N runs N copies of the run, each placed on its own (queue
///   names `<run>[i]`), workers named `<run>[i]-<rank>`. A copy whose
///   workers have all ended (exited, failed, or stopped at its time limit)
///   gives back its GPUs, cores and memory at once and leaves its machines'
///   worker sets; the run completes when every copy exited 0 and fails when
///   a worker of any copy fails.
/// - Each worker keeps the state its agent last reported (Exited, Failed,
///   OOMKilled, Cancelled); only workers still going on take the run's end
///   state. A worker not yet acknowledged that its agent reports stopping or
///   ended is an earlier worker of the same name (run deleted and submitted
///   again): that status changes nothing and the run says why it waits.
/// - At start every stored run is loaded: waiting runs (and copies) queue
///   again in their submission order; placed ones re-adopt their GPUs as
///   soon as the snapshots of their machines name them (each GPU is held
///   for the run the moment it appears, so no new run can take it
///   meanwhile).
/// - Issue 13: run names are unique per workspace. Requests name a run by
///   a reference (`run_ref`): "<workspace>/<name>" looks in that workspace
///   only; a bare name in the default workspace, else in the one workspace
///   that has a run of that name. Workers of a run in a workspace with a
///   namespace are named "<namespace>.<run>-<rank>" (their full name,
///   ASTRAEUS_TASK_NAME), so that two workspaces' runs of one name never
///   share a worker name on a machine.
/// - Issue 23 item 6: a deleted run is kept (stored, listed, shown) while
///   its workers stop: Stopped, with `deleted` set, each worker that had
///   not ended `Stopping` until its agent reports how it ended (its state,
///   exit code and words) or no longer holds it; then it is forgotten. A
///   worker whose machine is Down or removed is not waited for (Stopped).
///   Once none is Stopping it stays shown (how they ended) for
///   `deleted_run_retention`. A second delete is refused, naming the
///   workers still stopping; a new run of its name replaces it at once
///   (its worker starts once its agent has let the old one go).
/// - Issue 23: a worker told to stop (its run deleted, stopped, drained or
///   failed) keeps its GPUs, cores and memory held (`stopping_hold`) until
///   its agent reports it ended, so no other run is placed onto a GPU its
///   process may still use through the stop grace; a run waiting for them
///   says so ("gpu-01: 8 GPUs held by stopping workers of run train (ending
///   within 30 s)"). A deleted run whose name a new run takes keeps its
///   holds under a key of its own (`displaced`); holds are restored after a
///   restart as placed runs' GPUs are.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>
#include <caf/timespan.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/interfaces.hpp"
#include "actors/scheduler/placement.hpp"
#include "actors/scheduler/scheduler_inventory.hpp"
#include "store/wal_syncer.hpp"
#include "messages/astraeus.pb.h"
#include "messages/run_key.hpp"
#include "messages/run_state.hpp"
#include "messages/worker_state.hpp"
#include "runtime/process/wall_clock.hpp"

namespace astraeus {

class Store;

/// Validated settings of the scheduler actor.
struct scheduler_config {
  /// The controller's store; required.
  std::shared_ptr<Store> store;
  /// Options of the placement engine.
  placement_options placement;
  /// Options of the queue.
  queue_options queue;
  /// The wall clock of submitted and placed times, and of a placed run's
  /// elapsed time after a restart (its time limit counts from its placing).
  std::shared_ptr<const wall_clock> clock = real_wall_clock();
  /// Issue 14: the group commit's write and fsync run on a thread of their
  /// own (`wal_syncer::write_and_sync`; issue 15: with etcd the write is the
  /// round trip to the quorum): the actor hands a burst over and goes on
  /// gathering the next one, and the burst's answers and worker sets go out
  /// once it is durable (still: nobody is told of a run not on disk; a
  /// failed commit fails the burst's requests and its runs are written
  /// again with the next change). Issue 15: up to `commits_in_flight`
  /// bursts are committed at once when no run is in two of them (a burst
  /// with a run still in flight waits for it), and what they say goes out
  /// in burst order (a worker set names runs of earlier bursts). The
  /// controller sets it; tests on the deterministic coordinator leave it
  /// off (the write then runs inline, as one synced batch).
  bool background_sync = false;
  /// With `background_sync`: how many bursts may be committed at once; 0
  /// takes the store's `store_limits::writes_in_flight` (RocksDB 1, etcd 3).
  size_t commits_in_flight = 0;
  /// With `background_sync`: how the syncer's threads are scheduled
  /// (store/wal_syncer.hpp: real-time where the process may).
  sync_priority commit_priority = sync_priority::realtime;
  /// Issue 23 item 6: how long a deleted run whose workers have all ended
  /// stays shown (how they ended) before it is forgotten (actor clock). A
  /// new run of its name replaces it sooner.
  caf::timespan deleted_run_retention = std::chrono::minutes{10};
  /// The agents' stop grace (their `stop.grace`, 30 s by default: SIGTERM,
  /// then SIGKILL after it): how soon a worker told to stop is expected to
  /// end, named in the waiting reason of a run that waits for the GPUs it
  /// still holds. Each agent keeps its own; the controller does not read
  /// theirs, so this is the default.
  std::chrono::milliseconds stop_grace{30000};

  /// Errors: ec::invalid_config when the store or the clock is missing.
  caf::error validate() const;
};

/// A stored placed run whose GPUs are not all known yet (after a restart):
/// the GPUs that appeared are held piecewise until every one is there.
struct run_restore {
  /// (machine, GPU id) pairs not held yet.
  std::set<std::pair<std::string, std::string>> missing;
  /// Holds on the GPUs that appeared so far.
  std::vector<allocation_id> pieces;
};

/// What a worker told to stop (`Stopping`: its run deleted, stopped,
/// drained or failed) still holds until its agent reports it ended: its
/// GPUs, and its cores and memory, stay held in the placement index (an
/// allocation of its own, never the run's: a new run of the same name may
/// be submitted meanwhile) and count as used on its machine. Released when
/// its agent reports it ended or no longer holds it, or when its machine
/// goes Down or is removed (it is not waited for then).
struct stopping_hold {
  /// The worker's machine.
  std::string machine;
  /// Its GPUs (machine, id) not held yet: after a restart, until its
  /// machine's snapshot lists them.
  std::set<std::pair<std::string, std::string>> missing;
  /// The index's allocations holding what it has (owner "stopping worker
  /// <name>"): one normally, a piece per GPU that appeared later.
  std::vector<allocation_id> pieces;
  /// Whether its cores and memory are held in one of `pieces` yet.
  bool use_held = false;
  /// Its cores (as asked, and thousandths) and memory, bytes.
  double cpus = 0;
  uint64_t cpu_millis = 0;
  uint64_t memory_bytes = 0;
  /// When it was told to stop (wall clock, ms; the load time after a
  /// restart): its stop grace counts from then.
  int64_t stop_unix_ms = 0;
  /// The generation of the first worker set its machine gets without it:
  /// once its agent has applied that one, a worker of its name that the
  /// agent reports going on (not Stopping) is a new one (a run deleted and
  /// submitted again): this one has ended.
  uint64_t stop_generation = 0;
};

/// One burst of the group commit handed to the syncer's thread, waiting
/// for its write and fsync (`scheduler_config::background_sync`): what goes
/// out once it is durable.
struct commit_batch {
  /// The batch's number (`scheduler_state::written_seq` when written).
  uint64_t seq = 0;
  /// Answers, each as the run was when the batch was written (or the error).
  std::vector<std::pair<caf::typed_response_promise<v1::Run>, caf::expected<v1::Run>>> answers;
  /// Runs answered as they are at the flush (a submission's run as its
  /// pass left it): the copies answer, and the syncer's thread serializes
  /// the runs written from them (issue 14: off the actor's thread). Shared
  /// with the syncer until it has written the batch.
  std::shared_ptr<std::vector<v1::Run>> shown;
  /// The answers given from `shown` (index), after `answers`.
  std::vector<std::pair<caf::typed_response_promise<v1::Run>, size_t>> shown_answers;
  /// The worker sets of the machines changed, as written.
  std::vector<v1::WorkerOrders> orders;
  /// The runs written, marked again should the write or sync fail.
  std::vector<std::string> runs;
  /// Whether the syncer reported it, and with what error. A burst with
  /// nothing to write (answers only) is done when made.
  bool done = false;
  caf::error err;
};

/// The state of the scheduler actor.
struct scheduler_state {
  /// Actor name for CAF.
  static inline const char* name = "scheduler";
  /// Settings, validated at spawn.
  scheduler_config config;
  /// The machines and GPUs. Declared before `queue`, which refers to it.
  std::unique_ptr<placement_index> index;
  /// The waiting and running runs.
  std::unique_ptr<scheduler_queue> queue;
  /// Every run by name (hashed: looked up several times per request;
  /// whoever lists them sorts the names).
  name_map<v1::Run> runs;
  /// Keys of the runs below priority 0 (a validation's checks: the only runs
  /// that give way, preempt_for_waiting), added as such a run is submitted or
  /// loaded and dropped once its key holds no such run: a pass with a long
  /// queue looks at these, not at every run for each waiting one.
  std::set<std::string> below_zero_runs;
  /// What the last look for checks to give way saw when it stopped none
  /// (the index's capacity epoch, the checks' holds, the waiting runs
  /// looked at, hashed): the same again is not looked at again, as a pass
  /// runs on every submission (`preempt_for_waiting`). 0: look.
  uint64_t give_way_seen = 0;
  /// Placed runs (queue names: the run, or `<run>[i]` for an array copy)
  /// still re-adopting their GPUs after a restart.
  std::map<std::string, run_restore> restoring;
  /// Queue names of the runs and copies now waiting.
  name_set waiting;
  /// CPU-only runs and copies waiting, in submission order (the placement
  /// engine places GPU workers; these are placed by `place_cpu_runs`).
  std::vector<std::string> cpu_queue;
  /// Why each CPU-only run or copy waits.
  std::map<std::string, std::string> cpu_waiting_reason;
  /// The attached machine actors by machine name.
  std::map<std::string, machine_actor> machines;
  /// The last snapshot of each machine (re-indexed when another machine
  /// starts or stops reporting a UUID it reports too).
  /// Kept as wire bytes (issue 14): a parsed snapshot holds ~3 KiB of
  /// heap per machine, its bytes a fifth of that; read only to re-index.
  std::map<std::string, std::string> snapshots;
  /// The real GPU UUIDs each machine reports (issue 18, rule 1).
  gpu_claims claims;
  /// The set-aside notes last sent to each machine actor (wire bytes).
  std::map<std::string, std::string> notes_sent;
  /// What the last snapshot of each machine said: address, Down.
  struct machine_facts {
    std::string address;
    bool down = false;
    bool schedulable = false;
    /// Why it takes no new work ("is cordoned", "is Accepting (…)"), as its
    /// machine actor says it; named in CPU-only runs' waiting reasons.
    std::string why_not;
    /// Its labels packed one after another, each key and value preceded by
    /// its length (4 bytes, host order), so that any bytes in them read back
    /// (`label`, `has_labels`): one allocation per machine where a map took
    /// ~800 bytes (100,000 machines, issue 14).
    std::string labels;
    /// Sets `labels` from a snapshot's label map.
    template <class Map>
    void set_labels(const Map& from) {
      labels.clear();
      auto put = [this](const std::string& text) {
        const auto n = static_cast<uint32_t>(text.size());
        labels.append(reinterpret_cast<const char*>(&n), sizeof n);
        labels.append(text);
      };
      for (const auto& [k, v] : from) {
        put(k);
        put(v);
      }
    }
    /// The value of label `key`; nullopt without.
    std::optional<std::string_view> label(std::string_view key) const {
      std::string_view rest = labels;
      auto take = [&rest](std::string_view& out) {
        uint32_t n = 0;
        if (rest.size() < sizeof n)
          return false;
        std::memcpy(&n, rest.data(), sizeof n);
        rest.remove_prefix(sizeof n);
        if (rest.size() < n)
          return false;
        out = rest.substr(0, n);
        rest.remove_prefix(n);
        return true;
      };
      std::string_view k, v;
      while (take(k) && take(v))
        if (k == key)
          return v;
      return std::nullopt;
    }
    /// Whether it carries every label of `required` (`skip`, when given, is
    /// not asked for).
    bool has_labels(const label_map& required, std::string_view skip = {}) const {
      for (const auto& [k, v] : required) {
        if (!skip.empty() && k == skip)
          continue;
        auto l = label(k);
        if (!l || *l != v)
          return false;
      }
      return true;
    }
    uint32_t logical_cpus = 0;
    uint64_t memory_bytes = 0;
    /// CPU cores and memory the workers of live runs asked for here.
    double cpus_used = 0;
    uint64_t memory_used = 0;
    /// Of those, what the placement index's allocations do not hold (issue
    /// 22): CPU-only workers, and workers of copies still re-adopting their
    /// GPUs; the index is told (`placement_index::set_outside_use`). Cores
    /// in thousandths.
    uint64_t cpu_millis_outside = 0;
    uint64_t memory_outside = 0;
    /// CPU-only workers placed here (they spread out).
    uint32_t cpu_workers = 0;
  };
  name_map<machine_facts> machine_facts_by_name;
  /// The runs (keys) with a worker on one machine, in the order they came:
  /// a machine has a few (one per GPU at most, plus CPU-only workers, which
  /// its cores bound), so a vector searched from the end is cheaper than a
  /// hash set with a node per name (issue 14: a look-up per placement and
  /// deletion).
  struct run_keys {
    std::vector<std::string> keys;
    /// Adds `key`; false when it is there already.
    bool insert(const std::string& key) {
      if (std::find(keys.rbegin(), keys.rend(), key) != keys.rend())
        return false;
      keys.push_back(key);
      return true;
    }
    /// Takes `key` out (the last one takes its place); false without.
    bool erase(const std::string& key) {
      auto it = std::find(keys.begin(), keys.end(), key);
      if (it == keys.end())
        return false;
      if (it != keys.end() - 1)
        *it = std::move(keys.back());
      keys.pop_back();
      return true;
    }
    bool empty() const { return keys.empty(); }
    size_t size() const { return keys.size(); }
    std::vector<std::string>::const_iterator begin() const { return keys.begin(); }
    std::vector<std::string>::const_iterator end() const { return keys.end(); }
  };
  /// Live runs (placed, not stopped) with a worker on each machine.
  name_map<run_keys> runs_on;
  /// Runs (keys) with a worker still `Stopping` on each machine: told to
  /// stop (deleted, drained, stopped, failed), not yet reported ended by its
  /// agent (settle_stopping).
  std::unordered_map<std::string, std::unordered_set<std::string>> stopping_on;
  /// What each `Stopping` worker still holds, by (key of its run's record,
  /// worker name): the record is in `runs`, or in `displaced`.
  std::map<std::pair<std::string, std::string>, stopping_hold> stopping_holds;
  /// Deleted runs whose name a new run took while their workers still
  /// stop, by a key of their own ("<run key>~<n>", no run's key: '~' is in
  /// no name), stored under it (family `runs`) until those workers have
  /// ended; not listed or shown.
  std::unordered_map<std::string, v1::Run> displaced;
  /// Queue names of GPU runs and copies that wait for what stopping
  /// workers hold, with the words of their waiting reason (each pass).
  std::unordered_map<std::string, std::string> stopping_waits;
  /// Whether the last pass had any `stopping_waits` (its reasons then are
  /// looked at again in the next pass, whatever the queue says).
  bool had_stopping_waits = false;
  /// Generation of the worker set last sent to each machine.
  std::map<std::string, uint64_t> generation;
  /// First generation of this actor's life: later than any of a previous
  /// run of the controller (wall-clock based), so agents never mistake a new
  /// set for one they have applied.
  uint64_t generation_base = 0;
  /// Group commit: runs changed since the last flush (erased ones are no
  /// longer in `runs`), requests answered after it, machines whose worker
  /// set changed, and whether the flush message is on its way.
  name_set dirty_runs;
  std::vector<std::pair<caf::typed_response_promise<v1::Run>, v1::Run>> replies;
  std::vector<std::pair<caf::typed_response_promise<v1::Run>, std::string>>
    run_replies;
  std::unordered_set<std::string> dirty_machines;
  bool flush_pending = false;
  /// With `background_sync`: bursts made, not yet delivered, oldest first
  /// (what they say goes out in this order); the number of the last one;
  /// how many the syncer has not reported yet, and their runs (kept only
  /// where the syncer writes several bursts at once: with one, no burst
  /// starts while another is in flight).
  std::deque<commit_batch> unsynced;
  uint64_t written_seq = 0;
  size_t commits_in_flight = 0;
  std::unordered_set<std::string> runs_in_flight;
  /// The armed time limit of each placed run or copy (queue name -> token;
  /// a timer whose token no longer matches is stale).
  std::unordered_map<std::string, uint64_t> limit_token;
  uint64_t next_limit_token = 1;
  /// The actors of machines removed (`astra machine remove`): their late
  /// snapshots are ignored.
  std::set<caf::actor_addr> removed_senders;
  /// Issue 12: each machine's degraded RDMA ports, as the validations last
  /// said (v1::DegradedIbPortList); given to GPU workers placed there.
  std::map<std::string, std::vector<v1::DegradedIbPort>> degraded_ib_ports;
  /// Syncs the store for the group commit (with `background_sync`).
  std::unique_ptr<wal_syncer> syncer;
};

/// The scheduler actor's behaviour (handlers: actors/interfaces.hpp).
scheduler_actor::behavior_type
scheduler(scheduler_actor::stateful_pointer<scheduler_state> self,
          scheduler_config config);

/// Issue 21: labels the scheduler adds to every machine's snapshot: its
/// name (a validation's check is pinned by it) and whether it is Accepting
/// ("true"/"false"; every run but a validation's check requires "false").
inline constexpr const char* machine_label = "astraeus.io/machine";
inline constexpr const char* accepting_label = "astraeus.io/accepting";
/// Issue 22: whether the machine has an RDMA port up ("up"/"down"; from
/// SchedulerMachine.rdma_up); a run with `rdma: true` requires "up".
inline constexpr const char* rdma_label = "astraeus.io/rdma";

/// The engine's request for a run spec: groups in rank order (leader group
/// first), `pool` and `labels` as required labels, healthy_only, time limit.
/// `queue_name`: the run's key, or `<key>[i]` for copy i of an array.
placement_request placement_request_of(const v1::RunSpec& spec,
                                       const std::string& queue_name = {});

/// The queue names of a run: its key (messages/run_key.hpp), or `<key>[0]`
/// .. `<key>[N-1]` for an
/// array of size N (`array.size`; source: shared/seeds/inside-a-worker.md,
/// "Arrays").
std::vector<std::string> queue_names_of(const v1::RunSpec& spec);

/// Whether a run places no GPUs (CPU-only workers).
inline bool cpu_only(const v1::RunSpec& spec) { return spec.gpus_per_worker() == 0; }

/// The run and copy index a queue name stands for: ("train", -1) for
/// "train", ("sweep", 3) for "sweep[3]".
std::pair<std::string, int32_t> parse_queue_name(const std::string& queue_name);

/// A worker's name: `<run>-<rank>`, or `<run>[<copy>]-<rank>` in an array.
std::string worker_name(const std::string& run, int32_t copy, uint32_t rank);

/// The name of a worker of the run `spec` describes: `worker_name` of
/// "<namespace>.<name>" when the run's workspace has a namespace (the
/// worker's full name, unique on its machine whatever other workspace has a
/// run of the same name), else of its name.
std::string worker_name(const v1::RunSpec& spec, int32_t copy, uint32_t rank);


/// The engine's machine for a snapshot. Each GPU's health as `health_of`
/// reads it (messages/gpu_health_state.hpp: the enum, else the word; empty
/// = Healthy). Errors: ec::invalid_request for an unknown health word or an
/// NVLink peer index out of range.
caf::expected<machine_spec> machine_spec_of(const v1::SchedulerMachine& m);

} // namespace astraeus
