// The index's machines and GPUs: adding, updating and removing machines,
// their labels and topology groups, their GPU lists and health, and the
// look-ups. The buckets these changes move machines between are in
// placement_buckets.cpp.

#include "actors/scheduler/placement.hpp"

#include <algorithm>
#include <array>

#include "actors/scheduler/placement_internal.hpp"
#include "messages/error.hpp"

namespace astraeus {

using namespace placement_detail;

namespace placement_detail {

caf::error invalid(std::string what) {
  return caf::make_error(ec::invalid_request, std::move(what));
}

caf::error unknown_machine(machine_id m) {
  return caf::make_error(ec::no_such_machine, "no machine with id " + std::to_string(m));
}

} // namespace placement_detail

// ---------------------------------------------------------------------------
// Labels, groups and GPU lists of a machine
// ---------------------------------------------------------------------------

const std::string placement_index::state::empty;

uint32_t placement_index::state::intern_label(const std::string& k, const std::string& v) {
  key_scratch.assign(k);
  key_scratch.push_back('\0');
  key_scratch.append(v);
  auto [it, added] = label_ids.try_emplace(key_scratch, static_cast<uint32_t>(label_ids.size()));
  if (added)
    label_keys.push_back(&it->first);
  return it->second;
}

std::optional<std::string_view> placement_index::state::label_value(const machine_rec& m,
                                                                     std::string_view key) const {
  for (uint32_t l : m.labels) {
    auto [k, v] = label_text(l);
    if (k == key)
      return v;
  }
  return std::nullopt;
}

bool placement_index::state::has_label(const machine_rec& m, std::string_view key,
                                       std::string_view value) const {
  auto v = label_value(m, key);
  return v && *v == value;
}

uint32_t placement_index::state::intern_group(unsigned t, const std::string& key) {
  auto& ids = group_ids[t];
  auto [it, added] = ids.try_emplace(key, static_cast<uint32_t>(ids.size()));
  return it->second;
}

void placement_index::state::set_machine_labels(machine_rec& m, const label_map& labels) {
  count_pool(label_value(m, "pool"), -1);
  if (auto p = labels.find("pool"); p != labels.end())
    count_pool(std::string_view{p->second}, +1);
  m.labels.clear();
  for (const auto& [k, v] : labels)
    m.labels.push_back(intern_label(k, v));
  std::sort(m.labels.begin(), m.labels.end());
  auto accepting = labels.find(accepting_key);
  m.accepting = accepting != labels.end() && accepting->second == "true";
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

void placement_index::state::rebuild_masks(machine_rec& m) {
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

caf::error placement_index::state::check_gpu_list(machine_id id, const std::vector<gpu_spec>& gpus) const {
  if (gpus.size() > max_gpus_per_machine)
    return invalid("a machine has at most 64 GPUs; " + std::to_string(gpus.size()) + " listed");
  unsigned fresh = 0;
  std::vector<bool> listed_slot(max_gpus_per_machine, false);
  for (size_t i = 0; i < gpus.size(); ++i) {
    const auto& g = gpus[i];
    if (g.id.empty())
      return invalid("a GPU without an id");
    if (g.id.size() > max_gpu_id_length)
      return invalid("GPU id " + g.id.substr(0, 64) + "... is longer than " +
                     std::to_string(max_gpu_id_length) + " characters");
    for (size_t j = 0; j < i; ++j)
      if (gpus[j].id == g.id)
        return invalid("GPU " + g.id + " is listed twice");
    int slot = id < machines.size() ? machines[id].slot_named(g.id) : -1;
    if (slot < 0) {
      ++fresh;
      continue;
    }
    listed_slot[static_cast<size_t>(slot)] = true;
  }
  unsigned occupied = 0;
  if (id < machines.size())
    for (unsigned s = 0; s < machines[id].gpus.size(); ++s)
      if (listed_slot[s] || machines[id].gpus[s].holder != 0 ||
          (machines[id].gpus[s].gone && machines[id].gpus[s].named()))
        ++occupied;
  if (occupied + fresh > max_gpus_per_machine)
    return invalid("machine would have more than 64 GPU slots (held GPUs keep theirs)");
  return {};
}

void placement_index::state::drop_slot(machine_rec& m, unsigned s) {
  // Its id's bytes stay in `gpu_names` until the next repack.
  m.gpus[s] = gpu_rec{};
}

// Applies a checked GPU list.
void placement_index::state::apply_gpu_list(machine_id id, const std::vector<gpu_spec>& gpus) {
  machine_rec& m = machines[id];
  counts before = count_of(m);
  std::vector<int> slot_of(gpus.size(), -1);
  for (size_t i = 0; i < gpus.size(); ++i)
    slot_of[i] = m.slot_named(gpus[i].id);
  bool repack = false;
  // Forget or keep (held) the GPUs no longer listed.
  for (unsigned s = 0; s < m.gpus.size(); ++s) {
    gpu_rec& g = m.gpus[s];
    if (!g.named() || std::find(slot_of.begin(), slot_of.end(), static_cast<int>(s)) != slot_of.end())
      continue;
    if (g.holder != 0) {
      g.present = false;
      g.gone = true;
      g.nvlink = 0;
    } else {
      drop_slot(m, s);
      repack = true;
    }
  }
  // Place new GPUs in empty slots (their ids packed below), then update
  // every listed one.
  std::array<std::string_view, max_gpus_per_machine> fresh{};
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (slot_of[i] < 0) {
      unsigned s = 0;
      while (s < m.gpus.size() && (m.gpus[s].named() || !fresh[s].empty() || m.gpus[s].holder != 0))
        ++s;
      if (s == m.gpus.size())
        m.gpus.emplace_back();
      fresh[s] = gpus[i].id;
      slot_of[i] = static_cast<int>(s);
      repack = true;
    }
    gpu_rec& g = m.gpus[static_cast<unsigned>(slot_of[i])];
    g.present = true;
    g.gone = false;
    g.numa = static_cast<int16_t>(gpus[i].numa_node < -1 ? -1 : gpus[i].numa_node);
    g.health = gpus[i].health;
    g.nvlink = 0;
  }
  if (repack) {
    // At most 64 ids of at most 256 characters: offsets fit 16 bits.
    std::string names;
    for (unsigned s = 0; s < m.gpus.size(); ++s) {
      std::string_view n = fresh[s].empty() ? m.gpu_name(s) : fresh[s];
      m.gpus[s].name_at = static_cast<uint16_t>(names.size());
      m.gpus[s].name_len = static_cast<uint16_t>(n.size());
      names.append(n);
    }
    m.gpu_names = std::move(names);
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
  while (!m.gpus.empty() && !m.gpus.back().named() && m.gpus.back().holder == 0)
    m.gpus.pop_back();
  rebuild_masks(m);
  changed(id, before);
}

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
  ++S.capacity_epoch;
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
  // Kept while schedulable too: an Accepting machine's (issue 21).
  m.why_not = spec.not_schedulable;
  m.cpu_cap = uint64_t{spec.cpus} * 1000;
  m.mem_cap = spec.memory_bytes;
  m.core_class = m.core_class_now();
  S.set_machine_labels(m, spec.labels);
  S.machine_by_name.emplace(spec.name, id);
  S.attach_matching(id);
  S.apply_gpu_list(id, spec.gpus);
  S.note_blocked(id);
  return id;
}

caf::error placement_index::update_machine(machine_id m, const machine_spec& spec) {
  auto& S = *st_;
  ++S.capacity_epoch;
  if (m >= S.machines.size() || S.machines[m].removed)
    return unknown_machine(m);
  if (spec.name != S.machines[m].name)
    return invalid("machine " + S.machines[m].name + " cannot be renamed to " + spec.name);
  if (auto err = S.check_gpu_list(m, spec.gpus))
    return err;
  if (!S.same_labels(S.machines[m], spec.labels))
    set_labels(m, spec.labels);
  set_schedulable(m, spec.schedulable, spec.not_schedulable);
  set_size(m, spec.cpus, spec.memory_bytes);
  S.apply_gpu_list(m, spec.gpus);
  return {};
}

caf::error placement_index::set_size(machine_id id, uint32_t cpus, uint64_t memory_bytes) {
  auto& S = *st_;
  ++S.capacity_epoch;
  if (id >= S.machines.size() || S.machines[id].removed)
    return unknown_machine(id);
  machine_rec& m = S.machines[id];
  uint64_t cpu_cap = uint64_t{cpus} * 1000;
  if (m.cpu_cap == cpu_cap && m.mem_cap == memory_bytes)
    return {};
  for (uint32_t sid : m.selectors)
    state::caps_add(S.selectors[sid], m, -1);
  m.cpu_cap = cpu_cap;
  m.mem_cap = memory_bytes;
  for (uint32_t sid : m.selectors)
    state::caps_add(S.selectors[sid], m, +1);
  S.cores_changed(id);
  return {};
}

caf::error placement_index::set_outside_use(machine_id id, uint64_t cpu_millis,
                                            uint64_t memory_bytes) {
  auto& S = *st_;
  ++S.capacity_epoch;
  if (id >= S.machines.size() || S.machines[id].removed)
    return unknown_machine(id);
  S.machines[id].cpu_outside = cpu_millis;
  S.machines[id].mem_outside = memory_bytes;
  S.cores_changed(id);
  return {};
}

caf::error placement_index::set_schedulable(machine_id id, bool schedulable,
                                            std::string_view why) {
  auto& S = *st_;
  ++S.capacity_epoch;
  if (id >= S.machines.size() || S.machines[id].removed)
    return unknown_machine(id);
  machine_rec& m = S.machines[id];
  // A schedulable machine keeps a why only while Accepting (issue 21).
  if (why != m.why_not)
    m.why_not.assign(why.data(), why.size());
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
  S.note_blocked(id);
  return {};
}

caf::error placement_index::set_labels(machine_id id, const label_map& labels) {
  auto& S = *st_;
  ++S.capacity_epoch;
  if (id >= S.machines.size() || S.machines[id].removed)
    return unknown_machine(id);
  S.detach_all(id);
  S.set_machine_labels(S.machines[id], labels);
  S.attach_matching(id);
  S.note_blocked(id);
  return {};
}

caf::error placement_index::set_gpus(machine_id id, const std::vector<gpu_spec>& gpus) {
  auto& S = *st_;
  ++S.capacity_epoch;
  if (id >= S.machines.size() || S.machines[id].removed)
    return unknown_machine(id);
  if (auto err = S.check_gpu_list(id, gpus))
    return err;
  S.apply_gpu_list(id, gpus);
  return {};
}

caf::error placement_index::remove_machine(machine_id id) {
  auto& S = *st_;
  ++S.capacity_epoch;
  if (id >= S.machines.size() || S.machines[id].removed)
    return unknown_machine(id);
  machine_rec& m = S.machines[id];
  if (m.held || m.cpu_held || m.mem_held)
    return invalid("machine " + m.name + " still has held GPUs; release them first");
  S.detach_all(id);
  S.count_pool(S.label_value(m, "pool"), -1);
  S.blocked.erase(id);
  m.in_blocked = false;
  for (unsigned s = 0; s < m.gpus.size(); ++s)
    S.drop_slot(m, s);
  S.machine_by_name.erase(m.name);
  m.gpus.clear();
  std::string{}.swap(m.gpu_names);
  m.numa.clear();
  m.present = m.healthy = m.at_risk = m.held = 0;
  m.cpu_outside = m.mem_outside = 0;
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
  ++S.capacity_epoch;
  if (ref.machine >= S.machines.size() || S.machines[ref.machine].removed)
    return unknown_machine(ref.machine);
  machine_rec& m = S.machines[ref.machine];
  if (ref.slot >= m.gpus.size() || !m.gpus[ref.slot].named())
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
  // An id is only unique within its machine: the first machine listing it.
  for (machine_id m = 0; m < st_->machines.size(); ++m)
    if (!st_->machines[m].removed)
      if (auto ref = find_gpu(m, gpu_id))
        return ref;
  return std::nullopt;
}

std::optional<gpu_ref> placement_index::find_gpu(machine_id m, std::string_view gpu_id) const {
  if (m >= st_->machines.size())
    return std::nullopt;
  int slot = st_->machines[m].slot_named(gpu_id);
  if (slot < 0)
    return std::nullopt;
  return gpu_ref{m, static_cast<uint8_t>(slot)};
}

uint64_t placement_index::capacity_epoch() const {
  return st_->capacity_epoch;
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
  auto v = st_->label_value(st_->machines[m], key);
  if (!v)
    return std::nullopt;
  return std::string{*v};
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
  return st_->machines[g.machine].gpu_name(g.slot);
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

std::vector<machine_use> placement_index::allocation_use(allocation_id a) const {
  const alloc_rec* rec = st_->find_alloc(a);
  return rec ? rec->use : std::vector<machine_use>{};
}

uint64_t placement_index::free_cpu_millis(machine_id m) const {
  if (m >= st_->machines.size())
    return 0;
  const auto& rec = st_->machines[m];
  return rec.cpu_cap ? rec.free_cpu() : UINT64_MAX;
}

uint64_t placement_index::free_memory_bytes(machine_id m) const {
  if (m >= st_->machines.size())
    return 0;
  const auto& rec = st_->machines[m];
  return rec.mem_cap ? rec.free_mem() : UINT64_MAX;
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

} // namespace astraeus
