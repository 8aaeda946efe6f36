#include "actors/scheduler/placement.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <limits>

#include "messages/error.hpp"

namespace astraeus {

namespace {

unsigned popcount(gpu_mask x) {
  return static_cast<unsigned>(__builtin_popcountll(x));
}

unsigned lowest(gpu_mask x) {
  return static_cast<unsigned>(__builtin_ctzll(x));
}

gpu_mask bit(unsigned i) {
  return gpu_mask{1} << i;
}

// Topology tiers of the buckets, tightest first; the cluster tier has one
// group holding every machine.
enum tier : unsigned { t_nvlink = 0, t_fabric, t_rack, t_site, t_cluster };
constexpr unsigned tier_count = 5;
// Bucket kinds: by free healthy GPUs, and by free healthy-or-at-risk GPUs.
constexpr unsigned kind_healthy = 0;
constexpr unsigned kind_usable = 1;
constexpr uint32_t no_group = UINT32_MAX;
constexpr uint32_t slots_per_machine = tier_count * 2;
constexpr uint32_t not_member = UINT32_MAX;
constexpr int64_t never = std::numeric_limits<int64_t>::max();

struct gpu_rec {
  const std::string* id = nullptr; // the key in gpu_by_id (node-stable); null = empty slot
  gpu_mask nvlink = 0;             // NVLink peers (symmetric)
  allocation_id holder = 0;        // 0 = free
  int16_t numa = -1;
  gpu_health health = gpu_health::healthy;
  bool present = false;            // listed by the machine's last GPU list
  bool gone = false;               // no longer listed but still held
};

struct machine_rec {
  std::string name;
  std::vector<uint32_t> labels;         // sorted label ids
  label_map label_text;
  std::array<uint32_t, tier_count> group{no_group, no_group, no_group, no_group, 0};
  bool schedulable = false;
  bool removed = false;
  gpu_mask present = 0, healthy = 0, at_risk = 0, held = 0;
  std::vector<gpu_rec> gpus;                   // by slot
  std::vector<std::pair<int, gpu_mask>> numa;  // node -> present GPUs, by node
  std::vector<uint32_t> selectors;             // matching selectors

  gpu_mask free_healthy() const { return healthy & ~held; }
  gpu_mask free_at_risk() const { return at_risk & ~held; }
  gpu_mask free_usable() const { return (healthy | at_risk) & ~held; }
  bool in_views() const { return schedulable && !removed; }
};

struct counts {
  unsigned healthy = 0, usable = 0, present = 0;
};

counts count_of(const machine_rec& m) {
  return {popcount(m.free_healthy()), popcount(m.free_usable()), popcount(m.present)};
}

// Machines by free-GPU count: by_free[f] lists the machines with f free.
struct bucket_list {
  std::vector<std::vector<machine_id>> by_free;
  uint32_t members = 0;
  uint64_t free_sum = 0;

  bool has(unsigned f) const { return f < by_free.size() && !by_free[f].empty(); }
  // The most free GPUs of a member; 0 when none.
  unsigned max_free() const {
    for (size_t f = by_free.size(); f-- > 0;)
      if (!by_free[f].empty())
        return static_cast<unsigned>(f);
    return 0;
  }
  // How many workers of g GPUs fit, one machine each at most floor(f/g).
  uint64_t capacity(unsigned g) const {
    uint64_t n = 0;
    for (size_t f = g; f < by_free.size(); ++f)
      n += by_free[f].size() * (f / g);
    return n;
  }
};

struct group_view {
  bucket_list kind[2];
};

struct selector_rec {
  std::vector<uint32_t> labels; // sorted label ids
  label_map label_text;
  std::string where;            // " in pool h100", " with a=b", ""
  std::array<std::vector<group_view>, tier_count> groups;
  std::vector<uint32_t> pos;    // [machine * slots_per_machine + tier * 2 + kind]
  std::vector<uint32_t> present_hist; // matching machines by present GPUs
  std::vector<uint64_t> site_present; // present GPUs of matching machines by site group
  uint32_t matching = 0;              // matching machines (not removed)
  uint32_t schedulable = 0;           // of those, in the buckets
};

struct alloc_rec {
  std::string owner;
  std::vector<gpu_set> gpus; // one entry per machine, sorted by machine
  bool suspended = false;
};

// Allocations live in a slot map: id = generation << 32 | (slot + 1), so a
// look-up is an array access and a released id is not issued again until
// its slot was reused 2^32 times. A free slot keeps its buffers.
struct alloc_slot {
  uint32_t generation = 0;
  bool live = false;
  alloc_rec rec;
};

// A worker class of a gang: every rank asking for g GPUs.
struct demand {
  uint32_t g = 0;
  std::vector<uint32_t> ranks;
};

struct chosen_machine {
  machine_id machine = 0;
  unsigned left = 0; // GPUs not yet promised
};

caf::error invalid(std::string what) {
  return caf::make_error(ec::invalid_request, std::move(what));
}

caf::error unknown_machine(machine_id m) {
  return caf::make_error(ec::no_such_machine, "no machine with id " + std::to_string(m));
}

std::string plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string gpus_text(uint64_t n, bool healthy) {
  return std::to_string(n) + (healthy ? " healthy" : "") + (n == 1 ? " GPU" : " GPUs");
}

std::string where_of(const label_map& labels) {
  std::string pool, others;
  for (const auto& [k, v] : labels) {
    if (k == "pool" && pool.empty()) {
      pool = " in pool " + v;
      continue;
    }
    others += others.empty() ? " with " : ", ";
    others += k + "=" + v;
  }
  return pool + others;
}

// Sets `pos` and counts for `id` joining bucket f.
void bucket_push(bucket_list& b, machine_id id, unsigned f, uint32_t& pos) {
  if (b.by_free.size() <= f)
    b.by_free.resize(f + 1);
  pos = static_cast<uint32_t>(b.by_free[f].size());
  b.by_free[f].push_back(id);
  ++b.members;
  b.free_sum += f;
}

void bucket_remove(selector_rec& s, unsigned slot, bucket_list& b, machine_id id, unsigned f) {
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

} // namespace

const char* to_string(placement_tier x) {
  switch (x) {
    case placement_tier::one_machine: return "one machine";
    case placement_tier::nvlink_domain: return "one NVLink domain";
    case placement_tier::fabric: return "one fabric";
    case placement_tier::rack: return "one rack";
    case placement_tier::site: return "one site";
  }
  return "one site";
}

// ---------------------------------------------------------------------------
// The index's state
// ---------------------------------------------------------------------------

struct placement_index::state {
  placement_options options;
  std::vector<machine_rec> machines;
  std::unordered_map<std::string, machine_id> machine_by_name;
  std::unordered_map<std::string, gpu_ref> gpu_by_id;
  std::unordered_map<std::string, uint32_t> label_ids;
  std::array<std::unordered_map<std::string, uint32_t>, t_cluster> group_ids;
  std::map<std::vector<uint32_t>, uint32_t> selector_by_labels;
  std::vector<selector_rec> selectors;
  std::vector<alloc_slot> alloc_slots;
  std::vector<uint32_t> alloc_free;
  size_t alloc_live = 0;
  static const std::string empty;

  // Planning scratch, reused so that placing allocates little.
  std::vector<uint32_t> cursor;
  std::vector<chosen_machine> chosen;
  std::vector<uint32_t> rank_machine;
  std::vector<std::pair<uint64_t, uint32_t>> candidates;
  std::vector<demand> classes;
  std::vector<uint32_t> label_scratch;
  std::vector<gpu_set> sets_scratch;
  std::vector<machine_id> one_machine;
  std::string key_scratch;

  // -- labels and groups ---------------------------------------------------

  uint32_t intern_label(const std::string& k, const std::string& v) {
    key_scratch.assign(k);
    key_scratch.push_back('\0');
    key_scratch.append(v);
    auto [it, added] = label_ids.try_emplace(key_scratch, static_cast<uint32_t>(label_ids.size()));
    return it->second;
  }

  uint32_t intern_group(unsigned t, const std::string& key) {
    auto& ids = group_ids[t];
    auto [it, added] = ids.try_emplace(key, static_cast<uint32_t>(ids.size()));
    return it->second;
  }

  void set_machine_labels(machine_rec& m, const label_map& labels) {
    m.label_text = labels;
    m.labels.clear();
    for (const auto& [k, v] : labels)
      m.labels.push_back(intern_label(k, v));
    std::sort(m.labels.begin(), m.labels.end());
    auto value = [&](const char* key) -> const std::string* {
      auto i = labels.find(key);
      return i == labels.end() ? nullptr : &i->second;
    };
    const std::string* site = value(topology_label::site);
    std::string site_name = site ? *site : std::string{};
    m.group[t_site] = intern_group(t_site, site_name);
    const std::pair<unsigned, const char*> inner[] = {{t_nvlink, topology_label::nvlink_domain},
                                                      {t_fabric, topology_label::fabric},
                                                      {t_rack, topology_label::rack}};
    for (auto [t, key] : inner) {
      const std::string* v = value(key);
      m.group[t] = v ? intern_group(t, site_name + '\0' + *v) : no_group;
    }
    m.group[t_cluster] = 0;
  }

