#include "runtime/workers/cdi.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <system_error>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include <filesystem>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include "messages/error.hpp"
#include "runtime/workers/cdi_host.hpp"

namespace astraeus {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> strings(const YAML::Node& n) {
  std::vector<std::string> out;
  if (n && n.IsSequence())
    for (const auto& x : n)
      out.push_back(x.as<std::string>());
  return out;
}

/// Reads one containerEdits node under host root `root`; required device
/// nodes that are missing on the host are reported in `missing`, optional
/// ones dropped with a line in `dropped`.
cdi_edits read_edits(const YAML::Node& n, std::vector<std::string>& missing,
                     const std::string& root, std::vector<std::string>& dropped) {
  cdi_edits out;
  if (!n || !n.IsMap())
    return out;
  out.env = strings(n["env"]);
  for (const auto& d : n["deviceNodes"]) {
    oci_device dev;
    dev.path = d["path"].as<std::string>();
    dev.host_path = d["hostPath"] ? d["hostPath"].as<std::string>() : dev.path;
    struct stat sb;
    bool have_numbers = d["major"] && d["minor"];
    if (have_numbers) {
      dev.major = d["major"].as<int64_t>();
      dev.minor = d["minor"].as<int64_t>();
      dev.type = d["type"] ? d["type"].as<std::string>()[0] : 'c';
    }
    auto at = root.empty() || root == "/" ? dev.host_path : root + dev.host_path;
    if (::stat(at.c_str(), &sb) != 0) {
      if (node_need(dev.path) == cdi_node_need::optional)
        dropped.push_back(dev.host_path + " is missing on the host; handed over without it");
      else
        missing.push_back(dev.host_path);
      continue;
    }
    if (!have_numbers) {
      dev.type = S_ISBLK(sb.st_mode) ? 'b' : 'c';
      dev.major = major(sb.st_rdev);
      dev.minor = minor(sb.st_rdev);
    }
    if (d["fileMode"])
      dev.file_mode = d["fileMode"].as<uint32_t>();
    out.devices.push_back(dev);
  }
  for (const auto& m : n["mounts"])
    out.mounts.push_back({m["hostPath"].as<std::string>(),
                          m["containerPath"].as<std::string>(), strings(m["options"])});
  for (const auto& h : n["hooks"])
    out.hooks.push_back({h["hookName"].as<std::string>(), h["path"].as<std::string>(),
                         strings(h["args"]), strings(h["env"])});
  for (const auto& g : n["additionalGids"])
    out.additional_gids.push_back(g.as<uint32_t>());
  return out;
}

void append(cdi_edits& into, const cdi_edits& from) {
  into.devices.insert(into.devices.end(), from.devices.begin(), from.devices.end());
  into.mounts.insert(into.mounts.end(), from.mounts.begin(), from.mounts.end());
  into.hooks.insert(into.hooks.end(), from.hooks.begin(), from.hooks.end());
  into.env.insert(into.env.end(), from.env.begin(), from.env.end());
  into.additional_gids.insert(into.additional_gids.end(), from.additional_gids.begin(),
                              from.additional_gids.end());
}

/// Reads the specs of one folder into `out`, refusing devices two files
/// define.
/// What of `root` only some cdiVersions allow (cdi_host.hpp).
cdi_spec_features features_of(const YAML::Node& root) {
  cdi_spec_features f;
  if (root["cdiVersion"])
    f.version = root["cdiVersion"].as<std::string>();
  if (root["kind"])
    f.kind = root["kind"].as<std::string>();
  f.annotations = static_cast<bool>(root["annotations"]);
  auto scan = [&f](const YAML::Node& edits) {
    if (!edits || !edits.IsMap())
      return;
    for (const auto& d : edits["deviceNodes"])
      f.host_path = f.host_path || static_cast<bool>(d["hostPath"]);
    for (const auto& m : edits["mounts"])
      f.mount_type = f.mount_type || static_cast<bool>(m["type"]);
    f.additional_gids = f.additional_gids || static_cast<bool>(edits["additionalGids"]);
  };
  scan(root["containerEdits"]);
  for (const auto& d : root["devices"]) {
    f.device_names.push_back(d["name"] ? d["name"].as<std::string>() : std::string{});
    f.annotations = f.annotations || static_cast<bool>(d["annotations"]);
    scan(d["containerEdits"]);
  }
  f.devices_listed = root["devices"] && root["devices"].IsSequence();
  return f;
}

void load_dir(const std::string& dir, std::map<std::string, cdi_device>& out,
              std::map<std::string, std::string>& conflicts,
              std::vector<std::string>& warnings,
              std::map<std::string, std::string>& stale,
              std::map<std::string, std::string>& refused, const std::string& host_root) {
  std::error_code err;
  if (dir.empty() || !fs::is_directory(dir, err))
    return;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, err)) {
    auto ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".json" || ext == ".yaml" || ext == ".yml"))
      files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    try {
      auto root = YAML::LoadFile(f.string());
      if (auto why = cdi_version_problem(features_of(root)); !why.empty()) {
        warnings.push_back(f.string() + ": refused: " + why);
        refused[f.string()] = why;
        continue;
      }
      auto kind = root["kind"].as<std::string>();
      std::vector<std::string> missing, dropped;
      auto common = read_edits(root["containerEdits"], missing, host_root, dropped);
      for (const auto& d : root["devices"]) {
        cdi_device dev;
        dev.kind = kind;
        dev.name = d["name"].as<std::string>();
        dev.file = f.string();
        dev.common = common;
        std::vector<std::string> gone;
        dev.edits = read_edits(d["containerEdits"], gone, host_root, dropped);
        auto key = kind + "=" + dev.name;
        if (gone.empty() && !missing.empty())
          gone.push_back(missing.front());  // a node all its devices share
        if (!gone.empty()) {
          warnings.push_back(f.string() + ": device " + key + " names " + gone.front()
                             + ", which does not exist (a stale spec)");
          stale[key] = gone.front();
          continue;
        }
        if (auto c = conflicts.find(key); c != conflicts.end()) {
          c->second += ", " + f.string();
          continue;
        }
        if (auto i = out.find(key); i != out.end()) {
          conflicts[key] = i->second.file + ", " + f.string();
          out.erase(i);
          continue;
        }
        out.emplace(key, std::move(dev));
      }
      for (const auto& d : dropped)
        warnings.push_back(f.string() + ": " + d);
    } catch (const std::exception& e) {
      warnings.push_back(f.string() + ": " + e.what());
    }
  }
}

