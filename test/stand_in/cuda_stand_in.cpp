// A stand-in libcuda.so for tests: exports the CUDA driver API entry points
// astraeus-check uses (runtime/validation/cuda_driver.hpp), with the real
// names and ABI, and serves GPUs from a JSON fixture, so the checks' real
// dlopen and measuring code runs without a GPU.
//
// The fixture is the file named by ASTRAEUS_CUDA_FIXTURE, read at cuInit.
// No variable or an unreadable file: cuInit returns CUDA_ERROR_NO_DEVICE
// (100). Format (every key optional):
//   {
//     "init_error": 3,                 // cuInit returns this
//     "gpus": [ {
//       "uuid": "GPU-5f1e...",          // 32 hex digits, dashes anywhere
//       "pci_bus_id": "0000:18:00.0", "name": "NVIDIA H100 80GB HBM3",
//       "multiprocessors": 132,
//       "h2d_gbs": 52.0, "d2h_gbs": 53.0, "d2d_gbs": 2400, "peer_gbs": 360,
//       "fp32_tflops": 50.0,            // the burn kernel's pace
//       "errors": {"cuLaunchKernel": 700},  // these calls return the code
//       "wrong_results": true           // copies back differ after the first
//     } ],
//     "peer_access": true              // cuDeviceCanAccessPeer answers
//   }
// Time is virtual: each copy or kernel advances its stream's clock by
// bytes / bandwidth (or work / pace), and cuEventElapsedTime returns the
// difference of two events' clocks, so measured figures equal the
// fixture's. A kernel launch sleeps 1 ms of real time to pace a burn-in.
// Device memory is not backed (pointers are handed out, never touched);
// pinned host memory is real.

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

using json = nlohmann::json;

extern "C" {
typedef int CUresult;
typedef int CUdevice;
struct cu_ctx_st {
  int device;
};
struct cu_stream_st {
  int device;
  double clock_ms;
};
struct cu_event_st {
  double t_ms;
};
struct cu_mod_st {
  int device;
};
struct cu_func_st {
  int device;
};
typedef unsigned long long CUdeviceptr;
}

namespace {

constexpr CUresult kSuccess = 0;
constexpr CUresult kInvalidValue = 1;
constexpr CUresult kNotInitialized = 3;
constexpr CUresult kNoDevice = 100;
constexpr CUresult kInvalidDevice = 101;
constexpr CUresult kInvalidPtx = 218;
constexpr CUresult kInvalidContext = 201;
constexpr CUresult kNotFound = 500;
constexpr CUresult kPeerAlreadyEnabled = 704;

struct globals {
  std::mutex mu;
  json fixture;
  bool initialised = false;
  std::map<int, std::unique_ptr<cu_ctx_st>> contexts;
  std::atomic<CUdeviceptr> next_ptr{0x10000000ull};
  std::map<int, int> copies_back;  // device -> DtoH copies so far
};

globals& g() {
  static globals instance;
  return instance;
}

thread_local cu_ctx_st* current_ctx = nullptr;

const json& gpus() {
  static const json none = json::array();
  auto it = g().fixture.find("gpus");
  return it != g().fixture.end() && it->is_array() ? *it : none;
}

const json* gpu(int device) {
  const auto& list = gpus();
  if (device < 0 || static_cast<size_t>(device) >= list.size())
    return nullptr;
  return &list[static_cast<size_t>(device)];
}

double number(const json& obj, const char* key, double fallback) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_number() ? it->get<double>() : fallback;
}

// The fixture's error for `fn` on `device`, else 0.
CUresult injected(const char* fn, int device) {
  const json* d = gpu(device);
  if (!d)
    return kSuccess;
  auto e = d->find("errors");
  if (e == d->end() || !e->is_object())
    return kSuccess;
  auto c = e->find(fn);
  return c != e->end() && c->is_number_integer() ? c->get<int>() : kSuccess;
}

int current_device() {
  return current_ctx ? current_ctx->device : -1;
}

CUresult advance(const char* fn, cu_stream_st* s, int device, double bytes, const char* key) {
  if (!g().initialised)
    return kNotInitialized;
  if (CUresult rc = injected(fn, device))
    return rc;
  const json* d = gpu(device);
  if (!d)
    return kInvalidContext;
  double gbs = number(*d, key, 10.0);
  if (s)
    s->clock_ms += bytes / (gbs * 1e9) * 1000.0;
  return kSuccess;
}

}  // namespace

#define STAND_IN_EXPORT extern "C" __attribute__((visibility("default")))

