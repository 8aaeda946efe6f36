#pragma once
/// @file
/// The placement engine: which machines and which concrete GPUs the workers
/// of a run get. Plain C++ (no actors, no Protobuf): the scheduler actor
/// owns one `placement_index` and one `scheduler_queue` and feeds them from
/// machine and GPU events. Everything here is single-threaded and
/// deterministic: the same calls in the same order give the same answers.
///
/// The rules (shared/seeds/gpus.md "How a worker gets its GPUs", "Limits";
/// machines.md "Pools and topology", "GPU health"; drove-gpu-scheduling.md
/// "NUMA locality"; DESIGN.md "scheduler"):
/// - GPUs are whole and never shared; each worker gets concrete GPUs.
/// - Only schedulable machines (Up, not cordoned, not in maintenance or
///   acceptance, not under pressure) that carry every required label.
/// - Never a Faulty, Foreign or held GPU. AtRisk GPUs only when no placement
///   on healthy GPUs exists, and never for `healthy_only`.
/// - Within a machine: the NUMA node with the most free GPUs first, its GPUs
///   first (Drove's rule); among those, GPUs joined by NVLink.
/// - A run's workers (its gang) are placed all or nothing, within one site,
///   preferring one machine, then one NVLink domain, one InfiniBand fabric,
///   one rack.
/// - Across machines: best fit (the machine or group with the fewest free
///   GPUs that still fits), so whole machines stay free for large runs.
/// - A worker's CPU cores and memory (`--cpus`, `--mem`) must be free on its
///   machine too (issue 22): the cores and memory of the index's
///   allocations plus those its owner says are used outside them
///   (`set_outside_use`: CPU-only workers) count against the machine's. A
///   machine whose cores or memory are unknown (0) is not checked for them.
///   One machine is found through classes of free cores; a gang passes
///   over the machines short of them (its cost grows by those).
///
/// Sizes: a machine has at most 64 GPU slots (`gpu_mask` is one bit per
/// slot). 100,000 machines with 8 GPUs each take ~0.3 GiB (bench/RESULTS.md).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/scheduler/name_maps.hpp"
#include "messages/gpu_health_state.hpp"
#include "runtime/process/duration_text.hpp"