  static bool matches(const machine_rec& m, const selector_rec& s) {
    return std::includes(m.labels.begin(), m.labels.end(), s.labels.begin(), s.labels.end());
  }

  // -- selector views ------------------------------------------------------

  void view_insert(selector_rec& s, machine_id id) {
    const machine_rec& m = machines[id];
    size_t need = (static_cast<size_t>(id) + 1) * slots_per_machine;
    if (s.pos.size() < need)
      s.pos.resize(std::max(need, machines.size() * slots_per_machine), not_member);
    counts c = count_of(m);
    for (unsigned t = 0; t < tier_count; ++t) {
      uint32_t g = m.group[t];
      if (g == no_group)
        continue;
      if (s.groups[t].size() <= g)
        s.groups[t].resize(g + 1);
      auto& gv = s.groups[t][g];
      size_t base = static_cast<size_t>(id) * slots_per_machine + t * 2;
      bucket_push(gv.kind[kind_healthy], id, c.healthy, s.pos[base + kind_healthy]);
      bucket_push(gv.kind[kind_usable], id, c.usable, s.pos[base + kind_usable]);
    }
    ++s.schedulable;
  }

  void view_remove(selector_rec& s, machine_id id, counts c) {
    const machine_rec& m = machines[id];
    for (unsigned t = 0; t < tier_count; ++t) {
      uint32_t g = m.group[t];
      if (g == no_group)
        continue;
      auto& gv = s.groups[t][g];
      bucket_remove(s, t * 2 + kind_healthy, gv.kind[kind_healthy], id, c.healthy);
      bucket_remove(s, t * 2 + kind_usable, gv.kind[kind_usable], id, c.usable);
    }
    --s.schedulable;
  }

  void view_move(selector_rec& s, machine_id id, counts from, counts to) {
    const machine_rec& m = machines[id];
    for (unsigned t = 0; t < tier_count; ++t) {
      uint32_t g = m.group[t];
      if (g == no_group)
        continue;
      auto& gv = s.groups[t][g];
      size_t base = static_cast<size_t>(id) * slots_per_machine + t * 2;
      if (from.healthy != to.healthy) {
        bucket_remove(s, t * 2 + kind_healthy, gv.kind[kind_healthy], id, from.healthy);
        bucket_push(gv.kind[kind_healthy], id, to.healthy, s.pos[base + kind_healthy]);
      }
      if (from.usable != to.usable) {
        bucket_remove(s, t * 2 + kind_usable, gv.kind[kind_usable], id, from.usable);
        bucket_push(gv.kind[kind_usable], id, to.usable, s.pos[base + kind_usable]);
      }
    }
  }

  void stats_add(selector_rec& s, const machine_rec& m, unsigned present, int sign) {
    if (s.present_hist.size() <= present)
      s.present_hist.resize(present + 1, 0);
    s.present_hist[present] += sign;
    uint32_t site = m.group[t_site];
    if (s.site_present.size() <= site)
      s.site_present.resize(site + 1, 0);
    s.site_present[site] += sign * static_cast<int64_t>(present);
    s.matching += sign;
  }

  void attach(uint32_t sid, machine_id id) {
    machine_rec& m = machines[id];
    selector_rec& s = selectors[sid];
    m.selectors.push_back(sid);
    stats_add(s, m, popcount(m.present), +1);
    if (m.in_views())
      view_insert(s, id);
  }

  void detach_all(machine_id id) {
    machine_rec& m = machines[id];
    counts c = count_of(m);
    for (uint32_t sid : m.selectors) {
      selector_rec& s = selectors[sid];
      if (m.in_views())
        view_remove(s, id, c);
      stats_add(s, m, c.present, -1);
    }
    m.selectors.clear();
  }

  void attach_matching(machine_id id) {
    for (uint32_t sid = 0; sid < selectors.size(); ++sid)
      if (matches(machines[id], selectors[sid]))
        attach(sid, id);
  }

  // After the masks of `id` changed from `before`: moves it between buckets.
  void changed(machine_id id, counts before) {
    machine_rec& m = machines[id];
    counts after = count_of(m);
    if (m.in_views() && (before.healthy != after.healthy || before.usable != after.usable))
      for (uint32_t sid : m.selectors)
        view_move(selectors[sid], id, before, after);
    if (before.present != after.present)
      for (uint32_t sid : m.selectors) {
        stats_add(selectors[sid], m, before.present, -1);
        stats_add(selectors[sid], m, after.present, +1);
      }
  }

  uint32_t selector_for(const label_map& labels) {
    label_scratch.clear();
    for (const auto& [k, v] : labels)
      label_scratch.push_back(intern_label(k, v));
    std::sort(label_scratch.begin(), label_scratch.end());
    auto it = selector_by_labels.find(label_scratch);
    if (it != selector_by_labels.end())
      return it->second;
    auto sid = static_cast<uint32_t>(selectors.size());
    selectors.emplace_back();
    selectors.back().labels = label_scratch;
    selectors.back().label_text = labels;
    selectors.back().where = where_of(labels);
    selector_by_labels.emplace(label_scratch, sid);
    for (machine_id id = 0; id < machines.size(); ++id)
      if (!machines[id].removed && matches(machines[id], selectors[sid]))
        attach(sid, id);
    return sid;
  }

  // -- GPUs of a machine ---------------------------------------------------

  static void rebuild_masks(machine_rec& m) {
    m.present = m.healthy = m.at_risk = m.held = 0;
    m.numa.clear();
    for (unsigned i = 0; i < m.gpus.size(); ++i) {
      const gpu_rec& g = m.gpus[i];
      if (g.holder != 0)
        m.held |= bit(i);
      if (!g.present)
        continue;
      m.present |= bit(i);
      if (g.health == gpu_health::healthy)
        m.healthy |= bit(i);
      else if (g.health == gpu_health::at_risk)
        m.at_risk |= bit(i);
      auto n = std::find_if(m.numa.begin(), m.numa.end(),
                            [&](const auto& p) { return p.first == g.numa; });
      if (n == m.numa.end())
        m.numa.emplace_back(g.numa, bit(i));
      else
        n->second |= bit(i);
    }
    std::sort(m.numa.begin(), m.numa.end());
  }

  caf::error check_gpu_list(machine_id id, const std::vector<gpu_spec>& gpus) const {
    if (gpus.size() > max_gpus_per_machine)
      return invalid("a machine has at most 64 GPUs; " + std::to_string(gpus.size()) + " listed");
    unsigned fresh = 0;
    std::vector<bool> listed_slot(max_gpus_per_machine, false);
    for (size_t i = 0; i < gpus.size(); ++i) {
      const auto& g = gpus[i];
      if (g.id.empty())
        return invalid("a GPU without an id");
      for (size_t j = 0; j < i; ++j)
        if (gpus[j].id == g.id)
          return invalid("GPU " + g.id + " is listed twice");
      auto it = gpu_by_id.find(g.id);
      if (it == gpu_by_id.end()) {
        ++fresh;
        continue;
      }
      if (it->second.machine != id)
        return invalid("GPU " + g.id + " is already on machine " +
                       machines[it->second.machine].name);
      listed_slot[it->second.slot] = true;
    }
    unsigned occupied = 0;
    if (id < machines.size())
      for (unsigned s = 0; s < machines[id].gpus.size(); ++s)
        if (listed_slot[s] || machines[id].gpus[s].holder != 0 ||
            (machines[id].gpus[s].gone && machines[id].gpus[s].id))
          ++occupied;
    if (occupied + fresh > max_gpus_per_machine)
      return invalid("machine would have more than 64 GPU slots (held GPUs keep theirs)");
    return {};
  }

  void drop_slot(machine_rec& m, unsigned s) {
    gpu_rec& g = m.gpus[s];
    if (g.id)
      gpu_by_id.erase(*g.id);
    g = gpu_rec{};
  }