caf::error write_file(const fs::path& p, const std::string& text) {
  auto tmp = p;
  tmp += ".tmp";
  {
    std::ofstream out{tmp, std::ios::trunc};
    if (!(out << text) || !out.flush())
      return caf::make_error(ec::store_failure, "cannot write " + tmp.string());
  }
  std::error_code err;
  fs::rename(tmp, p, err);
  if (err)
    return caf::make_error(ec::store_failure, "cannot write " + p.string() + ": "
                                                + err.message());
  return caf::none;
}

std::string read_all(const fs::path& p) {
  std::ifstream in{p};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The gid of `name` in an /etc/group file, or -1.
int64_t group_id(const std::string& etc_group, const std::string& name) {
  std::ifstream in{etc_group};
  std::string line;
  while (std::getline(in, line)) {
    auto a = line.find(':');
    if (a == std::string::npos || line.substr(0, a) != name)
      continue;
    auto b = line.find(':', a + 1);
    auto c = line.find(':', b + 1);
    try {
      return std::stoll(line.substr(b + 1, c - b - 1));
    } catch (...) {
      return -1;
    }
  }
  return -1;
}

} // namespace

cdi_registry load_cdi(const cdi_options& o) {
  cdi_registry reg;
  std::map<std::string, cdi_device> low, high;
  std::map<std::string, std::string> low_conflicts, high_conflicts;
  std::map<std::string, std::string> low_stale, high_stale;
  load_dir(o.static_dir, low, low_conflicts, reg.warnings, low_stale, reg.refused, o.host_root);
  load_dir(o.dynamic_dir, high, high_conflicts, reg.warnings, high_stale, reg.refused,
           o.host_root);
  // A device defined and usable somewhere is not stale.
  for (auto& [key, node] : low_stale)
    if (!high.count(key))
      reg.stale[key] = node;
  for (auto& [key, node] : high_stale)
    reg.stale[key] = node;
  reg.devices = std::move(low);
  reg.conflicts = std::move(low_conflicts);
  // The dynamic folder wins: its devices (and its conflicts) replace the
  // static ones of the same name.
  for (auto& [key, dev] : high) {
    reg.conflicts.erase(key);
    reg.devices[key] = std::move(dev);
  }
  for (const auto& [key, dev] : reg.devices)
    reg.stale.erase(key);
  for (auto& [key, files] : high_conflicts) {
    reg.devices.erase(key);
    reg.conflicts[key] = files;
  }
  return reg;
}