namespace astraeus {

/// A machine in a `placement_index`: a dense number issued by `add_machine`,
/// stable for the index's life (never reused, also after removal).
using machine_id = uint32_t;

/// What holds GPUs: a committed placement, a restored hold or a queue's
/// reservation; 0 = none. Unique: a released id is not issued again (a slot
/// number with a generation count, 2^32 reuses of one slot before it wraps).
using allocation_id = uint64_t;

/// One bit per GPU slot of a machine (bit i = slot i).
using gpu_mask = uint64_t;

/// The most GPU slots a machine can have (the width of `gpu_mask`).
inline constexpr unsigned max_gpus_per_machine = 64;

/// The topology labels (machines.md, "Pools and topology").
namespace topology_label {
/// A site: a run never spans sites. A machine without it is in the one
/// unnamed site.
inline constexpr const char* site = "topology.astraeus.io/site";
/// A rack.
inline constexpr const char* rack = "topology.astraeus.io/rack";
/// An InfiniBand fabric.
inline constexpr const char* fabric = "topology.astraeus.io/fabric";
/// A multi-machine NVLink domain (GB200 NVL72).
inline constexpr const char* nvlink_domain = "topology.astraeus.io/nvlink-domain";
} // namespace topology_label

/// A machine's labels, key -> value.
using label_map = std::map<std::string, std::string>;

/// One GPU of a machine, as the machine reported it.
struct gpu_spec {
  std::string id;                          ///< UUID (GPU-...) or AMD unique id; unique in the index
  int numa_node = -1;                      ///< the NUMA node it is local to; -1 unknown
  gpu_mask nvlink_peers = 0;               ///< bit j: an NVLink to the machine's j-th GPU of this list
  gpu_health health = gpu_health::healthy; ///< its health now
};

/// A machine as the index needs it.
struct machine_spec {
  std::string name;            ///< unique in the index
  label_map labels;            ///< pool and topology labels
  bool schedulable = true;     ///< takes new work now (`MachineView.schedulable`)
  std::vector<gpu_spec> gpus;  ///< in the driver's index order; at most 64
  /// Why it takes no new work, as waiting reasons say it after its name
  /// ("is cordoned", "is Down", "is under memory pressure"); empty when it
  /// does, or unknown ("is not taking new work" is said then).
  std::string not_schedulable;
  /// Its logical CPUs (`SchedulerMachine.logical_cpus`); 0 = unknown: the
  /// cores of workers are not checked there.
  uint32_t cpus = 0;
  /// Its memory, bytes (`SchedulerMachine.memory_bytes`); 0 = unknown: the
  /// memory of workers is not checked there.
  uint64_t memory_bytes = 0;
};

/// CPU cores, in thousandths of a core, for `cpus` cores (rounded up).
inline uint64_t cpu_millis_of(double cpus) {
  if (!(cpus > 0))
    return 0;
  double m = cpus * 1000.0;
  auto whole = static_cast<uint64_t>(m);
  return static_cast<double>(whole) + 1e-6 < m ? whole + 1 : whole;
}

/// CPU cores (thousandths) and memory (bytes) held or used on one machine.
struct machine_use {
  machine_id machine = 0;    ///< the machine
  uint64_t cpu_millis = 0;   ///< cores x 1000
  uint64_t memory_bytes = 0; ///< bytes
};

/// One GPU: its machine and its slot there (slots are stable for the GPU's
/// life on the machine).
struct gpu_ref {
  machine_id machine = 0; ///< the machine
  uint8_t slot = 0;       ///< the slot, 0..63
  friend bool operator==(gpu_ref a, gpu_ref b) {
    return a.machine == b.machine && a.slot == b.slot;
  }
};

/// Some GPUs of one machine.
struct gpu_set {
  machine_id machine = 0; ///< the machine
  gpu_mask gpus = 0;      ///< its GPU slots
};

/// A worker group of a run (`task_groups`): `workers` workers with
/// `gpus_per_worker` GPUs each.
struct worker_group {
  std::string name = "default"; ///< the group's name
  uint32_t workers = 1;         ///< how many workers, at least 1
  uint32_t gpus_per_worker = 1; ///< whole GPUs per worker, 1..64
};

/// What a run asks for.
struct placement_request {
  std::string run;                  ///< the run's name (unique in a queue)
  std::vector<worker_group> groups; ///< ranks run across groups in this order
  uint32_t leader_group = 0;        ///< index into `groups`; its rank 0 leads
  label_map required_labels;        ///< every one must be on the machine (pool=h100)
  bool healthy_only = false;        ///< never AtRisk GPUs (`gpu_requests.healthy_only`)
  int64_t time_limit_seconds = 0;   ///< the run's time limit, s; 0 = none
  int32_t priority = 0;             ///< queue order: higher first, then submission order
  double cpus_per_worker = 0;       ///< CPU cores each worker asks for (`--cpus`); 0 = none
  uint64_t memory_bytes_per_worker = 0; ///< memory each worker asks for (`--mem`); 0 = none
  /// Every worker on a machine of its own (RunSpec.one_worker_per_machine;
  /// sbatch `--nodes=N`): a gang is never packed two to a machine.
  bool one_worker_per_machine = false;
};

/// How tightly a placement's machines are joined, tightest first.
enum class placement_tier : uint8_t {
  one_machine,   ///< every worker on one machine
  nvlink_domain, ///< one multi-machine NVLink domain
  fabric,        ///< one InfiniBand fabric
  rack,          ///< one rack (Ethernet between machines)
  site,          ///< one site (Ethernet between machines)
};

/// "one machine", "one NVLink domain", "one fabric", "one rack", "one site".
const char* to_string(placement_tier x);

/// Where one worker goes.
struct placed_worker {
  uint32_t rank = 0;        ///< from 0 across all groups (`ASTRAEUS_REPLICA_INDEX`)
  uint32_t group = 0;       ///< index into the request's groups
  uint32_t group_rank = 0;  ///< index within its group
  machine_id machine = 0;   ///< its machine
  gpu_mask gpus = 0;        ///< its GPU slots there (`placement_index::gpu_ids`)
  int numa_node = -1;       ///< the NUMA node most of its GPUs are local to; -1 unknown
};

/// Where a whole run goes: every worker, by rank.
struct placement {
  std::string run;                    ///< the request's run
  std::vector<placed_worker> workers; ///< index = rank
  uint32_t leader = 0;                ///< rank of the leader: rank 0 of the leader group
  placement_tier tier = placement_tier::one_machine; ///< how tightly it is joined
  bool uses_at_risk = false;          ///< some GPU is AtRisk (none was healthy enough)
  bool healthy_only = false;          ///< the request's `healthy_only`, checked again at commit
  uint32_t selector = 0;              ///< the label set it was placed for, checked at commit
  uint64_t cpu_millis_per_worker = 0; ///< cores each worker holds (x 1000), checked at commit
  uint64_t memory_bytes_per_worker = 0; ///< memory each worker holds, checked at commit
};

/// Why a run cannot be placed now.
enum class waiting_code : uint8_t {
  invalid_request, ///< the request is malformed (no groups, 0 GPUs, ...)
  no_machine,      ///< no machine carries the required labels
  none_schedulable,///< machines carry them but none takes new work
  never_fits,      ///< larger than the machines (or the largest site) even when empty:
                   ///< "cannot fit anywhere now: ..." (also for no machine with the labels)
  not_enough_gpus, ///< not enough free GPUs now
  not_enough_cores_or_memory, ///< the GPUs are free somewhere, but not with the cores or
                   ///< memory its workers ask for: "waiting: no machine has 2 free GPUs with
                   ///< 64 free cores; gpu-01 has the GPUs but only 16 free cores"
  reserved,        ///< it would fit, but only on GPUs reserved for an earlier run
};

/// Why a run waits: a code for programs and a sentence for people, e.g.
/// "waiting: needs 8 healthy GPUs on one machine in pool h100; best machine
/// has 6; gpu-01 has 8 free but is cordoned" (at most three machines that
/// would fit but for their state or fenced GPUs are named, then "and N
/// more"), or "cannot fit anywhere now: a worker needs 16 GPUs on one
/// machine; machines in pool h100 have at most 8" (issue 13, item 5).
struct waiting_reason {
  waiting_code code = waiting_code::not_enough_gpus; ///< for programs
  std::string message;                                ///< for people
};

/// The answer of `placement_index::place`.
using placement_result = std::variant<placement, waiting_reason>;

/// Options of a `placement_index`.
struct placement_options {
  /// How many machines of the best-fitting size a multi-GPU placement on one
  /// machine compares for NUMA and NVLink quality (1 = the first one).
  unsigned quality_lookahead = 8;
};

/// Totals over the whole index, for views and checks.
struct placement_totals {
  uint64_t machines = 0;      ///< not removed
  uint64_t schedulable = 0;   ///< of those, taking new work
  uint64_t gpus = 0;          ///< present GPUs
  uint64_t held = 0;          ///< GPU slots held (present or gone)
  uint64_t free_healthy = 0;  ///< free healthy GPUs (any machine state)
  uint64_t free_at_risk = 0;  ///< free AtRisk GPUs
  uint64_t fenced = 0;        ///< Faulty or Foreign present GPUs
  uint64_t allocations = 0;   ///< live allocations
};

/// The machines and GPUs the scheduler places onto, with incremental
/// updates. Per machine it keeps bit masks (present, healthy, at risk, held)
/// so free counts per machine and per NUMA node are popcounts; per label set
/// that requests have used (a "selector") and per topology group (NVLink
/// domain, fabric, rack, site, whole cluster) it keeps schedulable machines
/// in buckets by free-GPU count, healthy and healthy-or-at-risk. Every update
/// moves a machine between buckets in O(selectors x tiers); a single-worker
/// placement finds its best-fitting machine in O(GPUs per machine).
///
/// Errors are `caf::error`s with `ec::no_such_machine` (unknown machine or
/// GPU) or `ec::invalid_request` (a malformed or conflicting change); a
/// failed call changes nothing.
class placement_index {
public:
  /// An empty index.
  explicit placement_index(placement_options options = {});
  ~placement_index();
  placement_index(const placement_index&) = delete;
  placement_index& operator=(const placement_index&) = delete;
  placement_index(placement_index&&) noexcept;
  placement_index& operator=(placement_index&&) noexcept;

