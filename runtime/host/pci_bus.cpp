#include "runtime/host/pci_bus.hpp"
#include "runtime/host/iommu_group.hpp"

#include <algorithm>
#include <cerrno>
#include <csetjmp>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string_view>

extern "C" {
#include <pci/pci.h>
}

#include <spdlog/spdlog.h>

#include "runtime/host/host_facts.hpp"
#include "runtime/host/sysfs_text.hpp"

namespace astraeus {

namespace {

namespace fs = std::filesystem;

constexpr size_t max_file_bytes = 1u << 20;

// A small sysfs file: its text, or absent (ENOENT, ENOTDIR), or an error.
struct file_read {
  bool exists = false;
  bool ok = false;
  std::string text;
  std::string error;
};

file_read read_file(const std::string& path) {
  auto file = read_small_file(path, max_file_bytes);
  file_read r;
  r.exists = file.opened || (file.error != ENOENT && file.error != ENOTDIR);
  if (file.too_large)
    r.error = "larger than " + std::to_string(max_file_bytes) + " bytes";
  else if (file.error != 0)
    r.error = std::strerror(file.error);
  else
    r.ok = true;
  r.text = std::move(file.text);
  return r;
}

// The value of "KEY=value" in a uevent file; nullopt when there is no such
// line.
std::optional<std::string> uevent_value(std::string_view text, std::string_view key) {
  for (auto line : nonblank_lines(text)) {
    if (line.size() > key.size() && starts_with(line, key) && line[key.size()] == '=')
      return std::string{line.substr(key.size() + 1)};
  }
  return std::nullopt;
}

std::string hex4(uint32_t value) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%04x", value);
  return buf;
}

// --- libpci -----------------------------------------------------------------

// libpci reports a broken pci.ids through a->error, which must not return;
// it jumps back to the lookup instead. Guarded by lookup_mutex.
std::mutex lookup_mutex;
std::jmp_buf* lookup_jump = nullptr;

void libpci_error(char* msg, ...) {
  char text[512];
  va_list args;
  va_start(args, msg);
  std::vsnprintf(text, sizeof text, msg, args);
  va_end(args);
  spdlog::warn("PCI database: {}", trim(text));
  if (lookup_jump)
    std::longjmp(*lookup_jump, 1);
  std::abort();  // not reached: libpci is only called under lookup_jump
}

void libpci_warning(char* msg, ...) {
  char text[512];
  va_list args;
  va_start(args, msg);
  std::vsnprintf(text, sizeof text, msg, args);
  va_end(args);
  spdlog::debug("PCI database: {}", trim(text));
}

void libpci_debug(char*, ...) {}

// The process's one pci_access, used only for name lookups (pci_init is not
// called: it probes bus access methods and fails where there is no PCI bus,
// e.g. in a container). nullptr after it failed.
pci_access* name_access(bool& failed) {
  static pci_access* access = nullptr;
  if (failed)
    return nullptr;
  if (!access) {
    access = pci_alloc();
    if (!access) {
      failed = true;
      return nullptr;
    }
    access->error = libpci_error;
    access->warning = libpci_warning;
    access->debug = libpci_debug;
    // No ~/.pciids-cache (only useful with network lookups, never done).
    access->id_lookup_mode = 0;
  }
  return access;
}

std::string lookup(int flags, uint16_t vendor_id, uint16_t device_id) {
  std::lock_guard<std::mutex> lock(lookup_mutex);
  static bool failed = false;
  pci_access* access = name_access(failed);
  if (!access)
    return {};
  // No object with a destructor lives between setjmp and a longjmp to it.
  char buf[512];
  const char* name = nullptr;
  std::jmp_buf jump;
  if (setjmp(jump) == 0) {
    lookup_jump = &jump;
    name = pci_lookup_name(access, buf, sizeof buf, flags | PCI_LOOKUP_NO_NUMBERS,
                           static_cast<int>(vendor_id), static_cast<int>(device_id));
  } else {
    failed = true;  // the access is in an unknown state: leak it, stop using it
    name = nullptr;
  }
  lookup_jump = nullptr;
  return name ? to_valid_utf8(name) : std::string{};
}

std::string vendor_name(uint32_t vendor_id) {
  switch (vendor_id) {
  case 0x10de:
    return "nvidia";
  case 0x1002:
    return "amd";
  case 0x8086:
    return "intel";
  default:
    return "other";
  }
}

std::string relative(const std::string& root, const std::string& path) {
  return path.substr(root.size());
}

} // namespace

std::string pci_device_name(uint16_t vendor_id, uint16_t device_id) {
  return lookup(PCI_LOOKUP_VENDOR | PCI_LOOKUP_DEVICE, vendor_id, device_id);
}

std::string pci_device_only_name(uint16_t vendor_id, uint16_t device_id) {
  return lookup(PCI_LOOKUP_DEVICE, vendor_id, device_id);
}

