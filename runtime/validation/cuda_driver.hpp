#pragma once
/// @file
/// The CUDA driver API as the checks use it, loaded with dlopen at run time
/// from a configurable path (default `libcuda.so.1`), as NVML is
/// (runtime/gpu/nvml.hpp; DESIGN.md, "Host access"): no cuda.h, no link
/// dependency. The types and signatures below are written out by hand from
/// the CUDA driver API reference (cuda.h, CUDA 12.x) and must match it
/// exactly. Tests load a stand-in libcuda.so (test/stand_in/cuda_stand_in.cpp)
/// through the same code.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

namespace astraeus::validation {

/// CUresult, CUdevice and the opaque handles of cuda.h.
using cu_result = int;
using cu_device = int;
using cu_context = struct cu_ctx_st*;
using cu_stream = struct cu_stream_st*;
using cu_event = struct cu_event_st*;
using cu_module = struct cu_mod_st*;
using cu_function = struct cu_func_st*;
using cu_deviceptr = unsigned long long;  // CUdeviceptr_v2

/// CUDA_SUCCESS.
inline constexpr cu_result cu_success = 0;
/// CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT.
inline constexpr int cu_attr_multiprocessor_count = 16;
/// CU_STREAM_NON_BLOCKING.
inline constexpr unsigned cu_stream_non_blocking = 1;

/// The entry points, resolved with dlsym (the _v2 names where cuda.h maps
/// the plain name to one).
struct cuda_api {
  cu_result (*init)(unsigned) = nullptr;                                // cuInit
  cu_result (*device_count)(int*) = nullptr;                            // cuDeviceGetCount
  cu_result (*device_get)(cu_device*, int) = nullptr;                   // cuDeviceGet
  cu_result (*device_name)(char*, int, cu_device) = nullptr;            // cuDeviceGetName
  cu_result (*device_uuid)(unsigned char*, cu_device) = nullptr;        // cuDeviceGetUuid
  cu_result (*device_pci_bus_id)(char*, int, cu_device) = nullptr;      // cuDeviceGetPCIBusId
  cu_result (*device_attribute)(int*, int, cu_device) = nullptr;        // cuDeviceGetAttribute
  cu_result (*can_access_peer)(int*, cu_device, cu_device) = nullptr;   // cuDeviceCanAccessPeer
  cu_result (*primary_ctx_retain)(cu_context*, cu_device) = nullptr;    // cuDevicePrimaryCtxRetain
  cu_result (*primary_ctx_release)(cu_device) = nullptr;                // cuDevicePrimaryCtxRelease_v2
  cu_result (*ctx_set_current)(cu_context) = nullptr;                   // cuCtxSetCurrent
  cu_result (*ctx_enable_peer_access)(cu_context, unsigned) = nullptr;  // cuCtxEnablePeerAccess
  cu_result (*mem_alloc)(cu_deviceptr*, size_t) = nullptr;              // cuMemAlloc_v2
  cu_result (*mem_free)(cu_deviceptr) = nullptr;                        // cuMemFree_v2
  cu_result (*mem_alloc_host)(void**, size_t) = nullptr;                // cuMemAllocHost_v2
  cu_result (*mem_free_host)(void*) = nullptr;                          // cuMemFreeHost
  cu_result (*memcpy_htod_async)(cu_deviceptr, const void*, size_t, cu_stream) = nullptr;
  cu_result (*memcpy_dtoh_async)(void*, cu_deviceptr, size_t, cu_stream) = nullptr;
  cu_result (*memcpy_dtod_async)(cu_deviceptr, cu_deviceptr, size_t, cu_stream) = nullptr;
  cu_result (*memcpy_peer_async)(cu_deviceptr, cu_context, cu_deviceptr, cu_context, size_t,
                                 cu_stream) = nullptr;                  // cuMemcpyPeerAsync
  cu_result (*stream_create)(cu_stream*, unsigned) = nullptr;           // cuStreamCreate
  cu_result (*stream_destroy)(cu_stream) = nullptr;                     // cuStreamDestroy_v2
  cu_result (*stream_synchronize)(cu_stream) = nullptr;                 // cuStreamSynchronize
  cu_result (*event_create)(cu_event*, unsigned) = nullptr;             // cuEventCreate
  cu_result (*event_destroy)(cu_event) = nullptr;                       // cuEventDestroy_v2
  cu_result (*event_record)(cu_event, cu_stream) = nullptr;             // cuEventRecord
  cu_result (*event_synchronize)(cu_event) = nullptr;                   // cuEventSynchronize
  cu_result (*event_elapsed)(float*, cu_event, cu_event) = nullptr;     // cuEventElapsedTime
  cu_result (*module_load_data)(cu_module*, const void*) = nullptr;     // cuModuleLoadData
  cu_result (*module_unload)(cu_module) = nullptr;                      // cuModuleUnload
  cu_result (*module_function)(cu_function*, cu_module, const char*) = nullptr;
  cu_result (*launch_kernel)(cu_function, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, cu_stream, void**, void**) = nullptr;
  cu_result (*error_name)(cu_result, const char**) = nullptr;           // cuGetErrorName
};

/// One GPU as CUDA sees it.
struct cuda_gpu {
  cu_device device = 0;
  int ordinal = 0;
  std::string uuid;         ///< "GPU-5f1e...", as NVML writes it
  std::string pci_address;  ///< "0000:3b:00.0" (normalised)
  std::string name;
  int multiprocessors = 0;
};

/// The loaded driver: the library stays loaded while this lives.
class cuda_driver {
public:
  /// dlopen()s `library`, resolves every entry point and calls cuInit(0).
  /// Errors: ec::host_read_failure "dlopen libcuda.so.1: ..." or
  /// "<lib> has no <symbol>: not a CUDA driver library", or "cuInit
  /// returned CUDA_ERROR_NO_DEVICE (100)".
  static caf::expected<std::unique_ptr<cuda_driver>> load(const std::string& library);
  ~cuda_driver();
  cuda_driver(const cuda_driver&) = delete;
  cuda_driver& operator=(const cuda_driver&) = delete;

  /// The entry points.
  const cuda_api& api() const { return api_; }

  /// Every GPU, in CUDA ordinal order. Errors: the failing call, named.
  caf::expected<std::vector<cuda_gpu>> gpus() const;

  /// "cuMemAlloc_v2 returned CUDA_ERROR_OUT_OF_MEMORY (2)"; `call` is the
  /// entry point's name.
  std::string describe(const char* call, cu_result rc) const;

private:
  explicit cuda_driver(void* handle) : handle_(handle) {}
  void* handle_ = nullptr;
  cuda_api api_;
};

struct check_result;

/// The loaded driver and its GPUs, for a check.
struct cuda_gpus {
  std::unique_ptr<cuda_driver> driver;
  std::vector<cuda_gpu> gpus;
};

/// Loads `library` and lists its GPUs for check `out`: on failure adds a
/// fail finding with the fix ("install the NVIDIA driver's CUDA library
/// ..."), unless the PCI bus under `host_root` has no NVIDIA GPU at all:
/// then `out` is skipped with "no NVIDIA GPU on the PCI bus: <why>" (a CPU
/// machine passes acceptance on what it has); with no GPU listed sets `out`
/// skipped with "CUDA lists no GPU: <why>". nullopt in these cases.
std::optional<cuda_gpus> load_cuda_gpus(const std::string& library, const std::string& why,
                                        check_result& out, const std::string& host_root = "/");

/// CUDA's 16 UUID bytes -> "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (as
/// NVML and nvidia-smi write it).
std::string cuda_uuid_text(const unsigned char bytes[16]);

}  // namespace astraeus::validation