STAND_IN_EXPORT CUresult cuInit(unsigned) {
  std::lock_guard<std::mutex> lock(g().mu);
  const char* path = std::getenv("ASTRAEUS_CUDA_FIXTURE");
  std::ifstream in(path ? path : "");
  if (!path || !in)
    return kNoDevice;
  std::stringstream text;
  text << in.rdbuf();
  auto doc = json::parse(text.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return 999;
  if (auto e = doc.find("init_error"); e != doc.end() && e->is_number_integer())
    return e->get<int>();
  // As the real driver: CUDA_VISIBLE_DEVICES (indices or GPU UUIDs, comma
  // separated; the list ends at the first entry that names no GPU; empty:
  // none) keeps only those GPUs, in its order, renumbered from 0. A check
  // given 7 of 8 GPUs then cannot touch the eighth in the tests either.
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    auto all = doc.find("gpus");
    if (all != doc.end() && all->is_array()) {
      json kept = json::array();
      std::stringstream list{visible};
      std::string entry;
      while (std::getline(list, entry, ',')) {
        const json* found = nullptr;
        if (!entry.empty() && std::all_of(entry.begin(), entry.end(), ::isdigit)) {
          auto i = std::stoul(entry);
          if (i < all->size())
            found = &(*all)[i];
        } else {
          for (const auto& gpu_entry : *all)
            if (gpu_entry.value("uuid", std::string{}) == entry)
              found = &gpu_entry;
        }
        if (!found)
          break;
        kept.push_back(*found);
      }
      *all = std::move(kept);
    }
  }
  g().fixture = std::move(doc);
  g().initialised = true;
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuDeviceGetCount(int* n) {
  if (!g().initialised)
    return kNotInitialized;
  *n = static_cast<int>(gpus().size());
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (!gpu(ordinal))
    return kInvalidDevice;
  *d = ordinal;
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  const json* x = gpu(d);
  if (!x || len <= 0)
    return kInvalidDevice;
  std::string n = x->value("name", std::string{"Stand-in GPU"});
  std::strncpy(name, n.c_str(), static_cast<size_t>(len) - 1);
  name[len - 1] = '\0';
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuDeviceGetUuid(unsigned char* bytes, CUdevice d) {
  const json* x = gpu(d);
  if (!x)
    return kInvalidDevice;
  std::string hex;
  for (char c : x->value("uuid", std::string{}))
    if (std::isxdigit(static_cast<unsigned char>(c)))
      hex += c;
  if (hex.size() != 32)
    return kNotFound;
  for (int i = 0; i < 16; ++i)
    bytes[i] = static_cast<unsigned char>(std::stoi(hex.substr(static_cast<size_t>(i) * 2, 2), nullptr, 16));
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuDeviceGetPCIBusId(char* out, int len, CUdevice d) {
  const json* x = gpu(d);
  if (!x || len <= 0)
    return kInvalidDevice;
  std::string id = x->value("pci_bus_id", std::string{"0000:00:00.0"});
  std::strncpy(out, id.c_str(), static_cast<size_t>(len) - 1);
  out[len - 1] = '\0';
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice d) {
  const json* x = gpu(d);
  if (!x)
    return kInvalidDevice;
  *v = attr == 16 ? static_cast<int>(number(*x, "multiprocessors", 8)) : 0;
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuDeviceCanAccessPeer(int* can, CUdevice, CUdevice) {
  auto it = g().fixture.find("peer_access");
  *can = it != g().fixture.end() && it->is_boolean() && it->get<bool>() ? 1 : 0;
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuDevicePrimaryCtxRetain(cu_ctx_st** ctx, CUdevice d) {
  if (!g().initialised)
    return kNotInitialized;
  if (!gpu(d))
    return kInvalidDevice;
  if (CUresult rc = injected("cuDevicePrimaryCtxRetain", d))
    return rc;
  std::lock_guard<std::mutex> lock(g().mu);
  auto& c = g().contexts[d];
  if (!c)
    c.reset(new cu_ctx_st{d});
  *ctx = c.get();
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return kSuccess; }

STAND_IN_EXPORT CUresult cuCtxSetCurrent(cu_ctx_st* ctx) {
  current_ctx = ctx;
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuCtxEnablePeerAccess(cu_ctx_st*, unsigned) { return kPeerAlreadyEnabled; }

STAND_IN_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  if (!current_ctx)
    return kInvalidContext;
  if (CUresult rc = injected("cuMemAlloc_v2", current_device()))
    return rc;
  *p = g().next_ptr.fetch_add((bytes + 0xffff) & ~CUdeviceptr{0xffff});
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuMemFree_v2(CUdeviceptr) { return kSuccess; }

// Pinned host memory belongs to a context: the real driver answers
// CUDA_ERROR_INVALID_CONTEXT (201) with none current on the calling thread
// (seen on an H200, driver 580.159.04, before the all-reduce made one current).
STAND_IN_EXPORT CUresult cuMemAllocHost_v2(void** p, size_t bytes) {
  if (!current_ctx)
    return kInvalidContext;
  *p = std::calloc(1, bytes ? bytes : 1);
  return *p ? kSuccess : 2;
}

STAND_IN_EXPORT CUresult cuMemFreeHost(void* p) {
  std::free(p);
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void*, size_t n, cu_stream_st* s) {
  return advance("cuMemcpyHtoDAsync_v2", s, current_device(), static_cast<double>(n), "h2d_gbs");
}

STAND_IN_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr, size_t n, cu_stream_st* s) {
  int d = current_device();
  CUresult rc = advance("cuMemcpyDtoHAsync_v2", s, d, static_cast<double>(n), "d2h_gbs");
  if (rc != kSuccess)
    return rc;
  int copies;
  {
    std::lock_guard<std::mutex> lock(g().mu);
    copies = ++g().copies_back[d];
  }
  const json* x = gpu(d);
  if (x && x->value("wrong_results", false) && copies > 1 && n >= sizeof(float)) {
    float wrong = static_cast<float>(copies);
    std::memcpy(dst, &wrong, sizeof wrong);
  }
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr, CUdeviceptr, size_t n, cu_stream_st* s) {
  return advance("cuMemcpyDtoDAsync_v2", s, current_device(), static_cast<double>(n), "d2d_gbs");
}

STAND_IN_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr, cu_ctx_st*, CUdeviceptr, cu_ctx_st* src,
                                           size_t n, cu_stream_st* s) {
  return advance("cuMemcpyPeerAsync", s, src ? src->device : -1, static_cast<double>(n),
                 "peer_gbs");
}

STAND_IN_EXPORT CUresult cuStreamCreate(cu_stream_st** s, unsigned) {
  if (!current_ctx)
    return kInvalidContext;
  *s = new cu_stream_st{current_device(), 0};
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuStreamDestroy_v2(cu_stream_st* s) {
  delete s;
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuStreamSynchronize(cu_stream_st*) {
  return injected("cuStreamSynchronize", current_device());
}

STAND_IN_EXPORT CUresult cuEventCreate(cu_event_st** e, unsigned) {
  *e = new cu_event_st{0};
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuEventDestroy_v2(cu_event_st* e) {
  delete e;
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuEventRecord(cu_event_st* e, cu_stream_st* s) {
  if (!e)
    return kInvalidValue;
  e->t_ms = s ? s->clock_ms : 0;
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuEventSynchronize(cu_event_st*) {
  return injected("cuEventSynchronize", current_device());
}

STAND_IN_EXPORT CUresult cuEventElapsedTime(float* ms, cu_event_st* a, cu_event_st* b) {
  *ms = static_cast<float>(b->t_ms - a->t_ms);
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuModuleLoadData(cu_mod_st** m, const void* image) {
  if (!current_ctx)
    return kInvalidContext;
  if (CUresult rc = injected("cuModuleLoadData", current_device()))
    return rc;
  const char* text = static_cast<const char*>(image);
  if (!text || !std::strstr(text, ".entry astraeus_burn") || !std::strstr(text, ".target"))
    return kInvalidPtx;
  *m = new cu_mod_st{current_device()};
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuModuleUnload(cu_mod_st* m) {
  delete m;
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuModuleGetFunction(cu_func_st** f, cu_mod_st* m, const char* name) {
  if (!m || !name || std::strcmp(name, "astraeus_burn") != 0)
    return kNotFound;
  *f = new cu_func_st{m->device};
  return kSuccess;
}

// The kernel's work: threads x iters x 16 floating-point operations
// (runtime/validation/burn_kernel.ptx), at the fixture's fp32_tflops.
STAND_IN_EXPORT CUresult cuLaunchKernel(cu_func_st* f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned,
                                        cu_stream_st* s, void** params, void**) {
  if (!f || !params)
    return kInvalidValue;
  if (CUresult rc = injected("cuLaunchKernel", f->device))
    return rc;
  unsigned iters = *static_cast<unsigned*>(params[1]);
  double threads = double(gx) * gy * gz * bx * by * bz;
  const json* x = gpu(f->device);
  double tflops = x ? number(*x, "fp32_tflops", 10.0) : 10.0;
  if (s)
    s->clock_ms += threads * iters * 16 / (tflops * 1e12) * 1000.0;
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return kSuccess;
}

STAND_IN_EXPORT CUresult cuGetErrorName(CUresult rc, const char** name) {
  static const std::map<int, const char*> names = {
    {0, "CUDA_SUCCESS"}, {1, "CUDA_ERROR_INVALID_VALUE"}, {2, "CUDA_ERROR_OUT_OF_MEMORY"},
    {3, "CUDA_ERROR_NOT_INITIALIZED"}, {100, "CUDA_ERROR_NO_DEVICE"},
    {101, "CUDA_ERROR_INVALID_DEVICE"}, {201, "CUDA_ERROR_INVALID_CONTEXT"},
    {214, "CUDA_ERROR_ECC_UNCORRECTABLE"}, {218, "CUDA_ERROR_INVALID_PTX"},
    {500, "CUDA_ERROR_NOT_FOUND"}, {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"}, {999, "CUDA_ERROR_UNKNOWN"}};
  auto it = names.find(rc);
  if (it == names.end())
    return kInvalidValue;
  *name = it->second;
  return kSuccess;
}
