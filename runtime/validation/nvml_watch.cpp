#include "runtime/validation/nvml_watch.hpp"

#include <chrono>
#include <thread>

#include <dlfcn.h>

#include "messages/error.hpp"
#include "runtime/gpu/nvml_abi.hpp"

namespace astraeus::validation {

using namespace nvml_abi;

struct nvml_watch::impl {
  void* lib = nullptr;
  nvml_api api;
  std::vector<nvml_device> devices;
  std::vector<std::string> uuids;
  nvml_event_set events = nullptr;
};

nvml_watch::nvml_watch(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

nvml_watch::~nvml_watch() {
  if (impl_->events && impl_->api.event_set_free)
    impl_->api.event_set_free(impl_->events);
  impl_->api.shutdown();
  // The library stays loaded: the prober may hold it too.
}

caf::expected<std::unique_ptr<nvml_watch>> nvml_watch::open(const std::string& library) {
  auto p = std::make_unique<impl>();
  ::dlerror();
  p->lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!p->lib) {
    const char* err = ::dlerror();
    return caf::make_error(ec::host_read_failure,
                           "dlopen " + library + ": " + (err ? err : "unknown error"));
  }
  if (const char* missing = resolve_all(p->lib, p->api))
    return caf::make_error(ec::host_read_failure, library + " has no " + missing);
  if (auto rc = p->api.init(); rc != NVML_SUCCESS)
    return caf::make_error(ec::host_read_failure, "nvmlInit_v2 returned " + return_text(rc));
  unsigned n = 0;
  if (auto rc = p->api.count(&n); rc != NVML_SUCCESS) {
    p->api.shutdown();
    return caf::make_error(ec::host_read_failure,
                           "nvmlDeviceGetCount_v2 returned " + return_text(rc));
  }
  bool events = p->api.event_set_create && p->api.register_events && p->api.event_set_wait
                && p->api.event_set_create(&p->events) == NVML_SUCCESS;
  for (unsigned i = 0; i < n; ++i) {
    nvml_device d = nullptr;
    if (p->api.handle_by_index(i, &d) != NVML_SUCCESS)
      continue;
    char uuid[kUuidBuffer] = {};
    if (p->api.uuid)
      p->api.uuid(d, uuid, sizeof uuid);
    p->devices.push_back(d);
    p->uuids.push_back(buffer_text(uuid, sizeof uuid));
    if (events)
      p->api.register_events(d, kEventTypeXidCriticalError, p->events);
  }
  if (!events)
    p->events = nullptr;
  return std::unique_ptr<nvml_watch>{new nvml_watch(std::move(p))};
}

std::vector<gpu_sample> nvml_watch::sample() {
  std::vector<gpu_sample> out;
  const auto& a = impl_->api;
  for (size_t i = 0; i < impl_->devices.size(); ++i) {
    auto d = impl_->devices[i];
    gpu_sample s;
    s.uuid = impl_->uuids[i];
    unsigned v = 0;
    if (a.clock && a.clock(d, NVML_CLOCK_SM, &v) == NVML_SUCCESS)
      s.sm_clock_mhz = v;
    if (a.temperature && a.temperature(d, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS)
      s.temperature_c = v;
    if (a.power_usage && a.power_usage(d, &v) == NVML_SUCCESS)
      s.power_w = v / 1000.0;
    unsigned long long reasons = 0;
    if (a.clocks_event_reasons && a.clocks_event_reasons(d, &reasons) == NVML_SUCCESS)
      s.reasons = reasons;
    else if (a.clocks_throttle_reasons && a.clocks_throttle_reasons(d, &reasons) == NVML_SUCCESS)
      s.reasons = reasons;
    out.push_back(std::move(s));
  }
  return out;
}

bool nvml_watch::watching_xids() const {
  return impl_->events != nullptr;
}

std::vector<xid_event> nvml_watch::wait_xids(unsigned timeout_ms) {
  std::vector<xid_event> out;
  if (!impl_->events) {
    std::this_thread::sleep_for(std::chrono::milliseconds{timeout_ms});
    return out;
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds{timeout_ms};
  unsigned wait = timeout_ms;
  while (true) {
    nvml_event_data e{};
    auto rc = impl_->api.event_set_wait(impl_->events, &e, wait);
    if (rc != NVML_SUCCESS)
      break;
    if (e.eventType & kEventTypeXidCriticalError) {
      xid_event x;
      x.xid = e.eventData;
      for (size_t i = 0; i < impl_->devices.size(); ++i)
        if (impl_->devices[i] == e.device)
          x.uuid = impl_->uuids[i];
      out.push_back(std::move(x));
    }
    // More events may be queued: take them without waiting past `until`.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      until - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      break;
    wait = 0;
  }
  return out;
}

}  // namespace astraeus::validation
