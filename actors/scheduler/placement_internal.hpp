#pragma once
/// @file
/// Private to the placement engine (not installed for users; included only
/// by `actors/scheduler/placement_*.cpp`): the per-machine and per-GPU
/// records, the buckets by free-GPU count, the allocation slot map and
/// `placement_index::state`, whose methods are defined by concern:
/// - `placement_index.cpp`: machines, GPUs, labels and look-ups;
/// - `placement_buckets.cpp`: label sets ("selectors") and their buckets;
/// - `placement_allocations.cpp`: holding and freeing GPUs (commit, hold,
///   release, suspend, resume);
/// - `placement_gpu_pick.cpp`: the NUMA-local, NVLink-connected pick of GPUs
///   within a machine and the best machine for a one-machine placement;
/// - `placement_gang.cpp`: a gang over several machines, tier by tier;
/// - `placement_decision.cpp`: `place`, `may_fit` and the waiting reasons;
/// - `placement_invariants.cpp`: `check_invariants`;
/// - `scheduler_queue.cpp`: the queue and backfill.

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/error.hpp>

#include "actors/scheduler/placement.hpp"

namespace astraeus {
namespace placement_detail {

/// Set GPUs in `x`. Where the target has no POPCNT instruction (x86-64's
/// baseline, which Debian builds for), `__builtin_popcountll` is a call into
/// libgcc's table; the placement code counts masks ~130 times per decision,
/// so the count is done inline (SWAR, Hacker's Delight 5-1) instead.
inline unsigned popcount(gpu_mask x) {
#if defined(__POPCNT__) || !defined(__x86_64__)
  return static_cast<unsigned>(__builtin_popcountll(x));
#else
  x = x - ((x >> 1) & 0x5555555555555555ULL);
  x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
  x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
  return static_cast<unsigned>((x * 0x0101010101010101ULL) >> 56);
#endif
}

/// The lowest set slot of `x` (x != 0).
inline unsigned lowest(gpu_mask x) {
  return static_cast<unsigned>(__builtin_ctzll(x));
}

/// The mask of slot `i`.
inline gpu_mask bit(unsigned i) {
  return gpu_mask{1} << i;
}

/// Classes of free cores (issue 22): a machine is in class c when its
/// free cores are at least `core_bounds[c]` (x 1000) and below the next
/// bound; a machine whose cores are unknown is in the top class.
inline constexpr unsigned core_classes = 16;
inline constexpr uint64_t core_bounds[core_classes] = {
  0, 1000, 2000, 3000, 4000, 6000, 8000, 12000, 16000, 24000, 32000, 48000, 64000, 96000,
  128000, 192000};

/// The class of `millis` free cores.
inline uint8_t core_class_of(uint64_t millis) {
  unsigned c = core_classes - 1;
  while (c > 0 && core_bounds[c] > millis)
    --c;
  return static_cast<uint8_t>(c);
}

/// Topology tiers of the buckets, tightest first; the cluster tier has one
/// group holding every machine.
enum tier : unsigned { t_nvlink = 0, t_fabric, t_rack, t_site, t_cluster };
inline constexpr unsigned tier_count = 5;
/// Bucket kinds: by free healthy GPUs, and by free healthy-or-at-risk GPUs.
inline constexpr unsigned kind_healthy = 0;
inline constexpr unsigned kind_usable = 1;
inline constexpr uint32_t no_group = UINT32_MAX;
inline constexpr uint32_t slots_per_machine = tier_count * 2;
inline constexpr uint32_t not_member = UINT32_MAX;
inline constexpr int64_t never = std::numeric_limits<int64_t>::max();

/// The label the scheduler marks an Accepting machine with (scheduler_actor.hpp's
/// accepting_label; issue 21): every run but a validation's check requires "false".
inline constexpr const char* accepting_key = "astraeus.io/accepting";

/// The longest GPU id a machine may list (a UUID is 40 characters, a MIG
/// UUID ~50, a PCI address 12-16): a machine's ids are packed in one string
/// with 16-bit offsets.
inline constexpr size_t max_gpu_id_length = 256;

/// One GPU slot of a machine.
struct gpu_rec {
  uint16_t name_at = 0;            ///< where its id starts in its machine's `gpu_names`
  uint16_t name_len = 0;           ///< its id's length; 0 = empty slot
  /// Whether the slot has a GPU (listed, or gone but held).
  bool named() const { return name_len != 0; }
  gpu_mask nvlink = 0;             ///< NVLink peers (symmetric)
  allocation_id holder = 0;        ///< 0 = free
  int16_t numa = -1;               ///< NUMA node; -1 unknown
  gpu_health health = gpu_health::healthy; ///< its health now
  bool present = false;            ///< listed by the machine's last GPU list
  bool gone = false;               ///< no longer listed but still held
};

/// One machine: its labels, topology groups and GPU masks.
struct machine_rec {
  std::string name;                             ///< unique among machines not removed
  std::vector<uint32_t> labels;                 ///< sorted label ids (`label_text` gives them back)
  bool accepting = false;                       ///< labelled astraeus.io/accepting=true (issue 21)
  bool in_blocked = false;                      ///< in the index's `blocked` set
  std::array<uint32_t, tier_count> group{no_group, no_group, no_group, no_group, 0}; ///< per tier
  bool schedulable = false;                     ///< takes new work
  std::string why_not;                          ///< why not ("is cordoned"), for waiting reasons
  bool removed = false;                         ///< removed (the id is never reused)
  gpu_mask present = 0, healthy = 0, at_risk = 0, held = 0; ///< by slot
  std::vector<gpu_rec> gpus;                    ///< by slot
  /// Its GPUs' ids as it reported them, packed (slot s at gpus[s].name_at):
  /// one allocation per machine where a map of ids took ~120 bytes per GPU
  /// (issue 14). GPUs are found by (machine, id), so identical machines
  /// whose GPUs are named by PCI address never collide (issue 18, rule 1).
  std::string gpu_names;
  /// The id of the GPU in slot `s` (empty for an empty slot).
  std::string_view gpu_name(unsigned s) const {
    const gpu_rec& g = gpus[s];
    return std::string_view{gpu_names}.substr(g.name_at, g.name_len);
  }
  /// The slot of GPU `id`; -1 when it has none.
  int slot_named(std::string_view id) const {
    for (unsigned s = 0; s < gpus.size(); ++s)
      if (gpus[s].named() && gpu_name(s) == id)
        return static_cast<int>(s);
    return -1;
  }
  std::vector<std::pair<int, gpu_mask>> numa;   ///< node -> present GPUs, by node
  std::vector<uint32_t> selectors;              ///< matching selectors
  /// Its cores (x 1000) and memory; 0 = unknown, not checked (issue 22).
  uint64_t cpu_cap = 0, mem_cap = 0;
  /// Cores and memory held by allocations (not suspended), and used
  /// outside them (`set_outside_use`).
  uint64_t cpu_held = 0, mem_held = 0, cpu_outside = 0, mem_outside = 0;
  /// Its class of free cores in the selectors' `cores` lists.
  uint8_t core_class = core_classes - 1;
  /// The class its free cores put it in now.
  uint8_t core_class_now() const {
    return cpu_cap ? core_class_of(free_cpu()) : static_cast<uint8_t>(core_classes - 1);
  }