  // -- machines and GPUs ---------------------------------------------------

  /// Adds a machine. Fails on a duplicate machine name, a GPU id already in
  /// the index or repeated in `spec`, more than 64 GPUs, or an empty name.
  caf::expected<machine_id> add_machine(const machine_spec& spec);

  /// Applies `spec` (same name) to machine `m`: labels, schedulable, GPUs
  /// (`set_gpus`). Fails as `set_gpus` does, or on another name.
  caf::error update_machine(machine_id m, const machine_spec& spec);

  /// Whether `m` takes new work, and if not why (`machine_spec::
  /// not_schedulable`, named in waiting reasons). Its held GPUs stay held
  /// either way (a Down machine's workers keep their GPUs until told
  /// otherwise).
  caf::error set_schedulable(machine_id m, bool schedulable, std::string_view why = {});

  /// Replaces the labels of `m`.
  caf::error set_labels(machine_id m, const label_map& labels);

  /// Replaces the GPUs of `m`. A GPU keeps its slot while its id stays; a
  /// free GPU that is no longer listed is forgotten; a held one stays held,
  /// unusable, until its allocation is released (or it is listed again).
  /// NVLink peers are made symmetric. GPUs are keyed by (machine, id): an id
  /// another machine lists too is no conflict here (the scheduler sets
  /// aside real UUIDs two machines claim). Fails on a repeated id or more
  /// than 64 slots.
  caf::error set_gpus(machine_id m, const std::vector<gpu_spec>& gpus);

