// The measuring half of the copies check (copies_check.hpp): CUDA copies
// timed by events, one GPU at a time, with the PCIe link read while the
// host copies run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "runtime/gpu/nvml.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/validation/copies_check.hpp"
#include "runtime/validation/cuda_driver.hpp"

namespace astraeus::validation {

namespace {

using steady = std::chrono::steady_clock;

/// Thrown inside the measuring code only, caught in run_copies.
struct cuda_failure {
  std::string gpu;
  std::string what;
};

class copier {
public:
  copier(const cuda_driver& d, size_t bytes, int repeats) : d_(d), bytes_(bytes), repeats_(repeats) {}

  void check(const cuda_gpu& g, const char* call, cu_result rc) const {
    if (rc != cu_success)
      throw cuda_failure{g.uuid.empty() ? g.pci_address : g.uuid, d_.describe(call, rc)};
  }

  /// Best GB/s of `repeats_` copies enqueued by `enqueue`; `during` runs
  /// while they are in flight (the link is read then).
  template <class Enqueue, class During>
  double time_copies(const cuda_gpu& g, cu_stream s, Enqueue enqueue, During during) const {
    const auto& a = d_.api();
    std::vector<cu_event> ev(static_cast<size_t>(repeats_) + 1);
    for (auto& e : ev)
      check(g, "cuEventCreate", a.event_create(&e, 0));
    check(g, "cuEventRecord", a.event_record(ev[0], s));
    for (int i = 0; i < repeats_; ++i) {
      enqueue();
      check(g, "cuEventRecord", a.event_record(ev[static_cast<size_t>(i) + 1], s));
    }
    during();
    check(g, "cuStreamSynchronize", a.stream_synchronize(s));
    double best_ms = 0;
    for (int i = 0; i < repeats_; ++i) {
      float ms = 0;
      check(g, "cuEventElapsedTime", a.event_elapsed(&ms, ev[i], ev[i + 1]));
      if (ms > 0 && (best_ms == 0 || ms < best_ms))
        best_ms = ms;
    }
    for (auto& e : ev)
      a.event_destroy(e);
    return best_ms > 0 ? static_cast<double>(bytes_) / (best_ms / 1000.0) / 1e9 : 0;
  }