std::string pci_missing_text(const std::string& vendor, const std::string& driver) {
  if (driver == "vfio-pci")
    return "bound to vfio-pci (passed through to a VM)";
  if (vendor == "nvidia") {
    if (driver.empty())
      return "no driver bound: install the NVIDIA driver";
    if (driver == "nouveau")
      return "held by nouveau, not the NVIDIA driver";
    if (driver != "nvidia")
      return "bound to " + driver + ", not the NVIDIA driver";
    return {};
  }
  if (vendor == "amd") {
    if (driver.empty())
      return "no driver bound: load amdgpu (modprobe amdgpu) with the GPU firmware";
    if (driver != "amdgpu")
      return "bound to " + driver + ", not amdgpu";
    return {};
  }
  if (vendor == "intel") {
    if (driver.empty())
      return "no driver bound: load i915 or xe";
    if (driver != "i915" && driver != "xe")
      return "bound to " + driver + ", not i915 or xe";
    return {};
  }
  return driver.empty() ? "no driver bound" : "";
}

pci_numa_node read_pci_numa_node(const std::string& root_in, const std::string& address) {
  pci_numa_node out;
  const std::string root = root_prefix(root_in);
  const std::string path = root + "/sys/bus/pci/devices/" + address + "/numa_node";
  auto numa = read_file(path);
  if (!numa.ok) {
    out.absent = !numa.exists;
    out.error = relative(root, path) + ": " + (numa.exists ? numa.error : "missing");
    return out;
  }
  auto node = parse_i64(numa.text);
  if (!node || *node < -1 || *node > INT32_MAX)
    out.error = relative(root, path) + ": not a number '" + std::string{trim(numa.text)} + "'";
  else if (*node >= 0)
    out.node = static_cast<int32_t>(*node);
  return out;
}

bus_scan scan_pci_gpus(const std::string& root_in) {
  bus_scan scan;
  const std::string root = root_prefix(root_in);
  const std::string dir = root + "/sys/bus/pci/devices";

  std::error_code err;
  std::vector<std::string> names;
  for (fs::directory_iterator it{dir, err}, end; !err && it != end; it.increment(err))
    names.push_back(it->path().filename().string());
  if (err && err != std::errc::no_such_file_or_directory)
    scan.warnings.push_back(relative(root, dir) + ": " + err.message());
  std::sort(names.begin(), names.end());

  for (const auto& name : names) {
    const std::string base = dir + "/" + name;
    auto warn = [&](const std::string& file, const std::string& what) {
      scan.warnings.push_back(to_valid_utf8(relative(root, base + "/" + file) + ": " + what));
    };

    auto class_file = read_file(base + "/class");
    if (!class_file.ok) {
      warn("class", class_file.exists ? class_file.error : "missing");
      continue;
    }
    auto pci_class = parse_hex_u32(class_file.text);
    if (!pci_class) {
      warn("class", "not a hex number '" + std::string{trim(class_file.text)} + "'");
      continue;
    }
    uint32_t base_class = (*pci_class >> 16) & 0xff;
    if (base_class != 0x03 && base_class != 0x12)
      continue;

    auto uevent = read_file(base + "/uevent");
    std::optional<uint32_t> vendor_id, device_id;
    for (auto [file, out] : {std::pair{"vendor", &vendor_id}, std::pair{"device", &device_id}}) {
      auto f = read_file(base + "/" + file);
      if (f.ok) {
        *out = parse_hex_u32(f.text);
        if (!*out)
          warn(file, "not a hex number '" + std::string{trim(f.text)} + "'");
      } else if (f.exists) {
        warn(file, f.error);
      }
    }
    if ((!vendor_id || !device_id) && uevent.ok) {
      // PCI_ID=10DE:2330
      if (auto id = uevent_value(uevent.text, "PCI_ID")) {
        auto colon = id->find(':');
        if (colon != std::string::npos) {
          if (!vendor_id)
            vendor_id = parse_hex_u32(std::string_view{*id}.substr(0, colon));
          if (!device_id)
            device_id = parse_hex_u32(std::string_view{*id}.substr(colon + 1));
        }
      }
    }
    if (!vendor_id || !device_id || *vendor_id > 0xffff || *device_id > 0xffff) {
      warn("vendor", "vendor or device id unknown; device skipped");
      continue;
    }

    v1::BusGpu gpu;
    gpu.set_pci_address(to_valid_utf8(name));
    gpu.set_vendor(vendor_name(*vendor_id));
    gpu.set_vendor_id(hex4(*vendor_id));
    gpu.set_device_id(hex4(*device_id));
    gpu.set_name(pci_device_name(static_cast<uint16_t>(*vendor_id),
                                 static_cast<uint16_t>(*device_id)));

    std::string driver;
    if (uevent.ok) {
      driver = uevent_value(uevent.text, "DRIVER").value_or("");
    } else {
      if (uevent.exists)
        warn("uevent", uevent.error);
      auto target = fs::read_symlink(base + "/driver", err);
      if (!err)
        driver = target.filename().string();
    }
    gpu.set_driver(to_valid_utf8(driver));
    gpu.set_missing(pci_missing_text(gpu.vendor(), driver));
    if (driver == "vfio-pci")
      if (auto held = iommu_group_host_devices(root_in, name); !held.empty()) {
        std::string list;
        for (const auto& h : held)
          list += (list.empty() ? "" : ", ") + h;
        gpu.set_missing(gpu.missing() + "; its IOMMU group still holds " + list
                        + " on host drivers: passing it to a VM would fail");
      }

    auto numa = read_pci_numa_node(root_in, name);
    if (numa.node)
      gpu.set_numa_node(*numa.node);
    else if (!numa.error.empty() && !numa.absent)
      scan.warnings.push_back(to_valid_utf8(numa.error));
    scan.gpus.push_back(std::move(gpu));
  }
  return scan;
}

} // namespace astraeus
