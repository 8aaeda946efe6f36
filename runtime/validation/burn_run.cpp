// The running half of the burn-in (burn_check.hpp): one thread per GPU
// launching the PTX kernel until the deadline, one thread sampling NVML.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "messages/error.hpp"
#include "runtime/validation/burn_check.hpp"
#include "runtime/validation/burn_kernel.hpp"
#include "runtime/validation/cuda_driver.hpp"
#include "runtime/validation/fix_commands.hpp"
#include "runtime/validation/nvml_watch.hpp"

namespace astraeus::validation {

namespace {

using steady = std::chrono::steady_clock;

struct cuda_failure {
  std::string what;
};

/// Launches the kernel on one GPU until `until`; fills tflops, launches,
/// wrong_results and cuda_error.
void burn_gpu(const cuda_driver& d, const cuda_gpu& g, steady::time_point until,
              const std::atomic<bool>& stop, burn_figures& f) {
  const auto& a = d.api();
  auto check = [&](const char* call, cu_result rc) {
    if (rc != cu_success)
      throw cuda_failure{d.describe(call, rc)};
  };
  try {
    cu_context ctx = nullptr;
    check("cuDevicePrimaryCtxRetain", a.primary_ctx_retain(&ctx, g.device));
    check("cuCtxSetCurrent", a.ctx_set_current(ctx));
    cu_module mod = nullptr;
    check("cuModuleLoadData", a.module_load_data(&mod, burn_kernel_ptx));
    cu_function fn = nullptr;
    check("cuModuleGetFunction", a.module_function(&fn, mod, burn_kernel_name));
    unsigned blocks = static_cast<unsigned>(std::max(1, g.multiprocessors)) * 8, threads = 256;
    size_t n = static_cast<size_t>(blocks) * threads;
    cu_deviceptr out = 0;
    check("cuMemAlloc_v2", a.mem_alloc(&out, n * sizeof(float)));
    cu_stream s = nullptr;
    check("cuStreamCreate", a.stream_create(&s, cu_stream_non_blocking));
    cu_event e0 = nullptr, e1 = nullptr;
    check("cuEventCreate", a.event_create(&e0, 0));
    check("cuEventCreate", a.event_create(&e1, 0));
    std::vector<float> first(n), now(n);
    unsigned iters = 4096;
    double flops = 0, ms_total = 0;
    bool calibrated = false;
    while (!stop && steady::now() < until) {
      void* params[] = {&out, &iters};
      check("cuEventRecord", a.event_record(e0, s));
      check("cuLaunchKernel", a.launch_kernel(fn, blocks, 1, 1, threads, 1, 1, 0, s, params, nullptr));
      check("cuEventRecord", a.event_record(e1, s));
      check("cuEventSynchronize", a.event_synchronize(e1));
      float ms = 0;
      check("cuEventElapsedTime", a.event_elapsed(&ms, e0, e1));
      ++f.launches;
      // Grow the launch until it takes about 50 ms, so launch overhead
      // does not count; the results of each size are compared from then on.
      if (!calibrated) {
        if (ms < 25 && iters < (1u << 26)) {
          iters *= 2;
          continue;
        }
        calibrated = true;
        check("cuMemcpyDtoHAsync_v2", a.memcpy_dtoh_async(first.data(), out, n * sizeof(float), s));
        check("cuStreamSynchronize", a.stream_synchronize(s));
      } else if (f.launches % 16 == 0) {
        check("cuMemcpyDtoHAsync_v2", a.memcpy_dtoh_async(now.data(), out, n * sizeof(float), s));
        check("cuStreamSynchronize", a.stream_synchronize(s));
        if (std::memcmp(first.data(), now.data(), n * sizeof(float)) != 0)
          f.wrong_results = true;
      }
      flops += static_cast<double>(n) * iters * burn_flops_per_iteration;
      ms_total += ms;
    }
    if (ms_total > 0)
      f.tflops = flops / (ms_total / 1000) / 1e12;
    a.event_destroy(e0);
    a.event_destroy(e1);
    a.stream_destroy(s);
    a.mem_free(out);
    a.module_unload(mod);
    a.primary_ctx_release(g.device);
  } catch (const cuda_failure& e) {
    f.cuda_error = e.what;
  }
}

/// Sums of NVML samples per GPU while the burn runs.
struct watch_sums {
  double clock = 0, power = 0;
  int clock_n = 0, power_n = 0;
  std::optional<double> max_temp;
  uint64_t reasons = 0;
  std::vector<uint64_t> xids;
};

void watch_loop(nvml_watch& w, unsigned interval_ms, const std::atomic<bool>& stop,
                std::mutex& mu, std::map<std::string, watch_sums>& sums) {
  while (!stop) {
    auto samples = w.sample();
    auto xids = w.wait_xids(interval_ms);
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& s : samples) {
      auto& x = sums[s.uuid];
      if (s.sm_clock_mhz) {
        x.clock += *s.sm_clock_mhz;
        ++x.clock_n;
      }
      if (s.power_w) {
        x.power += *s.power_w;
        ++x.power_n;
      }
      if (s.temperature_c && (!x.max_temp || *s.temperature_c > *x.max_temp))
        x.max_temp = s.temperature_c;
      if (s.reasons)
        x.reasons |= *s.reasons;
    }
    for (const auto& e : xids)
      sums[e.uuid].xids.push_back(e.xid);
  }
}

}  // namespace

