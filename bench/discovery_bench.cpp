// A full discovery pass on the 8-GPU stand-in: wall and CPU time per pass
// and the report's size in bytes (plain main; figures in bench/RESULTS.md).
//
//   discovery_bench [--passes N] [--root DIR] [--nvml-fixture FILE]
//                   [--nvml-library PATH]   (a real libnvidia-ml.so.1 on a GPU host)
//
// Per pass it times, after a few warm-up passes:
//   - gpu_discovery::discover on the NVML stand-in serving
//     test/fixtures/nvml/h100x8.json (8 x H100, NVLink, fabric), with root
//     test/fixtures/hosts/dgx-h100;
//   - read_host_facts on the dgx-h100 tree (statfs answered by a fake, as
//     the mount points do not exist under the fixture);
//   - the agent's whole tick as actors/agent/agent.cpp does it every report
//     interval: read_host_facts for rdma_up, discover, then make_report's
//     read_host_facts, the GPU section copied in, SerializeAsString.
// CPU time is the process's (CLOCK_PROCESS_CPUTIME_ID): the NVML worker
// threads and the stand-in library count too.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "messages/astraeus.pb.h"
#include "messages/gpu_read.hpp"
#include "runtime/gpu/gpu_discovery.hpp"
#include "runtime/host/host_facts.hpp"
#include "runtime/host/pci_bus.hpp"

#ifndef ASTRAEUS_NVML_STAND_IN
#error "ASTRAEUS_NVML_STAND_IN (path of the stand-in libnvidia-ml.so) must be defined"
#endif

namespace {

using namespace astraeus;

double seconds_of(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct sample {
  double wall_ms;
  double cpu_ms;
};

// Runs `pass` `warmup` times untimed, then `passes` times timed.
template <typename Pass>
std::vector<sample> measure(int passes, int warmup, Pass pass) {
  for (int i = 0; i < warmup; ++i)
    pass();
  std::vector<sample> out;
  out.reserve(static_cast<size_t>(passes));
  for (int i = 0; i < passes; ++i) {
    double w0 = seconds_of(CLOCK_MONOTONIC), c0 = seconds_of(CLOCK_PROCESS_CPUTIME_ID);
    pass();
    double c1 = seconds_of(CLOCK_PROCESS_CPUTIME_ID), w1 = seconds_of(CLOCK_MONOTONIC);
    out.push_back({(w1 - w0) * 1e3, (c1 - c0) * 1e3});
  }
  return out;
}

// Nearest-rank percentile of sorted values.
double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty())
    return 0;
  auto rank = static_cast<size_t>(p / 100.0 * static_cast<double>(sorted.size()) + 0.999999);
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

void report(const char* what, const std::vector<sample>& samples) {
  auto line = [&](const char* kind, auto get) {
    std::vector<double> v;
    for (const auto& s : samples)
      v.push_back(get(s));
    std::sort(v.begin(), v.end());
    double mean = 0;
    for (double x : v)
      mean += x;
    mean /= static_cast<double>(v.size());
    std::printf("  %-4s ms  min %8.3f  median %8.3f  mean %8.3f  p99 %8.3f  max %8.3f\n", kind,
                v.front(), percentile(v, 50), mean, percentile(v, 99), v.back());
  };
  std::printf("%s (%zu passes)\n", what, samples.size());
  line("wall", [](const sample& s) { return s.wall_ms; });
  line("cpu", [](const sample& s) { return s.cpu_ms; });
}

bool rdma_up(const v1::HostFacts& facts) {
  for (const auto& p : facts.rdma_ports())
    if (p.state() == "ACTIVE")
      return true;
  return false;
}

} // namespace

