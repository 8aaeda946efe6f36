#include "runtime/validation/cuda_driver.hpp"

#include <algorithm>

#include "runtime/host/pci_bus.hpp"

#include <cstdio>

#include <dlfcn.h>

#include "messages/error.hpp"
#include "runtime/gpu/nvml.hpp"
#include "runtime/validation/check_result.hpp"

namespace astraeus::validation {

namespace {

template <class F>
bool bind(void* lib, const char* name, F& fn, const char*& missing) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  if (!fn && !missing)
    missing = name;
  return fn != nullptr;
}

const char* resolve(void* lib, cuda_api& a) {
  const char* m = nullptr;
  bind(lib, "cuInit", a.init, m);
  bind(lib, "cuDeviceGetCount", a.device_count, m);
  bind(lib, "cuDeviceGet", a.device_get, m);
  bind(lib, "cuDeviceGetName", a.device_name, m);
  bind(lib, "cuDeviceGetUuid", a.device_uuid, m);
  bind(lib, "cuDeviceGetPCIBusId", a.device_pci_bus_id, m);
  bind(lib, "cuDeviceGetAttribute", a.device_attribute, m);
  bind(lib, "cuDeviceCanAccessPeer", a.can_access_peer, m);
  bind(lib, "cuDevicePrimaryCtxRetain", a.primary_ctx_retain, m);
  bind(lib, "cuDevicePrimaryCtxRelease_v2", a.primary_ctx_release, m);
  bind(lib, "cuCtxSetCurrent", a.ctx_set_current, m);
  bind(lib, "cuCtxEnablePeerAccess", a.ctx_enable_peer_access, m);
  bind(lib, "cuMemAlloc_v2", a.mem_alloc, m);
  bind(lib, "cuMemFree_v2", a.mem_free, m);
  bind(lib, "cuMemAllocHost_v2", a.mem_alloc_host, m);
  bind(lib, "cuMemFreeHost", a.mem_free_host, m);
  bind(lib, "cuMemcpyHtoDAsync_v2", a.memcpy_htod_async, m);
  bind(lib, "cuMemcpyDtoHAsync_v2", a.memcpy_dtoh_async, m);
  bind(lib, "cuMemcpyDtoDAsync_v2", a.memcpy_dtod_async, m);
  bind(lib, "cuMemcpyPeerAsync", a.memcpy_peer_async, m);
  bind(lib, "cuStreamCreate", a.stream_create, m);
  bind(lib, "cuStreamDestroy_v2", a.stream_destroy, m);
  bind(lib, "cuStreamSynchronize", a.stream_synchronize, m);
  bind(lib, "cuEventCreate", a.event_create, m);
  bind(lib, "cuEventDestroy_v2", a.event_destroy, m);
  bind(lib, "cuEventRecord", a.event_record, m);
  bind(lib, "cuEventSynchronize", a.event_synchronize, m);
  bind(lib, "cuEventElapsedTime", a.event_elapsed, m);
  bind(lib, "cuModuleLoadData", a.module_load_data, m);
  bind(lib, "cuModuleUnload", a.module_unload, m);
  bind(lib, "cuModuleGetFunction", a.module_function, m);
  bind(lib, "cuLaunchKernel", a.launch_kernel, m);
  bind(lib, "cuGetErrorName", a.error_name, m);
  return m;
}

}  // namespace

std::string cuda_uuid_text(const unsigned char b[16]) {
  char buf[48];
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

caf::expected<std::unique_ptr<cuda_driver>> cuda_driver::load(const std::string& library) {
  ::dlerror();
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = ::dlerror();
    return caf::make_error(ec::host_read_failure,
                           "dlopen " + library + ": " + (err ? err : "unknown error"));
  }
  std::unique_ptr<cuda_driver> d{new cuda_driver(handle)};
  if (const char* missing = resolve(handle, d->api_))
    return caf::make_error(ec::host_read_failure,
                           library + " has no " + missing + ": not a CUDA driver library");
  if (auto rc = d->api_.init(0); rc != cu_success)
    return caf::make_error(ec::host_read_failure, d->describe("cuInit", rc));
  return d;
}

cuda_driver::~cuda_driver() {
  // The driver is never unloaded: its own threads may still run, and
  // unloading libcuda before exit is known to crash on some drivers.
}

std::string cuda_driver::describe(const char* call, cu_result rc) const {
  const char* name = nullptr;
  if (api_.error_name)
    api_.error_name(rc, &name);
  return std::string{call} + " returned " + (name ? name : "CUDA error") + " ("
         + std::to_string(rc) + ")";
}

caf::expected<std::vector<cuda_gpu>> cuda_driver::gpus() const {
  int n = 0;
  if (auto rc = api_.device_count(&n); rc != cu_success)
    return caf::make_error(ec::host_read_failure, describe("cuDeviceGetCount", rc));
  std::vector<cuda_gpu> out;
  for (int i = 0; i < n; ++i) {
    cuda_gpu g;
    g.ordinal = i;
    if (auto rc = api_.device_get(&g.device, i); rc != cu_success)
      return caf::make_error(ec::host_read_failure, describe("cuDeviceGet", rc));
    unsigned char uuid[16] = {};
    if (api_.device_uuid(uuid, g.device) == cu_success)
      g.uuid = cuda_uuid_text(uuid);
    char buf[128] = {};
    if (api_.device_pci_bus_id(buf, sizeof buf, g.device) == cu_success)
      g.pci_address = nvml::normalise_pci_address(buf);
    char name[256] = {};
    if (api_.device_name(name, sizeof name, g.device) == cu_success)
      g.name = name;
    api_.device_attribute(&g.multiprocessors, cu_attr_multiprocessor_count, g.device);
    out.push_back(std::move(g));
  }
  return out;
}

std::optional<cuda_gpus> load_cuda_gpus(const std::string& library, const std::string& why,
                                        check_result& out, const std::string& host_root) {
  auto driver = cuda_driver::load(library);
  if (!driver) {
    auto bus = scan_pci_gpus(host_root);
    bool nvidia = std::any_of(bus.gpus.begin(), bus.gpus.end(),
                              [](const auto& g) { return g.vendor() == "nvidia"; });
    if (!nvidia) {
      out.result = verdict::skipped;
      out.summary = "no NVIDIA GPU on the PCI bus: " + why;
      return std::nullopt;
    }
    out.add_finding(verdict::fail, "", "the CUDA driver cannot be used: " + render_error(driver.error()),
                    "install the NVIDIA driver on this machine, with its CUDA library "
                    "(libcuda.so.1; Debian: libcuda1), then run the check again");
    return std::nullopt;
  }
  auto gpus = (*driver)->gpus();
  if (!gpus) {
    out.add_finding(verdict::fail, "", render_error(gpus.error()),
                    "look for an Xid in `dmesg`; reboot the machine if the driver stays broken");
    return std::nullopt;
  }
  if (gpus->empty()) {
    out.result = verdict::skipped;
    out.summary = "CUDA lists no GPU: " + why;
    return std::nullopt;
  }
  return cuda_gpus{std::move(*driver), std::move(*gpus)};
}

}  // namespace astraeus::validation
