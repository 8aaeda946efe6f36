// NVIDIA GPU discovery through NVML loaded with dlopen (see nvml.hpp).
//
// The prober's parts, by concern:
//  - runtime/gpu/nvml_abi.*: NVML's public ABI (C types, constants, the
//    entry points resolved with dlsym), written out by hand;
//  - runtime/gpu/nvml_call_thread.*: one thread per GPU (and one for
//    driver-wide calls) running NVML calls under a deadline;
//  - runtime/gpu/nvml_gpu_reader.*: reading one GPU into v1::Gpu;
//  - here: the public helpers and nvml_prober (loading, the pass).

#include "runtime/gpu/nvml.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "messages/gpu_read.hpp"
#include "runtime/gpu/nvml_abi.hpp"
#include "runtime/gpu/nvml_call_thread.hpp"
#include "runtime/gpu/nvml_gpu_reader.hpp"

namespace astraeus {

using namespace nvml_abi;

namespace {

/// Upper bound on the device count NVML may report (garbage guard).
constexpr unsigned int kMaxGpus = 1024;

}  // namespace

// ===========================================================================
// Public helpers
// ===========================================================================

namespace nvml {

std::string normalise_pci_address(std::string_view text) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!text.empty() && is_space(text.front()))
    text.remove_prefix(1);
  while (!text.empty() && is_space(text.back()))
    text.remove_suffix(1);
  auto hex_value = [](std::string_view s, unsigned long& out) {
    if (s.empty() || s.size() > 8)
      return false;
    out = 0;
    for (char c : s) {
      int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
              : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
              : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                          : -1;
      if (d < 0)
        return false;
      out = out * 16 + static_cast<unsigned long>(d);
    }
    return true;
  };
  // [domain:]bus:device.function
  auto dot = text.rfind('.');
  if (dot == std::string_view::npos)
    return {};
  std::string_view function = text.substr(dot + 1);
  std::string_view rest = text.substr(0, dot);
  auto colon = rest.rfind(':');
  if (colon == std::string_view::npos)
    return {};
  std::string_view device = rest.substr(colon + 1);
  rest = rest.substr(0, colon);
  std::string_view domain, bus;
  auto colon2 = rest.rfind(':');
  if (colon2 == std::string_view::npos) {
    bus = rest;
  } else {
    bus = rest.substr(colon2 + 1);
    domain = rest.substr(0, colon2);
  }
  unsigned long d = 0, b = 0, dev = 0, fn = 0;
  if ((!domain.empty() && !hex_value(domain, d)) || !hex_value(bus, b) ||
      !hex_value(device, dev) || !hex_value(function, fn))
    return {};
  if (b > 0xff || dev > 0x1f || fn > 7 || bus.size() > 2 || device.size() > 2 ||
      function.size() != 1)
    return {};
  char out[32];
  if (d > 0xffff)
    std::snprintf(out, sizeof out, "%lx:%02lx:%02lx.%lx", d, b, dev, fn);
  else
    std::snprintf(out, sizeof out, "%04lx:%02lx:%02lx.%lx", d, b, dev, fn);
  return out;
}

std::string architecture_from_compute_capability(int major, int minor) {
  switch (major) {
    case 3: return "kepler";
    case 5: return "maxwell";
    case 6: return "pascal";
    case 7:
      if (minor == 0 || minor == 2)
        return "volta";
      if (minor == 5)
        return "turing";
      return {};
    case 8:
      if (minor == 0 || minor == 6 || minor == 7)
        return "ampere";
      if (minor == 9)
        return "ada";
      return {};
    case 9: return "hopper";
    case 10:
    case 11:
    case 12: return "blackwell";
    default: return {};
  }
}

