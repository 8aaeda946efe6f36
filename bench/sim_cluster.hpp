#pragma once
/// @file
/// The simulated cluster shared by the scheduler benchmarks (placement_bench,
/// scheduler_actor_bench): its machines, the request mixes, and the timing
/// and memory helpers they print with.
///
/// Cluster: N machines x 8 GPUs (NUMA 0: GPUs 0-3, NUMA 1: 4-7; NVSwitch on
/// 9 machines of 10, NVLink pairs on the rest; 40-character UUIDs); pools
/// h100 (80 %) and a100 (20 %); 2 sites; racks of 32 machines; InfiniBand
/// fabrics of 512; NVLink domains of 8 machines in every 4th rack; by
/// default 2 % of GPUs Faulty (fenced) and 1 % AtRisk.

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "actors/scheduler/placement.hpp"
#include "messages/astraeus.pb.h"

namespace astraeus::bench {

using clock_type = std::chrono::steady_clock;

inline double ns_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::nano>(clock_type::now() - t0).count();
}

/// Nearest-rank percentile of sorted values.
inline double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty())
    return 0;
  auto rank = static_cast<size_t>(p / 100.0 * static_cast<double>(sorted.size()) + 0.999999);
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

/// One line: n, mean, p50, p99, p99.9, max of `ns` (nanoseconds), in µs.
inline void print_latency(const char* what, std::vector<double> ns) {
  std::sort(ns.begin(), ns.end());
  double sum = 0;
  for (double x : ns)
    sum += x;
  std::printf("  %-28s n %7zu  mean %7.2f  p50 %7.2f  p99 %7.2f  p99.9 %8.2f  max %8.2f us\n",
              what, ns.size(), ns.empty() ? 0 : sum / static_cast<double>(ns.size()) / 1e3,
              percentile(ns, 50) / 1e3, percentile(ns, 99) / 1e3, percentile(ns, 99.9) / 1e3,
              ns.empty() ? 0 : ns.back() / 1e3);
}

/// VmRSS and VmHWM of this process in MiB.
inline std::pair<double, double> memory_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  double rss = 0, hwm = 0;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0)
      rss = std::strtod(line.c_str() + 6, nullptr) / 1024.0;
    if (line.rfind("VmHWM:", 0) == 0)
      hwm = std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  }
  return {rss, hwm};
}

/// A 40-character NVIDIA-style GPU UUID.
inline std::string uuid(std::mt19937_64& rng) {
  char buf[48];
  uint64_t a = rng(), b = rng();
  std::snprintf(buf, sizeof buf, "GPU-%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64
                "-%012" PRIx64,
                a >> 32, (a >> 16) & 0xffff, a & 0xffff, b >> 48, b & uint64_t{0xffffffffffff});
  return buf;
}

/// A GPU as an H100 agent reports it: readings, ECC, row remapping, 18
/// NVLinks.
inline v1::Gpu sim_h100_gpu(std::mt19937_64& rng, uint32_t i) {
  static const char* pcis[] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                               "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"};
  v1::Gpu g;
  g.set_id(uuid(rng));
  g.set_vendor("nvidia");
  g.set_model("NVIDIA H100 80GB HBM3");
  g.set_index(i);
  g.set_pci_address(pcis[i]);
  g.set_numa_node(i < 4 ? 0 : 1);
  g.set_memory_total_bytes(81559ull << 20);
  g.set_memory_used_bytes((rng() % 80000ull) << 20);
  g.set_architecture("hopper");
  g.set_compute_capability("9.0");
  g.set_utilization_percent(static_cast<double>(rng() % 101));
  g.set_temperature_c(static_cast<double>(30 + rng() % 50));
  g.set_power_watts(static_cast<double>(70 + rng() % 630));
  g.set_power_limit_watts(700);
  g.set_sm_clock_mhz(1980);
  g.set_memory_clock_mhz(2619);
  g.mutable_ecc()->set_volatile_correctable(0);
  g.mutable_ecc()->set_volatile_uncorrectable(0);
  g.mutable_row_remapping()->set_correctable_rows(0);
  g.mutable_row_remapping()->set_uncorrectable_rows(0);
  g.mutable_row_remapping()->set_failed(false);
  for (uint32_t l = 0; l < 18; ++l) {
    auto* link = g.add_nvlinks();
    link->set_link(l);
    link->set_active(true);
    link->set_remote_kind("switch");
    link->set_crc_errors(0);
  }
  g.set_pcie_replays(0);
  g.set_driver_version("550.54.15");
  g.set_status("ok");
  g.set_data_centre(true);
  g.set_serial(std::to_string(rng()));
  return g;
}