  /// Free cores (x 1000); meaningful when `cpu_cap` is known.
  uint64_t free_cpu() const {
    uint64_t used = cpu_held + cpu_outside;
    return cpu_cap > used ? cpu_cap - used : 0;
  }
  /// Free memory; meaningful when `mem_cap` is known.
  uint64_t free_mem() const {
    uint64_t used = mem_held + mem_outside;
    return mem_cap > used ? mem_cap - used : 0;
  }
  /// How many more workers of `cpu` cores (x 1000) and `mem` bytes each
  /// fit its free cores and memory; UINT32_MAX when neither is checked.
  uint32_t room(uint64_t cpu, uint64_t mem) const {
    uint64_t n = UINT32_MAX;
    if (cpu && cpu_cap)
      n = std::min(n, free_cpu() / cpu);
    if (mem && mem_cap)
      n = std::min(n, free_mem() / mem);
    return static_cast<uint32_t>(n);
  }

  gpu_mask free_healthy() const { return healthy & ~held; }
  gpu_mask free_at_risk() const { return at_risk & ~held; }
  gpu_mask free_usable() const { return (healthy | at_risk) & ~held; }
  /// Present Faulty or Foreign GPUs not held: what a cleared fault frees.
  gpu_mask free_fenced() const { return present & ~healthy & ~at_risk & ~held; }
  bool in_views() const { return schedulable && !removed; }
};

/// The counts that place a machine in buckets.
struct counts {
  unsigned healthy = 0, usable = 0, present = 0;
};

inline counts count_of(const machine_rec& m) {
  return {popcount(m.free_healthy()), popcount(m.free_usable()), popcount(m.present)};
}

/// Machines by free-GPU count: by_free[f] lists the machines with f free.
struct bucket_list {
  std::vector<std::vector<machine_id>> by_free;
  uint32_t members = 0;
  uint64_t free_sum = 0;