int main(int argc, char** argv) {
  int passes = 200;
  std::string source = ASTRAEUS_SOURCE_DIR;
  std::string root = source + "/test/fixtures/hosts/dgx-h100";
  std::string nvml_fixture = source + "/test/fixtures/nvml/h100x8.json";
  std::string pci_root = source + "/test/fixtures/pci";
  std::string nvml_library = ASTRAEUS_NVML_STAND_IN;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool has_value = i + 1 < argc;
    if (arg == "--passes" && has_value)
      passes = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--root" && has_value)
      root = argv[++i];
    else if (arg == "--nvml-fixture" && has_value)
      nvml_fixture = argv[++i];
    else if (arg == "--nvml-library" && has_value)
      nvml_library = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--passes N] [--root DIR] [--nvml-fixture FILE] "
                           "[--nvml-library PATH]\n", argv[0]);
      return 2;
    }
  }
  // The stand-in reads its fixture at nvmlInit_v2 (the prober's first pass).
  ::setenv("ASTRAEUS_NVML_FIXTURE", nvml_fixture.c_str(), 1);
  spdlog::set_level(spdlog::level::warn);

  HostReaderOptions host;
  host.root = root;
  host.architecture = "x86_64";
  host.statfs = [](const std::string&) -> std::optional<FilesystemUsage> {
    return FilesystemUsage{1'888'000'000'000, 1'500'000'000'000};
  };

  gpu_discovery_options opts;
  opts.root = root;
  opts.nvml.library = nvml_library;
  opts.nvidia_smi = "/nonexistent/nvidia-smi";  // never the fallback here
  gpu_discovery discovery{opts};

  // One pass to check the set-up and print what a report holds.
  auto facts = read_host_facts(host);
  auto section = discovery.discover(rdma_up(facts));
  v1::MachineReport full;
  full.set_machine(facts.hostname());
  full.set_sequence(1);
  full.set_sent_unix_ms(1'780'000'000'000);
  full.set_agent_version(ASTRAEUS_VERSION);
  *full.mutable_facts() = facts;
  *full.mutable_facts()->mutable_gpus() = section;
  std::printf("root %s\nNVML %s\nfixture %s\n", root.c_str(), nvml_library.c_str(),
              nvml_fixture.c_str());
  std::printf("GPU section: read_as %s, %d GPU(s), %d bus device(s), %d condition(s), "
              "%d unknown field note(s) on GPU 0\n",
              section.read_as().c_str(), section.gpus_size(), section.bus_size(),
              section.conditions_size(),
              section.gpus_size() > 0 ? section.gpus(0).unknown_fields_size() : 0);
  if (read_as(section) != gpu_read_as::driver || section.gpus_size() == 0) {
    std::fprintf(stderr, "discovery did not read the stand-in (read_as %s: %s)\n",
                 section.read_as().c_str(), section.detail().c_str());
    return 1;
  }
  std::printf("host facts: %d disk(s), %d filesystem(s), %d interface(s), %d RDMA port(s), "
              "%d warning(s)\n",
              facts.disks_size(), facts.filesystems_size(), facts.interfaces_size(),
              facts.rdma_ports_size(), facts.warnings_size());
  v1::HostFacts facts_only = facts;
  facts_only.clear_gpus();
  std::printf("report bytes: %zu in all (MachineReport.SerializeAsString); GPU section %zu, "
              "host facts without GPUs %zu\n\n",
              full.SerializeAsString().size(), section.SerializeAsString().size(),
              facts_only.SerializeAsString().size());

  const int warmup = 5;
  report("gpu_discovery::discover",
         measure(passes, warmup, [&] { section = discovery.discover(true); }));
  report("read_host_facts (dgx-h100)", measure(passes, warmup, [&] { facts = read_host_facts(host); }));
  report("scan_pci_gpus (test/fixtures/pci, 8 devices)",
         measure(passes, warmup, [&] { (void)scan_pci_gpus(pci_root); }));
  size_t bytes = 0;
  report("agent tick: read_host_facts (rdma_up) + discover + read_host_facts + report + "
         "SerializeAsString",
         measure(passes, warmup, [&] {
           bool up = rdma_up(read_host_facts(host));
           auto gpus = discovery.discover(up);
           v1::MachineReport r;
           r.set_machine("dgx-h100-01");
           r.set_sequence(2);
           r.set_sent_unix_ms(1'780'000'000'000);
           r.set_agent_version(ASTRAEUS_VERSION);
           *r.mutable_facts() = read_host_facts(host);
           *r.mutable_facts()->mutable_gpus() = gpus;
           bytes = r.SerializeAsString().size();
         }));
  std::printf("\nreport bytes (last tick): %zu\n", bytes);
  return 0;
}
