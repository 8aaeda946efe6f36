#include "runtime/gpu/amd_gpus.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include "messages/gpu_read.hpp"
#include "runtime/host/host_facts.hpp"
#include "runtime/host/pci_bus.hpp"
#include "runtime/host/sysfs_text.hpp"

namespace astraeus {

namespace {

namespace fs = std::filesystem;

constexpr size_t max_file_bytes = 1u << 20;

std::string shown_value(std::string_view text) {
  text = trim(text);
  std::string shown{text.substr(0, 60)};
  for (auto& c : shown)
    if (c == '\n' || c == '\t' || c == '\r')
      c = ' ';
  return "'" + to_valid_utf8(shown) + (text.size() > 60 ? "...'" : "'");
}

// Reads files under one root and collects warnings with root-relative paths.
struct reader {
  std::string root;  // "" for "/"
  std::vector<std::string>& warnings;

  std::string rel(const std::string& path) const {
    return path.substr(root.size());
  }

  void warn(const std::string& path, const std::string& what) {
    warnings.push_back(rel(path) + ": " + to_valid_utf8(what));
  }

  // The file's text; nullopt when absent (silently) or unreadable (with a
  // warning). sysfs attributes fail at read time (EIO, ENODEV, EBUSY while
  // the GPU resets, EOPNOTSUPP where the firmware lacks the value).
  std::optional<std::string> text(const std::string& path) {
    auto file = read_small_file(path, max_file_bytes);
    if (file.too_large) {
      warn(path, "larger than " + std::to_string(max_file_bytes) + " bytes");
      return std::nullopt;
    }
    if (file.error != 0) {
      if (file.opened || (file.error != ENOENT && file.error != ENOTDIR))
        warn(path, std::strerror(file.error));
      return std::nullopt;
    }
    return std::move(file.text);
  }

  // The file's number (parse: parse_u64 or parse_i64); nullopt with a
  // warning when it is empty or not a number, silently when absent.
  template <typename Parse>
  auto number(const std::string& path, Parse parse) -> decltype(parse(std::string_view{})) {
    auto t = text(path);
    if (!t)
      return std::nullopt;
    if (trim(*t).empty()) {
      warn(path, "empty");
      return std::nullopt;
    }
    auto v = parse(*t);
    if (!v)
      warn(path, "not a number " + shown_value(*t));
    return v;
  }

  std::optional<uint64_t> u64(const std::string& path) {
    return number(path, parse_u64);
  }

