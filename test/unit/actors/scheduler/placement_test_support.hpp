#pragma once
// Helpers shared by the placement engine's tests (test/unit/actors/scheduler/
// placement_*_test.cpp and scheduler_queue_test.cpp): an 8-GPU DGX-like
// machine, requests, and checks of what a placement changed.

#include <initializer_list>
#include <optional>
#include <string>
#include <variant>

#include <gtest/gtest.h>

#include "actors/scheduler/placement.hpp"

namespace astraeus::placement_test {

inline const label_map h100{{"pool", "h100"}};

// Eight GPUs: slots 0-3 on NUMA node 0, 4-7 on node 1, all joined by
// NVSwitch (every pair NVLinked), ids "<name>-g<i>".
inline machine_spec dgx(const std::string& name, label_map labels = h100, unsigned gpus = 8) {
  machine_spec m;
  m.name = name;
  m.labels = std::move(labels);
  for (unsigned i = 0; i < gpus; ++i) {
    gpu_spec g;
    g.id = name + "-g" + std::to_string(i);
    g.numa_node = i < gpus / 2 ? 0 : 1;
    g.nvlink_peers = ((gpu_mask{1} << gpus) - 1) & ~(gpu_mask{1} << i);
    m.gpus.push_back(g);
  }
  return m;
}

// `m` with `cpus` logical CPUs and `mem_gib` GiB of memory (issue 22).
inline machine_spec sized(machine_spec m, uint32_t cpus, uint64_t mem_gib) {
  m.cpus = cpus;
  m.memory_bytes = mem_gib << 30;
  return m;
}

// `r` whose workers each ask for `cpus` cores and `mem_gib` GiB too.
inline placement_request asking(placement_request r, double cpus, uint64_t mem_gib = 0) {
  r.cpus_per_worker = cpus;
  r.memory_bytes_per_worker = mem_gib << 30;
  return r;
}

inline placement_request single(const std::string& run, uint32_t gpus, label_map labels = h100) {
  placement_request r;
  r.run = run;
  r.groups = {worker_group{"default", 1, gpus}};
  r.required_labels = std::move(labels);
  return r;
}

inline placement_request gang(const std::string& run, uint32_t workers, uint32_t gpus,
                              label_map labels = h100) {
  placement_request r = single(run, gpus, std::move(labels));
  r.groups[0].workers = workers;
  return r;
}

inline unsigned lowest_slot(gpu_mask m) {
  return static_cast<unsigned>(__builtin_ctzll(m));
}

inline unsigned popcount_of(gpu_mask m) {
  return static_cast<unsigned>(__builtin_popcountll(m));
}

inline gpu_mask bits(std::initializer_list<unsigned> slots) {
  gpu_mask m = 0;
  for (unsigned s : slots)
    m |= gpu_mask{1} << s;
  return m;
}

inline machine_id add(placement_index& idx, const machine_spec& spec) {
  auto id = idx.add_machine(spec);
  EXPECT_TRUE(id) << spec.name;
  return id ? *id : 0;
}

// Holds slots of a machine for someone else.
inline allocation_id hold(placement_index& idx, machine_id m, gpu_mask gpus) {
  auto a = idx.hold("someone else", {gpu_set{m, gpus}});
  EXPECT_TRUE(a);
  return a ? *a : 0;
}

inline std::optional<placement> placed(const placement_result& r) {
  if (auto* w = std::get_if<waiting_reason>(&r)) {
    ADD_FAILURE() << "not placed: " << w->message;
    return std::nullopt;
  }
  return std::get<placement>(r);
}

inline std::string why(const placement_result& r) {
  if (auto* w = std::get_if<waiting_reason>(&r))
    return w->message;
  return "placed";
}

// Places and commits; the placement, or nullopt.
inline std::optional<placement> place_commit(placement_index& idx, const placement_request& r) {
  auto res = idx.place(r);
  auto* p = std::get_if<placement>(&res);
  if (!p)
    return std::nullopt;
  auto a = idx.commit(*p);
  EXPECT_TRUE(a) << r.run;
  return *p;
}

// Everything a placement can change, as text; `with_holders` false: which
// GPUs are held, not by which allocation id.
inline std::string fingerprint(const placement_index& idx, bool with_holders = true) {
  std::string out;
  auto t = idx.totals();
  out += std::to_string(t.held) + "/" + std::to_string(t.free_healthy) + "/" +
         std::to_string(t.free_at_risk) + "/" + std::to_string(t.allocations) + ";";
  for (machine_id m = 0; m < idx.machine_ids(); ++m)
    for (unsigned s = 0; s < idx.gpu_slots(m); ++s) {
      auto holder = idx.holder({m, static_cast<uint8_t>(s)});
      out += with_holders ? std::to_string(holder) + "," : holder != 0 ? "1" : "0";
    }
  return out;
}

} // namespace astraeus::placement_test