  /// Removes `m` (its name may then be added again). Fails while any of its
  /// GPUs is held.
  caf::error remove_machine(machine_id m);

  /// Sets the health of the GPU with id `gpu_id` (the first machine listing
  /// it; ids are unique only within a machine).
  caf::error set_gpu_health(std::string_view gpu_id, gpu_health health);

  /// Sets the health of GPU `gpu`.
  caf::error set_gpu_health(gpu_ref gpu, gpu_health health);

  /// Sets the logical CPUs and memory of `m` (`machine_spec::cpus`,
  /// `memory_bytes`; 0 = unknown, not checked). What is held stays held,
  /// also beyond a smaller size.
  caf::error set_size(machine_id m, uint32_t cpus, uint64_t memory_bytes);

  /// The cores (thousandths) and memory of `m` used outside the index's
  /// allocations (the scheduler's CPU-only workers, and the workers of runs
  /// still re-adopting their GPUs after a restart): they count against its
  /// free cores and memory like held ones. Replaces the previous figures.
  caf::error set_outside_use(machine_id m, uint64_t cpu_millis, uint64_t memory_bytes);

  // -- look-ups --------------------------------------------------------------

  /// The machine named `name`, if any (removed machines are not found).
  std::optional<machine_id> find_machine(std::string_view name) const;
  /// The GPU with id `gpu_id` on the first machine listing it, if any; ids
  /// are unique only within a machine, so prefer the two-argument form.
  std::optional<gpu_ref> find_gpu(std::string_view gpu_id) const;
  /// The GPU with id `gpu_id` on machine `m`, if any.
  std::optional<gpu_ref> find_gpu(machine_id m, std::string_view gpu_id) const;
  /// Machine ids issued so far (ids are 0 .. this - 1).
  size_t machine_ids() const;
  /// The name of `m` (empty for an unknown id).
  const std::string& machine_name(machine_id m) const;
  /// The label value `key` of `m`, if set.
  std::optional<std::string> machine_label(machine_id m, std::string_view key) const;
  /// Whether `m` takes new work (false for unknown or removed machines).
  bool schedulable(machine_id m) const;
  /// The number of GPU slots of `m` (present or held after removal).
  unsigned gpu_slots(machine_id m) const;
  /// The present GPUs of `m`.
  gpu_mask present_gpus(machine_id m) const;
  /// Free GPUs of `m` that may be assigned: healthy ones, plus AtRisk ones
  /// when `with_at_risk` (regardless of whether `m` is schedulable).
  gpu_mask free_gpus(machine_id m, bool with_at_risk) const;
  /// The id of `gpu` (empty for an empty slot).
  std::string_view gpu_id(gpu_ref gpu) const;
  /// The ids of the GPU slots `gpus` of `m`, in slot order.
  std::vector<std::string> gpu_ids(machine_id m, gpu_mask gpus) const;
  /// The health of `gpu` (faulty for an empty slot).
  gpu_health health(gpu_ref gpu) const;
  /// The NUMA node of `gpu` (-1 unknown).
  int numa_node(gpu_ref gpu) const;
  /// The allocation holding `gpu`; 0 when free.
  allocation_id holder(gpu_ref gpu) const;
  /// The GPUs an allocation holds (empty for an unknown one).
  std::vector<gpu_set> allocation_gpus(allocation_id a) const;
  /// The owner an allocation was made for (empty for an unknown one).
  std::string allocation_owner(allocation_id a) const;
  /// The cores and memory an allocation holds, by machine (empty for an
  /// unknown one or one holding none).
  std::vector<machine_use> allocation_use(allocation_id a) const;
  /// Free cores of `m`, thousandths: its logical CPUs less those held and
  /// used outside; UINT64_MAX when its CPUs are unknown.
  uint64_t free_cpu_millis(machine_id m) const;
  /// Free memory of `m`, bytes, likewise; UINT64_MAX when unknown.
  uint64_t free_memory_bytes(machine_id m) const;
  /// Totals over the whole index (O(machines)).
  placement_totals totals() const;