caf::expected<cdi_edits> cdi_edits_for(const cdi_registry& reg,
                                       const std::vector<std::string>& names) {
  cdi_edits out;
  std::set<std::string> common_done;
  for (const auto& name : names) {
    if (auto c = reg.conflicts.find(name); c != reg.conflicts.end())
      return caf::make_error(ec::invalid_request,
                             "CDI device " + name + " is defined by two files in one "
                               "folder (" + c->second + "): refused");
    auto d = reg.devices.find(name);
    if (d == reg.devices.end())
      return caf::make_error(ec::invalid_request,
                             "CDI device " + name + " is not defined in any spec");
    if (common_done.insert(d->second.file).second)
      append(out, d->second.common);
    append(out, d->second.edits);
  }
  return out;
}

std::string nvidia_fingerprint(const std::string& driver_version,
                               std::vector<std::string> gpu_ids,
                               const std::string& node_numbers) {
  std::sort(gpu_ids.begin(), gpu_ids.end());
  std::string out = "driver " + driver_version + "\ngpus";
  for (const auto& id : gpu_ids)
    out += " " + id;
  return out + "\n" + node_numbers;
}

std::vector<std::string> resolve_index_names(const cdi_registry& reg,
                                             const std::vector<std::string>& names,
                                             const std::vector<cdi_gpu>& discovered) {
  static const std::string kind = "nvidia.com/gpu=";
  std::vector<std::string> out;
  for (const auto& name : names) {
    out.push_back(name);
    if (name.rfind(kind, 0) != 0 || reg.devices.count(name))
      continue;
    auto uuid = name.substr(kind.size());
    auto g = std::find_if(discovered.begin(), discovered.end(),
                          [&](const cdi_gpu& d) { return d.uuid == uuid; });
    if (g == discovered.end() || g->minor < 0)
      continue;
    auto node = "/dev/nvidia" + std::to_string(g->minor);
    for (const auto& [key, dev] : reg.devices) {
      auto n = key.substr(std::min(key.size(), kind.size()));
      if (key.rfind(kind, 0) != 0 || n.empty()
          || !std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }))
        continue;
      bool mine = std::any_of(dev.edits.devices.begin(), dev.edits.devices.end(),
                              [&](const oci_device& d) { return d.path == node; });
      if (mine) {
        out.back() = key;
        break;
      }
    }
  }
  return out;
}

