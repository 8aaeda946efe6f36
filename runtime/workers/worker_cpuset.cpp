#include "runtime/workers/worker_cpuset.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "runtime/host/numa_facts.hpp"

namespace astraeus {

cpuset_choice choose_cpuset(uint32_t cores, uint64_t memory_bytes,
                            const std::map<int32_t, uint32_t>& gpus_per_node,
                            const std::vector<v1::NumaNode>& nodes,
                            const std::set<uint32_t>& taken) {
  // GPU nodes, most GPUs first, then the lower id.
  std::vector<std::pair<int32_t, uint32_t>> gpu_nodes;
  uint32_t gpus = 0;
  for (const auto& [id, n] : gpus_per_node)
    if (id >= 0 && n > 0) {
      gpu_nodes.emplace_back(id, n);
      gpus += n;
    }
  std::stable_sort(gpu_nodes.begin(), gpu_nodes.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (gpu_nodes.size() < 2)
    return choose_cpuset(cores, memory_bytes, gpu_nodes.empty() ? -1 : gpu_nodes.front().first,
                         nodes, taken);
  cpuset_choice out;
  if (cores == 0)
    return out;
  const int64_t home = gpu_nodes.front().first;
  // Every node with a CPU list: the GPU nodes first (in the order above),
  // then the others nearest `home` first.
  std::vector<const v1::NumaNode*> order;
  for (const auto& [id, n] : gpu_nodes)
    for (const auto& node : nodes)
      if (static_cast<int32_t>(node.id()) == id && !node.cpulist().empty())
        order.push_back(&node);
  const size_t gpu_nodes_found = order.size();
  std::vector<const v1::NumaNode*> others;
  for (const auto& node : nodes)
    if (!node.cpulist().empty() && !gpus_per_node.count(static_cast<int32_t>(node.id())))
      others.push_back(&node);
  std::stable_sort(others.begin(), others.end(), [&](const auto* a, const auto* b) {
    auto da = std::llabs(static_cast<int64_t>(a->id()) - home);
    auto db = std::llabs(static_cast<int64_t>(b->id()) - home);
    return da != db ? da < db : a->id() < b->id();
  });
  order.insert(order.end(), others.begin(), others.end());
  if (order.empty())
    return out;
  // Each GPU node's share: cores x its GPUs / all GPUs, the remainder to
  // the first nodes.
  std::vector<uint32_t> share(order.size(), 0);
  uint32_t given = 0;
  for (size_t i = 0; i < gpu_nodes_found; ++i) {
    auto n = gpus_per_node.at(static_cast<int32_t>(order[i]->id()));
    share[i] = static_cast<uint32_t>(uint64_t{cores} * n / gpus);
    given += share[i];
  }
  for (size_t i = 0; given < cores && gpu_nodes_found > 0; i = (i + 1) % gpu_nodes_found) {
    ++share[i];
    ++given;
  }
  std::vector<std::vector<uint32_t>> free(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    if (auto members = cpu_list_members(order[i]->cpulist()))
      for (auto c : *members)
        if (!taken.count(c))
          free[i].push_back(c);
  std::vector<uint32_t> chosen;
  std::vector<size_t> used(order.size(), 0);
  // Shares first, then whatever is short from any node in order.
  for (size_t i = 0; i < order.size(); ++i)
    for (; used[i] < std::min<size_t>(share[i], free[i].size()); ++used[i])
      chosen.push_back(free[i][used[i]]);
  for (size_t i = 0; i < order.size() && chosen.size() < cores; ++i)
    for (; used[i] < free[i].size() && chosen.size() < cores; ++used[i])
      chosen.push_back(free[i][used[i]]);
  if (chosen.size() < cores) {
    out.problem = std::to_string(cores) + " cores asked, " + std::to_string(chosen.size())
                  + " free";
    return out;
  }
  std::vector<uint32_t> mems;
  uint64_t memory = 0;
  for (size_t i = 0; i < order.size(); ++i)
    if (used[i] > 0) {
      mems.push_back(order[i]->id());
      memory += order[i]->memory_total_bytes();
    }
  // Memory spills to the next nodes only when the cores' nodes lack it.
  for (size_t i = 0; i < order.size() && memory < memory_bytes; ++i)
    if (used[i] == 0) {
      mems.push_back(order[i]->id());
      memory += order[i]->memory_total_bytes();
    }
  out.cpus = format_cpu_list(chosen);
  out.mems = format_cpu_list(mems);
  return out;
}

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
