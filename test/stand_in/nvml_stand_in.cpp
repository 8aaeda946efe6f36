// A stand-in libnvidia-ml.so for tests: exports the NVML symbols the agent
// uses, with the real names and the real ABI, and serves GPUs from a JSON
// fixture. The agent loads it through its ordinary dlopen code
// (runtime/gpu/nvml.cpp), so tests exercise the real prober.
//
// Built twice (test/CMakeLists.txt): the normal build, and an "old driver"
// build (ASTRAEUS_STAND_IN_OLD_DRIVER=1) that lacks symbols older drivers
// lack: nvmlDeviceGetRemappedRows, nvmlDeviceGetGpuFabricInfo(V),
// nvmlDeviceGetNumaNodeId, nvmlSystemGetCudaDriverVersion_v2 and
// nvmlDeviceGetCurrentClocksEventReasons.
//
// The fixture is the file named by the environment variable
// ASTRAEUS_NVML_FIXTURE, read at every nvmlInit_v2, and read again while
// initialised whenever the file changes (its modification time, size or
// inode), so a test can make a GPU vanish, get lost or come back while the
// agent runs: write the new fixture to a temporary file and rename it over
// the old one. A changed file that does not parse is ignored (the last good
// one stays). No variable or an
// unreadable file: nvmlInit_v2 returns NVML_ERROR_DRIVER_NOT_LOADED (9); not
// JSON, or not an object with a "gpus" array: NVML_ERROR_UNKNOWN (999).
//
// Fixture format (every key optional; a value that is absent makes the call
// that serves it return NVML_ERROR_NOT_SUPPORTED, as a GPU without the
// feature does):
//   {
//     "driver_version": "550.54.15",
//     "cuda_driver_version": 12040,          // 1000 * major + 10 * minor
//     "init_error": 9,                       // nvmlInit_v2 returns this
//     "init_hang": true,                     // nvmlInit_v2 blocks (below)
//     "xid_events": [{"gpu": 0, "xid": 79}], // nvmlEventSetWait_v2 (below)
//     "hang_until_file": "/tmp/x",           // what releases a hang
//     "gpus": [ {
//       "uuid": "GPU-...", "name": "NVIDIA H100 80GB HBM3",
//       "serial": "1652823054001", "vbios": "96.00.74.00.01",
//       "pci": {"bus_id": "00000000:18:00.0", "device_id": "0x233010DE",
//               "subsystem_id": "0x16C110DE"},
//       "numa_node": 0,
//       "memory": {"total_bytes": 85520809984, "used_bytes": 549715968},
//       "compute_capability": [9, 0],
//       "utilization": {"gpu": 35, "memory": 12},
//       "temperature_c": 38, "power_mw": 112000, "power_limit_mw": 700000,
//       "clocks_mhz": {"graphics": 1980, "sm": 1980, "mem": 2619},
//       "fan_percent": 30,
//       "ecc": {"volatile": {"corrected": 0, "uncorrected": 0},
//               "aggregate": {"corrected": 0, "uncorrected": 0}},
//       "retired_pages": {"single_bit": 0, "double_bit": 0, "pending": false},
//       "remapped_rows": {"correctable": 0, "uncorrectable": 0,
//                         "pending": false, "failed": false},
//       "nvlinks": {"count": 18, "active": true, "remote_type": "switch",
//                   "remote_pci": "00000008:00:00.0",
//                   "errors": {"replay": 0, "recovery": 0, "crc_flit": 0},
//                   "links": {"3": {"active": false}}},   // per-link patch
//                  // (or an array with one object per link)
//       "pcie_replays": 0,
//       "fabric": {"state": 3, "status": 0, "cluster_uuid": "<uuid>",
//                  "clique_id": 1, "health_mask": 170},
//       "clocks_event_reasons": 1,
//       "recovery_action": 1,   // nvmlDeviceGetFieldValues' field 230
//                               // (absent: NOT_SUPPORTED for that field)
//       // test knobs:
//       "lost": true,                         // every call on this GPU
//                                             // (not the handle) returns 15
//       "hang": ["nvmlDeviceGetMemoryInfo"],  // these calls block
//       "not_supported": ["nvmlDeviceGetFanSpeed"],
//       "errors": {"nvmlDeviceGetTemperature": 999}
//     } ]
//   }
//
// A hang blocks until a file exists: the file named by the environment
// variable ASTRAEUS_NVML_HANG_RELEASE when set (read when the hang starts),
// else the fixture's "hang_until_file"; with neither, until the process
// exits.
//
// Tests can also ask how often a call was made on a GPU since the last
// successful nvmlInit_v2: astraeus_stand_in_calls("nvmlDeviceGetMemoryInfo",
// 2) (dlsym it from the same library; the real NVML has no such symbol).

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

