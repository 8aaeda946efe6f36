#pragma once
/// @file
/// NVML's public ABI as runtime/gpu/nvml.cpp uses it: the C types,
/// constants and function signatures, written out by hand (nvml.h is not in
/// Debian main), and the table of entry points resolved with dlsym. They
/// must match NVML exactly; a wrong layout would corrupt memory on a real
/// driver. Sources: NVML API reference / nvml.h (CUDA 12.x).
/// Internal to the NVIDIA prober (runtime/gpu/nvml*.cpp) and the burn-in's
/// NVML watch (runtime/validation/nvml_watch.cpp).

#include <cstddef>
#include <string>

namespace astraeus::nvml_abi {

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

/// nvmlEventSet_t: an opaque pointer.
using nvml_event_set = struct nvml_event_set_st*;
/// nvmlEventData_t: one event from nvmlEventSetWait_v2.
struct nvml_event_data {
  nvml_device device;
  unsigned long long eventType;
  unsigned long long eventData;  // the Xid, for nvmlEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
static_assert(sizeof(nvml_event_data) == 32, "nvmlEventData_t layout");
/// nvmlEventTypeXidCriticalError.
constexpr unsigned long long kEventTypeXidCriticalError = 0x8;
/// NVML_ERROR_TIMEOUT: nvmlEventSetWait_v2 saw no event in time.
constexpr nvml_return NVML_ERROR_TIMEOUT = 10;

/// NVML return codes by name, for details (nvmlErrorString is not called:
/// it is one more call into a driver that may be hung).
std::string return_text(nvml_return rc);

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
  // Events (the burn-in's Xid watch; optional).
  nvml_return (*event_set_create)(nvml_event_set*) = nullptr;
  nvml_return (*register_events)(nvml_device, unsigned long long, nvml_event_set) = nullptr;
  nvml_return (*event_set_wait)(nvml_event_set, nvml_event_data*, unsigned int) = nullptr;  // _v2
  nvml_return (*event_set_free)(nvml_event_set) = nullptr;
};

/// Resolves every entry point; returns the first missing required symbol,
/// or nullptr.
const char* resolve_all(void* lib, nvml_api& api);

/// Text from a fixed NVML buffer: stops at NUL or the buffer's end, keeps
/// printable ASCII only (protobuf strings must be UTF-8), trims spaces.
std::string buffer_text(const char* buf, std::size_t size);

} // namespace astraeus::nvml_abi