  // -- placing ---------------------------------------------------------------

  /// Where `request` would go now, all or nothing, or why it waits. Changes
  /// no machine or GPU state (the first request with a new label set builds
  /// that set's buckets once, O(machines)).
  placement_result place(const placement_request& request);

  /// A cheap necessary condition for `place` to succeed (free GPUs in the
  /// best site and the largest free block on one machine), O(sites + 64).
  bool may_fit(const placement_request& request);

  /// Holds every GPU of `where` for `where.run`, and its workers' cores and
  /// memory on their machines, all or nothing. Fails (changing nothing) if
  /// any GPU is no longer free and assignable under the request's rules, a
  /// machine no longer has the free cores or memory, no longer takes new
  /// work or carries the labels: then `place` again.
  caf::expected<allocation_id> commit(const placement& where);

  /// Holds `gpus` (and the cores and memory of `use`) for `owner`, all or
  /// nothing, whatever their health, machine state or free cores (for
  /// reservations and for restoring holds after a restart). Fails if a slot
  /// is empty or already held, or `use` names an unknown machine.
  caf::expected<allocation_id> hold(std::string owner, const std::vector<gpu_set>& gpus,
                                    const std::vector<machine_use>& use = {});

  /// Holds the GPUs with ids `gpu_ids` for `owner`, as `hold` does: how the
  /// scheduler re-adopts running workers after a restart.
  caf::expected<allocation_id> restore(std::string owner,
                                       const std::vector<std::string>& gpu_ids);

  /// Holds the GPUs named by (machine name, GPU id) for `owner`, and the
  /// cores and memory of `use`, as `hold` does: ids are unique only within
  /// a machine (PCI addresses repeat on identical machines), so the
  /// scheduler restores by both.
  caf::expected<allocation_id>
  restore(std::string owner, const std::vector<std::pair<std::string, std::string>>& gpus,
          const std::vector<machine_use>& use = {});

  /// Frees every GPU of allocation `a` (the only way GPUs become free).
  caf::error release(allocation_id a);

  /// As `release`, for a hold taken and given back within one queue pass
  /// (`scheduler_queue`'s reservation): it returns no more than the pass
  /// took, so `capacity_epoch` stays.
  caf::error give_back_hold(allocation_id a);