using json = nlohmann::json;

// ---------------------------------------------------------------------------
// NVML's public types (the subset served here), as in nvml.h.
// ---------------------------------------------------------------------------
extern "C" {

typedef int nvmlReturn_t;
struct nvmlDevice_st {
  unsigned int index;
};
typedef struct nvmlDevice_st* nvmlDevice_t;

typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

typedef struct {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

typedef struct {
  unsigned char clusterUuid[16];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;
} nvmlGpuFabricInfo_t;

typedef struct {
  unsigned int version;
  unsigned char clusterUuid[16];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;
  unsigned int healthMask;
  unsigned char healthSummary;  // v3 only
} nvmlGpuFabricInfo_v3_t;

typedef struct {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  unsigned long long value;  // the union; unsigned int answers use its low bytes
} nvmlFieldValue_t;

}  // extern "C"

namespace {

constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kUninitialized = 1;
constexpr nvmlReturn_t kInvalidArgument = 2;
constexpr nvmlReturn_t kNotSupported = 3;
constexpr nvmlReturn_t kInsufficientSize = 7;
constexpr nvmlReturn_t kDriverNotLoaded = 9;
constexpr nvmlReturn_t kGpuIsLost = 15;
constexpr nvmlReturn_t kArgumentVersionMismatch = 25;
constexpr nvmlReturn_t kUnknown = 999;

constexpr unsigned kMaxGpus = 64;

// Process-wide state. A hung call released after the process began to exit
// could meet it destroyed: tests release every hang before they end.
struct globals {
  std::mutex mu;
  std::shared_ptr<const json> fixture;
  // What the fixture file was when it was read: changes make it read again.
  std::string path;
  struct stat seen {};
  std::map<std::pair<std::string, unsigned>, int> calls;
  nvmlDevice_st devices[kMaxGpus];

  globals() {
    for (unsigned i = 0; i < kMaxGpus; ++i)
      devices[i].index = i;
  }
};

globals& g() {
  static globals instance;
  return instance;
}

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_ino == b.st_ino && a.st_dev == b.st_dev && a.st_size == b.st_size
         && a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

// The fixture as parsed from `path`; null when it cannot be read or is not
// a fixture.
std::shared_ptr<json> parse_fixture(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return nullptr;
  std::stringstream text;
  text << in.rdbuf();
  auto doc = std::make_shared<json>(json::parse(text.str(), nullptr, false));
  if (doc->is_discarded() || !doc->is_object())
    return nullptr;
  auto gpus = doc->find("gpus");
  if (gpus == doc->end() || !gpus->is_array() || gpus->size() > kMaxGpus)
    return nullptr;
  return doc;
}

std::shared_ptr<const json> current() {
  std::lock_guard<std::mutex> lock(g().mu);
  auto& st = g();
  if (st.fixture && !st.path.empty()) {
    struct stat now {};
    if (::stat(st.path.c_str(), &now) == 0 && !same_file(now, st.seen)) {
      st.seen = now;
      if (auto doc = parse_fixture(st.path))
        st.fixture = std::move(doc);
    }
  }
  return st.fixture;
}

void count_call(const char* fn, unsigned gpu) {
  std::lock_guard<std::mutex> lock(g().mu);
  ++g().calls[{fn, gpu}];
}

// Blocks until the release file exists (or forever).
void hang(const json& fixture) {
  std::string release;
  if (const char* env = std::getenv("ASTRAEUS_NVML_HANG_RELEASE"); env && *env)
    release = env;
  else if (auto it = fixture.find("hang_until_file"); it != fixture.end() && it->is_string())
    release = it->get<std::string>();
  struct stat st {};
  while (release.empty() || ::stat(release.c_str(), &st) != 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

bool listed(const json& gpu, const char* key, const char* fn) {
  auto it = gpu.find(key);
  if (it == gpu.end() || !it->is_array())
    return false;
  for (const auto& v : *it)
    if (v.is_string() && v.get<std::string>() == fn)
      return true;
  return false;
}

const json* member(const json& obj, const char* key) {
  if (!obj.is_object())
    return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

unsigned long long as_u64(const json& v) {
  if (v.is_string())
    return std::stoull(v.get<std::string>(), nullptr, 0);
  if (v.is_boolean())
    return v.get<bool>() ? 1 : 0;
  return v.get<unsigned long long>();
}

nvmlReturn_t copy_text(const std::string& s, char* out, unsigned int length) {
  if (!out)
    return kInvalidArgument;
  if (s.size() + 1 > length)
    return kInsufficientSize;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return kSuccess;
}

int gpu_index(nvmlDevice_t dev) {
  auto* base = g().devices;
  if (dev < base || dev >= base + kMaxGpus)
    return -1;
  return static_cast<int>(dev - base);
}

// Common path of every per-GPU call: knobs first, then `serve(gpu)`.
template <class F>
nvmlReturn_t on_gpu(const char* fn, nvmlDevice_t dev, F&& serve) {
  try {
    auto fx = current();
    if (!fx)
      return kUninitialized;
    int idx = gpu_index(dev);
    const json& gpus = fx->at("gpus");
    if (idx < 0 || static_cast<size_t>(idx) >= gpus.size())
      return kInvalidArgument;
    count_call(fn, static_cast<unsigned>(idx));
    const json& gpu = gpus.at(static_cast<size_t>(idx));
    if (!gpu.is_object())
      return kUnknown;
    if (auto* lost = member(gpu, "lost"); lost && lost->get<bool>())
      return kGpuIsLost;
    if (listed(gpu, "hang", fn))
      hang(*fx);
    if (listed(gpu, "not_supported", fn))
      return kNotSupported;
    if (auto* errors = member(gpu, "errors"))
      if (auto* code = member(*errors, fn))
        return code->get<int>();
    return serve(gpu);
  } catch (...) {
    return kUnknown;
  }
}

// Serves a number member of `obj` (NOT_SUPPORTED when absent).
template <class T>
nvmlReturn_t serve_number(const json& obj, const char* key, T* out) {
  if (!out)
    return kInvalidArgument;
  auto* v = member(obj, key);
  if (!v)
    return kNotSupported;
  *out = static_cast<T>(as_u64(*v));
  return kSuccess;
}

void fill_pci(const std::string& bus_id, unsigned device_id, unsigned subsystem_id,
              nvmlPciInfo_t* pci) {
  std::memset(pci, 0, sizeof *pci);
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  bool parsed =
      std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) == 4;
  pci->domain = domain;
  pci->bus = bus;
  pci->device = device;
  pci->pciDeviceId = device_id;
  pci->pciSubSystemId = subsystem_id;
  if (parsed)
    std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X",
                  domain & 0xffff, bus & 0xff, device & 0xff, function & 0xf);
  std::snprintf(pci->busId, sizeof pci->busId, "%s", bus_id.c_str());
}

// The link's description: the template (or array entry) patched by
// "links"."<n>". Null when the GPU has no such link.
json link_spec(const json& gpu, unsigned link) {
  auto* links = member(gpu, "nvlinks");
  if (!links)
    return nullptr;
  if (links->is_array())
    return link < links->size() ? links->at(link) : json(nullptr);
  if (!links->is_object() || link >= as_u64(links->at("count")))
    return nullptr;
  json spec = *links;
  spec.erase("count");
  spec.erase("links");
  if (auto* patches = member(*links, "links"))
    if (auto* patch = member(*patches, std::to_string(link).c_str()))
      spec.merge_patch(*patch);
  return spec;
}

[[maybe_unused]] bool parse_uuid(const std::string& text, unsigned char out[16]) {
  std::string hex;
  for (char c : text)
    if (c != '-')
      hex += c;
  if (hex.size() != 32)
    return false;
  for (int i = 0; i < 16; ++i)
    out[i] = static_cast<unsigned char>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  return true;
}

template <class Info>
nvmlReturn_t fill_fabric(const json& gpu, Info* info) {
  auto* f = member(gpu, "fabric");
  if (!f)
    return kNotSupported;
  std::memset(info->clusterUuid, 0, sizeof info->clusterUuid);
  if (auto* u = member(*f, "cluster_uuid"))
    if (!parse_uuid(u->get<std::string>(), info->clusterUuid))
      return kUnknown;
  info->status = static_cast<nvmlReturn_t>(f->value("status", 0));
  info->cliqueId = static_cast<unsigned>(f->value("clique_id", 0u));
  info->state = static_cast<unsigned char>(f->value("state", 0u));
  return kSuccess;
}

}  // namespace

#define STAND_IN_EXPORT extern "C" __attribute__((visibility("default")))

// ---------------------------------------------------------------------------
// Library and system
// ---------------------------------------------------------------------------

STAND_IN_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  try {
    const char* path = std::getenv("ASTRAEUS_NVML_FIXTURE");
    if (!path || !*path)
      return kDriverNotLoaded;
    struct stat seen {};
    if (::stat(path, &seen) != 0)
      return kDriverNotLoaded;
    std::ifstream probe(path);
    if (!probe)
      return kDriverNotLoaded;
    auto doc = parse_fixture(path);
    if (!doc)
      return kUnknown;
    if (auto* hang_init = member(*doc, "init_hang"); hang_init && hang_init->get<bool>())
      hang(*doc);
    if (auto* err = member(*doc, "init_error"))
      return err->get<int>();
    std::lock_guard<std::mutex> lock(g().mu);
    g().fixture = std::move(doc);
    g().path = path;
    g().seen = seen;
    g().calls.clear();
    return kSuccess;
  } catch (...) {
    return kUnknown;
  }
}

STAND_IN_EXPORT nvmlReturn_t nvmlInit(void) {
  return nvmlInit_v2();
}

STAND_IN_EXPORT nvmlReturn_t nvmlShutdown(void) {
  std::lock_guard<std::mutex> lock(g().mu);
  if (!g().fixture)
    return kUninitialized;
  g().fixture.reset();
  return kSuccess;
}

STAND_IN_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    case 25: return "Argument version mismatch";
    default: return "Unknown Error";
  }
}

