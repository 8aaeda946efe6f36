// CDI device nodes against the host's, and the cdiVersion rules (issue 18,
// rule 3). Source: the CDI specification (SPEC.md, "Versions"), its
// reference implementation's minimum-version rules.

#include "runtime/workers/cdi_host.hpp"

#include <algorithm>
#include <array>
#include <fstream>
#include <system_error>

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>

namespace astraeus {

namespace fs = std::filesystem;

namespace {

std::string under(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/")
    return path;
  return root + path;
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

std::string numbers(int64_t major, int64_t minor) {
  return std::to_string(major) + ":" + std::to_string(minor);
}

} // namespace

cdi_node_need node_need(const std::string& p) {
  // Control and card nodes a worker can do without; every other node (the
  // GPU's /dev/nvidiaN, nvidiactl, nvidia-uvm, AMD renderD* and kfd, and
  // nodes this list does not know) is required.
  if (p == "/dev/nvidia-uvm-tools" || p == "/dev/nvidia-modeset"
      || starts_with(p, "/dev/nvidia-caps/") || starts_with(p, "/dev/dri/card")
      || starts_with(p, "/dev/dri/controlD"))
    return cdi_node_need::optional;
  return cdi_node_need::required;
}

host_device_node read_host_node(const std::string& host_root, const std::string& host_path) {
  host_device_node out;
  struct stat sb;
  if (::stat(under(host_root, host_path).c_str(), &sb) != 0)
    return out;
  out.exists = true;
  out.is_char = S_ISCHR(sb.st_mode);
  if (S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode)) {
    out.major = major(sb.st_rdev);
    out.minor = minor(sb.st_rdev);
  }
  return out;
}

std::optional<oci_device> imex_channel_device(const std::string& host_root,
                                              std::string& problem) {
  auto node = read_host_node(host_root, imex_channel0_path);
  if (!node.exists || !node.is_char) {
    problem = std::string{imex_channel0_path}
              + (node.exists ? " is not a character device" : " is missing")
              + " on the machine, so the worker has no IMEX channel (CUDA's "
                "cross-machine memory calls fail); create it as NVIDIA's IMEX guide says: "
                "mknod " + imex_channel0_path
              + " c $(awk '$2==\"nvidia-caps-imex-channels\"{print $1}' /proc/devices) 0";
    return std::nullopt;
  }
  oci_device d;
  d.path = imex_channel0_path;
  d.type = 'c';
  d.major = node.major;
  d.minor = node.minor;
  d.file_mode = 0666;
  return d;
}

cdi_host_check check_nodes_against_host(const std::string& host_root,
                                        const std::vector<oci_device>& devices) {
  cdi_host_check out;
  for (const auto& d : devices) {
    const auto& host = d.host_path.empty() ? d.path : d.host_path;
    auto node = read_host_node(host_root, host);
    bool usable = node.exists && node.is_char;
    if (!usable) {
      if (node_need(d.path) == cdi_node_need::required) {
        if (out.missing_required.empty()) {
          out.missing_required = host;
          out.required_not_char = node.exists;
        }
        continue;
      }
      out.warnings.push_back(host + (node.exists ? " is not a character device" : " is missing")
                             + " on the host; handed over without it");
      continue;
    }
    if (d.type == 'c' && (node.major != d.major || node.minor != d.minor)) {
      if (out.stale.empty())
        out.stale = host + " is " + numbers(d.major, d.minor) + " in the spec, "
                    + numbers(node.major, node.minor) + " on the host";
    }
    out.devices.push_back(d);
  }
  return out;
}

std::string nvidia_node_numbers(const std::string& host_root) {
  std::vector<std::string> lines;
  std::error_code err;
  for (const char* dir : {"/dev", "/dev/nvidia-caps"}) {
    for (const auto& e : fs::directory_iterator(under(host_root, dir), err)) {
      auto name = e.path().filename().string();
      if (std::string{dir} == "/dev" && !starts_with(name, "nvidia"))
        continue;
      auto path = std::string{dir} + "/" + name;
      auto node = read_host_node(host_root, path);
      if (node.is_char)
        lines.push_back(path + " " + numbers(node.major, node.minor));
    }
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines)
    out += l + "\n";
  return out;
}

int64_t nvidia_device_minor(const std::string& host_root, const std::string& pci_address) {
  std::ifstream in{under(host_root, "/proc/driver/nvidia/gpus/" + pci_address + "/information")};
  std::string line;
  while (std::getline(in, line)) {
    if (!starts_with(line, "Device Minor:"))
      continue;
    try {
      return std::stoll(line.substr(13));
    } catch (...) {
      return -1;
    }
  }
  return -1;
}

namespace {

/// "0.5.0" as {0, 5, 0}; {-1} when it is not a version.
std::array<int, 3> parse_version(std::string v) {
  if (!v.empty() && v[0] == 'v')
    v.erase(0, 1);
  std::array<int, 3> out{-1, -1, -1};
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    auto dot = v.find('.', at);
    auto part = v.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    if (part.empty() || !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return {-1, -1, -1};
    out[static_cast<size_t>(i)] = std::stoi(part);
    if (i < 2 && dot == std::string::npos)
      return {-1, -1, -1};
    at = dot + 1;
    if (i == 2 && dot != std::string::npos)
      return {-1, -1, -1};
  }
  return out;
}

} // namespace

std::string cdi_version_problem(const cdi_spec_features& spec) {
  if (spec.version.empty())
    return "the spec has no cdiVersion (a required field)";
  if (spec.kind.empty())
    return "the spec has no kind (a required field)";
  if (spec.kind.find('/') == std::string::npos)
    return "kind '" + spec.kind + "' is not vendor.com/class";
  if (!spec.devices_listed)
    return "the spec has no devices list (a required field)";
  static const std::vector<std::array<int, 3>> known{
    {0, 3, 0}, {0, 4, 0}, {0, 5, 0}, {0, 6, 0}, {0, 7, 0}, {0, 8, 0}, {1, 0, 0}, {1, 1, 0}};
  auto v = parse_version(spec.version);
  if (std::find(known.begin(), known.end(), v) == known.end())
    return "cdiVersion " + spec.version + " is not a CDI version this agent knows "
           "(0.3.0 to 1.1.0)";
  auto before = [&](std::array<int, 3> w) { return v < w; };
  auto needs = [&](const std::string& what, const char* version) {
    return "cdiVersion " + spec.version + ": " + what + ", which needs cdiVersion " + version
           + " or later";
  };
  for (const auto& name : spec.device_names) {
    if (name.empty())
      return "a device without a name (a required field)";
    if (before({0, 5, 0}) && name[0] >= '0' && name[0] <= '9')
      return needs("device name '" + name + "' starts with a digit", "0.5.0");
  }
  if (before({0, 4, 0}) && spec.mount_type)
    return needs("a mount with a type", "0.4.0");
  if (before({0, 5, 0}) && spec.host_path)
    return needs("a device node with hostPath", "0.5.0");
  auto cls = spec.kind.substr(spec.kind.find('/') + 1);
  if (before({0, 6, 0}) && cls.find('.') != std::string::npos)
    return needs("a '.' in the kind's class", "0.6.0");
  if (before({0, 6, 0}) && spec.annotations)
    return needs("annotations", "0.6.0");
  if (before({0, 7, 0}) && spec.additional_gids)
    return needs("additionalGids", "0.7.0");
  return {};
}

} // namespace astraeus