  /// A counter that moves whenever what `place` can find may have grown: an
  /// allocation released, a machine added, changed or removed, its size,
  /// outside use, labels, GPUs, GPU health or schedulable changed (also when
  /// such a call fails, to be safe). Commits, holds, `give_back_hold`,
  /// `suspend` and `resume` leave it. A request that `place` refused while
  /// no hold of the caller's was in place is refused again as long as the
  /// counter has not moved: only less can be free. `scheduler_queue` relies
  /// on this to skip runs that cannot start.
  uint64_t capacity_epoch() const;

  /// What-if planning: frees the GPUs of `a` but keeps the allocation, so
  /// that `resume` holds exactly the same GPUs again. Used by the queue to
  /// find when a blocked run could start. Fails for an unknown or already
  /// suspended allocation.
  caf::error suspend(allocation_id a);

  /// Holds the GPUs of suspended `a` again. Fails if one was taken meanwhile.
  caf::error resume(allocation_id a);

  /// Recounts everything from the per-GPU records and compares it with the
  /// masks, buckets and counters; the first difference in words, or empty.
  /// O(machines x selectors); for tests.
  std::string check_invariants() const;

private:
  struct state;
  std::unique_ptr<state> st_;
};

/// Options of a `scheduler_queue`.
struct queue_options {
  /// How many blocked runs one pass tries to find a start time for before it
  /// gives up reserving (the first that gets one holds the reservation).
  unsigned reservation_attempts = 8;
  /// Whether a pass skips a run refused with nothing freed since
  /// (`scheduler_queue::schedule`); false tries every run in every pass,
  /// the reference the skipping queue is tested against.
  bool skip_refused = true;
};

/// A run the queue started.
struct queue_decision {
  std::string run;          ///< the run
  placement where;          ///< its workers
  allocation_id allocation; ///< what holds its GPUs
  int64_t start = 0;        ///< `now` of the pass, s
  int64_t end = 0;          ///< start + time limit, s; INT64_MAX without one
  bool backfilled = false;  ///< started while an earlier run waited on a reservation
};

/// The GPUs kept for the first blocked run, and from when.
struct queue_reservation {
  std::string run;          ///< the blocked run
  int64_t start = 0;        ///< the earliest time it can start, s
  std::vector<gpu_set> gpus;///< the GPUs it would get then
  std::vector<machine_use> use; ///< the cores and memory its workers would take there
};

/// The queue of runs waiting for GPUs, with reservation and backfill like
/// Slurm's: in order (priority, then submission), each run starts if it can;
/// the first run that cannot gets a reservation at the earliest time it
/// could start, counting on running runs ending at their time limits (a run
/// without one never ends, as far as planning goes). A later run may then
/// start only if it leaves the reserved GPUs alone, or if its own time limit
/// ends it before the reservation starts. Time is explicit (`now`, seconds
/// on any fixed clock), so passes are deterministic.
class scheduler_queue {
public:
  /// A queue placing into `index` (which must outlive it). All placing into
  /// `index` should go through this queue, or reservations are not honoured.
  explicit scheduler_queue(placement_index& index, queue_options options = {});

  /// Queues `request` at `now`. Fails (ec::invalid_request) on an empty or
  /// duplicate run name.
  caf::error submit(placement_request request, int64_t now);

  /// Removes a waiting run. Fails (ec::invalid_request) if it is not waiting.
  caf::error cancel(std::string_view run);

  /// A running run ended: frees its GPUs. Fails if it is not running.
  caf::error complete(std::string_view run);

  /// `complete` for a run that may not be running, in one look-up: false
  /// when it is not running (nothing changed), true once its GPUs are
  /// freed. Errors: the index's, when its allocation cannot be released.
  caf::expected<bool> complete_if_running(std::string_view run);

  /// Adopts a run already holding `allocation` (after a restart), started at
  /// `start` with `time_limit_seconds` (0 = none).
  caf::error adopt(std::string run, allocation_id allocation, int64_t start,
                   int64_t time_limit_seconds);