  bool has(unsigned f) const { return f < by_free.size() && !by_free[f].empty(); }
  /// The most free GPUs of a member; 0 when none.
  unsigned max_free() const {
    for (size_t f = by_free.size(); f-- > 0;)
      if (!by_free[f].empty())
        return static_cast<unsigned>(f);
    return 0;
  }
  /// How many workers of g GPUs fit, one machine each at most floor(f/g).
  uint64_t capacity(unsigned g) const {
    uint64_t n = 0;
    for (size_t f = g; f < by_free.size(); ++f)
      n += by_free[f].size() * (f / g);
    return n;
  }
};

/// One topology group of a selector: its buckets of both kinds.
struct group_view {
  bucket_list kind[2];
};

/// The whole cluster's schedulable machines of a selector by free GPUs and
/// then by class of free cores (issue 22): a one-machine placement that asks
/// for cores looks only at machines in classes that may have them.
struct core_lists {
  std::vector<std::array<std::vector<machine_id>, core_classes>> by_free;
};

/// A label set that requests have used, with its buckets per tier and group.
struct selector_rec {
  std::vector<uint32_t> labels; ///< sorted label ids
  label_map label_text;         ///< the labels as given
  std::string where;            ///< " in pool h100", " with a=b", ""
  std::array<std::vector<group_view>, tier_count> groups; ///< by tier, then group id
  std::vector<uint32_t> pos;    ///< [machine * slots_per_machine + tier * 2 + kind]
  std::vector<uint32_t> present_hist; ///< matching machines by present GPUs
  std::vector<uint64_t> site_present; ///< present GPUs of matching machines by site group
  uint32_t matching = 0;              ///< matching machines (not removed)
  uint32_t schedulable = 0;           ///< of those, in the buckets
  /// Matching machines by their cores (x 1000) and memory (0: unknown), for
  /// "cannot fit anywhere now" (issue 22); changed only with labels or sizes.
  std::map<uint64_t, uint32_t> cpu_caps, mem_caps;
  /// The cluster's machines by free GPUs and class of free cores, by kind;
  /// positions in them [machine * 2 + kind].
  std::array<core_lists, 2> cores;
  std::vector<uint32_t> core_pos;
};

/// What an allocation holds.
struct alloc_rec {
  std::string owner;
  std::vector<gpu_set> gpus; ///< one entry per machine, sorted by machine
  std::vector<machine_use> use; ///< cores and memory, one entry per machine
  bool suspended = false;
};

/// Allocations live in a slot map: id = generation << 32 | (slot + 1), so a
/// look-up is an array access and a released id is not issued again until
/// its slot was reused 2^32 times. A free slot keeps its buffers.
struct alloc_slot {
  uint32_t generation = 0;
  bool live = false;
  alloc_rec rec;
};

/// A worker class of a gang: every rank asking for g GPUs.
struct demand {
  uint32_t g = 0;
  std::vector<uint32_t> ranks;
};

/// A machine a gang plan uses, and what it has left.
struct chosen_machine {
  machine_id machine = 0;
  unsigned left = 0; ///< GPUs not yet promised
  uint32_t room = UINT32_MAX; ///< workers its free cores and memory still take
};

/// The shape of a request without allocating: totals and the largest worker.
struct shape {
  uint64_t workers = 0;
  uint64_t gpus = 0;
  uint32_t gmax = 0;
  uint32_t gmin = UINT32_MAX;
  uint64_t workers_gmax = 0;
  bool uniform = true;
};

/// An `ec::invalid_request` error.
caf::error invalid(std::string what);

/// "16", "0.5": cores given in thousandths.
std::string cores_text(uint64_t millis);
/// "512 GiB", "15.5 GiB", "512 MiB".
std::string memory_text(uint64_t bytes);

/// An `ec::no_such_machine` error for machine id `m`.
caf::error unknown_machine(machine_id m);

/// Sets `pos` and counts for `id` joining bucket f.
inline void bucket_push(bucket_list& b, machine_id id, unsigned f, uint32_t& pos) {
  if (b.by_free.size() <= f)
    b.by_free.resize(f + 1);
  pos = static_cast<uint32_t>(b.by_free[f].size());
  b.by_free[f].push_back(id);
  ++b.members;
  b.free_sum += f;
}

/// Takes `id` out of bucket f (its position is in `s.pos` at `slot`).
inline void bucket_remove(selector_rec& s, unsigned slot, bucket_list& b, machine_id id,
                          unsigned f) {
  auto& v = b.by_free[f];
  uint32_t p = s.pos[static_cast<size_t>(id) * slots_per_machine + slot];
  machine_id last = v.back();
  v[p] = last;
  s.pos[static_cast<size_t>(last) * slots_per_machine + slot] = p;
  v.pop_back();
  s.pos[static_cast<size_t>(id) * slots_per_machine + slot] = not_member;
  --b.members;
  b.free_sum -= f;
}

} // namespace placement_detail

/// Everything a `placement_index` holds.
struct placement_index::state {
  using machine_rec = placement_detail::machine_rec;
  using selector_rec = placement_detail::selector_rec;
  using counts = placement_detail::counts;
  using bucket_list = placement_detail::bucket_list;
  using alloc_rec = placement_detail::alloc_rec;
  using shape = placement_detail::shape;