bool is_data_centre_model(std::string_view name) {
  // A family must end at a non-digit (see nvml.hpp): "A10G" and "L40S"
  // match, "RTX A2000" does not.
  static const char* const families[] = {
      "H100", "H200", "H800", "H20",  "GH200", "A100", "A800", "A30",  "A40",
      "A10",  "A16",  "A2",   "L40",  "L20",   "L4",   "B100", "B200", "B300",
      "GB200", "GB300", "V100", "T4", "P100",  "P40",  "P4",
  };
  std::string upper(name);
  for (auto& c : upper)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::size_t pos = 0;
  while (pos < upper.size()) {
    std::size_t end = upper.find_first_of(" -_/", pos);
    if (end == std::string::npos)
      end = upper.size();
    std::string_view word(upper.data() + pos, end - pos);
    // Every Tesla-branded board ("Tesla K80", "Tesla T4") is one.
    if (word == "TESLA")
      return true;
    for (const char* family : families) {
      std::string_view f(family);
      if (word.size() >= f.size() && word.substr(0, f.size()) == f &&
          (word.size() == f.size() || !std::isdigit(static_cast<unsigned char>(word[f.size()]))))
        return true;
    }
    pos = end + 1;
  }
  return false;
}

std::string cuda_version_text(int version) {
  if (version <= 0)
    return {};
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string_view driver_status_name(nvml_result::driver_status status) {
  switch (status) {
    case nvml_result::driver_status::ok: return "ok";
    case nvml_result::driver_status::not_loaded: return "not_loaded";
    case nvml_result::driver_status::init_failed: return "init_failed";
    case nvml_result::driver_status::unresponsive: return "unresponsive";
  }
  return "unknown";
}

}  // namespace nvml

// ===========================================================================
// 4. nvml_prober
// ===========================================================================

struct nvml_prober::impl {
  nvml_options opts;
  std::atomic<std::size_t> threads_started{0};
  void* lib = nullptr;
  nvml_api api;
  bool initialised = false;
  std::unique_ptr<worker> driver;
  std::map<unsigned, std::unique_ptr<worker>> gpus;  // by NVML index
  std::map<unsigned, v1::Gpu> last_identity;         // by NVML index

  explicit impl(nvml_options o) : opts(std::move(o)) {
    if (opts.call_deadline.count() <= 0)
      opts.call_deadline = std::chrono::milliseconds(1);
  }

  std::string overran(const std::string& call) const {
    return call + " did not return within " + std::to_string(opts.call_deadline.count()) + " ms";
  }

  /// The worker for driver-wide calls: nullptr when it is stuck.
  worker* driver_worker() {
    if (driver && driver->spent())
      driver.reset();
    if (!driver)
      driver = std::make_unique<worker>(threads_started);
    return driver->stuck() ? nullptr : driver.get();
  }

  bool load(nvml_result& r) {
    if (lib)
      return true;
    ::dlerror();
    void* handle = ::dlopen(opts.library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* err = ::dlerror();
      r.status = nvml_result::driver_status::not_loaded;
      r.detail = "dlopen " + opts.library + ": " + (err ? err : "unknown error");
      return false;
    }
    nvml_api resolved;
    if (const char* missing = resolve_all(handle, resolved)) {
      r.status = nvml_result::driver_status::not_loaded;
      r.detail = opts.library + " has no " + missing + ": not an NVML library";
      ::dlclose(handle);
      return false;
    }
    lib = handle;
    api = resolved;
    return true;
  }

