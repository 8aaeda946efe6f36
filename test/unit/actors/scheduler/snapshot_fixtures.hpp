#pragma once
/// @file
/// Machine snapshots for the scheduler's tests (issue 18): a machine whose
/// GPUs are named as given (PCI addresses or UUIDs), all Healthy on NUMA 0.

#include <string>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus::test {

/// A schedulable machine `name` with GPUs `ids` and the label probe=yes.
inline v1::SchedulerMachine fixture_machine(const std::string& name,
                                            const std::vector<std::string>& ids) {
  v1::SchedulerMachine m;
  m.set_name(name);
  m.set_schedulable(true);
  m.set_address("10.0.0." + std::to_string(name.size()));
  (*m.mutable_labels())["probe"] = "yes";
  for (const auto& id : ids) {
    auto* g = m.add_gpus();
    g->set_id(id);
    g->set_numa_node(0);
    g->set_health("Healthy");
  }
  return m;
}

/// A one-worker run `name` asking for `gpus` GPUs, with no pool.
inline v1::RunSpec fixture_run(const std::string& name, uint32_t gpus) {
  v1::RunSpec s;
  s.set_name(name);
  s.set_image("ghcr.io/acme/train:1");
  s.add_command("train");
  s.set_gpus_per_worker(gpus);
  s.set_workers(1);
  return s;
}

} // namespace astraeus::test