  placement_options options;
  /// placement_index::capacity_epoch.
  uint64_t capacity_epoch = 0;
  std::vector<machine_rec> machines;
  std::unordered_map<std::string, machine_id> machine_by_name;
  std::unordered_map<std::string, uint32_t> label_ids; ///< by "key\0value"
  /// Label id -> its key in `label_ids` (node-stable): a machine keeps only
  /// its labels' ids, 100,000 machines' label maps would take ~80 MiB.
  std::vector<const std::string*> label_keys;
  std::array<std::unordered_map<std::string, uint32_t>, placement_detail::t_cluster> group_ids;
  std::map<std::vector<uint32_t>, uint32_t> selector_by_labels;
  std::vector<selector_rec> selectors;
  std::vector<placement_detail::alloc_slot> alloc_slots;
  std::vector<uint32_t> alloc_free;
  size_t alloc_live = 0;
  /// Machines (not removed) that take no new work or have free fenced GPUs:
  /// the ones a waiting reason may name (placement_reasons.cpp).
  std::set<machine_id> blocked;
  /// Machines (not removed) by the value of their `pool` label.
  std::map<std::string, uint32_t, std::less<>> pools;
  static const std::string empty;

  // Planning scratch, reused so that placing allocates little.
  std::vector<uint32_t> cursor;
  std::vector<placement_detail::chosen_machine> chosen;
  std::vector<uint32_t> rank_machine;
  std::vector<std::pair<uint64_t, uint32_t>> candidates;
  std::vector<placement_detail::demand> classes;
  std::vector<uint32_t> label_scratch;
  std::vector<gpu_set> sets_scratch;
  std::vector<machine_use> use_scratch;
  std::vector<machine_id> one_machine;
  std::vector<machine_id> fitting;
  std::string key_scratch;

  // The request being placed: each worker's cores (x 1000) and memory, and
  // the machines passed over for them (the first few, and whether more).
  uint64_t ask_cpu = 0, ask_mem = 0;
  std::vector<machine_id> short_named;
  bool short_more = false;
  /// The request wants each worker on a machine of its own.
  bool one_per_machine = false;
  /// How many workers of the request being placed fit `m`'s free cores
  /// and memory (UINT32_MAX when it asks for none, or `m`'s are unknown).
  uint32_t room(const machine_rec& m) const { return m.room(ask_cpu, ask_mem); }
  /// Notes machine `id` passed over for its cores or memory.
  void note_short(machine_id id) {
    if (std::find(short_named.begin(), short_named.end(), id) != short_named.end())
      return;
    if (short_named.size() < 3)
      short_named.push_back(id);
    else
      short_more = true;
  }
  /// Adds (`sign` 1) or takes away (-1) `use` on its machines.
  void use_add(const std::vector<machine_use>& use, int sign);
  /// Counts the cores and memory of `m` in the selector's `cpu_caps` and
  /// `mem_caps` (`sign` 1 or -1).
  static void caps_add(selector_rec& s, const machine_rec& m, int sign);