  void probe(nvml_result& r) {
    if (!load(r))
      return;
    worker* w = driver_worker();
    if (!w) {
      r.status = nvml_result::driver_status::unresponsive;
      r.detail = driver->stuck_detail(opts.call_deadline);
      return;
    }
    auto& state = *w->state;

    if (!initialised) {
      auto rc = std::make_shared<nvml_return>(NVML_SUCCESS);
      auto init = api.init;
      uint64_t seq = w->post([&state, rc, init] { *rc = timed(state, "nvmlInit_v2", init); });
      if (auto stuck = w->await(seq, opts.call_deadline)) {
        r.status = nvml_result::driver_status::unresponsive;
        r.detail = overran(*stuck);
        return;
      }
      if (*rc != NVML_SUCCESS) {
        r.status = nvml_result::driver_status::init_failed;
        r.detail = "nvmlInit_v2 returned " + return_text(*rc);
        return;
      }
      initialised = true;
    }

    // Driver-wide facts and the device count.
    struct system_facts {
      std::string driver_version, cuda_version;
      nvml_return count_rc = NVML_SUCCESS;
      unsigned int count = 0;
    };
    auto facts = std::make_shared<system_facts>();
    const nvml_api api_copy = api;
    uint64_t seq = w->post([&state, facts, api_copy] {
      if (api_copy.driver_version) {
        char buf[kDriverVersionBuffer] = {};
        if (timed(state, "nvmlSystemGetDriverVersion", [&] {
              return api_copy.driver_version(buf, sizeof buf);
            }) == NVML_SUCCESS)
          facts->driver_version = buffer_text(buf, sizeof buf);
      }
      auto cuda = api_copy.cuda_version_v2 ? api_copy.cuda_version_v2 : api_copy.cuda_version;
      if (cuda) {
        int version = 0;
        const char* name = api_copy.cuda_version_v2 ? "nvmlSystemGetCudaDriverVersion_v2"
                                                    : "nvmlSystemGetCudaDriverVersion";
        if (timed(state, name, [&] { return cuda(&version); }) == NVML_SUCCESS)
          facts->cuda_version = nvml::cuda_version_text(version);
      }
      facts->count_rc =
          timed(state, "nvmlDeviceGetCount_v2", [&] { return api_copy.count(&facts->count); });
    });
    if (auto stuck = w->await(seq, opts.call_deadline)) {
      r.status = nvml_result::driver_status::unresponsive;
      r.detail = overran(*stuck);
      return;
    }
    r.driver_version = facts->driver_version;
    r.cuda_version = facts->cuda_version;
    if (facts->count_rc != NVML_SUCCESS) {
      r.status = nvml_result::driver_status::init_failed;
      r.detail = "nvmlDeviceGetCount_v2 returned " + return_text(facts->count_rc);
      return;
    }
    if (facts->count > kMaxGpus) {
      r.status = nvml_result::driver_status::init_failed;
      r.detail = "nvmlDeviceGetCount_v2 gave " + std::to_string(facts->count) + " GPUs";
      return;
    }
    r.status = nvml_result::driver_status::ok;
    read_gpus(r, facts->count);
  }

  void read_gpus(nvml_result& r, unsigned int count) {
    struct pending {
      unsigned index;
      worker* w = nullptr;  // null: stuck since an earlier pass
      uint64_t seq = 0;
      std::shared_ptr<v1::Gpu> gpu;
    };
    std::vector<pending> passes;
    passes.reserve(count);
    // Post every GPU's job first, so they are read in parallel.
    for (unsigned i = 0; i < count; ++i) {
      pending p;
      p.index = i;
      auto& slot = gpus[i];
      if (slot && slot->spent())
        slot.reset();
      if (!slot)
        slot = std::make_unique<worker>(threads_started);
      if (!slot->stuck()) {
        p.w = slot.get();
        p.gpu = std::make_shared<v1::Gpu>();
        auto gpu = p.gpu;
        auto state = slot->state;  // the job's own reference
        const nvml_api api_copy = api;
        const nvml_options opts_copy = opts;
        p.seq = slot->post([state, gpu, api_copy, opts_copy, i] {
          v1::Gpu out;
          read_gpu(api_copy, *state, opts_copy, i, out);
          *gpu = std::move(out);
        });
      }
      passes.push_back(std::move(p));
    }
    for (auto& p : passes) {
      v1::Gpu gpu;
      if (p.w) {
        if (auto stuck = p.w->await(p.seq, opts.call_deadline)) {
          gpu = stuck_gpu(p.index, *gpus[p.index]);
          gpu.set_status_detail(overran(*stuck));
        } else {
          gpu = std::move(*p.gpu);
          if (!gpu.id().empty())
            remember_identity(p.index, gpu);
          else if (read_status(gpu) == gpu_read_status::lost)
            fill_identity(p.index, gpu);  // lost before it told its UUID
        }
      } else {
        gpu = stuck_gpu(p.index, *gpus[p.index]);
        gpu.set_status_detail(gpus[p.index]->stuck_detail(opts.call_deadline));
      }
      gpu.set_driver_version(r.driver_version);
      r.gpus.push_back(std::move(gpu));
    }
  }