  // Applies a checked GPU list.
  void apply_gpu_list(machine_id id, const std::vector<gpu_spec>& gpus) {
    machine_rec& m = machines[id];
    counts before = count_of(m);
    std::vector<int> slot_of(gpus.size(), -1);
    for (size_t i = 0; i < gpus.size(); ++i) {
      auto it = gpu_by_id.find(gpus[i].id);
      if (it != gpu_by_id.end())
        slot_of[i] = it->second.slot;
    }
    // Forget or keep (held) the GPUs no longer listed.
    for (unsigned s = 0; s < m.gpus.size(); ++s) {
      gpu_rec& g = m.gpus[s];
      if (!g.id || std::find(slot_of.begin(), slot_of.end(), static_cast<int>(s)) != slot_of.end())
        continue;
      if (g.holder != 0) {
        g.present = false;
        g.gone = true;
        g.nvlink = 0;
      } else {
        drop_slot(m, s);
      }
    }
    // Place new GPUs in empty slots, then update every listed one.
    for (size_t i = 0; i < gpus.size(); ++i) {
      if (slot_of[i] < 0) {
        unsigned s = 0;
        while (s < m.gpus.size() && (m.gpus[s].id || m.gpus[s].holder != 0))
          ++s;
        if (s == m.gpus.size())
          m.gpus.emplace_back();
        auto [it, added] = gpu_by_id.emplace(gpus[i].id, gpu_ref{id, static_cast<uint8_t>(s)});
        m.gpus[s].id = &it->first;
        slot_of[i] = static_cast<int>(s);
      }
      gpu_rec& g = m.gpus[static_cast<unsigned>(slot_of[i])];
      g.present = true;
      g.gone = false;
      g.numa = static_cast<int16_t>(gpus[i].numa_node < -1 ? -1 : gpus[i].numa_node);
      g.health = gpus[i].health;
      g.nvlink = 0;
    }
    for (size_t i = 0; i < gpus.size(); ++i)
      for (gpu_mask peers = gpus[i].nvlink_peers; peers; peers &= peers - 1) {
        unsigned j = lowest(peers);
        if (j >= gpus.size() || j == i)
          continue;
        auto a = static_cast<unsigned>(slot_of[i]), b = static_cast<unsigned>(slot_of[j]);
        m.gpus[a].nvlink |= bit(b);
        m.gpus[b].nvlink |= bit(a);
      }
    while (!m.gpus.empty() && !m.gpus.back().id && m.gpus.back().holder == 0)
      m.gpus.pop_back();
    rebuild_masks(m);
    changed(id, before);
  }

  // -- holding -------------------------------------------------------------

  alloc_rec* find_alloc(allocation_id a) {
    uint64_t low = a & 0xffffffffu;
    if (low == 0 || low > alloc_slots.size())
      return nullptr;
    alloc_slot& slot = alloc_slots[low - 1];
    if (!slot.live || slot.generation != static_cast<uint32_t>(a >> 32))
      return nullptr;
    return &slot.rec;
  }

  const alloc_rec* find_alloc(allocation_id a) const {
    return const_cast<state*>(this)->find_alloc(a);
  }

  allocation_id hold_checked(const std::string& owner, const std::vector<gpu_set>& sets) {
    uint32_t slot;
    if (!alloc_free.empty()) {
      slot = alloc_free.back();
      alloc_free.pop_back();
    } else {
      slot = static_cast<uint32_t>(alloc_slots.size());
      alloc_slots.emplace_back();
    }
    alloc_slot& as = alloc_slots[slot];
    as.live = true;
    as.rec.owner.assign(owner);
    as.rec.gpus.assign(sets.begin(), sets.end());
    as.rec.suspended = false;
    ++alloc_live;
    allocation_id a = (static_cast<uint64_t>(as.generation) << 32) | (uint64_t{slot} + 1);
    for (const auto& set : sets) {
      machine_rec& m = machines[set.machine];
      counts before = count_of(m);
      for (gpu_mask b = set.gpus; b; b &= b - 1)
        m.gpus[lowest(b)].holder = a;
      m.held |= set.gpus;
      changed(set.machine, before);
    }
    return a;
  }

  void drop_alloc(allocation_id a) {
    alloc_slot& as = alloc_slots[(a & 0xffffffffu) - 1];
    as.live = false;
    ++as.generation;
    as.rec.owner.clear();
    as.rec.gpus.clear();
    as.rec.suspended = false;
    alloc_free.push_back(static_cast<uint32_t>((a & 0xffffffffu) - 1));
    --alloc_live;
  }

  // Sorts by machine and merges; false if two sets overlap.
  static bool merge_sets(std::vector<gpu_set>& sets) {
    std::sort(sets.begin(), sets.end(),
              [](const gpu_set& a, const gpu_set& b) { return a.machine < b.machine; });
    size_t out = 0;
    for (size_t i = 0; i < sets.size(); ++i) {
      if (out > 0 && sets[out - 1].machine == sets[i].machine) {
        if (sets[out - 1].gpus & sets[i].gpus)
          return false;
        sets[out - 1].gpus |= sets[i].gpus;
      } else {
        sets[out++] = sets[i];
      }
    }
    sets.resize(out);
    return true;
  }

  // Frees the GPUs of `sets` held by `a`; drops gone slots when `forget`.
  void free_sets(const std::vector<gpu_set>& sets, allocation_id a, bool forget) {
    for (const auto& set : sets) {
      machine_rec& m = machines[set.machine];
      counts before = count_of(m);
      gpu_mask freed = 0;
      bool dropped = false;
      for (gpu_mask b = set.gpus; b; b &= b - 1) {
        unsigned s = lowest(b);
        if (s >= m.gpus.size())
          continue;
        gpu_rec& g = m.gpus[s];
        if (a != 0 && g.holder == a) {
          g.holder = 0;
          freed |= bit(s);
        }
        if (forget && g.gone && g.holder == 0) {
          drop_slot(m, s);
          dropped = true;
        }
      }
      m.held &= ~freed;
      if (dropped) {
        while (!m.gpus.empty() && !m.gpus.back().id && m.gpus.back().holder == 0)
          m.gpus.pop_back();
        rebuild_masks(m);
      }
      changed(set.machine, before);
    }
  }

  // -- choosing GPUs within a machine ----------------------------------------

  // The best `t` GPUs of `cand` for one worker: the most NVLinks among them
  // and to `linked` (GPUs it already has), then the fewest NVLinks cut to
  // the rest of `cand` (keeping joined GPUs together for later workers),
  // then the lowest slots.
  static gpu_mask best_subset(const machine_rec& m, gpu_mask cand, unsigned t, gpu_mask linked) {
    if (t == 0)
      return 0;
    if (popcount(cand) <= t)
      return cand;
    bool any_link = false;
    for (gpu_mask b = cand; b; b &= b - 1)
      if (m.gpus[lowest(b)].nvlink) {
        any_link = true;
        break;
      }
    if (!any_link) { // no NVLink at all: the lowest slots
      gpu_mask out = 0;
      for (unsigned i = 0; i < t; ++i) {
        out |= cand & (~cand + 1) ;
        cand &= cand - 1;
      }
      return out;
    }
    gpu_mask best = 0;
    int best_in = -1, best_cut = INT_MAX;
    unsigned starts = 0;
    for (gpu_mask st = cand; st && starts < 16; st &= st - 1, ++starts) {
      gpu_mask set = bit(lowest(st));
      while (popcount(set) < t) {
        int pick = -1, pick_in = -1, pick_cut = INT_MAX;
        for (gpu_mask b = cand & ~set; b; b &= b - 1) {
          unsigned j = lowest(b);
          int in = static_cast<int>(popcount(m.gpus[j].nvlink & (set | linked)));
          int cut = static_cast<int>(popcount(m.gpus[j].nvlink & cand & ~set & ~bit(j)));
          if (in > pick_in || (in == pick_in && cut < pick_cut)) {
            pick = static_cast<int>(j);
            pick_in = in;
            pick_cut = cut;
          }
        }
        set |= bit(static_cast<unsigned>(pick));
      }
      int in = 0, cut = 0;
      for (gpu_mask b = set; b; b &= b - 1) {
        const auto& g = m.gpus[lowest(b)];
        in += static_cast<int>(popcount(g.nvlink & (set | linked)));
        cut += static_cast<int>(popcount(g.nvlink & cand & ~set));
      }
      if (in > best_in || (in == best_in && cut < best_cut)) {
        best = set;
        best_in = in;
        best_cut = cut;
      }
    }
    return best;
  }

  // Drove's rule: the NUMA node with the most GPUs of `avail` first, taking
  // its GPUs first, then the next; NVLink decides within a node.
  static gpu_mask pick_gpus(const machine_rec& m, gpu_mask avail, unsigned n, gpu_mask linked) {
    if (n == 0)
      return 0;
    std::array<uint8_t, max_gpus_per_machine> order;
    size_t nodes = m.numa.size();
    for (size_t i = 0; i < nodes; ++i)
      order[i] = static_cast<uint8_t>(i);
    auto before = [&](uint8_t a, uint8_t b) {
      unsigned fa = popcount(avail & m.numa[a].second), fb = popcount(avail & m.numa[b].second);
      if (fa != fb)
        return fa > fb;
      bool ua = m.numa[a].first < 0, ub = m.numa[b].first < 0;
      if (ua != ub)
        return ub; // a known node before the unknown one
      return m.numa[a].first < m.numa[b].first;
    };
    std::sort(order.begin(), order.begin() + static_cast<long>(nodes), before);
    gpu_mask chosen = 0;
    for (size_t i = 0; i < nodes && popcount(chosen) < n; ++i) {
      gpu_mask cand = avail & m.numa[order[i]].second;
      if (!cand)
        continue;
      unsigned t = std::min(n - popcount(chosen), popcount(cand));
      chosen |= best_subset(m, cand, t, linked | chosen);
    }
    return chosen;
  }