  void measure(const cuda_gpu& g, const cuda_gpu* peer, const std::string& root,
               copy_figures& f) const {
    const auto& a = d_.api();
    cu_context ctx = nullptr;
    check(g, "cuDevicePrimaryCtxRetain", a.primary_ctx_retain(&ctx, g.device));
    check(g, "cuCtxSetCurrent", a.ctx_set_current(ctx));
    cu_stream s = nullptr;
    check(g, "cuStreamCreate", a.stream_create(&s, cu_stream_non_blocking));
    cu_deviceptr dev = 0, dev2 = 0;
    void* host = nullptr;
    check(g, "cuMemAlloc_v2", a.mem_alloc(&dev, bytes_));
    check(g, "cuMemAlloc_v2", a.mem_alloc(&dev2, bytes_));
    check(g, "cuMemAllocHost_v2", a.mem_alloc_host(&host, bytes_));
    auto read_link = [&] { f.link = read_pci_link(root, f.pci_address); };
    auto nothing = [] {};
    // One copy each way first: the first copy pays for page mapping.
    check(g, "cuMemcpyHtoDAsync_v2", a.memcpy_htod_async(dev, host, bytes_, s));
    check(g, "cuMemcpyDtoHAsync_v2", a.memcpy_dtoh_async(host, dev, bytes_, s));
    check(g, "cuStreamSynchronize", a.stream_synchronize(s));
    f.h2d = time_copies(g, s, [&] {
      check(g, "cuMemcpyHtoDAsync_v2", a.memcpy_htod_async(dev, host, bytes_, s)); }, read_link);
    f.d2h = time_copies(g, s, [&] {
      check(g, "cuMemcpyDtoHAsync_v2", a.memcpy_dtoh_async(host, dev, bytes_, s)); }, nothing);
    f.d2d = time_copies(g, s, [&] {
      check(g, "cuMemcpyDtoDAsync_v2", a.memcpy_dtod_async(dev2, dev, bytes_, s)); }, nothing);
    if (peer) {
      cu_context pctx = nullptr;
      check(*peer, "cuDevicePrimaryCtxRetain", a.primary_ctx_retain(&pctx, peer->device));
      int can = 0;
      a.can_access_peer(&can, g.device, peer->device);
      if (can)
        a.ctx_enable_peer_access(pctx, 0);  // 704 (already enabled) is fine
      check(*peer, "cuCtxSetCurrent", a.ctx_set_current(pctx));
      cu_deviceptr remote = 0;
      check(*peer, "cuMemAlloc_v2", a.mem_alloc(&remote, bytes_));
      check(g, "cuCtxSetCurrent", a.ctx_set_current(ctx));
      f.peer = time_copies(g, s, [&] {
        check(g, "cuMemcpyPeerAsync", a.memcpy_peer_async(remote, pctx, dev, ctx, bytes_, s)); },
        nothing);
      f.peer_gpu = peer->uuid.empty() ? peer->pci_address : peer->uuid;
      check(*peer, "cuCtxSetCurrent", a.ctx_set_current(pctx));
      a.mem_free(remote);
      check(g, "cuCtxSetCurrent", a.ctx_set_current(ctx));
      a.primary_ctx_release(peer->device);
    }
    a.mem_free_host(host);
    a.mem_free(dev);
    a.mem_free(dev2);
    a.stream_destroy(s);
    a.primary_ctx_release(g.device);
  }

private:
  const cuda_driver& d_;
  size_t bytes_;
  int repeats_;
};

/// UUIDs of GPUs with an active NVLink to an NVSwitch, from NVML.
std::set<std::string> nvswitch_gpus(const check_options& o) {
  nvml_options n;
  n.library = o.nvml_lib;
  n.sysfs_root = o.host_root;
  nvml_prober prober{n};
  auto nv = prober.probe();
  std::set<std::string> out;
  for (const auto& g : nv.gpus)
    for (const auto& l : g.nvlinks())
      if (l.active() && l.remote_kind() == "switch")
        out.insert(g.id());
  return out;
}

}  // namespace

check_result run_copies(const check_options& o) {
  auto start = steady::now();
  const char* pass = "every GPU's copies reach their link's floor and their peers";
  check_result out;
  out.check = "copies";
  const auto& t = o.policy.values();
  auto cuda = load_cuda_gpus(o.cuda_lib, "nothing to copy", out, o.host_root);
  if (!cuda)
    return finish_result(std::move(out), start, pass);
  const auto* gpus = &cuda->gpus;
  const auto& driver = cuda->driver;
  auto switched = nvswitch_gpus(o);
  auto bytes = static_cast<size_t>(t.copies_size_mib * 1024 * 1024);
  copier c{*driver, bytes, std::max(1, static_cast<int>(t.copies_repeats))};
  std::vector<copy_figures> figures;
  for (size_t i = 0; i < gpus->size(); ++i) {
    const auto& g = (*gpus)[i];
    const cuda_gpu* peer = gpus->size() > 1 ? &(*gpus)[(i + 1) % gpus->size()] : nullptr;
    copy_figures f;
    f.gpu = g.uuid.empty() ? g.pci_address : g.uuid;
    f.pci_address = g.pci_address;
    f.nvswitch = peer && switched.count(g.uuid) && switched.count(peer->uuid);
    try {
      c.measure(g, peer, o.host_root, f);
    } catch (const cuda_failure& e) {
      out.add_finding(verdict::fail, e.gpu, "CUDA error on " + e.gpu + ": " + e.what,
                      "look for an Xid for " + e.gpu + " in `dmesg`; reset the GPU when idle "
                      "(`nvidia-smi -r`) or reboot; an error that recurs means a faulty GPU");
    }
    // A figure that was not measured (no peer on a one-GPU machine, a copy
    // that failed) prints as "-", not as a zero that reads like a dead link.
    auto gbs = [](const std::optional<double>& v) {
      char text[32] = "-";
      if (v) std::snprintf(text, sizeof text, "%.1f", *v);
      return std::string(text);
    };
    std::fprintf(stderr, "copies: %s h2d %s d2h %s d2d %s peer %s GB/s\n", f.gpu.c_str(),
                 gbs(f.h2d).c_str(), gbs(f.d2h).c_str(), gbs(f.d2d).c_str(), gbs(f.peer).c_str());
    figures.push_back(std::move(f));
  }
  judge_copies(figures, t, out);
  return finish_result(std::move(out), start, pass);
}

}  // namespace astraeus::validation