  // -- labels and groups (placement_index.cpp) -------------------------------

  uint32_t intern_label(const std::string& k, const std::string& v);
  /// The key and value of label `id` (interned).
  std::pair<std::string_view, std::string_view> label_text(uint32_t id) const {
    std::string_view kv = *label_keys[id];
    auto nul = kv.find('\0');
    return {kv.substr(0, nul), kv.substr(nul + 1)};
  }
  /// The value of label `key` on `m`; nullopt without.
  std::optional<std::string_view> label_value(const machine_rec& m, std::string_view key) const;
  /// Whether `m` carries label `key`=`value`.
  bool has_label(const machine_rec& m, std::string_view key, std::string_view value) const;
  /// Whether `m` carries exactly `labels`.
  bool same_labels(const machine_rec& m, const label_map& labels) const {
    if (m.labels.size() != labels.size())
      return false;
    for (const auto& [k, v] : labels)
      if (!has_label(m, k, v))
        return false;
    return true;
  }
  uint32_t intern_group(unsigned t, const std::string& key);
  void set_machine_labels(machine_rec& m, const label_map& labels);

  // -- waiting reasons (placement_reasons.cpp) -------------------------------

  /// Keeps `blocked` right for `id` after its state or GPUs changed.
  void note_blocked(machine_id id);
  /// Counts pool `pool` (the value of a machine's `pool` label; nothing
  /// without) in `pools` (`sign` 1 or -1).
  void count_pool(std::optional<std::string_view> pool, int sign);
  /// "; gpu-01 has 8 free but is cordoned, gpu-02 has 6 free and 2 GPUs
  /// fenced and 4 more": the machines of `sel` that would give one worker
  /// `need` GPUs of kind `k` but for their state or fenced GPUs; at most
  /// three named, O(blocked machines), at most 4096 looked at. Empty when
  /// none.
  /// With `accepting_must_fit`, a machine that only its cordon or
  /// acceptance keeps from the run is named only if it has `need` GPUs.
  /// With `gang`, a machine taking work is named also where its fenced GPUs
  /// cost it room for a worker (2 free and 6 held outside Astraeus: room
  /// for 1 worker of 2 GPUs, not 4), though it has room for one.
  std::string blockers(const selector_rec& sel, unsigned k, unsigned need,
                       bool accepting_must_fit = false, bool gang = false) const;
  /// The largest of the machines that only their cordon or acceptance
  /// keeps from a selector's runs: GPUs (0: none), cores and memory (0:
  /// none; UINT64_MAX when one's size is unknown, which may have any).
  struct kept_out_sizes {
    unsigned gpus = 0;
    uint64_t cpu_cap = 0;
    uint64_t mem_cap = 0;
  };
  /// Those sizes among the machines `sel`'s runs cannot have but for their
  /// cordon or acceptance (as `blockers` finds them; at most 4096 looked
  /// at). What "machines have at most N" and "the largest machine has"
  /// count beside the matching machines: a cordoned machine large enough
  /// is a reason to wait, not "cannot fit anywhere now".
  kept_out_sizes most_kept_out(const selector_rec& sel) const;
  /// " (machines are in pools a100, l4)": at most four pools; empty without.
  std::string pools_text() const;
  /// "; gpu-01 has the GPUs but only 16 free cores": the machines passed
  /// over for their cores or memory in this placement (`short_named`).
  std::string shorts_text() const;

  // -- GPUs of a machine (placement_index.cpp) -------------------------------

  static void rebuild_masks(machine_rec& m);
  caf::error check_gpu_list(machine_id id, const std::vector<gpu_spec>& gpus) const;
  void drop_slot(machine_rec& m, unsigned s);
  /// Applies a checked GPU list.
  void apply_gpu_list(machine_id id, const std::vector<gpu_spec>& gpus);

  // -- selectors and their buckets (placement_buckets.cpp) -------------------