/// The pool of machine `i`: every 5th machine is an a100, the rest h100.
inline const char* pool_of(size_t i) {
  return i % 5 == 4 ? "a100" : "h100";
}

/// How many GPUs of each hundred are Faulty and AtRisk.
struct health_mix {
  unsigned faulty_percent = 2;
  unsigned at_risk_percent = 1;
};

/// Machine `i` of a cluster of `machines` (draws from `rng`: 2 values per
/// GPU for its UUID, 1 for its health).
inline machine_spec sim_machine(size_t i, size_t machines, std::mt19937_64& rng,
                                health_mix mix = {}) {
  machine_spec m;
  m.name = "gpu-" + std::to_string(i);
  size_t site = i < machines / 2 ? 0 : 1;
  size_t rack = i / 32;
  m.labels = {{"pool", pool_of(i)},
              {topology_label::site, site ? "ams" : "fra"},
              {topology_label::rack, "r" + std::to_string(rack)},
              {topology_label::fabric, "ib" + std::to_string(i / 512)}};
  if (rack % 4 == 0)
    m.labels[topology_label::nvlink_domain] = "nvl" + std::to_string(i / 8);
  bool pairs = i % 10 == 9;
  for (unsigned g = 0; g < 8; ++g) {
    gpu_spec s;
    s.id = uuid(rng);
    s.numa_node = g < 4 ? 0 : 1;
    s.nvlink_peers = pairs ? gpu_mask{1} << (g ^ 1u) : 0xffull & ~(gpu_mask{1} << g);
    uint64_t roll = rng() % 100;
    s.health = roll < mix.faulty_percent ? gpu_health::faulty
               : roll < mix.faulty_percent + mix.at_risk_percent ? gpu_health::at_risk
                                                                 : gpu_health::healthy;
    m.gpus.push_back(std::move(s));
  }
  return m;
}

/// A single worker of 1/2/4/8 GPUs (weights 40/25/20/15) in pool h100 or
/// a100 (as the machines are split), 10 % healthy_only.
inline placement_request single_request(std::mt19937_64& rng, uint64_t n) {
  static const uint32_t sizes[] = {1, 2, 4, 8};
  uint64_t roll = rng() % 100;
  uint32_t g = sizes[roll < 40 ? 0 : roll < 65 ? 1 : roll < 85 ? 2 : 3];
  placement_request r;
  r.run = "run-" + std::to_string(n);
  r.groups = {worker_group{"default", 1, g}};
  r.required_labels = {{"pool", rng() % 5 == 4 ? "a100" : "h100"}};
  r.healthy_only = rng() % 10 == 0;
  return r;
}

/// A gang of 2-16 machines: 8-GPU workers x 2..16, or 4-GPU workers x 4..32.
inline placement_request gang_request(std::mt19937_64& rng, uint64_t n) {
  uint32_t machines = 2 + static_cast<uint32_t>(rng() % 15); // 2..16
  placement_request r;
  r.run = "gang-" + std::to_string(n);
  if (rng() % 2)
    r.groups = {worker_group{"default", machines, 8}};
  else
    r.groups = {worker_group{"default", machines * 2, 4}};
  r.required_labels = {{"pool", rng() % 5 == 4 ? "a100" : "h100"}};
  return r;
}

/// The Slurm side-by-side shape (bench/slurm_side_by_side.sh): job `i` is a
/// 4-GPU worker when i % 5 == 4, else a 1-GPU worker; no pool, no labels.
inline placement_request slurm_shape_request(uint64_t i) {
  placement_request r;
  r.run = "job-" + std::to_string(i);
  r.groups = {worker_group{"default", 1, i % 5 == 4 ? 4u : 1u}};
  return r;
}

/// "1000,5000" -> {1000, 5000}.
inline std::vector<size_t> parse_sizes(const std::string& list) {
  std::vector<size_t> out;
  for (size_t pos = 0; pos < list.size();) {
    size_t comma = list.find(',', pos);
    out.push_back(std::strtoull(list.substr(pos, comma - pos).c_str(), nullptr, 10));
    pos = comma == std::string::npos ? list.size() : comma + 1;
  }
  return out;
}

} // namespace astraeus::bench