  std::optional<int64_t> i64(const std::string& path) {
    return number(path, parse_i64);
  }
};

// "KEY=value" lines of a uevent file.
std::map<std::string, std::string> parse_uevent(std::string_view text) {
  std::map<std::string, std::string> values;
  for (auto line : nonblank_lines(text)) {
    auto eq = line.find('=');
    if (eq != std::string_view::npos)
      values[std::string{line.substr(0, eq)}] = std::string{trim(line.substr(eq + 1))};
  }
  return values;
}

// Sorted "<prefix><number>" names in a directory, with their numbers.
std::vector<std::pair<uint64_t, std::string>> numbered_entries(const std::string& dir,
                                                                std::string_view prefix) {
  std::vector<std::pair<uint64_t, std::string>> out;
  std::error_code err;
  for (fs::directory_iterator it{dir, err}, end; !err && it != end; it.increment(err)) {
    auto name = it->path().filename().string();
    if (!starts_with(name, prefix))
      continue;
    auto digits = std::string_view{name}.substr(prefix.size());
    if (!all_digits(digits))
      continue;
    if (auto n = parse_u64(digits))
      out.emplace_back(*n, name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A PCI address "0000:c1:00.0" split into its parts.
struct pci_location {
  uint32_t domain = 0;
  uint32_t location_id = 0;  // bus << 8 | device << 3 | function, as KFD
};

std::optional<pci_location> parse_pci_address(std::string_view address) {
  // <domain>:<bus>:<device>.<function>
  auto c1 = address.find(':');
  if (c1 == std::string_view::npos)
    return std::nullopt;
  auto c2 = address.find(':', c1 + 1);
  auto dot = address.find('.', c1 + 1);
  if (c2 == std::string_view::npos || dot == std::string_view::npos || dot < c2)
    return std::nullopt;
  auto domain = parse_hex_u32(address.substr(0, c1));
  auto bus = parse_hex_u32(address.substr(c1 + 1, c2 - c1 - 1));
  auto device = parse_hex_u32(address.substr(c2 + 1, dot - c2 - 1));
  auto function = parse_hex_u32(address.substr(dot + 1));
  if (!domain || !bus || !device || !function || *bus > 0xff || *device > 0x1f || *function > 7)
    return std::nullopt;
  return pci_location{*domain, (*bus << 8) | (*device << 3) | *function};
}

// One KFD topology GPU node.
struct kfd_node {
  std::string name;
  uint64_t gfx_target_version = 0;
  std::optional<uint32_t> location_id;
  std::optional<uint32_t> domain;  // absent on kernels before 5.x
  std::optional<uint32_t> render_minor;  // drm_render_minor: its renderD<N>
};

std::vector<kfd_node> read_kfd_nodes(reader& r) {
  std::vector<kfd_node> nodes;
  const std::string dir = r.root + "/sys/class/kfd/kfd/topology/nodes";
  for (const auto& [number, name] : numbered_entries(dir, "")) {
    const std::string path = dir + "/" + name + "/properties";
    auto text = r.text(path);
    if (!text)
      continue;
    std::map<std::string, std::string> props;
    for (auto line : nonblank_lines(*text)) {
      auto space = line.find_first_of(" \t");
      if (space == std::string_view::npos)
        continue;
      props[std::string{line.substr(0, space)}] = std::string{trim(line.substr(space))};
    }
    auto gfx = props.find("gfx_target_version");
    if (gfx == props.end()) {
      r.warn(path, "no gfx_target_version");
      continue;
    }
    auto version = parse_u64(gfx->second);
    if (!version) {
      r.warn(path, "gfx_target_version is not a number " + shown_value(gfx->second));
      continue;
    }
    if (*version == 0)
      continue;  // a CPU node
    kfd_node node;
    node.name = name;
    node.gfx_target_version = *version;
    if (auto it = props.find("location_id"); it != props.end()) {
      if (auto v = parse_u64(it->second); v && *v <= UINT32_MAX)
        node.location_id = static_cast<uint32_t>(*v);
      else
        r.warn(path, "location_id is not a number " + shown_value(it->second));
    } else {
      r.warn(path, "no location_id");
    }
    if (auto it = props.find("domain"); it != props.end()) {
      if (auto v = parse_u64(it->second); v && *v <= UINT32_MAX)
        node.domain = static_cast<uint32_t>(*v);
      else
        r.warn(path, "domain is not a number " + shown_value(it->second));
    }
    if (auto it = props.find("drm_render_minor"); it != props.end())
      if (auto v = parse_u64(it->second); v && *v <= UINT32_MAX)
        node.render_minor = static_cast<uint32_t>(*v);
    nodes.push_back(std::move(node));
  }
  return nodes;
}

// Sensors of the GPU's hwmon directory.
void read_hwmon(reader& r, const std::string& device, v1::Gpu& gpu) {
  auto dirs = numbered_entries(device + "/hwmon", "hwmon");
  if (dirs.empty())
    return;
  const std::string hw = device + "/hwmon/" + dirs.front().second;

  // Labelled inputs: "<kind><i>_label" -> i.
  auto labelled = [&](std::string_view kind) {
    std::map<std::string, std::string> by_label;  // label -> input path
    for (int i = 1; i <= 16; ++i) {
      std::string prefix = hw + "/" + std::string{kind} + std::to_string(i);
      if (auto label = r.text(prefix + "_label"))
        by_label.emplace(ascii_lower(trim(*label)), prefix + "_input");
    }
    return by_label;
  };

  auto temps = labelled("temp");
  // Every labelled sensor, shown; the seed's 87 °C sign is judged on edge,
  // the others against their own temp*_crit (actors/controller/gpu_health.cpp).
  for (int i = 1; i <= 16; ++i) {
    std::string prefix = hw + "/temp" + std::to_string(i);
    auto label = r.text(prefix + "_label");
    auto milli = label ? r.i64(prefix + "_input") : std::nullopt;
    if (!milli)
      continue;
    auto* t = gpu.add_temperatures();
    t->set_label(ascii_lower(trim(*label)));
    t->set_celsius(static_cast<double>(*milli) / 1000.0);
    if (auto crit = r.i64(prefix + "_crit"))
      t->set_critical_c(static_cast<double>(*crit) / 1000.0);
  }
  // The one temperature shown in lists: edge, else junction, else mem.
  bool shown = false;
  for (const char* preferred : {"edge", "junction", "mem"})
    for (const auto& t : gpu.temperatures())
      if (!shown && t.label() == preferred) {
        gpu.set_temperature_c(t.celsius());
        shown = true;
      }
  if (temps.empty())  // an unlabelled single sensor
    if (auto milli = r.i64(hw + "/temp1_input"))
      gpu.set_temperature_c(static_cast<double>(*milli) / 1000.0);

  auto power = r.u64(hw + "/power1_average");
  if (!power)
    power = r.u64(hw + "/power1_input");
  if (power)
    gpu.set_power_watts(static_cast<double>(*power) / 1e6);
  if (auto cap = r.u64(hw + "/power1_cap"))
    gpu.set_power_limit_watts(static_cast<double>(*cap) / 1e6);

  auto freqs = labelled("freq");
  auto mhz = [](uint64_t hz) { return static_cast<uint32_t>(std::llround(static_cast<double>(hz) / 1e6)); };
  if (auto it = freqs.find("sclk"); it != freqs.end())
    if (auto hz = r.u64(it->second))
      gpu.set_sm_clock_mhz(mhz(*hz));
  if (auto it = freqs.find("mclk"); it != freqs.end())
    if (auto hz = r.u64(it->second))
      gpu.set_memory_clock_mhz(mhz(*hz));

  std::optional<double> fan;
  if (auto rpm = r.u64(hw + "/fan1_input")) {
    if (auto max = r.u64(hw + "/fan1_max"); max && *max > 0)
      fan = std::min(100.0, 100.0 * static_cast<double>(*rpm) / static_cast<double>(*max));
  }
  if (!fan) {
    if (auto pwm = r.u64(hw + "/pwm1"); pwm && *pwm <= 255)
      fan = 100.0 * static_cast<double>(*pwm) / 255.0;
  }
  if (fan)
    gpu.set_fan_percent(std::round(*fan * 10.0) / 10.0);
}

void read_ras(reader& r, const std::string& device, v1::Gpu& gpu) {
  const std::string umc = device + "/ras/umc_err_count";
  if (auto text = r.text(umc)) {
    bool ue_seen = false, ce_seen = false;
    for (auto line : nonblank_lines(*text)) {
      auto colon = line.find(':');
      if (colon == std::string_view::npos)
        continue;
      auto key = trim(line.substr(0, colon));
      auto value = trim(line.substr(colon + 1));
      auto n = parse_u64(value);
      if (key == "ue") {
        ue_seen = true;
        if (n)
          gpu.set_ras_uncorrectable(*n);
        else
          r.warn(umc, "ue is not a number " + shown_value(value));
      } else if (key == "ce") {
        ce_seen = true;
        if (n)
          gpu.set_ras_correctable(*n);
        else
          r.warn(umc, "ce is not a number " + shown_value(value));
      }
    }
    if (!ue_seen || !ce_seen)
      r.warn(umc, std::string{"no "} + (!ue_seen && !ce_seen ? "'ue:' or 'ce:'" : !ue_seen ? "'ue:'" : "'ce:'")
                      + " line");
  }
  if (auto text = r.text(device + "/ras/gpu_vram_bad_pages"))
    gpu.set_bad_vram_pages(nonblank_lines(*text).size());
}

struct model_entry {
  uint16_t device_id;
  uint32_t vram_gib;  // 0: any
  const char* name;
  bool instinct;
};

// Keep in sync with amd_model_from_device_id's documentation.
constexpr model_entry model_table[] = {
    {0x74a1, 0, "AMD Instinct MI300X", true},
    {0x74a5, 0, "AMD Instinct MI325X", true},
    {0x74a0, 0, "AMD Instinct MI300A", true},
    {0x740f, 0, "AMD Instinct MI210", true},
    {0x7408, 0, "AMD Instinct MI250X", true},
    {0x740c, 0, "AMD Instinct MI250X/MI250", true},
    {0x738c, 0, "AMD Instinct MI100", true},
    {0x738e, 0, "AMD Instinct MI100", true},
    {0x744c, 24, "AMD Radeon RX 7900 XTX", false},
    {0x744c, 20, "AMD Radeon RX 7900 XT", false},
    {0x744c, 16, "AMD Radeon RX 7900 GRE", false},
    {0x7448, 0, "AMD Radeon PRO W7900", false},
};

bool instinct_device(uint16_t device_id) {
  return std::any_of(std::begin(model_table), std::end(model_table),
                     [&](const model_entry& e) { return e.device_id == device_id && e.instinct; });
}

bool is_xcp_device(const std::string& device, const std::map<std::string, std::string>& uevent) {
  if (auto it = uevent.find("MODALIAS"); it != uevent.end()
                                         && starts_with(it->second, "platform:amdgpu_xcp"))
    return true;
  std::error_code err;
  auto target = fs::read_symlink(device, err);
  return !err && starts_with(target.filename().string(), "amdgpu_xcp");
}

} // namespace

std::string amd_gfx_target_name(uint64_t version) {
  if (version == 0)
    return {};
  uint64_t major = version / 10000;
  uint64_t minor = (version / 100) % 100;
  uint64_t stepping = version % 100;
  if (minor > 15 || stepping > 15)
    return {};
  char buf[48];
  std::snprintf(buf, sizeof buf, "gfx%llu%llx%llx", static_cast<unsigned long long>(major),
                static_cast<unsigned long long>(minor), static_cast<unsigned long long>(stepping));
  return buf;
}

std::string amd_model_from_device_id(uint16_t device_id, uint64_t vram_bytes) {
  uint64_t gib = (vram_bytes + (1ull << 29)) >> 30;  // to the nearest GiB
  for (const auto& entry : model_table) {
    if (entry.device_id != device_id)
      continue;
    if (entry.vram_gib == 0 || (vram_bytes > 0 && entry.vram_gib == gib))
      return entry.name;
  }
  return {};
}

amd_result read_amd_gpus(const std::string& root_in) {
  amd_result result;
  const std::string root = root_prefix(root_in);
  reader r{root, result.warnings};
  const std::string drm = root + "/sys/class/drm";

  // Render nodes by PCI address (an xcp partition's render node has none).
  std::map<std::string, std::string> render_by_address;
  for (const auto& [minor, name] : numbered_entries(drm, "renderD")) {
    auto text = r.text(drm + "/" + name + "/device/uevent");
    if (!text)
      continue;
    auto uevent = parse_uevent(*text);
    auto slot = uevent.find("PCI_SLOT_NAME");
    if (slot != uevent.end())
      render_by_address.emplace(ascii_lower(slot->second), "/dev/dri/" + name);
  }

  size_t xcp_cards = 0;
  for (const auto& [number, name] : numbered_entries(drm, "card")) {
    const std::string device = drm + "/" + name + "/device";
    auto text = r.text(device + "/uevent");
    if (!text)
      continue;  // a card without a device (virtual), or a warning already
    auto uevent = parse_uevent(*text);
    if (is_xcp_device(device, uevent)) {
      ++xcp_cards;
      continue;
    }
    auto driver = uevent.find("DRIVER");
    if (driver == uevent.end() || driver->second != "amdgpu")
      continue;
    auto slot = uevent.find("PCI_SLOT_NAME");
    if (slot == uevent.end() || !parse_pci_address(slot->second)) {
      r.warn(device + "/uevent", "amdgpu card without a valid PCI_SLOT_NAME; skipped");
      continue;
    }

    v1::Gpu gpu;
    gpu.set_vendor("amd");
    set_read_status(gpu, gpu_read_status::ok);
    gpu.set_index(static_cast<uint32_t>(std::min<uint64_t>(number, UINT32_MAX)));
    gpu.set_card(name);
    gpu.set_pci_address(to_valid_utf8(ascii_lower(slot->second)));

    if (auto uid = r.text(device + "/unique_id")) {
      auto id = ascii_lower(trim(*uid));
      if (starts_with(id, "0x"))
        id = id.substr(2);
      if (!id.empty())
        gpu.set_id("AMD-" + to_valid_utf8(id));
    }
    if (gpu.id().empty())
      gpu.set_id(gpu.pci_address());

    if (auto v = r.u64(device + "/mem_info_vram_total"))
      gpu.set_memory_total_bytes(*v);
    if (auto v = r.u64(device + "/mem_info_vram_used"))
      gpu.set_memory_used_bytes(*v);

    // Device id: the "device" file, else PCI_ID=1002:74A1.
    std::optional<uint32_t> device_id;
    if (auto t = r.text(device + "/device")) {
      device_id = parse_hex_u32(*t);
      if (!device_id)
        r.warn(device + "/device", "not a hex number " + shown_value(*t));
    }
    if (!device_id) {
      if (auto it = uevent.find("PCI_ID"); it != uevent.end()) {
        auto colon = it->second.find(':');
        if (colon != std::string::npos)
          device_id = parse_hex_u32(std::string_view{it->second}.substr(colon + 1));
      }
    }
    if (device_id && *device_id > 0xffff)
      device_id.reset();
    const bool id_known = device_id.has_value();
    const uint16_t pci_device = static_cast<uint16_t>(device_id.value_or(0));

    std::string model;
    if (auto product = r.text(device + "/product_name"))
      model = to_valid_utf8(trim(*product));
    if (model.empty() && id_known)
      model = amd_model_from_device_id(pci_device, gpu.has_memory_total_bytes() ? gpu.memory_total_bytes() : 0);
    if (model.empty() && id_known) {
      auto db = pci_device_only_name(0x1002, pci_device);
      if (!db.empty())
        model = "AMD " + db;
    }
    if (model.empty() && id_known) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "AMD GPU 0x%04x", static_cast<unsigned>(pci_device));
      model = buf;
    }
    gpu.set_model(model);
    gpu.set_data_centre(model.find("Instinct") != std::string::npos
                        || (id_known && instinct_device(pci_device)));

    if (auto v = r.u64(device + "/gpu_busy_percent"))
      gpu.set_utilization_percent(static_cast<double>(*v));
    read_hwmon(r, device, gpu);
    read_ras(r, device, gpu);

    if (auto node = r.i64(device + "/numa_node"); node && *node >= 0 && *node <= INT32_MAX)
      gpu.set_numa_node(static_cast<int32_t>(*node));

    if (auto it = render_by_address.find(gpu.pci_address()); it != render_by_address.end())
      gpu.set_render_node(it->second);
    // The compute partition mode (SPX, DPX, QPX, CPX) where the GPU has one.
    if (auto mode = r.text(device + "/current_compute_partition"))
      gpu.set_partition_mode(to_valid_utf8(trim(*mode)));

    result.gpus.push_back(std::move(gpu));
  }

  // Architecture and partitions from the KFD topology, matched by PCI
  // location (never by card number: KFD numbers its nodes its own way).
  if (!result.gpus.empty()) {
    auto nodes = read_kfd_nodes(r);
    size_t mapped_partitions = 0;
    for (auto& gpu : result.gpus) {
      auto location = parse_pci_address(gpu.pci_address());
      if (!location)
        continue;
      std::vector<const kfd_node*> matches;
      for (const auto& node : nodes) {
        if (node.location_id == location->location_id
            && (!node.domain || *node.domain == location->domain))
          matches.push_back(&node);
      }
      if (matches.empty())
        continue;
      gpu.set_architecture(amd_gfx_target_name(matches.front()->gfx_target_version));
      if (matches.size() >= 2) {
        gpu.set_partitions(static_cast<uint32_t>(matches.size()));
        mapped_partitions += matches.size() - 1;  // the first is the GPU's own card
        // Handed out whole, the GPU brings every partition's render node.
        for (const auto* node : matches)
          if (node->render_minor)
            gpu.add_partition_render_nodes("/dev/dri/renderD"
                                           + std::to_string(*node->render_minor));
      }
    }
    if (xcp_cards > mapped_partitions) {
      result.warnings.push_back(
          "/sys/class/drm: " + std::to_string(xcp_cards - mapped_partitions)
          + " compute partition card(s) (amdgpu_xcp) not mapped to a GPU (no matching KFD "
            "topology node); their GPUs' partitions are left 0");
    }

    // The driver: AMD's packaged amdgpu-dkms sets a module version; the
    // in-kernel driver has none, so the kernel release stands for it.
    for (const char* path : {"/sys/module/amdgpu/version", "/proc/sys/kernel/osrelease"}) {
      if (auto t = r.text(root + path)) {
        auto v = trim(*t);
        if (!v.empty()) {
          result.driver_version = to_valid_utf8(v);
          break;
        }
      }
    }
    for (auto& gpu : result.gpus)
      gpu.set_driver_version(result.driver_version);
  }

  if (auto t = r.text(root + "/opt/rocm/.info/version")) {
    auto lines = nonblank_lines(*t);
    if (!lines.empty())
      result.rocm_version = to_valid_utf8(lines.front());
  }
  return result;
}

} // namespace astraeus
