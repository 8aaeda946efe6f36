#include "runtime/workers/worker_cpuset.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "runtime/host/numa_facts.hpp"

namespace astraeus {

uint32_t cores_wanted(const v1::RunSpec& spec) {
  if (!(spec.cpus_per_worker() > 0))
    return 0;
  return static_cast<uint32_t>(std::ceil(spec.cpus_per_worker()));
}

cpuset_choice choose_cpuset(uint32_t cores, uint64_t memory_bytes, int32_t gpu_node,
                            const std::vector<v1::NumaNode>& nodes,
                            const std::set<uint32_t>& taken) {
  cpuset_choice out;
  if (cores == 0)
    return out;
  // Nearest first: |id - gpu_node|, then the lower id.
  std::vector<const v1::NumaNode*> order;
  for (const auto& n : nodes)
    if (!n.cpulist().empty())
      order.push_back(&n);
  if (order.empty())
    return out;
  int64_t home = gpu_node < 0 ? 0 : gpu_node;
  std::stable_sort(order.begin(), order.end(), [&](const v1::NumaNode* a, const v1::NumaNode* b) {
    auto da = std::llabs(static_cast<int64_t>(a->id()) - home);
    auto db = std::llabs(static_cast<int64_t>(b->id()) - home);
    return da != db ? da < db : a->id() < b->id();
  });
  std::vector<uint32_t> chosen;
  std::vector<uint32_t> mems;
  uint64_t memory = 0;
  size_t i = 0;
  for (; i < order.size() && chosen.size() < cores; ++i) {
    auto members = cpu_list_members(order[i]->cpulist());
    if (!members)
      continue;
    size_t before = chosen.size();
    for (auto c : *members)
      if (chosen.size() < cores && !taken.count(c))
        chosen.push_back(c);
    if (chosen.size() > before) {
      mems.push_back(order[i]->id());
      memory += order[i]->memory_total_bytes();
    }
  }
  if (chosen.size() < cores) {
    out.problem = std::to_string(cores) + " cores asked, " + std::to_string(chosen.size())
                  + " free";
    return out;
  }
  // Memory spills to the next nodes only when the cores' nodes lack it.
  for (; i < order.size() && memory < memory_bytes; ++i) {
    mems.push_back(order[i]->id());
    memory += order[i]->memory_total_bytes();
  }
  out.cpus = format_cpu_list(chosen);
  out.mems = format_cpu_list(mems);
  return out;
}

} // namespace astraeus
