// The RDMA ports a worker's NCCL_IB_HCA leaves out (ib_port_exclusions.hpp).

#include "actors/validation/ib_port_exclusions.hpp"

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include "actors/validation/pair_plan.hpp"
#include "actors/validation/topology_findings.hpp"

namespace astraeus::validation {

namespace {

/// Whether the policy of `m`'s pool leaves degraded ports out (the default).
bool excludes(const v1::MachineView& m,
              const std::map<std::string, v1::ValidationPolicy>& policies) {
  auto pool = m.labels().find("pool");
  if (pool == m.labels().end())
    return true;
  auto p = policies.find(pool->second);
  return p == policies.end() || !p->second.has_exclude_degraded_ports()
         || p->second.exclude_degraded_ports();
}

/// Whether `entry` ("mlx5_5:1" or "mlx5_5") names port `p`.
bool names(const std::string& entry, const v1::RdmaPort& p) {
  return entry == p.device() || entry == p.device() + ":" + std::to_string(p.port());
}

/// The ports of `m` that NCCL_IB_HCA would take: Active, and InfiniBand
/// where it has any (runtime/workers/worker_env.cpp, ib_hca).
std::vector<const v1::RdmaPort*> usable(const v1::MachineView& m) {
  std::vector<const v1::RdmaPort*> out;
  bool infiniband = std::any_of(
    m.facts().rdma_ports().begin(), m.facts().rdma_ports().end(),
    [](const v1::RdmaPort& p) { return p.state() == "ACTIVE" && p.link_layer() == "InfiniBand"; });
  for (const auto& p : m.facts().rdma_ports())
    if (p.state() == "ACTIVE" && (!infiniband || p.link_layer() == "InfiniBand"))
      out.push_back(&p);
  return out;
}

/// The devices most of whose pairs fail, by machine: (machine, device) ->
/// "gpu-03 mlx5_3: 2 of its 3 pairs on that rail fail".
std::map<std::pair<std::string, std::string>, std::string>
failing_pair_devices(const v1::MachineList& machines, const latest_map& latest) {
  std::set<std::string> listed;
  for (const auto& m : machines.machines())
    listed.insert(m.name());
  std::vector<const v1::ValidationStep*> steps;
  for (const auto& [key, step] : latest)
    if (is_pair(step) && listed.count(step.machine()) && listed.count(step.peer()))
      steps.push_back(&step);
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> verdicts;
  for (const auto& p : pair_results(steps, check_policy{}.values())) {
    verdicts[{p.a(), p.device()}].push_back(p.verdict());
    verdicts[{p.b(), p.device()}].push_back(p.verdict());
  }
  std::map<std::pair<std::string, std::string>, std::string> out;
  for (const auto& [key, v] : verdicts) {
    if (machine_pairs_verdict(v) != "fail")
      continue;
    auto failing = std::count(v.begin(), v.end(), "fail");
    out[key] = key.first + " " + key.second + ": " + std::to_string(failing) + " of its "
               + std::to_string(v.size()) + " pair" + (v.size() == 1 ? "" : "s")
               + " on that rail fail";
  }
  return out;
}

} // namespace

v1::DegradedIbPortList
ib_port_exclusions(const v1::MachineList& machines, const latest_map& latest,
                   const std::map<std::string, v1::ValidationPolicy>& policies) {
  std::map<std::string, std::vector<v1::DegradedIbPort>> found;
  for (auto& d : degraded_ports(machines, "")) {
    v1::DegradedIbPort p;
    p.set_port(std::move(d.port));
    p.set_why(std::move(d.what));
    found[d.machine].push_back(std::move(p));
  }
  for (auto& [key, why] : failing_pair_devices(machines, latest)) {
    auto& list = found[key.first];
    // A port the topology names already says why (its rate or state).
    bool named = std::any_of(list.begin(), list.end(), [&](const v1::DegradedIbPort& p) {
      return p.port().rfind(key.second + ":", 0) == 0;
    });
    if (named)
      continue;
    v1::DegradedIbPort p;
    p.set_port(key.second);
    p.set_why(std::move(why));
    list.push_back(std::move(p));
  }
  v1::DegradedIbPortList out;
  for (const auto& m : machines.machines()) {
    auto f = found.find(m.name());
    if (f == found.end() || f->second.empty() || !excludes(m, policies))
      continue;
    auto& ports = f->second;
    std::sort(ports.begin(), ports.end(),
              [](const auto& a, const auto& b) { return a.port() < b.port(); });
    auto up = usable(m);
    bool none_left = std::all_of(up.begin(), up.end(), [&](const v1::RdmaPort* u) {
      return std::any_of(ports.begin(), ports.end(),
                         [&](const v1::DegradedIbPort& d) { return names(d.port(), *u); });
    });
    if (none_left)
      for (auto& d : ports)
        d.set_kept(std::any_of(up.begin(), up.end(),
                               [&](const v1::RdmaPort* u) { return names(d.port(), *u); }));
    auto* entry = out.add_machines();
    entry->set_machine(m.name());
    for (auto& d : ports)
      *entry->add_ports() = std::move(d);
  }
  std::sort(out.mutable_machines()->begin(), out.mutable_machines()->end(),
            [](const auto& a, const auto& b) { return a.machine() < b.machine(); });
  return out;
}

} // namespace astraeus::validation
