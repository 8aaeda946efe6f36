// What of a machine's snapshot reaches the placement index: the GPU claims
// across machines and the GPUs set aside (issue 18, rules 1 and 2).

#include "actors/scheduler/scheduler_inventory.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>

#include "messages/gpu_health_state.hpp"

namespace astraeus {

bool is_pci_address_id(std::string_view id) {
  // domain:bus:device.function, e.g. 0000:01:00.0 (domain 4 to 8 digits).
  auto colon = id.find(':');
  if (colon == std::string_view::npos || colon < 4 || colon > 8)
    return false;
  std::string_view rest = id.substr(colon + 1);
  if (rest.size() != 7 || rest[2] != ':' || rest[5] != '.')
    return false;
  auto hex = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(),
                       [](unsigned char c) { return std::isxdigit(c) != 0; });
  };
  return hex(id.substr(0, colon)) && hex(rest.substr(0, 2)) && hex(rest.substr(3, 2))
         && rest[6] >= '0' && rest[6] <= '7';
}

namespace {

uint64_t hash_of(std::string_view id) {
  return std::hash<std::string_view>{}(id);
}

/// Calls `f` with each id of a packed list (gpu_claims::packed_).
template <class F>
void each_packed(std::string_view packed, F&& f) {
  size_t at = 0;
  while (at + sizeof(uint32_t) <= packed.size()) {
    uint32_t len;
    std::memcpy(&len, packed.data() + at, sizeof len);
    at += sizeof len;
    f(packed.substr(at, len));
    at += len;
  }
}

void append_packed(std::string& packed, std::string_view id) {
  auto len = static_cast<uint32_t>(id.size());
  packed.append(reinterpret_cast<const char*>(&len), sizeof len);
  packed.append(id);
}

bool is_claim(const std::string& id) {
  return !id.empty() && id.size() <= UINT32_MAX && !is_pci_address_id(id);
}

} // namespace

uint32_t gpu_claims::number_of(const std::string& machine) {
  auto [it, fresh] = number_.try_emplace(machine, static_cast<uint32_t>(names_.size()));
  if (fresh) {
    names_.push_back(machine);
    packed_.emplace_back();
  }
  return it->second;
}

bool gpu_claims::claims(uint32_t n, std::string_view id) const {
  bool found = false;
  each_packed(packed_[n], [&](std::string_view x) { found = found || x == id; });
  return found;
}

std::set<std::string> gpu_claims::update(const std::string& machine,
                                         const std::vector<std::string>& ids) {
  std::set<std::string> touched;
  auto known = number_.find(machine);
  if (known == number_.end() && std::none_of(ids.begin(), ids.end(), is_claim))
    return touched;  // claims nothing, never did
  const uint32_t me = known != number_.end() ? known->second : number_of(machine);
  // What it claimed goes, telling the machines that shared a UUID with it.
  const std::string before = std::move(packed_[me]);
  packed_[me].clear();
  each_packed(before, [&](std::string_view id) {
    auto [from, to] = by_hash_.equal_range(hash_of(id));
    for (auto it = from; it != to;) {
      if (it->second == me) {
        it = by_hash_.erase(it);
        continue;
      }
      if (claims(it->second, id))
        touched.insert(names_[it->second]);
      ++it;
    }
  });
  // What it claims now, telling the machines that claim a UUID of it too.
  std::vector<std::string_view> now;  // each UUID once, whatever the list repeats
  now.reserve(ids.size());
  for (const auto& id : ids)
    if (is_claim(id))
      now.push_back(id);
  std::sort(now.begin(), now.end());
  now.erase(std::unique(now.begin(), now.end()), now.end());
  std::string& mine = packed_[me];
  for (auto id : now) {
    auto h = hash_of(id);
    auto [from, to] = by_hash_.equal_range(h);
    for (auto it = from; it != to; ++it)
      if (it->second != me && claims(it->second, id))
        touched.insert(names_[it->second]);
    by_hash_.emplace(h, me);
    append_packed(mine, id);
  }
  mine.shrink_to_fit();
  touched.erase(machine);
  return touched;
}

std::vector<std::string> gpu_claims::others(const std::string& machine,
                                            const std::string& id) const {
  std::vector<std::string> out;
  auto [from, to] = by_hash_.equal_range(hash_of(id));
  for (auto it = from; it != to; ++it)
    if (names_[it->second] != machine && claims(it->second, id))
      out.push_back(names_[it->second]);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

v1::SetAsideGpu aside(const std::string& id, std::string reason) {
  v1::SetAsideGpu out;
  out.set_id(id);
  out.set_reason(std::move(reason));
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

} // namespace

admitted_snapshot admit_snapshot(const v1::SchedulerMachine& m, const gpu_claims& claims) {
  admitted_snapshot out;
  out.spec.name = m.name();
  out.spec.schedulable = m.schedulable();
  // Its size: a GPU worker's cores and memory are fitted too (issue 22).
  out.spec.cpus = m.logical_cpus();
  out.spec.memory_bytes = m.memory_bytes();
  // Why not, in the words a waiting reason names it with (issue 13).
  if (!out.spec.schedulable)
    out.spec.not_schedulable = m.down() ? std::string{"is Down"} : m.not_schedulable();
  // An Accepting machine takes checks only (issue 21): why it takes no
  // other work, for the waiting reasons of runs that may not go there.
  else if (m.accepting())
    out.spec.not_schedulable = m.not_schedulable();
  for (const auto& [k, v] : m.labels())
    out.spec.labels[k] = v;
  // Snapshot index -> index in the spec (-1: set aside).
  std::vector<int> kept(static_cast<size_t>(m.gpus_size()), -1);
  std::set<std::string> seen;
  for (int i = 0; i < m.gpus_size(); ++i) {
    const auto& g = m.gpus(i);
    if (g.id().empty())
      continue;
    if (!seen.insert(g.id()).second) {
      out.set_aside.push_back(aside(g.id(), "listed twice by the machine; placed once"));
      continue;
    }
    auto h = health_of(g);
    if (!h) {
      out.set_aside.push_back(aside(g.id(), "unknown health '" + g.health() + "'"));
      continue;
    }
    if (auto others = claims.others(m.name(), g.id()); !others.empty()) {
      out.set_aside.push_back(aside(
        g.id(), "GPU " + g.id() + " is also reported by machine " + joined(others)
                  + "; neither machine places onto it until one stops reporting it"));
      continue;
    }
    if (out.spec.gpus.size() >= max_gpus_per_machine) {
      out.set_aside.push_back(aside(g.id(), "a machine has at most 64 GPUs"));
      continue;
    }
    gpu_spec gs;
    gs.id = g.id();
    gs.numa_node = g.numa_node();
    gs.health = *h;
    kept[static_cast<size_t>(i)] = static_cast<int>(out.spec.gpus.size());
    out.spec.gpus.push_back(std::move(gs));
  }
  // NVLink peers by snapshot index, renumbered; peers set aside or out of
  // range are dropped.
  for (int i = 0; i < m.gpus_size(); ++i) {
    int at = kept[static_cast<size_t>(i)];
    if (at < 0)
      continue;
    for (auto peer : m.gpus(i).nvlink_peers())
      if (peer < kept.size() && kept[peer] >= 0 && kept[peer] != at)
        out.spec.gpus[static_cast<size_t>(at)].nvlink_peers |= gpu_mask{1}
                                                              << static_cast<unsigned>(kept[peer]);
  }
  return out;
}

} // namespace astraeus
