// NVML's entry points resolved with dlsym, and its return codes by name
// (see nvml_abi.hpp).

#include "runtime/gpu/nvml_abi.hpp"

#include <dlfcn.h>

#include <map>

namespace astraeus::nvml_abi {

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

namespace {

template <class Fn>
void resolve(void* lib, Fn& slot, const char* symbol) {
  slot = reinterpret_cast<Fn>(::dlsym(lib, symbol));
}

} // namespace

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
  resolve(lib, api.event_set_create, "nvmlEventSetCreate");
  resolve(lib, api.register_events, "nvmlDeviceRegisterEvents");
  resolve(lib, api.event_set_wait, "nvmlEventSetWait_v2");
  resolve(lib, api.event_set_free, "nvmlEventSetFree");
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

} // namespace astraeus::nvml_abi
