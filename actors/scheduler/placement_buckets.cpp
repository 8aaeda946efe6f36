// The buckets: for every label set that requests have used (a selector),
// the schedulable machines carrying it, by free-GPU count (healthy, and
// healthy or AtRisk), per topology group of every tier (NVLink domain,
// fabric, rack, site, the whole cluster). Each change of a machine moves it
// between buckets in O(selectors x tiers).

#include "actors/scheduler/placement.hpp"

#include <algorithm>

#include "actors/scheduler/placement_internal.hpp"

namespace astraeus {

using namespace placement_detail;

namespace {

std::string where_of(const label_map& labels) {
  std::string pool, others;
  for (const auto& [k, v] : labels) {
    if (k == "pool" && pool.empty()) {
      pool = " in pool " + v;
      continue;
    }
    // The scheduler's own labels (astraeus.io/machine, /accepting; issue 21)
    // are not what the user asked for: never in a waiting reason.
    if (k.rfind("astraeus.io/", 0) == 0)
      continue;
    others += others.empty() ? " with " : ", ";
    others += k + "=" + v;
  }
  return pool + others;
}

} // namespace

void placement_index::state::cores_push(selector_rec& s, unsigned k, machine_id id,
                                        unsigned f) {
  auto& lists = s.cores[k].by_free;
  if (lists.size() <= f)
    lists.resize(f + 1);
  auto& v = lists[f][machines[id].core_class];
  size_t need = (static_cast<size_t>(id) + 1) * 2;
  if (s.core_pos.size() < need)
    s.core_pos.resize(std::max(need, machines.size() * 2), not_member);
  s.core_pos[static_cast<size_t>(id) * 2 + k] = static_cast<uint32_t>(v.size());
  v.push_back(id);
}

void placement_index::state::cores_remove(selector_rec& s, unsigned k, machine_id id,
                                          unsigned f) {
  auto& v = s.cores[k].by_free[f][machines[id].core_class];
  uint32_t p = s.core_pos[static_cast<size_t>(id) * 2 + k];
  machine_id last = v.back();
  v[p] = last;
  s.core_pos[static_cast<size_t>(last) * 2 + k] = p;
  v.pop_back();
  s.core_pos[static_cast<size_t>(id) * 2 + k] = not_member;
}

void placement_index::state::cores_changed(machine_id id) {
  machine_rec& m = machines[id];
  uint8_t now = m.core_class_now();
  if (now == m.core_class)
    return;
  if (!m.in_views()) {
    m.core_class = now;
    return;
  }
  counts c = count_of(m);
  for (uint32_t sid : m.selectors) {
    cores_remove(selectors[sid], kind_healthy, id, c.healthy);
    cores_remove(selectors[sid], kind_usable, id, c.usable);
  }
  m.core_class = now;
  for (uint32_t sid : m.selectors) {
    cores_push(selectors[sid], kind_healthy, id, c.healthy);
    cores_push(selectors[sid], kind_usable, id, c.usable);
  }
}

void placement_index::state::view_insert(selector_rec& s, machine_id id) {
  const machine_rec& m = machines[id];
  size_t need = (static_cast<size_t>(id) + 1) * slots_per_machine;
  if (s.pos.size() < need)
    s.pos.resize(std::max(need, machines.size() * slots_per_machine), not_member);
  counts c = count_of(m);
  cores_push(s, kind_healthy, id, c.healthy);
  cores_push(s, kind_usable, id, c.usable);
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

void placement_index::state::view_remove(selector_rec& s, machine_id id, counts c) {
  const machine_rec& m = machines[id];
  cores_remove(s, kind_healthy, id, c.healthy);
  cores_remove(s, kind_usable, id, c.usable);
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

void placement_index::state::view_move(selector_rec& s, machine_id id, counts from, counts to) {
  const machine_rec& m = machines[id];
  if (from.healthy != to.healthy) {
    cores_remove(s, kind_healthy, id, from.healthy);
    cores_push(s, kind_healthy, id, to.healthy);
  }
  if (from.usable != to.usable) {
    cores_remove(s, kind_usable, id, from.usable);
    cores_push(s, kind_usable, id, to.usable);
  }
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

void placement_index::state::stats_add(selector_rec& s, const machine_rec& m, unsigned present, int sign) {
  if (s.present_hist.size() <= present)
    s.present_hist.resize(present + 1, 0);
  s.present_hist[present] += sign;
  uint32_t site = m.group[t_site];
  if (s.site_present.size() <= site)
    s.site_present.resize(site + 1, 0);
  s.site_present[site] += sign * static_cast<int64_t>(present);
  s.matching += sign;
}

void placement_index::state::caps_add(selector_rec& s, const machine_rec& m, int sign) {
  for (auto [caps, cap] : {std::pair{&s.cpu_caps, m.cpu_cap}, std::pair{&s.mem_caps, m.mem_cap}}) {
    if (sign > 0) {
      ++(*caps)[cap];
      continue;
    }
    auto it = caps->find(cap);
    if (it != caps->end() && --it->second == 0)
      caps->erase(it);
  }
}

void placement_index::state::attach(uint32_t sid, machine_id id) {
  machine_rec& m = machines[id];
  selector_rec& s = selectors[sid];
  m.selectors.push_back(sid);
  stats_add(s, m, popcount(m.present), +1);
  caps_add(s, m, +1);
  if (m.in_views())
    view_insert(s, id);
}

void placement_index::state::detach_all(machine_id id) {
  machine_rec& m = machines[id];
  counts c = count_of(m);
  for (uint32_t sid : m.selectors) {
    selector_rec& s = selectors[sid];
    if (m.in_views())
      view_remove(s, id, c);
    stats_add(s, m, c.present, -1);
    caps_add(s, m, -1);
  }
  m.selectors.clear();
}

void placement_index::state::attach_matching(machine_id id) {
  for (uint32_t sid = 0; sid < selectors.size(); ++sid)
    if (matches(machines[id], selectors[sid]))
      attach(sid, id);
}

// After the masks of `id` changed from `before`: moves it between buckets.
void placement_index::state::changed(machine_id id, counts before) {
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
  note_blocked(id);
}

uint32_t placement_index::state::selector_for(const label_map& labels) {
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

} // namespace astraeus