  static bool matches(const machine_rec& m, const selector_rec& s) {
    return std::includes(m.labels.begin(), m.labels.end(), s.labels.begin(), s.labels.end());
  }
  void view_insert(selector_rec& s, machine_id id);
  void view_remove(selector_rec& s, machine_id id, counts c);
  void view_move(selector_rec& s, machine_id id, counts from, counts to);
  /// Puts `id` in the `cores` lists of `s` (kind k, f free GPUs, its
  /// `core_class`), or takes it out.
  void cores_push(selector_rec& s, unsigned k, machine_id id, unsigned f);
  void cores_remove(selector_rec& s, unsigned k, machine_id id, unsigned f);
  /// After the free cores of `id` changed: moves it to its new class.
  void cores_changed(machine_id id);
  void stats_add(selector_rec& s, const machine_rec& m, unsigned present, int sign);
  void attach(uint32_t sid, machine_id id);
  void detach_all(machine_id id);
  void attach_matching(machine_id id);
  /// After the masks of `id` changed from `before`: moves it between buckets.
  void changed(machine_id id, counts before);
  /// The selector of `labels`, built on first use (O(machines)).
  uint32_t selector_for(const label_map& labels);

  // -- holding (placement_allocations.cpp) -----------------------------------

  alloc_rec* find_alloc(allocation_id a);
  const alloc_rec* find_alloc(allocation_id a) const {
    return const_cast<state*>(this)->find_alloc(a);
  }
  allocation_id hold_checked(const std::string& owner, const std::vector<gpu_set>& sets,
                             const std::vector<machine_use>& use);
  void drop_alloc(allocation_id a);
  /// Sorts by machine and merges; false if two sets overlap.
  static bool merge_sets(std::vector<gpu_set>& sets);
  /// Frees the GPUs of `sets` held by `a`; drops gone slots when `forget`.
  void free_sets(const std::vector<gpu_set>& sets, allocation_id a, bool forget);

  // -- choosing GPUs within a machine (placement_gpu_pick.cpp) ---------------

  /// The best `t` GPUs of `cand` for one worker: the most NVLinks among them
  /// and to `linked` (GPUs it already has), then the fewest NVLinks cut to
  /// the rest of `cand` (keeping joined GPUs together for later workers),
  /// then the lowest slots.
  static gpu_mask best_subset(const machine_rec& m, gpu_mask cand, unsigned t, gpu_mask linked);
  /// Drove's rule: the NUMA node with the most GPUs of `avail` first, taking
  /// its GPUs first, then the next; NVLink decides within a node.
  static gpu_mask pick_gpus(const machine_rec& m, gpu_mask avail, unsigned n, gpu_mask linked);
  /// One worker of g GPUs from the machine's remaining `primary` (healthy)
  /// GPUs, then `secondary` (AtRisk) ones; removes what it takes. Returns
  /// the GPUs; sets its NUMA node and adds a quality penalty (0 = all on one
  /// NUMA node and all joined by NVLink).
  static gpu_mask select_worker(const machine_rec& m, gpu_mask& primary, gpu_mask& secondary,
                                unsigned g, int& numa, uint64_t& penalty);
  /// Every worker of `request` on one machine of bucket kind `k`: best fit
  /// by free GPUs, then the best NUMA/NVLink layout among a few machines of
  /// that size. Fills `out` (machines, GPUs, tier) and returns true, or
  /// false when no machine has room.
  bool place_on_one_machine(const selector_rec& sel, unsigned k,
                            const placement_request& request, const shape& sh,
                            placement& out);

  // -- gangs over several machines (placement_gang.cpp) ----------------------

  /// The gang's worker classes (by GPUs per worker, largest first) in
  /// `classes`; returns how many.
  size_t gang_classes(const placement_request& request, const shape& sh, const placement& out);
  /// Promises machines of `bl` to the ranks of the first `nclasses` classes:
  /// largest free machines first, the last one best fit. False if they do
  /// not fit.
  bool pack_gang(const bucket_list& bl, size_t nclasses);
  /// The concrete GPUs of a packed gang, machine by machine, larger workers
  /// first; true if some GPU is AtRisk.
  bool pick_gang_gpus(unsigned k, size_t nclasses, placement& out);
  /// The gang on the tightest tier with a group that fits, best fit among
  /// that tier's groups. Fills `out` and returns true, or false.
  bool place_gang(const selector_rec& sel, unsigned k, const placement_request& request,
                  const shape& sh, placement& out);
};

} // namespace astraeus