std::string nvidia_spec_stale(const cdi_registry& reg, const std::vector<std::string>& names,
                              const std::vector<cdi_gpu>& discovered) {
  static const std::string kind = "nvidia.com/gpu=";
  for (const auto& name : names) {
    if (name.rfind(kind, 0) != 0 || reg.conflicts.count(name))
      continue;
    if (auto s = reg.stale.find(name); s != reg.stale.end())
      return "CDI device " + name + " names " + s->second + ", which does not exist";
    if (!reg.devices.count(name))
      return "CDI device " + name + " is not defined in any spec";
  }
  if (discovered.empty())
    return {};
  // The spec's devices against the machine's GPUs, by how it names them.
  auto is_digits = [](const std::string& t) {
    return !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  auto is_pci = [](const std::string& t) {
    return t.size() == 12 && t[4] == ':' && t[7] == ':' && t[10] == '.';
  };
  auto lower = [](std::string t) {
    for (auto& c : t)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return t;
  };
  std::set<std::string> by_uuid, by_index, by_pci;
  std::vector<std::string> keys;
  for (const auto& entry : reg.devices)
    keys.push_back(entry.first);
  for (const auto& entry : reg.stale)
    keys.push_back(entry.first);
  for (const auto& key : keys) {
    if (key.rfind(kind, 0) != 0)
      continue;
    auto n = key.substr(kind.size());
    if (n.rfind("GPU-", 0) == 0)
      by_uuid.insert(n);
    else if (is_digits(n))
      by_index.insert(n);
    else if (is_pci(n))
      by_pci.insert(lower(n));
  }
  std::set<std::string> uuids, indexes, pcis;
  for (const auto& g : discovered) {
    uuids.insert(g.uuid);
    if (g.index >= 0)
      indexes.insert(std::to_string(g.index));
    if (!g.pci_address.empty())
      pcis.insert(lower(g.pci_address));
  }
  auto compare = [&](const std::set<std::string>& in_spec, const std::set<std::string>& here,
                     const char* what) -> std::string {
    if (in_spec.empty())
      return {};
    for (const auto& g : discovered) {
      auto id = std::string{what} == "UUID" ? g.uuid
                : std::string{what} == "index"
                  ? (g.index >= 0 ? std::to_string(g.index) : std::string{})
                  : lower(g.pci_address);
      if (!id.empty() && !in_spec.count(id))
        return "the NVIDIA CDI spec has no device for GPU " + g.uuid + " (" + what + " " + id
               + ")";
    }
    for (const auto& n : in_spec)
      if (!here.count(n))
        return "the NVIDIA CDI spec defines " + kind + n + ", which this machine does not have";
    return {};
  };
  for (auto why : {compare(by_uuid, uuids, "UUID"), compare(by_index, indexes, "index"),
                   compare(by_pci, pcis, "PCI address")})
    if (!why.empty())
      return why;
  return {};
}

namespace {

/// The first required node `names` lack on the host ("" when none): for a
/// device left out as stale, the node it names.
std::string missing_required_node(const cdi_registry& reg,
                                  const std::vector<std::string>& names) {
  for (const auto& name : names)
    if (auto s = reg.stale.find(name); s != reg.stale.end())
      return s->second;
  return {};
}

/// "hand-over failing: /dev/nvidia3 missing (<context>)": the error that
/// fails the worker and fences its GPU (issue 18, rule 3).
caf::error hand_over_failing(const std::string& node, const std::string& context,
                             const char* what = " missing") {
  return caf::make_error(ec::invalid_request,
                         hand_over_failing_prefix + node + what + " (" + context + ")");
}

/// The edits for `names`, checked against the host's nodes: a required node
/// missing fails; a node whose numbers differ is `stale` (written again).
caf::expected<cdi_edits> host_checked(const cdi_options& o, const cdi_registry& reg,
                                      const std::vector<std::string>& names,
                                      std::string& stale) {
  if (auto node = missing_required_node(reg, names); !node.empty())
    return hand_over_failing(node, "a required device node of " + names.front()
                                     + " is not on the host");
  auto edits = cdi_edits_for(reg, names);
  if (!edits)
    return edits;
  auto check = check_nodes_against_host(o.host_root, edits->devices);
  for (const auto& w : check.warnings)
    spdlog::warn("agent: CDI: {}", w);
  if (!check.missing_required.empty())
    return check.required_not_char
             ? hand_over_failing(check.missing_required,
                                 "a required device node is there but is no device node",
                                 " is not a character device")
             : hand_over_failing(check.missing_required,
                                 "a required device node is not on the host");
  stale = check.stale;
  edits->devices = std::move(check.devices);
  return edits;
}

/// A refused spec file and why, for an error message ("" when none).
std::string refused_note(const cdi_registry& reg) {
  if (reg.refused.empty())
    return {};
  const auto& [file, why] = *reg.refused.begin();
  return " (" + file + " was refused: " + why + ")";
}

} // namespace

caf::expected<cdi_edits> checked_cdi_edits(const cdi_options& o,
                                           const std::vector<std::string>& asked,
                                           const std::string& driver_version,
                                           const std::vector<cdi_gpu>& discovered) {
  auto reg = load_cdi(o);
  auto names = resolve_index_names(reg, asked, discovered);
  auto why = nvidia_spec_stale(reg, names, discovered);
  std::string numbers_stale;
  if (why.empty()) {
    auto edits = host_checked(o, reg, names, numbers_stale);
    if (!edits || numbers_stale.empty())
      return edits;
    why = numbers_stale;
  }
  if (discovered.empty() || driver_version.empty()) {
    if (auto node = missing_required_node(reg, names); !node.empty())
      return hand_over_failing(node, why);
    return caf::make_error(ec::invalid_request,
                           why + refused_note(reg)
                             + " (no NVIDIA GPU is discovered on this machine to write "
                               "the spec for)");
  }
  std::vector<std::string> ids;
  for (const auto& g : discovered)
    ids.push_back(g.uuid);
  spdlog::warn("agent: CDI: {}; writing the NVIDIA spec again", why);
  auto wrote = sync_nvidia_spec(o, driver_version, ids, true);
  if (!wrote)
    return wrote.error();
  reg = load_cdi(o);
  names = resolve_index_names(reg, asked, discovered);
  why = nvidia_spec_stale(reg, names, discovered);
  auto again = "the NVIDIA CDI spec is stale even after " + o.nvidia_ctk + " wrote it again: ";
  if (!why.empty()) {
    if (auto node = missing_required_node(reg, names); !node.empty())
      return hand_over_failing(node, again + why);
    return caf::make_error(ec::invalid_request, again + why + refused_note(reg));
  }
  numbers_stale.clear();
  auto edits = host_checked(o, reg, names, numbers_stale);
  if (edits && !numbers_stale.empty())
    return caf::make_error(ec::invalid_request, again + numbers_stale);
  return edits;
}

namespace {
/// One NVIDIA or AMD spec write at a time in this process.
std::mutex spec_writes;
} // namespace

caf::expected<bool> sync_nvidia_spec(const cdi_options& o,
                                     const std::string& driver_version,
                                     const std::vector<std::string>& gpu_ids,
                                     bool force) {
  std::lock_guard<std::mutex> guard{spec_writes};
  auto spec = fs::path{o.dynamic_dir} / "nvidia.yaml";
  auto print_path = fs::path{o.dynamic_dir} / ".nvidia.yaml.astraeus-fingerprint";
  std::error_code err;
  if (gpu_ids.empty() || driver_version.empty()) {
    // Ours to remove only when we wrote it.
    if (!fs::exists(print_path, err))
      return false;
    fs::remove(spec, err);
    fs::remove(print_path, err);
    return true;
  }
  auto print = nvidia_fingerprint(driver_version, gpu_ids, nvidia_node_numbers(o.host_root));
  if (!force && fs::exists(spec, err) && fs::exists(print_path, err)
      && read_all(print_path) == print)
    return false;
  if (o.nvidia_ctk.empty())
    return caf::make_error(ec::store_failure,
                           "the NVIDIA CDI spec needs writing but cdi.nvidia_ctk is empty");
  fs::create_directories(o.dynamic_dir, err);
  auto [status, out] = run_tool({o.nvidia_ctk, "cdi", "generate", "--output=" + spec.string(),
                                 "--device-name-strategy=uuid"});
  // 127: the shell found no such program (recorded on an H200 machine
  // without the container toolkit: "sh: 1: nvidia-ctk: not found").
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    return caf::make_error(ec::store_failure,
                           "no NVIDIA CDI spec: " + o.nvidia_ctk
                             + " is not installed, so GPU containers cannot be handed their GPUs"
                               " (host-process workers can); install nvidia-container-toolkit"
                               " or set cdi.nvidia_ctk to its nvidia-ctk");
  if (status != 0 || !fs::exists(spec, err))
    return caf::make_error(ec::store_failure,
                           o.nvidia_ctk + " cdi generate failed: " + out);
  if (auto e = write_file(print_path, print))
    return e;
  return true;
}

caf::expected<bool> write_amd_spec(const cdi_options& o, const std::string& sys_root,
                                   const std::string& dev_root,
                                   const std::vector<amd_cdi_gpu>& gpus) {
  std::lock_guard<std::mutex> guard{spec_writes};
  auto path = fs::path{o.dynamic_dir} / "amd-astraeus.json";
  std::error_code err;
  if (gpus.empty()) {
    bool had = fs::exists(path, err);
    fs::remove(path, err);
    return had;
  }
  auto root = [](const std::string& r) {
    return r.empty() || r == "/" ? std::string{} : r;
  };
  using nlohmann::json;
  json devices = json::array();
  for (const auto& g : gpus) {
    auto drm = fs::path{root(sys_root) + "/sys/bus/pci/devices/" + g.pci_address + "/drm"};
    json nodes = json::array();
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(drm, err))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    // Only nodes that exist on the host (under its root) are listed.
    auto exists = [&](const std::string& node) { return fs::exists(root(dev_root) + node, err); };
    for (const auto& n : names)
      if ((n.rfind("renderD", 0) == 0 || n.rfind("card", 0) == 0) && exists("/dev/dri/" + n))
        nodes.push_back({{"path", "/dev/dri/" + n}});
    // A partitioned GPU handed out whole: every partition's render node.
    for (const auto& p : g.partition_render_nodes)
      if (std::find(names.begin(), names.end(), fs::path{p}.filename().string()) == names.end()
          && exists(p))
        nodes.push_back({{"path", p}});
    if (nodes.empty())
      continue;  // no DRM nodes: the GPU is not usable in a container
    devices.push_back({{"name", g.id}, {"containerEdits", {{"deviceNodes", nodes}}}});
  }
  json gids = json::array();
  for (const char* group : {"render", "video"}) {
    auto gid = group_id(root(dev_root) + "/etc/group", group);
    if (gid >= 0)
      gids.push_back(gid);
  }
  json common = {{"deviceNodes", json::array()}};
  if (fs::exists(root(dev_root) + "/dev/kfd", err))
    common["deviceNodes"].push_back({{"path", "/dev/kfd"}});
  if (!gids.empty())
    common["additionalGids"] = gids;
  // 0.7.0: additionalGids at the spec level needs it (cdi_version_problem).
  json spec = {{"cdiVersion", "0.7.0"},
               {"kind", "amd.com/gpu"},
               {"devices", devices},
               {"containerEdits", common}};
  auto text = spec.dump(2) + "\n";
  if (fs::exists(path, err) && read_all(path) == text)
    return false;
  fs::create_directories(o.dynamic_dir, err);
  if (auto e = write_file(path, text))
    return e;
  return true;
}

} // namespace astraeus
