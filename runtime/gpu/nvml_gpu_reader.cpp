// Reading one NVIDIA GPU (see nvml_gpu_reader.hpp).

#include "runtime/gpu/nvml_gpu_reader.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "messages/gpu_read.hpp"

namespace astraeus::nvml_abi {
namespace {

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

}  // namespace

void read_gpu(const nvml_api& api, worker_state& w, const nvml_options& opts, unsigned index,
              v1::Gpu& gpu) {
  gpu_reader(api, w, opts, index, gpu).read();
}

} // namespace astraeus::nvml_abi