STAND_IN_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  try {
    auto fx = current();
    if (!fx)
      return kUninitialized;
    auto* v = member(*fx, "driver_version");
    if (!v)
      return kNotSupported;
    return copy_text(v->get<std::string>(), version, length);
  } catch (...) {
    return kUnknown;
  }
}

STAND_IN_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  try {
    auto fx = current();
    if (!fx)
      return kUninitialized;
    return serve_number(*fx, "cuda_driver_version", version);
  } catch (...) {
    return kUnknown;
  }
}

#if !ASTRAEUS_STAND_IN_OLD_DRIVER
STAND_IN_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return nvmlSystemGetCudaDriverVersion(version);
}
#endif

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  try {
    auto fx = current();
    if (!fx)
      return kUninitialized;
    if (!count)
      return kInvalidArgument;
    *count = static_cast<unsigned>(fx->at("gpus").size());
    return kSuccess;
  } catch (...) {
    return kUnknown;
  }
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                           nvmlDevice_t* device) {
  try {
    auto fx = current();
    if (!fx)
      return kUninitialized;
    const json& gpus = fx->at("gpus");
    if (!device || index >= gpus.size())
      return kInvalidArgument;
    count_call("nvmlDeviceGetHandleByIndex_v2", index);
    const json& gpu = gpus.at(index);
    if (listed(gpu, "hang", "nvmlDeviceGetHandleByIndex_v2"))
      hang(*fx);
    if (auto* errors = member(gpu, "errors"))
      if (auto* code = member(*errors, "nvmlDeviceGetHandleByIndex_v2"))
        return code->get<int>();
    *device = &g().devices[index];
    return kSuccess;
  } catch (...) {
    return kUnknown;
  }
}

