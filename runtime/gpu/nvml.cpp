// NVIDIA GPU discovery through NVML loaded with dlopen (see nvml.hpp).
//
// Layout of this file:
//  1. NVML's public ABI: the C types, constants and function signatures
//     used here, written out by hand (nvml.h is not in Debian main). They
//     must match NVML exactly; a wrong layout would corrupt memory on a
//     real driver. Sources: NVML API reference / nvml.h (CUDA 12.x).
//  2. Workers: one thread per GPU (and one for driver-wide calls) that runs
//     a job of NVML calls while the prober watches each call's deadline.
//  3. Reading one GPU into v1::Gpu.
//  4. nvml_prober.

#include "runtime/gpu/nvml.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "messages/gpu_read.hpp"

namespace astraeus {
namespace {

// ===========================================================================
// 1. NVML ABI
// ===========================================================================

/// nvmlReturn_t (a C enum: int-sized).
using nvml_return = int;
/// nvmlDevice_t: an opaque pointer.
using nvml_device = struct nvml_device_st*;

constexpr nvml_return NVML_SUCCESS = 0;
constexpr nvml_return NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvml_return NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvml_return NVML_ERROR_NOT_FOUND = 6;
constexpr nvml_return NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvml_return NVML_ERROR_GPU_IS_LOST = 15;

/// nvmlMemory_t (v1): bytes.
struct nvml_memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
static_assert(sizeof(nvml_memory) == 24, "nvmlMemory_t layout");

/// nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v3 and
/// nvmlDeviceGetNvLinkRemotePciInfo_v2.
struct nvml_pci_info {
  char busIdLegacy[16];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;     // (device id << 16) | vendor id
  unsigned int pciSubSystemId;  // (subsystem id << 16) | subsystem vendor id
  char busId[32];               // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE: "00000000:3B:00.0"
};
static_assert(sizeof(nvml_pci_info) == 68, "nvmlPciInfo_t layout");

/// nvmlUtilization_t: percent over the last sample period.
struct nvml_utilization {
  unsigned int gpu;
  unsigned int memory;
};
static_assert(sizeof(nvml_utilization) == 8, "nvmlUtilization_t layout");

/// nvmlGpuFabricInfo_t (nvmlDeviceGetGpuFabricInfo). `state` is
/// nvmlGpuFabricState_t, an unsigned char.
struct nvml_fabric_info {
  unsigned char clusterUuid[16];  // NVML_GPU_FABRIC_UUID_LEN
  nvml_return status;             // meaningful only when state is COMPLETED
  unsigned int cliqueId;
  unsigned char state;
};
static_assert(sizeof(nvml_fabric_info) == 28, "nvmlGpuFabricInfo_t layout");

/// nvmlGpuFabricInfo_v2_t (nvmlDeviceGetGpuFabricInfoV with
/// version nvmlGpuFabricInfo_v2), read for the health mask.
struct nvml_fabric_info_v2 {
  unsigned int version;
  unsigned char clusterUuid[16];
  nvml_return status;
  unsigned int cliqueId;
  unsigned char state;
  unsigned int healthMask;
};
static_assert(sizeof(nvml_fabric_info_v2) == 36, "nvmlGpuFabricInfo_v2_t layout");
/// NVML_STRUCT_VERSION(GpuFabricInfo, 2).
constexpr unsigned int kFabricInfoV2 = sizeof(nvml_fabric_info_v2) | (2u << 24);

/// nvmlFieldValue_t: one answer of nvmlDeviceGetFieldValues. The value is
/// a union of 8 bytes; valueType says which member (unsigned int here).
struct nvml_field_value {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  nvml_return nvmlReturn;
  unsigned long long value;
};
static_assert(sizeof(nvml_field_value) == 40, "nvmlFieldValue_t layout");
/// NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvml.h, r550+): what the GPU needs
/// after an uncorrectable error (nvmlDeviceGpuRecoveryAction_t).
constexpr unsigned int kFieldRecoveryAction = 230;

// Buffer sizes (nvml.h).
constexpr unsigned int kUuidBuffer = 96;           // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned int kNameBuffer = 96;           // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned int kSerialBuffer = 30;         // NVML_DEVICE_SERIAL_BUFFER_SIZE
constexpr unsigned int kVbiosBuffer = 32;          // NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE
constexpr unsigned int kDriverVersionBuffer = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

// Enum values (nvml.h).
constexpr unsigned int NVML_TEMPERATURE_GPU = 0;
constexpr unsigned int NVML_CLOCK_SM = 1;
constexpr unsigned int NVML_CLOCK_MEM = 2;
constexpr unsigned int NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;
constexpr unsigned int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr unsigned int NVML_VOLATILE_ECC = 0;
constexpr unsigned int NVML_AGGREGATE_ECC = 1;
constexpr unsigned int NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0;
constexpr unsigned int NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1;
constexpr unsigned int NVML_FEATURE_ENABLED = 1;  // nvmlEnableState_t
constexpr unsigned int NVML_NVLINK_MAX_LINKS = 18;
constexpr unsigned int NVML_NVLINK_ERROR_DL_REPLAY = 0;
constexpr unsigned int NVML_NVLINK_ERROR_DL_RECOVERY = 1;
constexpr unsigned int NVML_NVLINK_ERROR_DL_CRC_FLIT = 2;
constexpr unsigned int NVML_NVLINK_DEVICE_TYPE_GPU = 0x00;
constexpr unsigned int NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02;
constexpr unsigned char NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0;
constexpr unsigned char NVML_GPU_FABRIC_STATE_NOT_STARTED = 1;
constexpr unsigned char NVML_GPU_FABRIC_STATE_IN_PROGRESS = 2;
constexpr unsigned char NVML_GPU_FABRIC_STATE_COMPLETED = 3;
constexpr unsigned int NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY = 4;
constexpr unsigned int NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_UNHEALTHY = 0x3;
constexpr unsigned int NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE = 1;
constexpr unsigned int NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE = 2;
// nvmlClocksEventReason* / nvmlClocksThrottleReason* bits.
constexpr unsigned long long kReasonHwSlowdown = 0x8;
constexpr unsigned long long kReasonSwThermalSlowdown = 0x20;
constexpr unsigned long long kReasonHwThermalSlowdown = 0x40;

/// NVML return codes by name, for details (nvmlErrorString is not called:
/// it is one more call into a driver that may be hung).
std::string return_text(nvml_return rc) {
  static const std::map<int, const char*> names = {
      {0, "NVML_SUCCESS"},
      {1, "NVML_ERROR_UNINITIALIZED"},
      {2, "NVML_ERROR_INVALID_ARGUMENT"},
      {3, "NVML_ERROR_NOT_SUPPORTED"},
      {4, "NVML_ERROR_NO_PERMISSION"},
      {5, "NVML_ERROR_ALREADY_INITIALIZED"},
      {6, "NVML_ERROR_NOT_FOUND"},
      {7, "NVML_ERROR_INSUFFICIENT_SIZE"},
      {8, "NVML_ERROR_INSUFFICIENT_POWER"},
      {9, "NVML_ERROR_DRIVER_NOT_LOADED"},
      {10, "NVML_ERROR_TIMEOUT"},
      {11, "NVML_ERROR_IRQ_ISSUE"},
      {12, "NVML_ERROR_LIBRARY_NOT_FOUND"},
      {13, "NVML_ERROR_FUNCTION_NOT_FOUND"},
      {14, "NVML_ERROR_CORRUPTED_INFOROM"},
      {15, "NVML_ERROR_GPU_IS_LOST"},
      {16, "NVML_ERROR_RESET_REQUIRED"},
      {17, "NVML_ERROR_OPERATING_SYSTEM"},
      {18, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"},
      {19, "NVML_ERROR_IN_USE"},
      {20, "NVML_ERROR_MEMORY"},
      {21, "NVML_ERROR_NO_DATA"},
      {22, "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED"},
      {23, "NVML_ERROR_INSUFFICIENT_RESOURCES"},
      {24, "NVML_ERROR_FREQ_NOT_SUPPORTED"},
      {25, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH"},
      {26, "NVML_ERROR_DEPRECATED"},
      {27, "NVML_ERROR_NOT_READY"},
      {28, "NVML_ERROR_GPU_NOT_FOUND"},
      {29, "NVML_ERROR_INVALID_STATE"},
      {30, "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED"},
      {999, "NVML_ERROR_UNKNOWN"},
  };
  auto it = names.find(rc);
  std::string name = it == names.end() ? "NVML error" : it->second;
  return name + " (" + std::to_string(rc) + ")";
}

/// The NVML entry points, resolved with dlsym. Required ones are checked at
/// load; a null optional one means "not in this driver".
struct nvml_api {
  nvml_return (*init)() = nullptr;      // nvmlInit_v2
  nvml_return (*shutdown)() = nullptr;  // nvmlShutdown
  nvml_return (*count)(unsigned int*) = nullptr;
  nvml_return (*handle_by_index)(unsigned int, nvml_device*) = nullptr;
  nvml_return (*driver_version)(char*, unsigned int) = nullptr;
  nvml_return (*cuda_version_v2)(int*) = nullptr;
  nvml_return (*cuda_version)(int*) = nullptr;
  nvml_return (*uuid)(nvml_device, char*, unsigned int) = nullptr;
  nvml_return (*name)(nvml_device, char*, unsigned int) = nullptr;
  nvml_return (*serial)(nvml_device, char*, unsigned int) = nullptr;
  nvml_return (*vbios)(nvml_device, char*, unsigned int) = nullptr;
  nvml_return (*pci_info)(nvml_device, nvml_pci_info*) = nullptr;  // _v3
  nvml_return (*numa_node)(nvml_device, unsigned int*) = nullptr;
  nvml_return (*memory)(nvml_device, nvml_memory*) = nullptr;
  nvml_return (*compute_capability)(nvml_device, int*, int*) = nullptr;
  nvml_return (*utilization)(nvml_device, nvml_utilization*) = nullptr;
  nvml_return (*temperature)(nvml_device, unsigned int, unsigned int*) = nullptr;
  nvml_return (*power_usage)(nvml_device, unsigned int*) = nullptr;        // mW
  nvml_return (*enforced_power_limit)(nvml_device, unsigned int*) = nullptr;  // mW
  nvml_return (*clock)(nvml_device, unsigned int, unsigned int*) = nullptr;   // MHz
  nvml_return (*fan_speed)(nvml_device, unsigned int*) = nullptr;            // percent
  nvml_return (*ecc_total)(nvml_device, unsigned int, unsigned int, unsigned long long*) =
      nullptr;
  nvml_return (*retired_pages)(nvml_device, unsigned int, unsigned int*, unsigned long long*) =
      nullptr;
  nvml_return (*retired_pages_pending)(nvml_device, unsigned int*) = nullptr;
  nvml_return (*remapped_rows)(nvml_device, unsigned int*, unsigned int*, unsigned int*,
                               unsigned int*) = nullptr;
  nvml_return (*nvlink_state)(nvml_device, unsigned int, unsigned int*) = nullptr;
  nvml_return (*nvlink_remote_pci)(nvml_device, unsigned int, nvml_pci_info*) = nullptr;  // _v2
  nvml_return (*nvlink_remote_type)(nvml_device, unsigned int, unsigned int*) = nullptr;
  nvml_return (*nvlink_error_counter)(nvml_device, unsigned int, unsigned int,
                                      unsigned long long*) = nullptr;
  nvml_return (*pcie_replay_counter)(nvml_device, unsigned int*) = nullptr;
  nvml_return (*fabric_info)(nvml_device, nvml_fabric_info*) = nullptr;
  nvml_return (*fabric_info_v)(nvml_device, nvml_fabric_info_v2*) = nullptr;
  nvml_return (*clocks_event_reasons)(nvml_device, unsigned long long*) = nullptr;
  nvml_return (*clocks_throttle_reasons)(nvml_device, unsigned long long*) = nullptr;
  nvml_return (*field_values)(nvml_device, int, nvml_field_value*) = nullptr;
};

template <class Fn>
void resolve(void* lib, Fn& slot, const char* symbol) {
  slot = reinterpret_cast<Fn>(::dlsym(lib, symbol));
}

/// Resolves every entry point; returns the first missing required symbol,
/// or nullptr.
const char* resolve_all(void* lib, nvml_api& api) {
  resolve(lib, api.init, "nvmlInit_v2");
  resolve(lib, api.shutdown, "nvmlShutdown");
  resolve(lib, api.count, "nvmlDeviceGetCount_v2");
  resolve(lib, api.handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
  resolve(lib, api.driver_version, "nvmlSystemGetDriverVersion");
  resolve(lib, api.cuda_version_v2, "nvmlSystemGetCudaDriverVersion_v2");
  resolve(lib, api.cuda_version, "nvmlSystemGetCudaDriverVersion");
  resolve(lib, api.uuid, "nvmlDeviceGetUUID");
  resolve(lib, api.name, "nvmlDeviceGetName");
  resolve(lib, api.serial, "nvmlDeviceGetSerial");
  resolve(lib, api.vbios, "nvmlDeviceGetVbiosVersion");
  resolve(lib, api.pci_info, "nvmlDeviceGetPciInfo_v3");
  resolve(lib, api.numa_node, "nvmlDeviceGetNumaNodeId");
  resolve(lib, api.memory, "nvmlDeviceGetMemoryInfo");
  resolve(lib, api.compute_capability, "nvmlDeviceGetCudaComputeCapability");
  resolve(lib, api.utilization, "nvmlDeviceGetUtilizationRates");
  resolve(lib, api.temperature, "nvmlDeviceGetTemperature");
  resolve(lib, api.power_usage, "nvmlDeviceGetPowerUsage");
  resolve(lib, api.enforced_power_limit, "nvmlDeviceGetEnforcedPowerLimit");
  resolve(lib, api.clock, "nvmlDeviceGetClockInfo");
  resolve(lib, api.fan_speed, "nvmlDeviceGetFanSpeed");
  resolve(lib, api.ecc_total, "nvmlDeviceGetTotalEccErrors");
  resolve(lib, api.retired_pages, "nvmlDeviceGetRetiredPages");
  resolve(lib, api.retired_pages_pending, "nvmlDeviceGetRetiredPagesPendingStatus");
  resolve(lib, api.remapped_rows, "nvmlDeviceGetRemappedRows");
  resolve(lib, api.nvlink_state, "nvmlDeviceGetNvLinkState");
  resolve(lib, api.nvlink_remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  resolve(lib, api.nvlink_remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
  resolve(lib, api.nvlink_error_counter, "nvmlDeviceGetNvLinkErrorCounter");
  resolve(lib, api.pcie_replay_counter, "nvmlDeviceGetPcieReplayCounter");
  resolve(lib, api.fabric_info, "nvmlDeviceGetGpuFabricInfo");
  resolve(lib, api.fabric_info_v, "nvmlDeviceGetGpuFabricInfoV");
  resolve(lib, api.clocks_event_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
  resolve(lib, api.clocks_throttle_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  resolve(lib, api.field_values, "nvmlDeviceGetFieldValues");
  if (!api.init)
    return "nvmlInit_v2";
  if (!api.shutdown)
    return "nvmlShutdown";
  if (!api.count)
    return "nvmlDeviceGetCount_v2";
  if (!api.handle_by_index)
    return "nvmlDeviceGetHandleByIndex_v2";
  return nullptr;
}

// ===========================================================================
// 2. Workers
// ===========================================================================

using clock_type = std::chrono::steady_clock;

/// State shared by a worker thread and the prober. The thread keeps it
/// alive, so a worker left behind (abandoned) outlives the prober safely.
struct worker_state {
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> job;  // the posted job, if has_job
  bool has_job = false;
  bool stop = false;
  bool abandoned = false;  // the prober stopped waiting; exit after the job
  bool exited = false;     // the thread is out of every NVML call for good
  uint64_t posted = 0;
  uint64_t finished = 0;
  const char* call = nullptr;  // the NVML call in flight, if any
  clock_type::time_point progress = clock_type::now();  // last call start/end
  // Identity a GPU job publishes as soon as it has it, so a GPU that hangs
  // later in the pass is still reported by UUID and address.
  v1::Gpu identity;
  bool has_identity = false;
};

/// Thrown inside a job when its worker was abandoned: stop calling NVML.
struct job_abandoned {};

void worker_main(std::shared_ptr<worker_state> w) {
  std::unique_lock<std::mutex> lock(w->mu);
  for (;;) {
    w->cv.wait(lock, [&] { return w->stop || w->has_job; });
    if (w->has_job) {
      auto job = std::move(w->job);
      w->job = nullptr;
      w->has_job = false;
      lock.unlock();
      try {
        job();
      } catch (...) {
      }
      job = nullptr;
      lock.lock();
      w->call = nullptr;
      ++w->finished;
      w->cv.notify_all();
      if (w->abandoned)
        break;
      continue;
    }
    if (w->stop)
      break;
  }
  w->exited = true;
  w->cv.notify_all();
}

/// A worker thread and its state.
struct worker {
  std::shared_ptr<worker_state> state = std::make_shared<worker_state>();
  std::thread thread;

  explicit worker(std::atomic<std::size_t>& started) {
    thread = std::thread(worker_main, state);
    ++started;
  }

  ~worker() {
    if (!thread.joinable())
      return;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->stop = true;
    }
    state->cv.notify_all();
    thread.join();
  }

  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;

  /// A worker whose call hung and has not returned yet.
  bool stuck() {
    std::lock_guard<std::mutex> lock(state->mu);
    return state->abandoned && !state->exited;
  }

  /// A worker whose call hung and has since returned: replace it.
  bool spent() {
    std::lock_guard<std::mutex> lock(state->mu);
    return state->abandoned && state->exited;
  }

  /// What the stuck call is and how long it has been stuck.
  std::string stuck_detail(std::chrono::milliseconds deadline) {
    std::lock_guard<std::mutex> lock(state->mu);
    auto for_ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() -
                                                                        state->progress);
    return std::string(state->call ? state->call : "an NVML call") + " has not returned for " +
           std::to_string(for_ms.count()) + " ms (deadline " + std::to_string(deadline.count()) +
           " ms)";
  }

  uint64_t post(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(state->mu);
    state->progress = clock_type::now();  // the deadline runs from here
    state->job = std::move(job);
    state->has_job = true;
    state->cv.notify_all();
    return ++state->posted;
  }

  /// Waits for job `seq`. Returns nullopt when it finished; otherwise the
  /// name of the call that overran `deadline` (the worker is then abandoned
  /// and its thread detached).
  std::optional<std::string> await(uint64_t seq, std::chrono::milliseconds deadline) {
    std::unique_lock<std::mutex> lock(state->mu);
    for (;;) {
      if (state->finished >= seq)
        return std::nullopt;
      auto due = state->progress + deadline;
      if (clock_type::now() >= due) {
        state->abandoned = true;
        std::string call = state->call ? state->call : "an NVML call";
        lock.unlock();
        if (thread.joinable())
          thread.detach();
        return call;
      }
      state->cv.wait_until(lock, due);
    }
  }
};

/// Runs one NVML call on the worker's thread (from inside a job), recording
/// it so the prober can time it. Throws job_abandoned when the prober gave
/// up on this worker while the call ran.
template <class F>
nvml_return timed(worker_state& w, const char* name, F&& f) {
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.call = name;
    w.progress = clock_type::now();
  }
  w.cv.notify_all();
  nvml_return rc = f();
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.call = nullptr;
    w.progress = clock_type::now();
    if (w.abandoned)
      throw job_abandoned{};
  }
  return rc;
}

// ===========================================================================
// 3. Reading one GPU
// ===========================================================================

/// Text from a fixed NVML buffer: stops at NUL or the buffer's end, keeps
/// printable ASCII only (protobuf strings must be UTF-8), trims spaces.
std::string buffer_text(const char* buf, std::size_t size) {
  std::string out;
  for (std::size_t i = 0; i < size && buf[i] != '\0'; ++i) {
    auto c = static_cast<unsigned char>(buf[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  auto first = out.find_first_not_of(' ');
  if (first == std::string::npos)
    return {};
  return out.substr(first, out.find_last_not_of(' ') - first + 1);
}

std::string pci_text(const nvml_pci_info& pci) {
  std::string addr = nvml::normalise_pci_address(buffer_text(pci.busId, sizeof pci.busId));
  if (addr.empty())
    addr = nvml::normalise_pci_address(buffer_text(pci.busIdLegacy, sizeof pci.busIdLegacy));
  return addr;
}

std::string uuid_text(const unsigned char bytes[16]) {
  bool all_zero = std::all_of(bytes, bytes + 16, [](unsigned char b) { return b == 0; });
  if (all_zero)
    return {};
  char out[37];
  std::snprintf(out, sizeof out,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", bytes[0],
                bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8],
                bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]);
  return out;
}

std::string fabric_state_text(unsigned char state) {
  switch (state) {
    case NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: return "not-supported";
    case NVML_GPU_FABRIC_STATE_NOT_STARTED: return "not-started";
    case NVML_GPU_FABRIC_STATE_IN_PROGRESS: return "in-progress";
    case NVML_GPU_FABRIC_STATE_COMPLETED: return "completed";
    default: return "unknown";
  }
}

std::string join_path(const std::string& root, const std::string& rest) {
  if (root.empty() || root == "/")
    return "/" + rest;
  return root.back() == '/' ? root + rest : root + "/" + rest;
}

/// Thrown when a call answers NVML_ERROR_GPU_IS_LOST: the GPU is lost.
struct gpu_lost {
  std::string call;
};

/// Reads one GPU, on its worker's thread.
class gpu_reader {
 public:
  gpu_reader(const nvml_api& api, worker_state& w, const nvml_options& opts, unsigned index,
             v1::Gpu& gpu)
      : api_(api), w_(w), opts_(opts), index_(index), gpu_(gpu) {}

  void read() {
    gpu_.set_vendor("nvidia");
    gpu_.set_index(index_);
    set_read_status(gpu_, gpu_read_status::ok);
    try {
      nvml_return rc = timed(w_, "nvmlDeviceGetHandleByIndex_v2",
                             [&] { return api_.handle_by_index(index_, &dev_); });
      if (rc != NVML_SUCCESS) {
        // No handle, nothing else can be read: the driver cannot reach it.
        set_read_status(gpu_, gpu_read_status::lost);
        gpu_.set_status_detail("nvmlDeviceGetHandleByIndex_v2 returned " + return_text(rc));
        return;
      }
      read_identity();
      read_numa();
      read_metrics();
      read_memory_errors();
      read_nvlinks();
      read_fabric();
      read_recovery_action();
    } catch (const gpu_lost& lost) {
      set_read_status(gpu_, gpu_read_status::lost);
      gpu_.set_status_detail(lost.call + " returned " + return_text(NVML_ERROR_GPU_IS_LOST));
    }
  }

 private:
  template <class F>
  nvml_return call(const char* name, F&& f) {
    nvml_return rc = timed(w_, name, std::forward<F>(f));
    if (rc == NVML_ERROR_GPU_IS_LOST)
      throw gpu_lost{name};
    return rc;
  }

  void unknown(const std::string& field, const std::string& why) {
    std::string line = field + ": " + why;
    for (const auto& have : gpu_.unknown_fields())
      if (have == line)
        return;
    gpu_.add_unknown_fields(line);
  }

  /// Whether `fn` exists; notes the field unknown when it does not.
  template <class Fn>
  bool have(Fn fn, const char* field, const char* symbol) {
    if (fn)
      return true;
    unknown(field, std::string(symbol) + " not in this driver");
    return false;
  }

  /// Whether rc is success. NOT_SUPPORTED (the GPU lacks the feature) is
  /// silent; other errors note the field unknown.
  bool ok(nvml_return rc, const char* field, const char* symbol) {
    if (rc == NVML_SUCCESS)
      return true;
    if (rc != NVML_ERROR_NOT_SUPPORTED)
      unknown(field, std::string(symbol) + " returned " + return_text(rc));
    return false;
  }

  /// Reads a string attribute into `set`.
  template <class Fn, class Set>
  void read_text(Fn fn, const char* field, const char* symbol, unsigned int size, Set&& set) {
    if (!have(fn, field, symbol))
      return;
    std::vector<char> buf(size, '\0');
    nvml_return rc = call(symbol, [&] { return fn(dev_, buf.data(), size); });
    if (ok(rc, field, symbol))
      set(buffer_text(buf.data(), buf.size()));
  }

  void read_identity() {
    read_text(api_.uuid, "id", "nvmlDeviceGetUUID", kUuidBuffer,
              [&](std::string s) { gpu_.set_id(std::move(s)); });
    read_text(api_.name, "model", "nvmlDeviceGetName", kNameBuffer, [&](std::string s) {
      gpu_.set_data_centre(nvml::is_data_centre_model(s));
      gpu_.set_model(std::move(s));
    });
    if (have(api_.pci_info, "pci_address", "nvmlDeviceGetPciInfo_v3")) {
      nvml_pci_info pci{};
      nvml_return rc =
          call("nvmlDeviceGetPciInfo_v3", [&] { return api_.pci_info(dev_, &pci); });
      if (ok(rc, "pci_address", "nvmlDeviceGetPciInfo_v3")) {
        std::string addr = pci_text(pci);
        if (addr.empty())
          unknown("pci_address", "nvmlDeviceGetPciInfo_v3 gave no PCI address");
        gpu_.set_pci_address(addr);
      }
    }
    publish_identity();
    read_text(api_.serial, "serial", "nvmlDeviceGetSerial", kSerialBuffer,
              [&](std::string s) { gpu_.set_serial(std::move(s)); });
    read_text(api_.vbios, "vbios_version", "nvmlDeviceGetVbiosVersion", kVbiosBuffer,
              [&](std::string s) { gpu_.set_vbios_version(std::move(s)); });
  }

  void publish_identity() {
    std::lock_guard<std::mutex> lock(w_.mu);
    w_.identity.Clear();
    w_.identity.set_id(gpu_.id());
    w_.identity.set_vendor("nvidia");
    w_.identity.set_model(gpu_.model());
    w_.identity.set_index(index_);
    w_.identity.set_pci_address(gpu_.pci_address());
    w_.identity.set_data_centre(gpu_.data_centre());
    w_.has_identity = true;
  }

  void read_numa() {
    std::string nvml_why;
    if (api_.numa_node) {
      unsigned int node = 0;
      nvml_return rc =
          call("nvmlDeviceGetNumaNodeId", [&] { return api_.numa_node(dev_, &node); });
      if (rc == NVML_SUCCESS) {
        if (node <= 0x7fffffffu) {
          gpu_.set_numa_node(static_cast<int32_t>(node));
          return;
        }
        nvml_why = "nvmlDeviceGetNumaNodeId gave no node";
      } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
        nvml_why = "nvmlDeviceGetNumaNodeId returned " + return_text(rc);
      } else {
        nvml_why = "nvmlDeviceGetNumaNodeId not supported";
      }
    } else {
      nvml_why = "nvmlDeviceGetNumaNodeId not in this driver";
    }
    // Fallback: the kernel's view of the device.
    if (gpu_.pci_address().empty()) {
      unknown("numa_node", nvml_why + ", and no PCI address to look up in sysfs");
      return;
    }
    std::string path = join_path(
        opts_.sysfs_root, "sys/bus/pci/devices/" + gpu_.pci_address() + "/numa_node");
    std::string text;
    bool read_ok = false;
    timed(w_, "read numa_node from sysfs", [&] {
      std::ifstream in(path);
      read_ok = static_cast<bool>(std::getline(in, text));
      return NVML_SUCCESS;
    });
    if (!read_ok) {
      unknown("numa_node", nvml_why + ", and " + path + " cannot be read");
      return;
    }
    errno = 0;
    char* end = nullptr;
    long node = std::strtol(text.c_str(), &end, 10);
    while (end && (*end == ' ' || *end == '\n' || *end == '\t'))
      ++end;
    if (end == text.c_str() || (end && *end) || errno || node < -1 || node > 0x7fffffffL) {
      unknown("numa_node", nvml_why + ", and " + path + " is not a number");
      return;
    }
    if (node >= 0)
      gpu_.set_numa_node(static_cast<int32_t>(node));
    // -1: the platform has no NUMA affinity for it; absent, not unknown.
  }

  void read_metrics() {
    if (have(api_.memory, "memory", "nvmlDeviceGetMemoryInfo")) {
      nvml_memory mem{};
      nvml_return rc = call("nvmlDeviceGetMemoryInfo", [&] { return api_.memory(dev_, &mem); });
      if (ok(rc, "memory", "nvmlDeviceGetMemoryInfo")) {
        gpu_.set_memory_total_bytes(mem.total);
        gpu_.set_memory_used_bytes(mem.used);
      }
    }
    if (have(api_.compute_capability, "compute_capability",
             "nvmlDeviceGetCudaComputeCapability")) {
      int major = 0, minor = 0;
      nvml_return rc = call("nvmlDeviceGetCudaComputeCapability",
                            [&] { return api_.compute_capability(dev_, &major, &minor); });
      if (ok(rc, "compute_capability", "nvmlDeviceGetCudaComputeCapability")) {
        if (major > 0 && major < 100 && minor >= 0 && minor < 100) {
          gpu_.set_compute_capability(std::to_string(major) + "." + std::to_string(minor));
          std::string arch = nvml::architecture_from_compute_capability(major, minor);
          if (arch.empty())
            unknown("architecture", "compute capability " + gpu_.compute_capability() +
                                        " is not in the table");
          gpu_.set_architecture(arch);
        } else {
          unknown("compute_capability", "nvmlDeviceGetCudaComputeCapability gave " +
                                            std::to_string(major) + "." + std::to_string(minor));
        }
      }
    }
    if (have(api_.utilization, "utilization_percent", "nvmlDeviceGetUtilizationRates")) {
      nvml_utilization util{};
      nvml_return rc = call("nvmlDeviceGetUtilizationRates",
                            [&] { return api_.utilization(dev_, &util); });
      if (ok(rc, "utilization_percent", "nvmlDeviceGetUtilizationRates"))
        gpu_.set_utilization_percent(util.gpu);
    }
    if (have(api_.temperature, "temperature_c", "nvmlDeviceGetTemperature")) {
      unsigned int temp = 0;
      nvml_return rc = call("nvmlDeviceGetTemperature",
                            [&] { return api_.temperature(dev_, NVML_TEMPERATURE_GPU, &temp); });
      if (ok(rc, "temperature_c", "nvmlDeviceGetTemperature"))
        gpu_.set_temperature_c(temp);
    }
    if (have(api_.power_usage, "power_watts", "nvmlDeviceGetPowerUsage")) {
      unsigned int mw = 0;
      nvml_return rc =
          call("nvmlDeviceGetPowerUsage", [&] { return api_.power_usage(dev_, &mw); });
      if (ok(rc, "power_watts", "nvmlDeviceGetPowerUsage"))
        gpu_.set_power_watts(mw / 1000.0);
    }
    if (have(api_.enforced_power_limit, "power_limit_watts", "nvmlDeviceGetEnforcedPowerLimit")) {
      unsigned int mw = 0;
      nvml_return rc = call("nvmlDeviceGetEnforcedPowerLimit",
                            [&] { return api_.enforced_power_limit(dev_, &mw); });
      if (ok(rc, "power_limit_watts", "nvmlDeviceGetEnforcedPowerLimit"))
        gpu_.set_power_limit_watts(mw / 1000.0);
    }
    if (have(api_.clock, "sm_clock_mhz", "nvmlDeviceGetClockInfo")) {
      unsigned int mhz = 0;
      nvml_return rc =
          call("nvmlDeviceGetClockInfo", [&] { return api_.clock(dev_, NVML_CLOCK_SM, &mhz); });
      if (ok(rc, "sm_clock_mhz", "nvmlDeviceGetClockInfo"))
        gpu_.set_sm_clock_mhz(mhz);
      rc = call("nvmlDeviceGetClockInfo", [&] { return api_.clock(dev_, NVML_CLOCK_MEM, &mhz); });
      if (ok(rc, "memory_clock_mhz", "nvmlDeviceGetClockInfo"))
        gpu_.set_memory_clock_mhz(mhz);
    } else {
      unknown("memory_clock_mhz", "nvmlDeviceGetClockInfo not in this driver");
    }
    if (have(api_.fan_speed, "fan_percent", "nvmlDeviceGetFanSpeed")) {
      unsigned int pct = 0;
      nvml_return rc = call("nvmlDeviceGetFanSpeed", [&] { return api_.fan_speed(dev_, &pct); });
      if (ok(rc, "fan_percent", "nvmlDeviceGetFanSpeed"))
        gpu_.set_fan_percent(pct);
    }
    if (have(api_.pcie_replay_counter, "pcie_replays", "nvmlDeviceGetPcieReplayCounter")) {
      unsigned int replays = 0;
      nvml_return rc = call("nvmlDeviceGetPcieReplayCounter",
                            [&] { return api_.pcie_replay_counter(dev_, &replays); });
      if (ok(rc, "pcie_replays", "nvmlDeviceGetPcieReplayCounter"))
        gpu_.set_pcie_replays(replays);
    }
    // Newer drivers name it "event reasons"; the "throttle reasons" symbol
    // is the same call, kept for older drivers.
    auto reasons_fn = api_.clocks_event_reasons ? api_.clocks_event_reasons
                                                : api_.clocks_throttle_reasons;
    const char* reasons_name = api_.clocks_event_reasons
                                   ? "nvmlDeviceGetCurrentClocksEventReasons"
                                   : "nvmlDeviceGetCurrentClocksThrottleReasons";
    if (have(reasons_fn, "thermal_slowdown", reasons_name)) {
      unsigned long long reasons = 0;
      nvml_return rc = call(reasons_name, [&] { return reasons_fn(dev_, &reasons); });
      if (ok(rc, "thermal_slowdown", reasons_name))
        gpu_.set_thermal_slowdown(
            (reasons & (kReasonHwThermalSlowdown | kReasonSwThermalSlowdown | kReasonHwSlowdown)) !=
            0);
    }
  }

  void read_memory_errors() {
    if (have(api_.ecc_total, "ecc", "nvmlDeviceGetTotalEccErrors")) {
      struct counter {
        unsigned int error_type, counter_type;
        void (v1::EccCounts::*set)(uint64_t);
      };
      const counter counters[] = {
          {NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC,
           &v1::EccCounts::set_volatile_correctable},
          {NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC,
           &v1::EccCounts::set_volatile_uncorrectable},
          {NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC,
           &v1::EccCounts::set_aggregate_correctable},
          {NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC,
           &v1::EccCounts::set_aggregate_uncorrectable},
      };
      for (const auto& c : counters) {
        unsigned long long n = 0;
        nvml_return rc = call("nvmlDeviceGetTotalEccErrors", [&] {
          return api_.ecc_total(dev_, c.error_type, c.counter_type, &n);
        });
        if (ok(rc, "ecc", "nvmlDeviceGetTotalEccErrors"))
          (gpu_.mutable_ecc()->*c.set)(n);
      }
    }

    if (have(api_.retired_pages, "retired_pages", "nvmlDeviceGetRetiredPages")) {
      struct cause {
        unsigned int cause;
        void (v1::RetiredPages::*set)(uint64_t);
      };
      const cause causes[] = {
          {NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
           &v1::RetiredPages::set_single_bit},
          {NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, &v1::RetiredPages::set_double_bit},
      };
      bool any = false;
      for (const auto& c : causes) {
        // A zero-sized buffer asks for the count only; NVML answers
        // INSUFFICIENT_SIZE when there are pages, with the count filled in.
        unsigned int count = 0;
        nvml_return rc = call("nvmlDeviceGetRetiredPages",
                              [&] { return api_.retired_pages(dev_, c.cause, &count, nullptr); });
        if (rc == NVML_ERROR_INSUFFICIENT_SIZE)
          rc = NVML_SUCCESS;
        if (ok(rc, "retired_pages", "nvmlDeviceGetRetiredPages")) {
          (gpu_.mutable_retired_pages()->*c.set)(count);
          any = true;
        }
      }
      if (any && have(api_.retired_pages_pending, "retired_pages.pending",
                      "nvmlDeviceGetRetiredPagesPendingStatus")) {
        unsigned int pending = 0;
        nvml_return rc = call("nvmlDeviceGetRetiredPagesPendingStatus",
                              [&] { return api_.retired_pages_pending(dev_, &pending); });
        if (ok(rc, "retired_pages.pending", "nvmlDeviceGetRetiredPagesPendingStatus"))
          gpu_.mutable_retired_pages()->set_pending(pending == NVML_FEATURE_ENABLED);
      }
    }

    if (have(api_.remapped_rows, "row_remapping", "nvmlDeviceGetRemappedRows")) {
      unsigned int corrected = 0, uncorrected = 0, pending = 0, failed = 0;
      nvml_return rc = call("nvmlDeviceGetRemappedRows", [&] {
        return api_.remapped_rows(dev_, &corrected, &uncorrected, &pending, &failed);
      });
      if (ok(rc, "row_remapping", "nvmlDeviceGetRemappedRows")) {
        auto* rows = gpu_.mutable_row_remapping();
        rows->set_correctable_rows(corrected);
        rows->set_uncorrectable_rows(uncorrected);
        rows->set_pending(pending != 0);
        rows->set_failed(failed != 0);
      }
    }
  }

  /// The driver's recovery action (r550+). A driver that does not know the
  /// field answers it with NOT_SUPPORTED or INVALID_ARGUMENT: left unset,
  /// silently, as a GPU without the feature.
  void read_recovery_action() {
    if (!api_.field_values)
      return;
    nvml_field_value v{};
    v.fieldId = kFieldRecoveryAction;
    nvml_return rc = call("nvmlDeviceGetFieldValues",
                          [&] { return api_.field_values(dev_, 1, &v); });
    if (rc == NVML_ERROR_INVALID_ARGUMENT)
      return;
    if (!ok(rc, "recovery_action", "nvmlDeviceGetFieldValues"))
      return;
    if (v.nvmlReturn == NVML_SUCCESS)
      gpu_.set_recovery_action(static_cast<uint32_t>(v.value & 0xffffffffu));
    else if (v.nvmlReturn != NVML_ERROR_NOT_SUPPORTED
             && v.nvmlReturn != NVML_ERROR_INVALID_ARGUMENT)
      unknown("recovery_action",
              "nvmlDeviceGetFieldValues(GPU_RECOVERY_ACTION) returned "
                + return_text(v.nvmlReturn));
  }

  void read_nvlinks() {
    if (!have(api_.nvlink_state, "nvlinks", "nvmlDeviceGetNvLinkState"))
      return;
    for (unsigned int link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
      unsigned int active = 0;
      nvml_return rc = call("nvmlDeviceGetNvLinkState",
                            [&] { return api_.nvlink_state(dev_, link, &active); });
      // NOT_SUPPORTED / INVALID_ARGUMENT: no such link on this GPU.
      if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT ||
          rc == NVML_ERROR_NOT_FOUND)
        continue;
      std::string field = "nvlinks[" + std::to_string(link) + "]";
      if (!ok(rc, field.c_str(), "nvmlDeviceGetNvLinkState"))
        continue;
      auto* l = gpu_.add_nvlinks();
      l->set_link(link);
      l->set_active(active == NVML_FEATURE_ENABLED);
      l->set_remote_kind("unknown");
      if (!l->active())
        continue;

      if (have(api_.nvlink_remote_pci, "nvlinks.remote_pci_address",
               "nvmlDeviceGetNvLinkRemotePciInfo_v2")) {
        nvml_pci_info pci{};
        rc = call("nvmlDeviceGetNvLinkRemotePciInfo_v2",
                  [&] { return api_.nvlink_remote_pci(dev_, link, &pci); });
        if (ok(rc, "nvlinks.remote_pci_address", "nvmlDeviceGetNvLinkRemotePciInfo_v2"))
          l->set_remote_pci_address(pci_text(pci));
      }
      if (have(api_.nvlink_remote_type, "nvlinks.remote_kind",
               "nvmlDeviceGetNvLinkRemoteDeviceType")) {
        unsigned int type = 0xFF;
        rc = call("nvmlDeviceGetNvLinkRemoteDeviceType",
                  [&] { return api_.nvlink_remote_type(dev_, link, &type); });
        if (ok(rc, "nvlinks.remote_kind", "nvmlDeviceGetNvLinkRemoteDeviceType"))
          l->set_remote_kind(type == NVML_NVLINK_DEVICE_TYPE_SWITCH ? "switch"
                             : type == NVML_NVLINK_DEVICE_TYPE_GPU  ? "gpu"
                                                                    : "unknown");
      }
      if (have(api_.nvlink_error_counter, "nvlinks.errors", "nvmlDeviceGetNvLinkErrorCounter")) {
        struct counter {
          unsigned int id;
          void (v1::NvLink::*set)(uint64_t);
        };
        const counter counters[] = {
            {NVML_NVLINK_ERROR_DL_REPLAY, &v1::NvLink::set_replay_errors},
            {NVML_NVLINK_ERROR_DL_RECOVERY, &v1::NvLink::set_recovery_errors},
            {NVML_NVLINK_ERROR_DL_CRC_FLIT, &v1::NvLink::set_crc_errors},
        };
        for (const auto& c : counters) {
          unsigned long long n = 0;
          rc = call("nvmlDeviceGetNvLinkErrorCounter",
                    [&] { return api_.nvlink_error_counter(dev_, link, c.id, &n); });
          if (ok(rc, "nvlinks.errors", "nvmlDeviceGetNvLinkErrorCounter"))
            (l->*c.set)(n);
        }
      }
    }
  }

  void read_fabric() {
    if (!have(api_.fabric_info, "fabric", "nvmlDeviceGetGpuFabricInfo"))
      return;
    nvml_fabric_info info{};
    nvml_return rc =
        call("nvmlDeviceGetGpuFabricInfo", [&] { return api_.fabric_info(dev_, &info); });
    if (rc == NVML_ERROR_NOT_SUPPORTED) {
      gpu_.mutable_fabric()->set_state("not-supported");
      return;
    }
    if (!ok(rc, "fabric", "nvmlDeviceGetGpuFabricInfo"))
      return;
    auto* fabric = gpu_.mutable_fabric();
    fabric->set_state(fabric_state_text(info.state));
    fabric->set_health("unknown");
    if (info.state != NVML_GPU_FABRIC_STATE_COMPLETED)
      return;
    // status, UUID and clique are meaningful once registration completed.
    fabric->set_status(static_cast<uint32_t>(info.status));
    fabric->set_cluster_uuid(uuid_text(info.clusterUuid));
    fabric->set_clique_id(info.cliqueId);
    if (!api_.fabric_info_v)
      return;  // health needs the versioned call; "unknown" it stays
    nvml_fabric_info_v2 v2{};
    v2.version = kFabricInfoV2;
    rc = call("nvmlDeviceGetGpuFabricInfoV", [&] { return api_.fabric_info_v(dev_, &v2); });
    if (rc != NVML_SUCCESS)
      return;
    unsigned int route = (v2.healthMask >> NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY) &
                         NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_UNHEALTHY;
    if (route == NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE)
      fabric->set_health("route-unhealthy");
    else if (route == NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE)
      fabric->set_health("healthy");
  }

  const nvml_api& api_;
  worker_state& w_;
  const nvml_options& opts_;
  unsigned index_;
  v1::Gpu& gpu_;
  nvml_device dev_ = nullptr;
};

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
          gpu_reader(api_copy, *state, opts_copy, i, out).read();
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
