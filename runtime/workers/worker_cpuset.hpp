#pragma once
/// @file
/// NUMA-local cores and memory for a worker (issue 22; Drove's rule,
/// shared/seeds/drove-gpu-scheduling.md, "NUMA locality"): a worker's cores
/// and memory are taken on the NUMA node of its GPUs where they fit,
/// spilling to the next node only when they do not; cores given to one
/// worker are not given to another on the same machine. The agent chooses
/// (the controller may choose instead: WorkerOrder.cpuset_cpus); the choice
/// is kept in the worker's process record, so a restarted agent still knows
/// which cores are taken.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// Cores and memory nodes chosen for one worker, in sysfs list syntax
/// ("0-7,112-119", "0"); both empty = not pinned.
struct cpuset_choice {
  std::string cpus;     ///< linux.resources.cpu.cpus; sched_setaffinity
  std::string mems;     ///< linux.resources.cpu.mems; the memory policy's nodes
  std::string problem;  ///< why it is not pinned although cores were asked for
};

/// Chooses `cores` whole CPUs and the memory nodes for a worker whose GPUs
/// are on NUMA node `gpu_node` (-1 unknown: the lowest node first), among
/// `nodes` (HostFacts.cpu.nodes) without `taken` (CPUs other workers hold).
/// Nodes are tried nearest first: the GPU node, then by distance of id, the
/// lower id first on a tie. Free cores are taken from each in turn until
/// there are enough; `mems` names the nodes they came from, plus further
/// nodes in the same order while their total memory (memory_total_bytes)
/// is below `memory_bytes`. `cores` = 0, or no node with a CPU list:
/// nothing pinned and no problem. Fewer free cores than `cores`: nothing
/// pinned, with a problem ("16 cores asked, 12 free").
cpuset_choice choose_cpuset(uint32_t cores, uint64_t memory_bytes, int32_t gpu_node,
                            const std::vector<v1::NumaNode>& nodes,
                            const std::set<uint32_t>& taken);

/// As above for a worker whose GPUs are on several NUMA nodes
/// (`gpus_per_node`: node id -> how many of its GPUs are local to it; an
/// 8-GPU worker of a two-socket machine has {0: 4, 1: 4}). Its cores are
/// shared among those nodes in proportion to their GPUs (the remainder to
/// the node with more GPUs, then the lower id), each node's share from its
/// own free cores; a node short of free cores leaves the rest to the other
/// GPU nodes, then to the nearest others (by id distance from the node with
/// most GPUs). `mems` names every node cores came from, then further nodes
/// while memory is short. One node (or none, empty) chooses as above; a
/// sixth new-user trial found an 8-GPU worker on both sockets pinned to
/// node 0's cores and memory only.
cpuset_choice choose_cpuset(uint32_t cores, uint64_t memory_bytes,
                            const std::map<int32_t, uint32_t>& gpus_per_node,
                            const std::vector<v1::NumaNode>& nodes,
                            const std::set<uint32_t>& taken);

/// The cores a worker of `spec` asks for: cpus_per_worker rounded up
/// (0.5 -> 1), 0 without `cpus`.
uint32_t cores_wanted(const v1::RunSpec& spec);

} // namespace astraeus