  /// One pass at `now`: starts what may start, in order, and records why the
  /// rest waits (`waiting`). Returns the runs started, in order.
  ///
  /// A run the index refused with no hold of the pass in place is not tried
  /// again while the index's `capacity_epoch` stays (only less can be free
  /// since), unless the pass would look for its reservation: with nothing
  /// freed, a submission costs the runs ahead of it a skip each, not a
  /// placement (a queue of thousands stays cheap). Within a pass, a run asking
  /// exactly what a run refused earlier in the pass asked (GPUs, workers,
  /// labels, cores, memory), with nothing started and the reservation's hold
  /// unchanged in between, is refused with its words, untried (a backlog of
  /// like runs costs a look-up each after a run ends). The runs started, their
  /// GPU counts and the reservation are those of trying every run; among
  /// machines of equal standing a run may land on another one (a skipped try
  /// does not give back and re-take the reservation's hold, which reorders
  /// such machines). A skipped run keeps the reason of its last try, whose
  /// counts ("best machine has 3") may be higher than what is free now.
  std::vector<queue_decision> schedule(int64_t now);

  /// Why `run` waits (nullptr if it did not wait in the last pass): the
  /// reason of the last pass that tried it.
  const waiting_reason* waiting(std::string_view run) const;
  /// The runs whose waiting reason was new or changed in the last pass, in
  /// queue order (a run that started or was cancelled is not listed).
  const std::vector<std::string>& reasons_changed() const { return reasons_changed_; }
  /// The reservation of the last pass, if one was made.
  const std::optional<queue_reservation>& reservation() const { return reservation_; }
  /// The allocation of a running run, if it runs.
  std::optional<allocation_id> allocation_of(std::string_view run) const;
  /// Runs waiting.
  size_t waiting_count() const { return order_.size(); }
  /// Runs running.
  size_t running_count() const { return running_.size(); }

private:
  using order_key = std::tuple<int64_t, int64_t, uint64_t>; // -priority, submitted, seq
  struct running_run {
    allocation_id allocation = 0;
    int64_t start = 0;
    int64_t end = 0;
  };
  struct plan {
    int64_t start = 0;
    std::vector<gpu_set> gpus;
    std::vector<machine_use> use;
  };
  std::optional<plan> earliest_start(const placement_request& request, int64_t now);
  allocation_id hold_free_part(const queue_reservation& r);
  std::optional<queue_decision> start(const placement_request& request, placement where,
                                      int64_t now, bool backfilled);

  placement_index& index_;
  queue_options options_;
  uint64_t seq_ = 0;
  /// Which of `retry_` and `capacity_refused_` holds a waiting run.
  enum class filed : uint8_t { nowhere, retry, capacity_refused };
  /// A waiting run, and the `capacity_epoch` at which the index last refused
  /// it with none of the pass's holds in place (`never_tried` if not).
  struct queued {
    placement_request request;
    /// What `place` looks at, as bytes: equal for requests it answers alike
    /// (made when a pass first needs it; never empty once made).
    std::string shape;
    size_t shape_hash = 0;
    uint64_t refused_at = never_tried;
    waiting_code refused_code = waiting_code::not_enough_gpus;
    filed in = filed::nowhere;
    /// Its entry in `waiting_` once it has one (nodes do not move).
    waiting_reason* shown = nullptr;
  };
  static constexpr uint64_t never_tried = UINT64_MAX;
  std::map<order_key, queued> order_;
  name_map<order_key> pending_;
  name_map<running_run> running_;
  std::set<std::pair<int64_t, allocation_id>> ends_; // finite ends only
  name_map<waiting_reason> waiting_;
  std::vector<std::string> reasons_changed_;
  /// The index's capacity_epoch at the last pass.
  uint64_t last_epoch_ = never_tried;
  /// Runs submitted since the last pass (tried in the next; a cancelled one
  /// is simply not found).
  std::vector<order_key> fresh_;
  /// Waiting runs not refused at `last_epoch_` (tried in the next pass).
  std::set<order_key> retry_;
  /// Waiting runs refused for want of room at `last_epoch_` (the first are
  /// tried while a pass looks for its reservation).
  std::set<order_key> capacity_refused_;
  std::optional<queue_reservation> reservation_;
};

} // namespace astraeus