  void remember_identity(unsigned index, const v1::Gpu& gpu) {
    v1::Gpu id;
    id.set_id(gpu.id());
    id.set_vendor("nvidia");
    id.set_model(gpu.model());
    id.set_index(index);
    id.set_pci_address(gpu.pci_address());
    id.set_data_centre(gpu.data_centre());
    last_identity[index] = std::move(id);
  }

  /// Fills a GPU's missing identity from the last pass that had it.
  void fill_identity(unsigned index, v1::Gpu& gpu) {
    auto it = last_identity.find(index);
    if (it == last_identity.end())
      return;
    if (gpu.id().empty())
      gpu.set_id(it->second.id());
    if (gpu.model().empty()) {
      gpu.set_model(it->second.model());
      gpu.set_data_centre(it->second.data_centre());
    }
    if (gpu.pci_address().empty())
      gpu.set_pci_address(it->second.pci_address());
  }

  /// A GPU whose call hangs: what this pass learnt of its identity, else
  /// what the last pass did.
  v1::Gpu stuck_gpu(unsigned index, worker& w) {
    v1::Gpu gpu;
    {
      std::lock_guard<std::mutex> lock(w.state->mu);
      if (w.state->has_identity && !w.state->identity.id().empty())
        gpu = w.state->identity;
    }
    if (gpu.id().empty()) {
      auto it = last_identity.find(index);
      if (it != last_identity.end())
        gpu = it->second;
    }
    gpu.set_vendor("nvidia");
    gpu.set_index(index);
    set_read_status(gpu, gpu_read_status::unresponsive);
    return gpu;
  }

  /// Whether a call of ours may still be running inside the library.
  bool any_stuck() {
    if (driver && driver->stuck())
      return true;
    for (auto& [index, w] : gpus)
      if (w && w->stuck())
        return true;
    return false;
  }

  ~impl() {
    try {
      if (lib && initialised && !any_stuck()) {
        if (worker* w = driver_worker()) {
          auto state = w->state;
          auto shutdown = api.shutdown;
          uint64_t seq = w->post([state, shutdown] { timed(*state, "nvmlShutdown", shutdown); });
          w->await(seq, opts.call_deadline);
        }
      }
    } catch (...) {
    }
    // A call still running inside the library (its worker was detached
    // when it overran) pins the library: it is then never unloaded.
    bool pinned = any_stuck();
    // Idle workers are between jobs and join at once.
    gpus.clear();
    driver.reset();
    if (lib && !pinned)
      ::dlclose(lib);
  }
};

nvml_prober::nvml_prober(nvml_options opts) : impl_(std::make_unique<impl>(std::move(opts))) {}

nvml_prober::~nvml_prober() = default;

nvml_result nvml_prober::probe() {
  nvml_result r;
  try {
    impl_->probe(r);
  } catch (const std::exception& e) {
    r.gpus.clear();
    r.status = nvml_result::driver_status::init_failed;
    r.detail = std::string("NVML probe failed: ") + e.what();
  } catch (...) {
    r.gpus.clear();
    r.status = nvml_result::driver_status::init_failed;
    r.detail = "NVML probe failed";
  }
  return r;
}

std::size_t nvml_prober::threads_started() const {
  return impl_->threads_started.load();
}

}  // namespace astraeus
