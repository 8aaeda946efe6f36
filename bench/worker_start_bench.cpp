// Time from an assignment reaching the agent (the ledger applies the orders)
// to the worker's process running (its command has written a marker file),
// p50 and p99 over 100 starts, for the `process` and `runc` runtimes; and the
// memory each running worker costs on the agent's side (its shim's
// proportional set size, and the agent's own growth). Plain main; prints
// figures for bench/RESULTS.md. Issue 6, "Benchmark".

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <filesystem>

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "runtime/workers/worker_ledger.hpp"
#include "runtime/workers/worker_process.hpp"
#include "runtime/process/boot_clock.hpp"
#include "runtime/process/wall_clock.hpp"
#include "runtime/workers/worker_supervisor.hpp"
#include "store/store.hpp"

using namespace astraeus;
namespace fs = std::filesystem;
using clk = std::chrono::steady_clock;

namespace {

int64_t now_ms() {
  return unix_ms_now();
}

/// A kB figure from /proc/<pid>/<file> ("Pss:", "VmRSS:").
long proc_kb(pid_t pid, const char* file, const char* key) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/" + file};
  std::string k;
  long v;
  while (in >> k) {
    if (k == key && in >> v)
      return v;
  }
  return -1;
}


v1::WorkerOrders orders_of(uint64_t gen, int n, const std::string& runtime,
                           const std::string& marker_dir) {
  v1::WorkerOrders o;
  o.set_machine("bench");
  o.set_generation(gen);
  for (int i = 0; i < n; ++i) {
    auto* w = o.add_workers();
    w->set_worker("w" + std::to_string(gen) + "-" + std::to_string(i));
    w->set_run("w" + std::to_string(gen));
    w->set_world_size(1);
    w->set_array_index(-1);
    auto* spec = w->mutable_spec();
    spec->set_name(w->run());
    spec->set_runtime(runtime);
    spec->set_image("busybox");
    spec->add_command("sh");
    spec->add_command("-c");
    spec->add_command("echo > " + marker_dir + "/" + w->worker() + "; exec sleep 1000");
  }
  return o;
}

struct figures {
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
};

/// The worker ledger of an agent whose data folder is `dir`.
worker_ledger open_ledger(const fs::path& dir) {
  auto opened = Store::open((dir / "store").string());
  return *worker_ledger::load(std::shared_ptr<Store>{std::move(*opened)});
}

/// A supervisor's settings for machine "bench" with data folder `dir`; workers
/// are killed at once when stopped (no stop grace).
supervisor_options bench_options(const fs::path& dir, const std::string& runtime) {
  supervisor_options opts;
  opts.data_dir = dir.string();
  opts.machine = "bench";
  opts.runtime = runtime;
  opts.images_dir = (dir / "images").string();
  opts.stop_grace = std::chrono::milliseconds{0};
  return opts;
}

figures measure(const std::string& runtime, int starts, const fs::path& dir) {
  auto ledger = open_ledger(dir);
  worker_supervisor sup{bench_options(dir, runtime)};
  std::vector<double> ms;
  for (int i = 1; i <= starts; ++i) {
    // In a container the marker lands in the bundle's root filesystem.
    auto name = "w" + std::to_string(i) + "-0";
    auto marker_dir = runtime == "runc" ? std::string{"/"} : dir.string();
    auto marker = runtime == "runc" ? dir / "workers" / name / "bundle" / "rootfs" / name
                                    : dir / name;
    auto t0 = clk::now();
    ledger.apply("bench", orders_of(i, 1, runtime, marker_dir == "/" ? "" : marker_dir));
    sup.reconcile(ledger, now_ms(), real_boot_clock()->now_boot_ms());
    while (!fs::exists(marker)) {
      if (clk::now() - t0 > std::chrono::seconds{10}) {
        std::fprintf(stderr, "%s: worker %d did not start\n", runtime.c_str(), i);
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds{200});
    }
    ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
    // Stop it: the set empties, the grace is 0, the next pass kills it.
    ledger.apply("bench", orders_of(1000000 + i, 0, runtime, ""));
    for (int k = 0; k < 200 && !ledger.processes().empty(); ++k) {
      sup.reconcile(ledger, now_ms(), real_boot_clock()->now_boot_ms());
      std::this_thread::sleep_for(std::chrono::milliseconds{2});
    }
  }
  std::sort(ms.begin(), ms.end());
  figures f;
  f.p50_ms = ms[ms.size() / 2];
  f.p99_ms = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  f.max_ms = ms.back();
  return f;
}

} // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  int starts = argc > 1 ? std::atoi(argv[1]) : 100;
  auto base = fs::temp_directory_path() / ("astraeus-worker-bench-" + std::to_string(::getpid()));
  fs::create_directories(base);
  // A busybox-static image for runc.
  bool have_runc = !find_executable("runc", "/usr/sbin:/usr/bin:/sbin:/bin").empty()
                   && fs::exists("/bin/busybox");
  for (const char* rt : {"process", "runc"}) {
    if (std::string{rt} == "runc" && !have_runc) {
      std::printf("runc: skipped (runc or busybox-static not installed)\n");
      continue;
    }
    auto dir = base / rt;
    auto image = dir / "images" / "busybox" / "bin";
    fs::create_directories(image);
    fs::copy_file("/bin/busybox", image / "busybox");
    for (const char* t : {"sh", "sleep", "echo"})
      fs::create_symlink("busybox", image / t);
    auto f = measure(rt, starts, dir);
    std::printf("%-8s assignment -> process running, %d starts: p50 %.1f ms, p99 %.1f ms, "
                "max %.1f ms\n",
                rt, starts, f.p50_ms, f.p99_ms, f.max_ms);
  }
  // Memory per running worker (process runtime): 50 workers.
  {
    auto dir = base / "memory";
    auto ledger = open_ledger(dir);
    worker_supervisor sup{bench_options(dir, "process")};
    long rss0 = proc_kb(::getpid(), "status", "VmRSS:");
    const int n = 50;
    ledger.apply("bench", orders_of(1, n, "process", dir.string()));
    sup.reconcile(ledger, now_ms(), real_boot_clock()->now_boot_ms());
    std::this_thread::sleep_for(std::chrono::milliseconds{300});
    long rss1 = proc_kb(::getpid(), "status", "VmRSS:");
    long pss = 0;
    for (const auto& [name, p] : ledger.processes())
      pss += std::max(0L, proc_kb(p.shim_pid(), "smaps_rollup", "Pss:"));
    std::printf("memory per running worker (%d workers): shim PSS %.0f KiB, agent growth "
                "%.1f KiB\n",
                n, static_cast<double>(pss) / n, static_cast<double>(rss1 - rss0) / n);
    ledger.apply("bench", orders_of(2, 0, "process", ""));
    for (int k = 0; k < 100 && !ledger.processes().empty(); ++k) {
      sup.reconcile(ledger, now_ms(), real_boot_clock()->now_boot_ms());
      std::this_thread::sleep_for(std::chrono::milliseconds{5});
    }
  }
  std::error_code err;
  fs::remove_all(base, err);
  return 0;
}
