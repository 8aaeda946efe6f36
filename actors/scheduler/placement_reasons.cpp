// The machines a waiting reason names (issue 13, item 5): those that would
// take a worker but for their state (cordoned, in Maintenance, Down, under
// pressure, Accepting: issue 21) or their fenced GPUs, and the pools there are when no machine
// carries the pool a run asks for. Kept off the hot path: `blocked` is
// updated with each machine change, and the words are made only for runs
// that did not place.

#include "actors/scheduler/placement.hpp"

#include "actors/scheduler/placement_internal.hpp"

namespace astraeus {

using namespace placement_detail;

namespace {

/// How many blocked machines one reason looks at, at most.
constexpr size_t look_at_most = 4096;
/// How many machines one reason names.
constexpr size_t name_at_most = 3;

std::string gpus_word(unsigned n) {
  return std::to_string(n) + (n == 1 ? " GPU" : " GPUs");
}

/// "has 6 free and 2 GPUs fenced": `free` GPUs and the free GPUs of `m`
/// that are not usable, in the seeds' words (shared/seeds/gpus.md): Faulty
/// ones "fenced", Foreign ones "held outside Astraeus" ("Used outside
/// Astraeus"); "has 5 free, 1 GPU fenced and 2 GPUs held outside Astraeus"
/// with both.
std::string free_and_unusable(const machine_rec& m, unsigned free) {
  unsigned foreign = 0, faulty = 0;
  const gpu_mask unusable = m.free_fenced();
  for (size_t slot = 0; slot < m.gpus.size(); ++slot)
    if (unusable & (gpu_mask{1} << slot))
      ++(m.gpus[slot].health == gpu_health::foreign ? foreign : faulty);
  // The rest of its GPUs are held by runs: said too, so the counts add up
  // ("has 0 free and 6 GPUs held outside Astraeus" on an 8-GPU machine left
  // 2 unexplained: a new-user trial).
  const auto by_runs = static_cast<unsigned>(popcount(m.present & m.held));
  std::vector<std::string> parts;
  if (faulty > 0)
    parts.push_back(gpus_word(faulty) + " fenced");
  if (foreign > 0)
    parts.push_back(gpus_word(foreign) + " held outside Astraeus");
  if (by_runs > 0)
    parts.push_back(gpus_word(by_runs) + " held by runs");
  std::string out = "has " + std::to_string(free) + " free";
  for (size_t i = 0; i < parts.size(); ++i)
    out += (i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return out;
}

} // namespace

void placement_index::state::note_blocked(machine_id id) {
  machine_rec& m = machines[id];
  const bool now = !m.removed && (!m.schedulable || m.free_fenced() != 0 || m.accepting);
  // The tree is touched only when the machine joins or leaves it (issue 14:
  // a look-up per placement and release otherwise).
  if (now == m.in_blocked)
    return;
  m.in_blocked = now;
  if (now)
    blocked.insert(id);
  else
    blocked.erase(id);
}

void placement_index::state::count_pool(std::optional<std::string_view> pool, int sign) {
  if (!pool)
    return;
  if (sign > 0) {
    auto it = pools.find(*pool);
    if (it == pools.end())
      it = pools.emplace(std::string{*pool}, 0).first;
    ++it->second;
    return;
  }
  auto it = pools.find(*pool);
  if (it != pools.end() && --it->second == 0)
    pools.erase(it);
}

std::string placement_index::state::blockers(const selector_rec& sel, unsigned k,
                                             unsigned need, bool accepting_must_fit,
                                             bool gang) const {
  std::string named;
  size_t count = 0, looked = 0;
  bool more = false;
  for (machine_id id : blocked) {
    if (++looked > look_at_most) {
      more = true;
      break;
    }
    const machine_rec& m = machines[id];
    if (!matches(m, sel)) {
      // Issue 21: a machine that only its acceptance keeps from this run
      // counts as matching but taking no new work.
      if (!m.accepting || !std::all_of(sel.label_text.begin(), sel.label_text.end(),
                                        [&](const auto& kv) {
                                          return kv.first == accepting_key ||
                                                 has_label(m, kv.first, kv.second);
                                        }))
        continue;
      if (accepting_must_fit && popcount(m.present) < need)
        continue;
      // One only its cordon keeps out (the machine actor offers it as taking
      // checks only) is said as the README writes it, "gpu-01 has 8 free but
      // is cordoned"; an Accepting one by its acceptance.
      std::string what = m.name + " ";
      const unsigned free =
        popcount(k == kind_healthy ? m.free_healthy() : m.free_usable());
      if (m.why_not.rfind("is cordoned", 0) == 0 && free >= need)
        what += "has " + std::to_string(free) + " free but ";
      what += m.why_not.empty() ? std::string{"is Accepting"} : m.why_not;
      if (++count <= name_at_most)
        named += (named.empty() ? "" : ", ") + what;
      continue;
    }
    unsigned free = popcount(k == kind_healthy ? m.free_healthy() : m.free_usable());
    unsigned fenced = popcount(m.free_fenced());
    std::string what;
    if (!m.schedulable && free >= need)
      what = m.name + " has " + std::to_string(free) + " free but " +
             (m.why_not.empty() ? std::string{"is not taking new work"} : m.why_not);
    else if (!m.schedulable && free + fenced >= need)
      what = m.name + " " + free_and_unusable(m, free) + ", and " +
             (m.why_not.empty() ? std::string{"takes no new work"} : m.why_not);
    else if (m.schedulable && free < need && free + fenced >= need)
      what = m.name + " " + free_and_unusable(m, free);
    else if (gang && m.schedulable && need > 0 && free / need < (free + fenced) / need)
      what = m.name + " " + free_and_unusable(m, free);
    if (what.empty())
      continue;
    if (++count <= name_at_most)
      named += (named.empty() ? "" : ", ") + what;
  }
  if (named.empty())
    return more ? "; more than " + std::to_string(look_at_most) +
                    " machines take no new work or have GPUs fenced or held outside Astraeus"
                : std::string{};
  if (count > name_at_most)
    named += " and " + std::to_string(count - name_at_most) + (more ? " or more" : " more");
  else if (more)
    named += " and maybe more";
  return "; " + named;
}

placement_index::state::kept_out_sizes
placement_index::state::most_kept_out(const selector_rec& sel) const {
  kept_out_sizes most;
  size_t looked = 0;
  for (machine_id id : blocked) {
    if (++looked > look_at_most)
      break;
    const machine_rec& m = machines[id];
    if (matches(m, sel) || !m.accepting)
      continue;
    if (!std::all_of(sel.label_text.begin(), sel.label_text.end(), [&](const auto& kv) {
          return kv.first == accepting_key || has_label(m, kv.first, kv.second);
        }))
      continue;
    most.gpus = std::max(most.gpus, static_cast<unsigned>(popcount(m.present)));
    most.cpu_cap = m.cpu_cap == 0 ? UINT64_MAX : std::max<uint64_t>(most.cpu_cap, m.cpu_cap);
    most.mem_cap = m.mem_cap == 0 ? UINT64_MAX : std::max<uint64_t>(most.mem_cap, m.mem_cap);
  }
  return most;
}

std::string placement_index::state::shorts_text() const {
  std::string out;
  for (machine_id id : short_named) {
    const machine_rec& m = machines[id];
    // What limits it: the cores, the memory or both (for a gang, what ran
    // out before its GPUs did).
    uint32_t r = room(m);
    bool cpu = ask_cpu && m.cpu_cap && m.free_cpu() / ask_cpu == r;
    bool mem = ask_mem && m.mem_cap && m.free_mem() / ask_mem == r;
    std::string what;
    if (cpu)
      what = cores_text(m.free_cpu()) + " free " + (m.free_cpu() == 1000 ? "core" : "cores");
    if (mem)
      what += (what.empty() ? "" : " and ") + memory_text(m.free_mem()) + " free memory";
    if (what.empty())
      what = "not the free cores and memory for every worker";
    else
      what = "only " + what;
    out += (out.empty() ? "; " : ", ") + m.name + " has the GPUs but " + what;
  }
  if (short_more)
    out += " and more";
  return out;
}

std::string placement_index::state::pools_text() const {
  if (pools.empty())
    return {};
  std::string out;
  size_t n = 0;
  for (const auto& [pool, machines_in] : pools) {
    if (n++ == 4) {
      out += ", ...";
      break;
    }
    out += (out.empty() ? "" : ", ") + pool;
  }
  return std::string{" (machines are in pool"} + (pools.size() == 1 ? " " : "s ") + out + ")";
}

} // namespace astraeus