check_result run_burn(const check_options& o) {
  auto start = steady::now();
  check_result out;
  out.check = "burn";
  const auto& t = o.policy.values();
  auto duration = o.duration.value_or(
    std::chrono::milliseconds{static_cast<long long>(t.burn_duration_s * 1000)});
  auto pass = "every GPU held its pace for " + std::to_string(duration.count() / 1000)
              + " s with no Xid, error or unexpected throttling";
  auto cuda = load_cuda_gpus(o.cuda_lib, "nothing to burn", out, o.host_root);
  if (!cuda)
    return finish_result(std::move(out), start, pass);
  const auto* gpus = &cuda->gpus;
  const auto& driver = cuda->driver;
  std::string watch_problem;
  auto watch = nvml_watch::open(o.nvml_lib);
  if (!watch)
    watch_problem = render_error(watch.error());
  else if (!(*watch)->watching_xids())
    watch_problem = "this driver offers no Xid events";
  std::fprintf(stderr, "burn: %zu GPU(s) for %lld s\n", gpus->size(),
               static_cast<long long>(duration.count() / 1000));
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<std::string, watch_sums> sums;
  std::thread watcher;
  if (watch)
    watcher = std::thread([&] {
      watch_loop(**watch, static_cast<unsigned>(t.burn_sample_interval_ms), stop, mu, sums);
    });
  std::vector<burn_figures> figs(gpus->size());
  std::vector<std::thread> burners;
  auto until = start + duration;
  for (size_t i = 0; i < gpus->size(); ++i) {
    const auto& g = (*gpus)[i];
    figs[i].gpu = g.uuid.empty() ? g.pci_address : g.uuid;
    burners.emplace_back([&, i] { burn_gpu(*driver, (*gpus)[i], until, stop, figs[i]); });
  }
  for (auto& b : burners)
    b.join();
  stop = true;
  if (watcher.joinable())
    watcher.join();
  for (auto& f : figs) {
    std::lock_guard<std::mutex> lock(mu);
    auto i = sums.find(f.gpu);
    if (i == sums.end())
      continue;
    const auto& x = i->second;
    if (x.clock_n)
      f.mean_sm_clock_mhz = x.clock / x.clock_n;
    if (x.power_n)
      f.mean_power_w = x.power / x.power_n;
    f.max_temperature_c = x.max_temp;
    f.reasons_seen = x.reasons;
    f.xids = x.xids;
    std::fprintf(stderr, "burn: %s %.1f TFLOP/s, %llu launches\n", f.gpu.c_str(),
                 f.tflops.value_or(0), static_cast<unsigned long long>(f.launches));
  }
  // An Xid for a device NVML did not name: report it on no GPU.
  if (auto i = sums.find(""); i != sums.end())
    for (auto xid : i->second.xids)
      out.add_finding(verdict::fail, "", "Xid " + std::to_string(xid) + " during the burn-in",
                      "see `" + fix_command::xids() + "`; reset the GPU or reboot");
  judge_burn(figs, watch_problem, t, out);
  return finish_result(std::move(out), start, pass);
}

}  // namespace astraeus::validation