  // One worker of g GPUs from the machine's remaining `primary` (healthy)
  // GPUs, then `secondary` (AtRisk) ones; removes what it takes. Returns
  // the GPUs; sets its NUMA node and adds a quality penalty (0 = all on one
  // NUMA node and all joined by NVLink).
  static gpu_mask select_worker(const machine_rec& m, gpu_mask& primary, gpu_mask& secondary,
                                unsigned g, int& numa, uint64_t& penalty) {
    unsigned n1 = std::min(g, popcount(primary));
    gpu_mask a = pick_gpus(m, primary, n1, 0);
    gpu_mask b = g > n1 ? pick_gpus(m, secondary, g - n1, a) : 0;
    primary &= ~a;
    secondary &= ~b;
    gpu_mask sel = a | b;
    numa = -1;
    unsigned most = 0, spanned = 0;
    for (const auto& [node, mask] : m.numa) {
      unsigned c = popcount(sel & mask);
      if (c > 0)
        ++spanned;
      if (c > most) {
        most = c;
        numa = node;
      }
    }
    if (g > 1) {
      unsigned links = 0;
      for (gpu_mask x = sel; x; x &= x - 1)
        links += popcount(m.gpus[lowest(x)].nvlink & sel);
      uint64_t pairs = uint64_t(g) * (g - 1) / 2;
      penalty += (spanned > 1 ? (spanned - 1) * 4096ull : 0) + (pairs - links / 2);
    }
    return sel;
  }
};

const std::string placement_index::state::empty;

// ---------------------------------------------------------------------------
// placement_index
// ---------------------------------------------------------------------------

placement_index::placement_index(placement_options options) : st_(std::make_unique<state>()) {
  st_->options = options;
  if (st_->options.quality_lookahead == 0)
    st_->options.quality_lookahead = 1;
}

placement_index::~placement_index() = default;
placement_index::placement_index(placement_index&&) noexcept = default;
placement_index& placement_index::operator=(placement_index&&) noexcept = default;

caf::expected<machine_id> placement_index::add_machine(const machine_spec& spec) {
  auto& S = *st_;
  if (spec.name.empty())
    return invalid("a machine needs a name");
  if (S.machine_by_name.count(spec.name))
    return invalid("machine " + spec.name + " is already in the placement index");
  if (S.machines.size() >= UINT32_MAX - 1)
    return invalid("too many machines");
  auto id = static_cast<machine_id>(S.machines.size());
  if (auto err = S.check_gpu_list(id, spec.gpus))
    return err;
  S.machines.emplace_back();
  machine_rec& m = S.machines.back();
  m.name = spec.name;
  m.schedulable = spec.schedulable;
  S.set_machine_labels(m, spec.labels);
  S.machine_by_name.emplace(spec.name, id);
  S.attach_matching(id);
  S.apply_gpu_list(id, spec.gpus);
  return id;
}

caf::error placement_index::update_machine(machine_id m, const machine_spec& spec) {
  auto& S = *st_;
  if (m >= S.machines.size() || S.machines[m].removed)
    return unknown_machine(m);
  if (spec.name != S.machines[m].name)
    return invalid("machine " + S.machines[m].name + " cannot be renamed to " + spec.name);
  if (auto err = S.check_gpu_list(m, spec.gpus))
    return err;
  if (spec.labels != S.machines[m].label_text)
    set_labels(m, spec.labels);
  set_schedulable(m, spec.schedulable);
  S.apply_gpu_list(m, spec.gpus);
  return {};
}

caf::error placement_index::set_schedulable(machine_id id, bool schedulable) {
  auto& S = *st_;
  if (id >= S.machines.size() || S.machines[id].removed)
    return unknown_machine(id);
  machine_rec& m = S.machines[id];
  if (m.schedulable == schedulable)
    return {};
  counts c = count_of(m);
  if (!schedulable)
    for (uint32_t sid : m.selectors)
      S.view_remove(S.selectors[sid], id, c);
  m.schedulable = schedulable;
  if (schedulable)
    for (uint32_t sid : m.selectors)
      S.view_insert(S.selectors[sid], id);
  return {};
}

caf::error placement_index::set_labels(machine_id id, const label_map& labels) {
  auto& S = *st_;
  if (id >= S.machines.size() || S.machines[id].removed)
    return unknown_machine(id);
  S.detach_all(id);
  S.set_machine_labels(S.machines[id], labels);
  S.attach_matching(id);
  return {};
}

caf::error placement_index::set_gpus(machine_id id, const std::vector<gpu_spec>& gpus) {
  auto& S = *st_;
  if (id >= S.machines.size() || S.machines[id].removed)
    return unknown_machine(id);
  if (auto err = S.check_gpu_list(id, gpus))
    return err;
  S.apply_gpu_list(id, gpus);
  return {};
}

caf::error placement_index::remove_machine(machine_id id) {
  auto& S = *st_;
  if (id >= S.machines.size() || S.machines[id].removed)
    return unknown_machine(id);
  machine_rec& m = S.machines[id];
  if (m.held)
    return invalid("machine " + m.name + " still has held GPUs; release them first");
  S.detach_all(id);
  for (unsigned s = 0; s < m.gpus.size(); ++s)
    S.drop_slot(m, s);
  S.machine_by_name.erase(m.name);
  m.gpus.clear();
  m.numa.clear();
  m.present = m.healthy = m.at_risk = m.held = 0;
  m.removed = true;
  m.schedulable = false;
  return {};
}

caf::error placement_index::set_gpu_health(std::string_view gpu_id, gpu_health health) {
  auto ref = find_gpu(gpu_id);
  if (!ref)
    return caf::make_error(ec::no_such_machine, "no GPU " + std::string{gpu_id});
  return set_gpu_health(*ref, health);
}

caf::error placement_index::set_gpu_health(gpu_ref ref, gpu_health health) {
  auto& S = *st_;
  if (ref.machine >= S.machines.size() || S.machines[ref.machine].removed)
    return unknown_machine(ref.machine);
  machine_rec& m = S.machines[ref.machine];
  if (ref.slot >= m.gpus.size() || !m.gpus[ref.slot].id)
    return caf::make_error(ec::no_such_machine, "no GPU in slot " + std::to_string(ref.slot) +
                                                  " of machine " + m.name);
  gpu_rec& g = m.gpus[ref.slot];
  if (g.health == health)
    return {};
  counts before = count_of(m);
  g.health = health;
  m.healthy &= ~bit(ref.slot);
  m.at_risk &= ~bit(ref.slot);
  if (g.present && health == gpu_health::healthy)
    m.healthy |= bit(ref.slot);
  else if (g.present && health == gpu_health::at_risk)
    m.at_risk |= bit(ref.slot);
  S.changed(ref.machine, before);
  return {};
}

std::optional<machine_id> placement_index::find_machine(std::string_view name) const {
  auto it = st_->machine_by_name.find(std::string{name});
  if (it == st_->machine_by_name.end())
    return std::nullopt;
  return it->second;
}

std::optional<gpu_ref> placement_index::find_gpu(std::string_view gpu_id) const {
  auto it = st_->gpu_by_id.find(std::string{gpu_id});
  if (it == st_->gpu_by_id.end())
    return std::nullopt;
  return it->second;
}

size_t placement_index::machine_ids() const {
  return st_->machines.size();
}

const std::string& placement_index::machine_name(machine_id m) const {
  return m < st_->machines.size() ? st_->machines[m].name : state::empty;
}

std::optional<std::string> placement_index::machine_label(machine_id m,
                                                          std::string_view key) const {
  if (m >= st_->machines.size())
    return std::nullopt;
  const auto& labels = st_->machines[m].label_text;
  auto it = labels.find(std::string{key});
  if (it == labels.end())
    return std::nullopt;
  return it->second;
}

bool placement_index::schedulable(machine_id m) const {
  return m < st_->machines.size() && st_->machines[m].in_views();
}

unsigned placement_index::gpu_slots(machine_id m) const {
  return m < st_->machines.size() ? static_cast<unsigned>(st_->machines[m].gpus.size()) : 0;
}

gpu_mask placement_index::present_gpus(machine_id m) const {
  return m < st_->machines.size() ? st_->machines[m].present : 0;
}

gpu_mask placement_index::free_gpus(machine_id m, bool with_at_risk) const {
  if (m >= st_->machines.size())
    return 0;
  const auto& rec = st_->machines[m];
  return with_at_risk ? rec.free_usable() : rec.free_healthy();
}

std::string_view placement_index::gpu_id(gpu_ref g) const {
  if (g.machine >= st_->machines.size() || g.slot >= st_->machines[g.machine].gpus.size())
    return {};
  const auto* id = st_->machines[g.machine].gpus[g.slot].id;
  return id ? std::string_view{*id} : std::string_view{};
}

std::vector<std::string> placement_index::gpu_ids(machine_id m, gpu_mask gpus) const {
  std::vector<std::string> out;
  for (gpu_mask b = gpus; b; b &= b - 1)
    out.emplace_back(gpu_id({m, static_cast<uint8_t>(lowest(b))}));
  return out;
}

gpu_health placement_index::health(gpu_ref g) const {
  if (g.machine >= st_->machines.size() || g.slot >= st_->machines[g.machine].gpus.size())
    return gpu_health::faulty;
  const auto& rec = st_->machines[g.machine].gpus[g.slot];
  return rec.present ? rec.health : gpu_health::faulty;
}

int placement_index::numa_node(gpu_ref g) const {
  if (g.machine >= st_->machines.size() || g.slot >= st_->machines[g.machine].gpus.size())
    return -1;
  return st_->machines[g.machine].gpus[g.slot].numa;
}

allocation_id placement_index::holder(gpu_ref g) const {
  if (g.machine >= st_->machines.size() || g.slot >= st_->machines[g.machine].gpus.size())
    return 0;
  return st_->machines[g.machine].gpus[g.slot].holder;
}

std::vector<gpu_set> placement_index::allocation_gpus(allocation_id a) const {
  const alloc_rec* rec = st_->find_alloc(a);
  return rec ? rec->gpus : std::vector<gpu_set>{};
}

std::string placement_index::allocation_owner(allocation_id a) const {
  const alloc_rec* rec = st_->find_alloc(a);
  return rec ? rec->owner : std::string{};
}

placement_totals placement_index::totals() const {
  placement_totals t;
  for (const auto& m : st_->machines) {
    if (m.removed)
      continue;
    ++t.machines;
    t.schedulable += m.schedulable;
    t.gpus += popcount(m.present);
    t.held += popcount(m.held);
    t.free_healthy += popcount(m.free_healthy());
    t.free_at_risk += popcount(m.free_at_risk());
    t.fenced += popcount(m.present & ~m.healthy & ~m.at_risk);
  }
  t.allocations = st_->alloc_live;
  return t;
}

// -- placing ------------------------------------------------------------------

namespace {

// The shape of a request without allocating: totals and the largest worker.
struct shape {
  uint64_t workers = 0;
  uint64_t gpus = 0;
  uint32_t gmax = 0;
  uint32_t gmin = UINT32_MAX;
  uint64_t workers_gmax = 0;
  bool uniform = true;
};

shape shape_of(const placement_request& r) {
  shape s;
  for (const auto& g : r.groups) {
    s.workers += g.workers;
    s.gpus += uint64_t(g.workers) * g.gpus_per_worker;
    if (g.gpus_per_worker > s.gmax) {
      s.gmax = g.gpus_per_worker;
      s.workers_gmax = 0;
    }
    if (g.gpus_per_worker == s.gmax)
      s.workers_gmax += g.workers;
    s.gmin = std::min(s.gmin, g.gpus_per_worker);
  }
  s.uniform = s.gmin == s.gmax;
  return s;
}

std::optional<std::string> check_request(const placement_request& r) {
  if (r.groups.empty())
    return "the run has no worker groups";
  if (r.leader_group >= r.groups.size())
    return "the leader group " + std::to_string(r.leader_group) + " does not exist";
  uint64_t workers = 0;
  for (const auto& g : r.groups) {
    if (g.workers == 0)
      return "worker group " + g.name + " has no workers";
    if (g.gpus_per_worker == 0)
      return "worker group " + g.name + " asks for no GPUs (the GPU placement engine places GPU workers)";
    workers += g.workers;
  }
  if (workers > (1u << 20))
    return "the run has more than 1,048,576 workers";
  return std::nullopt;
}

waiting_reason waiting_for(waiting_code code, std::string message) {
  return waiting_reason{code, std::move(message)};
}

} // namespace

bool placement_index::may_fit(const placement_request& request) {
  auto& S = *st_;
  if (check_request(request))
    return false;
  shape sh = shape_of(request);
  const selector_rec& sel = S.selectors[S.selector_for(request.required_labels)];
  if (sel.schedulable == 0)
    return false;
  unsigned k = request.healthy_only ? kind_healthy : kind_usable;
  const auto& cluster = sel.groups[t_cluster][0].kind[k];
  if (cluster.max_free() < sh.gmax)
    return false;
  if (sh.workers == 1)
    return true;
  for (const auto& site : sel.groups[t_site])
    if (site.kind[k].free_sum >= sh.gpus && site.kind[k].capacity(sh.gmax) >= sh.workers_gmax)
      return true;
  return false;
}

placement_result placement_index::place(const placement_request& request) {
  auto& S = *st_;
  if (auto why = check_request(request))
    return waiting_for(waiting_code::invalid_request, "cannot place: " + *why);
  shape sh = shape_of(request);
  uint32_t sid = S.selector_for(request.required_labels);
  const selector_rec& sel = S.selectors[sid];
  const std::string& where = sel.where;
  bool gang = sh.workers > 1;

  if (sel.matching == 0)
    return waiting_for(waiting_code::no_machine, "waiting: no machine" + where);
  if (sel.schedulable == 0)
    return waiting_for(waiting_code::none_schedulable,
                "waiting: no machine" + where + " takes new work (" +
                  plural(sel.matching, "machine is", "machines are") +
                  " Down, cordoned, in maintenance, in acceptance or under pressure)");
  unsigned max_present = 0;
  for (size_t p = sel.present_hist.size(); p-- > 0;)
    if (sel.present_hist[p]) {
      max_present = static_cast<unsigned>(p);
      break;
    }
  if (sh.gmax > max_present)
    return waiting_for(waiting_code::never_fits,
                "waiting: never fits: a worker needs " + gpus_text(sh.gmax, false) +
                  " on one machine; machines" + where + " have at most " +
                  std::to_string(max_present));
  if (gang) {
    uint64_t best_site = 0;
    for (uint64_t p : sel.site_present)
      best_site = std::max(best_site, p);
    if (sh.gpus > best_site)
      return waiting_for(waiting_code::never_fits,
                  "waiting: never fits: needs " + gpus_text(sh.gpus, false) +
                    " within one site; the largest site" + where + " has " +
                    std::to_string(best_site));
  }

  // Ranks run across groups in request order; the leader is rank 0 of the
  // leader group.
  placement out;
  out.run = request.run;
  out.healthy_only = request.healthy_only;
  out.selector = sid;
  out.workers.resize(sh.workers);
  {
    uint32_t rank = 0;
    for (uint32_t gi = 0; gi < request.groups.size(); ++gi) {
      if (gi == request.leader_group)
        out.leader = rank;
      for (uint32_t r = 0; r < request.groups[gi].workers; ++r, ++rank) {
        out.workers[rank].rank = rank;
        out.workers[rank].group = gi;
        out.workers[rank].group_rank = r;
      }
    }
  }
  auto gpus_of = [&](uint32_t rank) {
    return request.groups[out.workers[rank].group].gpus_per_worker;
  };

  for (unsigned k : {kind_healthy, kind_usable}) {
    if (k == kind_usable && request.healthy_only)
      break;
    // One machine: best fit by free GPUs, then the best NUMA/NVLink layout
    // among a few machines of that size.
    const bucket_list& cluster = sel.groups[t_cluster][0].kind[k];
    if (sh.gpus <= max_gpus_per_machine) {
      auto need = static_cast<unsigned>(sh.gpus);
      unsigned f = need;
      while (f < cluster.by_free.size() && cluster.by_free[f].empty())
        ++f;
      // With AtRisk GPUs: the machine that needs the fewest of them (the
      // most free healthy GPUs), looking at a bounded number per count.
      const std::vector<machine_id>* fewest_at_risk = nullptr;
      if (k == kind_usable && f < cluster.by_free.size()) {
        const bucket_list& healthy = sel.groups[t_cluster][0].kind[kind_healthy];
        for (size_t h = std::min<size_t>(need, healthy.by_free.size()); h-- > 0 && !fewest_at_risk;) {
          const auto& b = healthy.by_free[h];
          for (size_t i = 0; i < b.size() && i < 64; ++i)
            if (popcount(S.machines[b[i]].free_usable()) >= need) {
              fewest_at_risk = &S.one_machine;
              S.one_machine.assign(1, b[i]);
              break;
            }
        }
      }
      if (f < cluster.by_free.size()) {
        const auto& bucket = fewest_at_risk ? *fewest_at_risk : cluster.by_free[f];
        size_t look = (need > 1) ? std::min<size_t>(bucket.size(), S.options.quality_lookahead) : 1;
        machine_id best = bucket[0];
        uint64_t best_penalty = UINT64_MAX;
        for (size_t i = 0; i < look; ++i) {
          const machine_rec& m = S.machines[bucket[i]];
          gpu_mask primary = m.free_healthy();
          gpu_mask secondary = k == kind_usable ? m.free_at_risk() : 0;
          uint64_t penalty = 0;
          for (uint32_t r = 0; r < sh.workers; ++r) {
            int numa;
            out.workers[r].gpus = S.select_worker(m, primary, secondary, gpus_of(r), numa, penalty);
            out.workers[r].numa_node = numa;
          }
          if (penalty < best_penalty) {
            best_penalty = penalty;
            best = bucket[i];
          }
          if (penalty == 0)
            break;
        }
        const machine_rec& m = S.machines[best];
        gpu_mask primary = m.free_healthy();
        gpu_mask secondary = k == kind_usable ? m.free_at_risk() : 0;
        gpu_mask at_risk = secondary;
        uint64_t penalty = 0;
        gpu_mask all = 0;
        for (uint32_t r = 0; r < sh.workers; ++r) {
          int numa;
          out.workers[r].machine = best;
          out.workers[r].gpus = S.select_worker(m, primary, secondary, gpus_of(r), numa, penalty);
          out.workers[r].numa_node = numa;
          all |= out.workers[r].gpus;
        }
        out.tier = placement_tier::one_machine;
        out.uses_at_risk = (all & at_risk) != 0;
        return out;
      }
    }
    if (!gang)
      continue;

    // Several machines: the tightest tier with a group that fits, best fit
    // among that tier's groups; largest free machines first, the last one
    // best fit.
    if (S.classes.size() < request.groups.size())
      S.classes.resize(request.groups.size());
    size_t nclasses = 0;
    {
      std::vector<std::pair<uint32_t, uint32_t>> sizes; // (g, group)
      for (uint32_t gi = 0; gi < request.groups.size(); ++gi)
        sizes.emplace_back(request.groups[gi].gpus_per_worker, gi);
      std::stable_sort(sizes.begin(), sizes.end(),
                       [](const auto& a, const auto& b) { return a.first > b.first; });
      for (const auto& [g, gi] : sizes) {
        if (nclasses == 0 || S.classes[nclasses - 1].g != g) {
          S.classes[nclasses].g = g;
          S.classes[nclasses].ranks.clear();
          ++nclasses;
        }
        for (uint32_t r = 0; r < sh.workers; ++r)
          if (out.workers[r].group == gi)
            S.classes[nclasses - 1].ranks.push_back(r);
      }
      for (size_t c = 0; c < nclasses; ++c)
        std::sort(S.classes[c].ranks.begin(), S.classes[c].ranks.end());
    }
    S.rank_machine.assign(sh.workers, 0);

    auto plan_in = [&](const bucket_list& bl) {
      S.cursor.assign(bl.by_free.size(), 0);
      S.chosen.clear();
      auto take = [&](size_t f) -> bool {
        if (f >= bl.by_free.size() || S.cursor[f] >= bl.by_free[f].size())
          return false;
        S.chosen.push_back({bl.by_free[f][S.cursor[f]++], static_cast<unsigned>(f)});
        return true;
      };
      for (size_t c = 0; c < nclasses; ++c) {
        const demand& d = S.classes[c];
        size_t next = 0, need = d.ranks.size();
        for (size_t ci = 0; ci < S.chosen.size() && next < need; ++ci)
          while (S.chosen[ci].left >= d.g && next < need) {
            S.rank_machine[d.ranks[next++]] = static_cast<uint32_t>(ci);
            S.chosen[ci].left -= d.g;
          }
        while (next < need) {
          uint64_t rest = need - next;
          bool got = false;
          for (uint64_t f = uint64_t(d.g) * rest; f < bl.by_free.size() && !got; ++f)
            got = take(f);
          for (size_t f = bl.by_free.size(); !got && f-- > d.g;)
            got = take(f);
          if (!got)
            return false;
          size_t ci = S.chosen.size() - 1;
          while (S.chosen[ci].left >= d.g && next < need) {
            S.rank_machine[d.ranks[next++]] = static_cast<uint32_t>(ci);
            S.chosen[ci].left -= d.g;
          }
        }
      }
      return true;
    };

    static constexpr unsigned tiers[] = {t_nvlink, t_fabric, t_rack, t_site};
    static constexpr placement_tier tier_names[] = {
      placement_tier::nvlink_domain, placement_tier::fabric, placement_tier::rack,
      placement_tier::site};
    for (unsigned ti = 0; ti < 4; ++ti) {
      const auto& groups = sel.groups[tiers[ti]];
      auto fits = [&](const bucket_list& bl) {
        return bl.members > 0 && bl.free_sum >= sh.gpus &&
               bl.capacity(sh.gmax) >= sh.workers_gmax && bl.capacity(sh.gmin) >= sh.workers;
      };
      // The best-fitting group (least free GPUs left over, then the lowest
      // id); the others, in that order, only if packing fails there.
      uint64_t best_slack = UINT64_MAX;
      uint32_t best_group = 0;
      size_t feasible = 0;
      for (uint32_t g = 0; g < groups.size(); ++g) {
        const bucket_list& bl = groups[g].kind[k];
        if (!fits(bl))
          continue;
        ++feasible;
        if (bl.free_sum - sh.gpus < best_slack) {
          best_slack = bl.free_sum - sh.gpus;
          best_group = g;
        }
      }
      if (feasible == 0)
        continue;
      S.candidates.clear();
      S.candidates.emplace_back(best_slack, best_group);
      bool listed_all = feasible == 1;
      for (size_t ci_ = 0; ci_ < S.candidates.size(); ++ci_) {
        uint32_t g = S.candidates[ci_].second;
        const bucket_list& bl = groups[g].kind[k];
        if (!plan_in(bl)) {
          if (!listed_all) {
            listed_all = true;
            for (uint32_t other = 0; other < groups.size(); ++other)
              if (other != best_group && fits(groups[other].kind[k]))
                S.candidates.emplace_back(groups[other].kind[k].free_sum - sh.gpus, other);
            std::sort(S.candidates.begin() + 1, S.candidates.end());
          }
          continue;
        }
        // Concrete GPUs, machine by machine: larger workers first.
        std::vector<std::pair<gpu_mask, gpu_mask>> avail(S.chosen.size());
        gpu_mask uses_at_risk = 0;
        for (size_t ci = 0; ci < S.chosen.size(); ++ci) {
          const machine_rec& m = S.machines[S.chosen[ci].machine];
          avail[ci] = {m.free_healthy(), k == kind_usable ? m.free_at_risk() : 0};
        }
        for (size_t c = 0; c < nclasses; ++c)
          for (uint32_t r : S.classes[c].ranks) {
            size_t ci = S.rank_machine[r];
            const machine_rec& m = S.machines[S.chosen[ci].machine];
            gpu_mask secondary_before = avail[ci].second;
            uint64_t penalty = 0;
            int numa;
            out.workers[r].machine = S.chosen[ci].machine;
            out.workers[r].gpus =
              S.select_worker(m, avail[ci].first, avail[ci].second, S.classes[c].g, numa, penalty);
            out.workers[r].numa_node = numa;
            uses_at_risk |= out.workers[r].gpus & secondary_before;
          }
        out.tier = tier_names[ti];
        out.uses_at_risk = uses_at_risk != 0;
        return out;
      }
    }
  }

  // Why not, in the words of the best there is.
  unsigned k = request.healthy_only ? kind_healthy : kind_usable;
  if (!gang) {
    unsigned best = sel.groups[t_cluster][0].kind[k].max_free();
    std::string msg = "waiting: needs " + gpus_text(sh.gpus, request.healthy_only) +
                      " on one machine" + where + "; best machine has " + std::to_string(best);
    if (request.healthy_only &&
        sel.groups[t_cluster][0].kind[kind_usable].max_free() >= sh.gpus)
      msg += " (it would fit with GPUs at risk, which healthy_only refuses)";
    return waiting_for(waiting_code::not_enough_gpus, std::move(msg));
  }
  std::string need;
  if (sh.uniform) {
    need = plural(sh.workers, "worker", "workers") + " of " +
           gpus_text(sh.gmax, request.healthy_only) + " each (" + gpus_text(sh.gpus, false) + ")";
  } else {
    std::map<uint32_t, uint64_t, std::greater<>> by_size;
    for (const auto& g : request.groups)
      by_size[g.gpus_per_worker] += g.workers;
    for (const auto& [g, n] : by_size) {
      if (!need.empty())
        need += " and ";
      need += plural(n, "worker", "workers") + " of " + gpus_text(g, request.healthy_only);
    }
    need += " (" + gpus_text(sh.gpus, false) + ")";
  }
  uint64_t best_room = 0, best_free = 0;
  for (const auto& site : sel.groups[t_site]) {
    best_room = std::max(best_room, site.kind[k].capacity(sh.gmax));
    best_free = std::max(best_free, site.kind[k].free_sum);
  }
  std::string msg = "waiting: needs " + need + " within one site" + where;
  if (sh.uniform)
    msg += "; best site has room for " + std::to_string(best_room);
  else
    msg += "; best site has " + std::to_string(best_free) + " free";
  return waiting_for(waiting_code::not_enough_gpus, std::move(msg));
}

caf::expected<allocation_id> placement_index::commit(const placement& where) {
  auto& S = *st_;
  if (where.selector >= S.selectors.size())
    return invalid("placement of " + where.run + " names an unknown label set");
  if (where.workers.empty())
    return invalid("placement of " + where.run + " has no workers");
  std::vector<gpu_set>& sets = S.sets_scratch;
  sets.clear();
  for (const auto& w : where.workers) {
    if (w.machine >= S.machines.size() || S.machines[w.machine].removed)
      return unknown_machine(w.machine);
    const machine_rec& m = S.machines[w.machine];
    if (!m.schedulable)
      return invalid("machine " + m.name + " no longer takes new work");
    if (std::find(m.selectors.begin(), m.selectors.end(), where.selector) == m.selectors.end())
      return invalid("machine " + m.name + " no longer carries the labels of " + where.run);
    if (w.gpus == 0)
      return invalid("a worker of " + where.run + " has no GPUs");
    gpu_mask allowed = where.healthy_only ? m.free_healthy() : m.free_usable();
    if ((w.gpus & ~allowed) != 0)
      return invalid("GPUs of machine " + m.name + " for " + where.run +
                     " are no longer free and assignable");
    sets.push_back({w.machine, w.gpus});
  }
  if (!state::merge_sets(sets))
    return invalid("placement of " + where.run + " gives a GPU to two workers");
  return S.hold_checked(where.run, sets);
}

caf::expected<allocation_id> placement_index::hold(std::string owner,
                                                   const std::vector<gpu_set>& gpus) {
  auto& S = *st_;
  std::vector<gpu_set> sets = gpus;
  if (!state::merge_sets(sets))
    return invalid("a GPU is listed twice for " + owner);
  for (const auto& set : sets) {
    if (set.machine >= S.machines.size() || S.machines[set.machine].removed)
      return unknown_machine(set.machine);
    const machine_rec& m = S.machines[set.machine];
    for (gpu_mask b = set.gpus; b; b &= b - 1) {
      unsigned s = lowest(b);
      if (s >= m.gpus.size() || !m.gpus[s].id)
        return caf::make_error(ec::no_such_machine,
                               "no GPU in slot " + std::to_string(s) + " of machine " + m.name);
      if (m.gpus[s].holder != 0)
        return invalid("GPU " + *m.gpus[s].id + " is already held by allocation " +
                       std::to_string(m.gpus[s].holder));
    }
  }
  sets.erase(std::remove_if(sets.begin(), sets.end(), [](const gpu_set& s) { return !s.gpus; }),
             sets.end());
  return S.hold_checked(owner, sets);
}

caf::expected<allocation_id> placement_index::restore(std::string owner,
                                                      const std::vector<std::string>& gpu_ids) {
  std::vector<gpu_set> sets;
  for (const auto& id : gpu_ids) {
    auto ref = find_gpu(id);
    if (!ref)
      return caf::make_error(ec::no_such_machine, "no GPU " + id);
    sets.push_back({ref->machine, bit(ref->slot)});
  }
  return hold(std::move(owner), sets);
}

caf::error placement_index::release(allocation_id a) {
  auto& S = *st_;
  alloc_rec* rec = S.find_alloc(a);
  if (!rec)
    return invalid("no allocation " + std::to_string(a));
  S.free_sets(rec->gpus, rec->suspended ? 0 : a, true); // also forgets GPUs that left
  S.drop_alloc(a);
  return {};
}

caf::error placement_index::suspend(allocation_id a) {
  auto& S = *st_;
  alloc_rec* rec = S.find_alloc(a);
  if (!rec || rec->suspended)
    return invalid("no held allocation " + std::to_string(a));
  rec->suspended = true;
  S.free_sets(rec->gpus, a, false);
  return {};
}

caf::error placement_index::resume(allocation_id a) {
  auto& S = *st_;
  alloc_rec* rec = S.find_alloc(a);
  if (!rec || !rec->suspended)
    return invalid("no suspended allocation " + std::to_string(a));
  for (const auto& set : rec->gpus) {
    const machine_rec& m = S.machines[set.machine];
    for (gpu_mask b = set.gpus; b; b &= b - 1) {
      unsigned s = lowest(b);
      if (s >= m.gpus.size() || !m.gpus[s].id || m.gpus[s].holder != 0)
        return invalid("a GPU of allocation " + std::to_string(a) + " was taken meanwhile");
    }
  }
  for (const auto& set : rec->gpus) {
    machine_rec& m = S.machines[set.machine];
    counts before = count_of(m);
    for (gpu_mask b = set.gpus; b; b &= b - 1)
      m.gpus[lowest(b)].holder = a;
    m.held |= set.gpus;
    S.changed(set.machine, before);
  }
  rec->suspended = false;
  return {};
}

std::string placement_index::check_invariants() const {
  const auto& S = *st_;
  auto fail = [](std::string what) { return what; };
  size_t gpus_with_ids = 0;
  std::unordered_map<allocation_id, std::vector<gpu_set>> seen;
  for (machine_id id = 0; id < S.machines.size(); ++id) {
    const machine_rec& m = S.machines[id];
    if (m.removed) {
      if (!m.gpus.empty() || m.schedulable || !m.selectors.empty())
        return fail("removed machine " + m.name + " keeps state");
      continue;
    }
    if (m.gpus.size() > max_gpus_per_machine)
      return fail("machine " + m.name + " has more than 64 slots");
    gpu_mask present = 0, healthy = 0, at_risk = 0, held = 0;
    for (unsigned s = 0; s < m.gpus.size(); ++s) {
      const gpu_rec& g = m.gpus[s];
      if (g.id) {
        ++gpus_with_ids;
        auto it = S.gpu_by_id.find(*g.id);
        if (it == S.gpu_by_id.end() || it->second.machine != id || it->second.slot != s ||
            &it->first != g.id)
          return fail("GPU id map disagrees for slot " + std::to_string(s) + " of " + m.name);
      } else if (g.present || g.holder) {
        return fail("slot " + std::to_string(s) + " of " + m.name + " is used without an id");
      }
      if (g.present && g.gone)
        return fail("GPU both present and gone on " + m.name);
      if (g.holder) {
        held |= bit(s);
        const alloc_rec* a = S.find_alloc(g.holder);
        if (!a || a->suspended)
          return fail("GPU " + *g.id + " held by a dead or suspended allocation");
        seen[g.holder].push_back({id, bit(s)});
      }
      if (g.present) {
        present |= bit(s);
        if (g.health == gpu_health::healthy)
          healthy |= bit(s);
        if (g.health == gpu_health::at_risk)
          at_risk |= bit(s);
        if (g.nvlink & ~m.present)
          return fail("NVLink to an absent GPU on " + m.name);
        for (gpu_mask b = g.nvlink; b; b &= b - 1)
          if (!(m.gpus[lowest(b)].nvlink & bit(s)))
            return fail("one-way NVLink on " + m.name);
      }
    }
    if (present != m.present || healthy != m.healthy || at_risk != m.at_risk || held != m.held)
      return fail("masks of " + m.name + " disagree with its GPUs");
    gpu_mask numa_all = 0;
    for (const auto& [node, mask] : m.numa) {
      if (numa_all & mask)
        return fail("NUMA masks overlap on " + m.name);
      numa_all |= mask;
      for (gpu_mask b = mask; b; b &= b - 1)
        if (m.gpus[lowest(b)].numa != node)
          return fail("NUMA node of a GPU on " + m.name + " disagrees");
    }
    if (numa_all != m.present)
      return fail("NUMA masks of " + m.name + " do not cover its GPUs");
    // Selector membership.
    for (uint32_t sid = 0; sid < S.selectors.size(); ++sid) {
      bool listed = std::find(m.selectors.begin(), m.selectors.end(), sid) != m.selectors.end();
      if (listed != state::matches(m, S.selectors[sid]))
        return fail("selector membership of " + m.name + " is wrong");
      const selector_rec& sel = S.selectors[sid];
      counts c = count_of(m);
      for (unsigned t = 0; t < tier_count; ++t) {
        uint32_t g = m.group[t];
        if (g == no_group)
          continue;
        for (unsigned k = 0; k < 2; ++k) {
          size_t slot = static_cast<size_t>(id) * slots_per_machine + t * 2 + k;
          uint32_t pos = slot < sel.pos.size() ? sel.pos[slot] : not_member;
          bool in = listed && m.in_views();
          if (!in) {
            if (pos != not_member)
              return fail("machine " + m.name + " is in buckets it should not be in");
            continue;
          }
          unsigned f = k == kind_healthy ? c.healthy : c.usable;
          if (g >= sel.groups[t].size() || f >= sel.groups[t][g].kind[k].by_free.size() ||
              pos >= sel.groups[t][g].kind[k].by_free[f].size() ||
              sel.groups[t][g].kind[k].by_free[f][pos] != id)
            return fail("machine " + m.name + " is not where its free count says (tier " +
                        std::to_string(t) + ", kind " + std::to_string(k) + ")");
        }
      }
    }
  }
  if (gpus_with_ids != S.gpu_by_id.size())
    return fail("GPU id map has entries for no slot");
  // Bucket totals.
  for (const auto& sel : S.selectors) {
    uint32_t matching = 0, in_views = 0;
    for (machine_id id = 0; id < S.machines.size(); ++id) {
      const auto& m = S.machines[id];
      if (!m.removed && state::matches(m, sel)) {
        ++matching;
        in_views += m.in_views();
      }
    }
    if (matching != sel.matching || in_views != sel.schedulable)
      return fail("selector counts disagree");
    for (unsigned t = 0; t < tier_count; ++t)
      for (const auto& gv : sel.groups[t])
        for (unsigned k = 0; k < 2; ++k) {
          uint64_t members = 0, sum = 0;
          for (size_t f = 0; f < gv.kind[k].by_free.size(); ++f) {
            members += gv.kind[k].by_free[f].size();
            sum += f * gv.kind[k].by_free[f].size();
          }
          if (members != gv.kind[k].members || sum != gv.kind[k].free_sum)
            return fail("bucket totals disagree");
        }
    uint64_t cluster_members =
      sel.groups[t_cluster].empty() ? 0 : sel.groups[t_cluster][0].kind[0].members;
    if (cluster_members != in_views)
      return fail("cluster bucket does not hold every schedulable machine");
  }
  // Allocations hold exactly their GPUs.
  size_t live = 0;
  for (size_t slot = 0; slot < S.alloc_slots.size(); ++slot) {
    const alloc_slot& as = S.alloc_slots[slot];
    if (!as.live)
      continue;
    ++live;
    allocation_id a = (static_cast<uint64_t>(as.generation) << 32) | (slot + 1);
    const alloc_rec& rec = as.rec;
    if (rec.suspended)
      continue;
    auto it = seen.find(a);
    uint64_t expect = 0, got = 0;
    for (const auto& set : rec.gpus)
      expect += popcount(set.gpus);
    if (it != seen.end())
      got = it->second.size();
    if (expect != got)
      return fail("allocation " + std::to_string(a) + " of " + rec.owner + " holds " +
                  std::to_string(got) + " GPUs, expected " + std::to_string(expect));
    for (const auto& set : rec.gpus)
      for (gpu_mask b = set.gpus; b; b &= b - 1) {
        unsigned s = lowest(b);
        const auto& m = S.machines[set.machine];
        if (s >= m.gpus.size() || m.gpus[s].holder != a)
          return fail("allocation " + std::to_string(a) + " lost a GPU");
      }
  }
  if (live != S.alloc_live || S.alloc_free.size() + live != S.alloc_slots.size())
    return fail("allocation slot counts disagree");
  for (const auto& [g_unused, holders] : seen)
    if (!S.find_alloc(g_unused))
      return fail("a GPU is held by an unknown allocation");
  return {};
}

// ---------------------------------------------------------------------------
// scheduler_queue
// ---------------------------------------------------------------------------

scheduler_queue::scheduler_queue(placement_index& index, queue_options options)
  : index_(index), options_(options) {
}

caf::error scheduler_queue::submit(placement_request request, int64_t now) {
  if (request.run.empty())
    return invalid("a run needs a name");
  if (pending_.count(request.run) || running_.count(request.run))
    return invalid("run " + request.run + " is already queued or running");
  order_key key{-static_cast<int64_t>(request.priority), now, seq_++};
  pending_.emplace(request.run, key);
  order_.emplace(key, std::move(request));
  return {};
}

caf::error scheduler_queue::cancel(std::string_view run) {
  auto it = pending_.find(std::string{run});
  if (it == pending_.end())
    return invalid("run " + std::string{run} + " is not waiting");
  order_.erase(it->second);
  waiting_.erase(it->first);
  pending_.erase(it);
  return {};
}

caf::error scheduler_queue::complete(std::string_view run) {
  auto it = running_.find(std::string{run});
  if (it == running_.end())
    return invalid("run " + std::string{run} + " is not running");
  if (auto err = index_.release(it->second.allocation))
    return err;
  ends_.erase({it->second.end, it->second.allocation});
  running_.erase(it);
  return {};
}

caf::error scheduler_queue::adopt(std::string run, allocation_id allocation, int64_t start,
                                  int64_t time_limit_seconds) {
  if (run.empty() || pending_.count(run) || running_.count(run))
    return invalid("run " + run + " is already queued or running");
  if (index_.allocation_gpus(allocation).empty())
    return invalid("no allocation " + std::to_string(allocation) + " for run " + run);
  int64_t end = time_limit_seconds > 0 ? start + time_limit_seconds : never;
  running_.emplace(std::move(run), running_run{allocation, start, end});
  if (end != never)
    ends_.emplace(end, allocation);
  return {};
}

const waiting_reason* scheduler_queue::waiting(std::string_view run) const {
  auto it = waiting_.find(std::string{run});
  return it == waiting_.end() ? nullptr : &it->second;
}

std::optional<allocation_id> scheduler_queue::allocation_of(std::string_view run) const {
  auto it = running_.find(std::string{run});
  if (it == running_.end())
    return std::nullopt;
  return it->second.allocation;
}

std::optional<scheduler_queue::plan>
scheduler_queue::earliest_start(const placement_request& request, int64_t now) {
  // Release running runs in the order they must end, until the run fits;
  // then hold everything again exactly as it was.
  std::vector<allocation_id> suspended;
  std::optional<plan> out;
  for (auto it = ends_.begin(); it != ends_.end();) {
    int64_t end = it->first;
    for (; it != ends_.end() && it->first == end; ++it)
      if (!index_.suspend(it->second))
        suspended.push_back(it->second);
    if (!index_.may_fit(request))
      continue;
    auto r = index_.place(request);
    if (auto* p = std::get_if<placement>(&r)) {
      plan pl;
      pl.start = std::max(end, now);
      for (const auto& w : p->workers)
        pl.gpus.push_back({w.machine, w.gpus});
      out = std::move(pl);
      break;
    }
  }
  for (auto a = suspended.rbegin(); a != suspended.rend(); ++a)
    index_.resume(*a);
  return out;
}

allocation_id scheduler_queue::hold_free_part(const std::vector<gpu_set>& gpus,
                                              const std::string& run) {
  std::vector<gpu_set> free_part;
  for (const auto& set : gpus) {
    gpu_mask f = set.gpus & index_.free_gpus(set.machine, true);
    if (f)
      free_part.push_back({set.machine, f});
  }
  if (free_part.empty())
    return 0;
  auto a = index_.hold("reservation for " + run, free_part);
  return a ? *a : 0;
}

std::optional<queue_decision> scheduler_queue::start(const placement_request& request,
                                                    placement where, int64_t now,
                                                    bool backfilled) {
  // place() answered on this very state, so commit succeeds; if it ever did
  // not, the run simply waits for the next pass.
  auto a = index_.commit(where);
  if (!a)
    return std::nullopt;
  queue_decision d;
  d.run = request.run;
  d.start = now;
  d.end = request.time_limit_seconds > 0 ? now + request.time_limit_seconds : never;
  d.backfilled = backfilled;
  d.allocation = *a;
  d.where = std::move(where);
  running_.emplace(request.run, running_run{d.allocation, d.start, d.end});
  if (d.end != never)
    ends_.emplace(d.end, d.allocation);
  return d;
}

std::vector<queue_decision> scheduler_queue::schedule(int64_t now) {
  std::vector<queue_decision> out;
  waiting_.clear();
  reservation_.reset();
  allocation_id held = 0; // the free part of the reservation, held during the pass
  unsigned attempts = 0;
  for (auto it = order_.begin(); it != order_.end();) {
    const placement_request& req = it->second;
    auto r = index_.place(req);
    if (auto* p = std::get_if<placement>(&r)) {
      // Reserved GPUs are held, so this leaves them alone.
      if (auto d = start(req, std::move(*p), now, reservation_.has_value())) {
        out.push_back(std::move(*d));
        pending_.erase(req.run);
        it = order_.erase(it);
        continue;
      }
      waiting_[req.run] = waiting_reason{waiting_code::not_enough_gpus,
                                         "waiting: its GPUs changed while it was placed"};
      ++it;
      continue;
    }
    waiting_reason why = std::get<waiting_reason>(std::move(r));
    if (why.code == waiting_code::not_enough_gpus) {
      if (!reservation_) {
        if (attempts < options_.reservation_attempts) {
          ++attempts;
          if (auto pl = earliest_start(req, now)) {
            reservation_ = queue_reservation{req.run, pl->start, std::move(pl->gpus)};
            held = hold_free_part(reservation_->gpus, req.run);
            why.message += "; GPUs are reserved for it, due to start in " +
                           format_duration(reservation_->start - now);
          }
        }
      } else {
        // Would it fit on the reserved GPUs? Only if it ends before the
        // reservation starts.
        int64_t end = req.time_limit_seconds > 0 ? now + req.time_limit_seconds : never;
        if (held)
          index_.release(held);
        held = 0;
        auto r2 = index_.place(req);
        if (auto* p = std::get_if<placement>(&r2)) {
          if (end <= reservation_->start) {
            auto d = start(req, std::move(*p), now, true);
            held = hold_free_part(reservation_->gpus, reservation_->run);
            if (d) {
              out.push_back(std::move(*d));
              pending_.erase(req.run);
              it = order_.erase(it);
              continue;
            }
          }
          why = waiting_reason{waiting_code::reserved,
                               "waiting: the GPUs it fits on are reserved for " +
                                 reservation_->run + ", due to start in " +
                                 format_duration(reservation_->start - now) +
                                 ", before this run's time limit would end it"};
        }
        held = hold_free_part(reservation_->gpus, reservation_->run);
      }
    }
    waiting_[req.run] = std::move(why);
    ++it;
  }
  if (held)
    index_.release(held);
  return out;
}

} // namespace astraeus
