#pragma once
/// @file
/// Host facts of issue 22 (multi-machine training): each NUMA node's cores
/// and memory, CPU use over a report interval, and what a worker needs to
/// be handed an RDMA port (its verbs device, NUMA node, PCI address and the
/// /dev/infiniband nodes that exist). Read under a configurable root like
/// the other host facts (runtime/host/host_facts.hpp), so tests run the same
/// code on fixture trees. Nothing here throws for bad input: a missing,
/// truncated or garbage file leaves its fields unknown and adds one warning
/// "<path relative to root>: <what was wrong>" to facts.warnings().

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// What one NUMA node's meminfo says, in bytes.
struct node_memory {
  uint64_t total_bytes = 0;  ///< "Node N MemTotal: <kB> kB"
  uint64_t free_bytes = 0;   ///< "Node N MemFree: <kB> kB"
};

/// Parses /sys/devices/system/node/nodeN/meminfo text ("Node 0 MemTotal:
/// 1056270564 kB" lines). nullopt when MemTotal or MemFree is missing, or
/// their value is not a number of kB that fits in 64 bits as bytes.
std::optional<node_memory> parse_node_meminfo(std::string_view text);

/// The CPUs of a sysfs CPU list ("0-3,8-11\n" -> {0,1,2,3,8,9,10,11}),
/// ascending, without repeats. nullopt when malformed (as parse_cpu_list in
/// host_facts.hpp: a non-number, a descending range, an empty element).
std::optional<std::vector<uint32_t>> cpu_list_members(std::string_view text);

/// The shortest CPU list naming `cpus` ({0,1,2,3,8} -> "0-3,8"); the input
/// need not be sorted; repeats are ignored; "" for none.
std::string format_cpu_list(std::vector<uint32_t> cpus);

/// Fills facts.cpu().nodes() from <root>/sys/devices/system/node/node<N>/
/// {cpulist,meminfo}, by ascending N. A node whose cpulist is unreadable or
/// malformed is still listed, with 0 CPUs and a warning; a node without
/// meminfo has unknown memory (0) and a warning. No node folder (a kernel
/// without NUMA) leaves nodes empty without a warning.
void read_numa_nodes(const std::string& root, v1::HostFacts& facts);

/// On a machine with exactly one NUMA node (facts.cpu().nodes() lists one),
/// gives every GPU without a node that node: there its memory and every CPU
/// are local. A single-node VM's kernel often says -1 for a PCI device (no
/// ACPI proximity domain; recorded on an H200 VM, where `nvidia-smi topo -m`
/// says "NUMA Affinity 0" and NVML's nvmlDeviceGetNumaNodeId is not
/// supported). With several nodes, or none listed, nothing changes.
void place_gpus_on_the_only_numa_node(v1::HostFacts& facts);

/// Sets the issue-22 fields of `port` (of HCA `device`): `uverbs` (the one
/// entry of <root>/sys/class/infiniband/<device>/device/infiniband_verbs/),
/// `numa_node` (device/numa_node; -1 unknown, the kernel's own -1 included)
/// and `pci_address` (PCI_SLOT_NAME of device/uevent, else the name the
/// `device` link points to when it is a PCI address). A garbage numa_node
/// or uevent is a warning; absent files are not.
void read_rdma_port_device(const std::string& root, const std::string& device,
                           v1::RdmaPort& port, v1::HostFacts& facts);

/// Fills facts.rdma_device_nodes() with the RDMA nodes under
/// <root>/dev/infiniband (uverbsN, rdma_cm, umadN, issmN), as paths on the
/// machine ("/dev/infiniband/uverbs0"), naturally sorted. None when the
/// folder is absent.
void read_rdma_device_nodes(const std::string& root, v1::HostFacts& facts);

/// The CPU time counters of the first ("cpu ") line of /proc/stat, in
/// clock ticks: busy (user, nice, system, irq, softirq, steal) and total
/// (busy plus idle and iowait; guest time is already in user).
struct cpu_times {
  uint64_t busy = 0;
  uint64_t total = 0;
};

/// Parses /proc/stat text. nullopt when there is no "cpu " line or it has
/// fewer than the four fields every kernel writes, or a field is not a
/// number.
std::optional<cpu_times> parse_proc_stat(std::string_view text);

/// CPU use between two readings, percent 0-100: the busy share of the
/// ticks that passed. nullopt when no tick passed or a counter went back
/// (a reading from before a reboot).
std::optional<double> cpu_use_percent(const cpu_times& before, const cpu_times& after);

/// Measures CPU use over report intervals: each sample reads
/// <root>/proc/stat and, from the second on, sets facts.cpu().use_percent()
/// to the use since the sample before. Not thread-safe (one per agent).
class cpu_use_meter {
public:
  /// Reads /proc/stat under `root` (a warning in `facts` when it is
  /// missing or malformed, which also forgets the last reading) and sets
  /// use_percent where a previous reading allows.
  void sample(const std::string& root, v1::HostFacts& facts);

private:
  std::optional<cpu_times> last_;  ///< the previous reading, if any
};

} // namespace astraeus