// ---------------------------------------------------------------------------
// Identity
// ---------------------------------------------------------------------------

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                               unsigned int length) {
  return on_gpu("nvmlDeviceGetUUID", device, [&](const json& gpu) {
    auto* v = member(gpu, "uuid");
    return v ? copy_text(v->get<std::string>(), uuid, length) : kNotSupported;
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                               unsigned int length) {
  return on_gpu("nvmlDeviceGetName", device, [&](const json& gpu) {
    auto* v = member(gpu, "name");
    return v ? copy_text(v->get<std::string>(), name, length) : kNotSupported;
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial,
                                                 unsigned int length) {
  return on_gpu("nvmlDeviceGetSerial", device, [&](const json& gpu) {
    auto* v = member(gpu, "serial");
    return v ? copy_text(v->get<std::string>(), serial, length) : kNotSupported;
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char* version,
                                                       unsigned int length) {
  return on_gpu("nvmlDeviceGetVbiosVersion", device, [&](const json& gpu) {
    auto* v = member(gpu, "vbios");
    return v ? copy_text(v->get<std::string>(), version, length) : kNotSupported;
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return on_gpu("nvmlDeviceGetPciInfo_v3", device, [&](const json& gpu) {
    auto* p = member(gpu, "pci");
    if (!p)
      return kNotSupported;
    if (!pci)
      return kInvalidArgument;
    auto* dev_id = member(*p, "device_id");
    auto* sub_id = member(*p, "subsystem_id");
    fill_pci(p->at("bus_id").get<std::string>(), dev_id ? static_cast<unsigned>(as_u64(*dev_id)) : 0,
             sub_id ? static_cast<unsigned>(as_u64(*sub_id)) : 0, pci);
    return kSuccess;
  });
}

#if !ASTRAEUS_STAND_IN_OLD_DRIVER
STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node) {
  return on_gpu("nvmlDeviceGetNumaNodeId", device, [&](const json& gpu) {
    auto* v = member(gpu, "numa_node");
    if (!v)
      return kNotSupported;
    if (!node)
      return kInvalidArgument;
    *node = static_cast<unsigned>(v->get<int>());  // -1 comes back as 0xffffffff
    return kSuccess;
  });
}
#endif

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major,
                                                                int* minor) {
  return on_gpu("nvmlDeviceGetCudaComputeCapability", device, [&](const json& gpu) {
    auto* v = member(gpu, "compute_capability");
    if (!v)
      return kNotSupported;
    if (!major || !minor)
      return kInvalidArgument;
    *major = v->at(0).get<int>();
    *minor = v->at(1).get<int>();
    return kSuccess;
  });
}

// ---------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  return on_gpu("nvmlDeviceGetMemoryInfo", device, [&](const json& gpu) {
    auto* m = member(gpu, "memory");
    if (!m)
      return kNotSupported;
    if (!memory)
      return kInvalidArgument;
    memory->total = as_u64(m->at("total_bytes"));
    memory->used = m->contains("used_bytes") ? as_u64(m->at("used_bytes")) : 0;
    memory->free = memory->total > memory->used ? memory->total - memory->used : 0;
    return kSuccess;
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                          nvmlUtilization_t* utilization) {
  return on_gpu("nvmlDeviceGetUtilizationRates", device, [&](const json& gpu) {
    auto* u = member(gpu, "utilization");
    if (!u)
      return kNotSupported;
    if (!utilization)
      return kInvalidArgument;
    utilization->gpu = static_cast<unsigned>(u->value("gpu", 0u));
    utilization->memory = static_cast<unsigned>(u->value("memory", 0u));
    return kSuccess;
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensor,
                                                      unsigned int* temp) {
  return on_gpu("nvmlDeviceGetTemperature", device, [&](const json& gpu) {
    if (sensor != 0)  // NVML_TEMPERATURE_GPU is the only sensor
      return kInvalidArgument;
    return serve_number(gpu, "temperature_c", temp);
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  return on_gpu("nvmlDeviceGetPowerUsage", device,
                [&](const json& gpu) { return serve_number(gpu, "power_mw", power); });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device,
                                                            unsigned int* limit) {
  return on_gpu("nvmlDeviceGetEnforcedPowerLimit", device,
                [&](const json& gpu) { return serve_number(gpu, "power_limit_mw", limit); });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type,
                                                    unsigned int* clock) {
  return on_gpu("nvmlDeviceGetClockInfo", device, [&](const json& gpu) {
    static const char* const names[] = {"graphics", "sm", "mem", "video"};
    auto* c = member(gpu, "clocks_mhz");
    if (!c)
      return kNotSupported;
    if (type >= 4)
      return kInvalidArgument;
    return serve_number(*c, names[type], clock);
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int* speed) {
  return on_gpu("nvmlDeviceGetFanSpeed", device,
                [&](const json& gpu) { return serve_number(gpu, "fan_percent", speed); });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device,
                                                           unsigned int* value) {
  return on_gpu("nvmlDeviceGetPcieReplayCounter", device,
                [&](const json& gpu) { return serve_number(gpu, "pcie_replays", value); });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(
    nvmlDevice_t device, unsigned long long* reasons) {
  return on_gpu("nvmlDeviceGetCurrentClocksThrottleReasons", device, [&](const json& gpu) {
    return serve_number(gpu, "clocks_event_reasons", reasons);
  });
}

#if !ASTRAEUS_STAND_IN_OLD_DRIVER
STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                                   unsigned long long* reasons) {
  return on_gpu("nvmlDeviceGetCurrentClocksEventReasons", device, [&](const json& gpu) {
    return serve_number(gpu, "clocks_event_reasons", reasons);
  });
}
#endif

// ---------------------------------------------------------------------------
// Memory errors
// ---------------------------------------------------------------------------

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                        unsigned int error_type,
                                                        unsigned int counter_type,
                                                        unsigned long long* count) {
  return on_gpu("nvmlDeviceGetTotalEccErrors", device, [&](const json& gpu) {
    auto* e = member(gpu, "ecc");
    if (!e)
      return kNotSupported;
    if (error_type > 1 || counter_type > 1)
      return kInvalidArgument;
    auto* c = member(*e, counter_type == 0 ? "volatile" : "aggregate");
    if (!c)
      return kNotSupported;
    return serve_number(*c, error_type == 0 ? "corrected" : "uncorrected", count);
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, unsigned int cause,
                                                      unsigned int* page_count,
                                                      unsigned long long* addresses) {
  return on_gpu("nvmlDeviceGetRetiredPages", device, [&](const json& gpu) {
    auto* r = member(gpu, "retired_pages");
    if (!r)
      return kNotSupported;
    if (cause > 1 || !page_count)
      return kInvalidArgument;
    auto* v = member(*r, cause == 0 ? "single_bit" : "double_bit");
    unsigned n = v ? static_cast<unsigned>(as_u64(*v)) : 0;
    if (*page_count < n) {
      *page_count = n;
      return kInsufficientSize;
    }
    for (unsigned i = 0; addresses && i < n; ++i)
      addresses[i] = 0x1000ull * (i + 1) + cause;
    *page_count = n;
    return kSuccess;
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                                   unsigned int* pending) {
  return on_gpu("nvmlDeviceGetRetiredPagesPendingStatus", device, [&](const json& gpu) {
    auto* r = member(gpu, "retired_pages");
    if (!r)
      return kNotSupported;
    return serve_number(*r, "pending", pending);
  });
}

#if !ASTRAEUS_STAND_IN_OLD_DRIVER
STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corr_rows,
                                                      unsigned int* unc_rows,
                                                      unsigned int* is_pending,
                                                      unsigned int* failure_occurred) {
  return on_gpu("nvmlDeviceGetRemappedRows", device, [&](const json& gpu) {
    auto* r = member(gpu, "remapped_rows");
    if (!r)
      return kNotSupported;
    if (!corr_rows || !unc_rows || !is_pending || !failure_occurred)
      return kInvalidArgument;
    *corr_rows = static_cast<unsigned>(r->value("correctable", 0u));
    *unc_rows = static_cast<unsigned>(r->value("uncorrectable", 0u));
    *is_pending = r->value("pending", false) ? 1 : 0;
    *failure_occurred = r->value("failed", false) ? 1 : 0;
    return kSuccess;
  });
}
#endif

// Field values: only NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (230) is served;
// the old-driver build answers it INVALID_ARGUMENT, as a driver before r550
// that does not know the field.
STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count,
                                                     nvmlFieldValue_t* values) {
  return on_gpu("nvmlDeviceGetFieldValues", device, [&](const json& gpu) {
    if (count < 0 || (count > 0 && !values))
      return kInvalidArgument;
    for (int i = 0; i < count; ++i) {
      auto& v = values[i];
      v.valueType = 1;  // NVML_VALUE_TYPE_UNSIGNED_INT
      v.value = 0;
#if ASTRAEUS_STAND_IN_OLD_DRIVER
      (void) gpu;
      v.nvmlReturn = kInvalidArgument;
#else
      auto* action = member(gpu, "recovery_action");
      if (v.fieldId != 230 || !action) {
        v.nvmlReturn = v.fieldId == 230 ? kNotSupported : kInvalidArgument;
        continue;
      }
      v.value = action->get<unsigned>();
      v.nvmlReturn = kSuccess;
#endif
    }
    return kSuccess;
  });
}

// ---------------------------------------------------------------------------
// NVLink
// ---------------------------------------------------------------------------

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                     unsigned int* is_active) {
  return on_gpu("nvmlDeviceGetNvLinkState", device, [&](const json& gpu) {
    if (!member(gpu, "nvlinks"))
      return kNotSupported;
    json spec = link_spec(gpu, link);
    if (spec.is_null())
      return kInvalidArgument;
    if (!is_active)
      return kInvalidArgument;
    *is_active = spec.value("active", false) ? 1 : 0;
    return kSuccess;
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device,
                                                                unsigned int link,
                                                                nvmlPciInfo_t* pci) {
  return on_gpu("nvmlDeviceGetNvLinkRemotePciInfo_v2", device, [&](const json& gpu) {
    json spec = link_spec(gpu, link);
    if (spec.is_null())
      return kInvalidArgument;
    auto* remote = member(spec, "remote_pci");
    if (!remote)
      return kNotSupported;
    if (!pci)
      return kInvalidArgument;
    fill_pci(remote->get<std::string>(), 0, 0, pci);
    return kSuccess;
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device,
                                                                unsigned int link,
                                                                unsigned int* type) {
  return on_gpu("nvmlDeviceGetNvLinkRemoteDeviceType", device, [&](const json& gpu) {
    json spec = link_spec(gpu, link);
    if (spec.is_null())
      return kInvalidArgument;
    auto* t = member(spec, "remote_type");
    if (!t)
      return kNotSupported;
    if (!type)
      return kInvalidArgument;
    std::string kind = t->get<std::string>();
    *type = kind == "gpu" ? 0 : kind == "ibmnpu" ? 1 : kind == "switch" ? 2 : 0xFF;
    return kSuccess;
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device,
                                                            unsigned int link,
                                                            unsigned int counter,
                                                            unsigned long long* value) {
  return on_gpu("nvmlDeviceGetNvLinkErrorCounter", device, [&](const json& gpu) {
    static const char* const names[] = {"replay", "recovery", "crc_flit", "crc_data", "ecc_data"};
    json spec = link_spec(gpu, link);
    if (spec.is_null() || counter >= 5)
      return kInvalidArgument;
    auto* errors = member(spec, "errors");
    if (!errors)
      return kNotSupported;
    return serve_number(*errors, names[counter], value);
  });
}

// ---------------------------------------------------------------------------
// NVLink fabric (multi-node NVLink)
// ---------------------------------------------------------------------------

#if !ASTRAEUS_STAND_IN_OLD_DRIVER
STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device,
                                                       nvmlGpuFabricInfo_t* info) {
  return on_gpu("nvmlDeviceGetGpuFabricInfo", device, [&](const json& gpu) {
    if (!info)
      return kInvalidArgument;
    return fill_fabric(gpu, info);
  });
}

// Versioned: accepts nvmlGpuFabricInfo_v2 (36 bytes) and _v3 (40 bytes).
STAND_IN_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device,
                                                        nvmlGpuFabricInfo_v3_t* info) {
  return on_gpu("nvmlDeviceGetGpuFabricInfoV", device, [&](const json& gpu) {
    if (!info)
      return kInvalidArgument;
    unsigned version = info->version >> 24, size = info->version & 0xffffffu;
    if (!((version == 2 && size == 36) || (version == 3 && size == sizeof(nvmlGpuFabricInfo_v3_t))))
      return kArgumentVersionMismatch;
    nvmlReturn_t rc = fill_fabric(gpu, info);
    if (rc != kSuccess)
      return rc;
    const json* f = member(gpu, "fabric");
    info->healthMask = static_cast<unsigned>(f->value("health_mask", 0u));
    if (version == 3)
      info->healthSummary = static_cast<unsigned char>(f->value("health_summary", 0u));
    return kSuccess;
  });
}
#endif

// ---------------------------------------------------------------------------
// Events: the fixture's "xid_events": [{"gpu": 0, "xid": 79}, ...] are
// delivered once each, in order, by nvmlEventSetWait_v2 on a set that GPU is
// registered with (the burn-in's Xid watch). With none left, the wait
// sleeps for its timeout (at most 1 s) and returns NVML_ERROR_TIMEOUT (10).
// ---------------------------------------------------------------------------

struct nvmlEventSet_st {
  std::mutex mu;
  unsigned long long registered[kMaxGpus] = {};
  size_t delivered = 0;
};
typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

STAND_IN_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_st** set) {
  if (!set)
    return kInvalidArgument;
  if (!current())
    return kUninitialized;
  *set = new nvmlEventSet_st;
  return kSuccess;
}

STAND_IN_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                     unsigned long long types,
                                                     nvmlEventSet_st* set) {
  return on_gpu("nvmlDeviceRegisterEvents", device, [&](const json&) {
    if (!set)
      return kInvalidArgument;
    std::lock_guard<std::mutex> lock(set->mu);
    set->registered[gpu_index(device)] |= types;
    return kSuccess;
  });
}

STAND_IN_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_st* set, nvmlEventData_t* data,
                                                unsigned int timeout_ms) {
  if (!set || !data)
    return kInvalidArgument;
  auto fx = current();
  if (!fx)
    return kUninitialized;
  {
    std::lock_guard<std::mutex> lock(set->mu);
    auto* events = member(*fx, "xid_events");
    while (events && events->is_array() && set->delivered < events->size()) {
      const json& e = events->at(set->delivered++);
      unsigned gpu = e.value("gpu", 0u);
      if (gpu >= kMaxGpus || !(set->registered[gpu] & 0x8))
        continue;
      *data = nvmlEventData_t{&g().devices[gpu], 0x8, e.value("xid", 0ull), 0xffffffffu,
                              0xffffffffu};
      return kSuccess;
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 1000u)));
  return 10;  // NVML_ERROR_TIMEOUT
}

STAND_IN_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_st* set) {
  delete set;
  return kSuccess;
}

// ---------------------------------------------------------------------------
// Test-only
// ---------------------------------------------------------------------------

STAND_IN_EXPORT int astraeus_stand_in_calls(const char* fn, unsigned int gpu) {
  std::lock_guard<std::mutex> lock(g().mu);
  auto it = g().calls.find({fn ? fn : "", gpu});
  return it == g().calls.end() ? 0 : it->second;
}
