#include "runtime/workers/oci_bundle.hpp"
#include "runtime/workers/builtin_image.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <system_error>

#include <filesystem>

#include "messages/error.hpp"
#include "runtime/workers/run_spec.hpp"

namespace astraeus {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

caf::error bad_image(const std::string& text) {
  return caf::make_error(ec::invalid_request, text);
}

caf::expected<json> read_json(const fs::path& p) {
  std::ifstream in{p};
  if (!in)
    return bad_image("cannot read " + p.string());
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    return bad_image(p.string() + " is not JSON: " + e.what());
  }
}

fs::path blob_path(const std::string& layout, const std::string& digest) {
  auto colon = digest.find(':');
  if (colon == std::string::npos)
    return {};
  return fs::path{layout} / "blobs" / digest.substr(0, colon) / digest.substr(colon + 1);
}

std::vector<std::string> strings_of(const json& j, const char* key) {
  std::vector<std::string> out;
  if (j.contains(key) && j[key].is_array())
    for (const auto& x : j[key])
      if (x.is_string())
        out.push_back(x.get<std::string>());
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

/// The fields of one line of an /etc/passwd- or /etc/group-style file (or
/// of a comma-separated member list), split at `sep`.
std::vector<std::string> split_fields(const std::string& line, char sep) {
  std::vector<std::string> f;
  std::stringstream ss{line};
  std::string x;
  while (std::getline(ss, x, sep))
    f.push_back(x);
  return f;
}

/// Looks `name` up in an /etc/passwd- or /etc/group-style file: field 0 is
/// the name, field 2 the id (and field 3 the passwd's gid).
bool lookup_id(const fs::path& file, const std::string& name, uint32_t& id,
               uint32_t* gid = nullptr, std::string* found_name = nullptr) {
  std::ifstream in{file};
  std::string line;
  while (std::getline(in, line)) {
    auto f = split_fields(line, ':');
    if (f.size() < 3)
      continue;
    bool match = f[0] == name || f[2] == name;
    if (!match)
      continue;
    try {
      id = static_cast<uint32_t>(std::stoul(f[2]));
      if (gid && f.size() > 3)
        *gid = static_cast<uint32_t>(std::stoul(f[3]));
      if (found_name)
        *found_name = f[0];
    } catch (...) {
      return false;
    }
    return true;
  }
  return false;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
}

} // namespace

std::pair<int, std::string> run_tool(const std::vector<std::string>& argv) {
  std::string cmd;
  for (const auto& a : argv)
    cmd += shell_quote(a) + " ";
  cmd += "2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p)
    return {-1, "cannot run " + argv.front()};
  std::string out;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0)
    if (out.size() < 4096)
      out.append(buf, n);
  int status = ::pclose(p);
  return {status, out};
}

caf::error read_oci_config(const std::string& layout, const std::string& tag,
                           oci_image& out) {
  auto index = read_json(fs::path{layout} / "index.json");
  if (!index)
    return index.error();
  const json* chosen = nullptr;
  if (index->contains("manifests") && (*index)["manifests"].is_array()) {
    for (const auto& m : (*index)["manifests"]) {
      auto ref = m.value("annotations", json::object())
                   .value("org.opencontainers.image.ref.name", std::string{});
      if (ref == tag || (!chosen && tag == "latest" && ref.empty()))
        chosen = &m;
    }
    if (!chosen && (*index)["manifests"].size() == 1 && tag == "latest")
      chosen = &(*index)["manifests"][0];
  }
  if (!chosen)
    return bad_image("OCI layout " + layout + " has no image tagged '" + tag + "'");
  auto manifest = read_json(blob_path(layout, chosen->value("digest", "")));
  if (!manifest)
    return manifest.error();
  auto digest = manifest->value("config", json::object()).value("digest", "");
  auto config = read_json(blob_path(layout, digest));
  if (!config)
    return config.error();
  auto c = config->value("config", json::object());
  out.env = strings_of(c, "Env");
  out.entrypoint = strings_of(c, "Entrypoint");
  out.cmd = strings_of(c, "Cmd");
  out.user = c.value("User", "");
  out.workdir = c.value("WorkingDir", "");
  out.stop_signal = c.value("StopSignal", "");
  return caf::none;
}

caf::expected<oci_image> find_image(const std::string& image,
                                    const std::string& images_dir) {
  if (image.empty())
    return bad_image("the run names no image");
  std::string path = image;
  std::string tag = "latest";
  // "name:tag" or "/path:tag" (a ':' after the last '/').
  auto colon = image.rfind(':');
  auto slash = image.rfind('/');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
    path = image.substr(0, colon);
    tag = image.substr(colon + 1);
  }
  std::vector<fs::path> candidates;
  if (!path.empty() && path[0] == '/')
    candidates.push_back(path);
  else if (!images_dir.empty())
    candidates.push_back(fs::path{images_dir} / path);
  // `--image busybox` works on a fresh machine: built from busybox-static.
  if (path == "busybox" && tag == "latest" && !images_dir.empty())
    if (auto e = ensure_busybox_image(images_dir))
      return e;
  std::error_code err;
  for (const auto& c : candidates) {
    oci_image out;
    out.path = c.string();
    out.tag = tag;
    if (fs::is_directory(c, err)) {
      if (fs::exists(c / "oci-layout", err)) {
        out.kind = "oci";
        if (auto e = read_oci_config(out.path, tag, out))
          return e;
        return out;
      }
      out.kind = "rootfs";
      // A bundle-like folder with rootfs/ inside is taken as that rootfs.
      if (fs::is_directory(c / "rootfs", err))
        out.path = (c / "rootfs").string();
      return out;
    }
    if (fs::is_regular_file(c, err)) {
      out.kind = "docker-archive";
      return out;
    }
    if (fs::is_regular_file(c.string() + ".tar", err)) {
      out.kind = "docker-archive";
      out.path = c.string() + ".tar";
      return out;
    }
  }
  return bad_image("image '" + image + "' not found"
                   + (candidates.empty()
                        ? std::string{" (no images folder is set: workers.images_dir)"}
                        : " at " + candidates.front().string()
                            + " (a root filesystem folder, an OCI layout or a "
                              "docker archive)"));
}

std::vector<std::string> worker_command(const std::vector<std::string>& command,
                                        const oci_image& image,
                                        const std::vector<std::string>& args) {
  if (!command.empty())
    return command;
  auto out = image.entrypoint;
  const auto& tail = args.empty() ? image.cmd : args;
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

uint64_t shm_size_bytes(uint32_t gpus, uint64_t memory_limit_bytes) {
  constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;
  if (gpus == 0)
    return 64 * MiB;
  if (memory_limit_bytes == 0)
    return 8 * GiB;
  return std::clamp<uint64_t>(memory_limit_bytes / 2, GiB, 64 * GiB);
}

caf::expected<oci_user> resolve_user(const std::string& user,
                                     const std::string& rootfs) {
  oci_user out;
  auto colon = user.find(':');
  auto name = user.substr(0, colon);
  if (name.empty())
    name = "root";
  auto group = colon == std::string::npos ? std::string{} : user.substr(colon + 1);
  auto etc = fs::path{rootfs} / "etc";
  uint32_t gid_from_passwd = 0;
  bool have_passwd_gid = false;
  // The user's name in /etc/passwd: `--user 0` is root, and /etc/group
  // lists members by name (a helper's audit: a uid lost its groups).
  std::string user_name = name;
  if (lookup_id(etc / "passwd", name, out.uid, &gid_from_passwd, &user_name)) {
    have_passwd_gid = true;
  } else if (all_digits(name)) {
    out.uid = static_cast<uint32_t>(std::stoul(name));
  } else if (name == "root") {
    out.uid = 0;
  } else {
    return caf::make_error(ec::invalid_request,
                           "user '" + name + "' is not in the image's /etc/passwd");
  }
  // Supplementary groups: those of the image's /etc/group that list the
  // user by name (as `id` shows them).
  {
    std::ifstream in{etc / "group"};
    std::string line;
    while (std::getline(in, line)) {
      auto f = split_fields(line, ':');
      if (f.size() < 4 || !all_digits(f[2]))
        continue;
      for (const auto& member : split_fields(f[3], ','))
        if (member == user_name)
          out.groups.push_back(static_cast<uint32_t>(std::stoul(f[2])));
    }
  }
  if (group.empty()) {
    out.gid = have_passwd_gid ? gid_from_passwd : out.uid;
  } else if (!lookup_id(etc / "group", group, out.gid)) {
    if (!all_digits(group))
      return caf::make_error(ec::invalid_request,
                             "group '" + group + "' is not in the image's /etc/group");
    out.gid = static_cast<uint32_t>(std::stoul(group));
  }
  return out;
}

namespace {

/// Applies each valid ulimit of `spec` to `limits`: the limit whose
/// resource (`resource_of`) is the same is replaced by `make(ulimit,
/// resource)`, else that is added.
template <class Limit, class Make, class ResourceOf>
void apply_each_ulimit(std::vector<Limit>& limits, const v1::RunSpec& spec, Make make,
                       ResourceOf resource_of) {
  for (const auto& u : spec.ulimits()) {
    auto resource = rlimit_resource(u.name());
    if (!resource)
      continue;
    auto same = std::find_if(limits.begin(), limits.end(),
                             [&](const Limit& l) { return resource_of(l) == *resource; });
    if (same != limits.end())
      *same = make(u, *resource);
    else
      limits.push_back(make(u, *resource));
  }
}

} // namespace

void apply_ulimits(std::vector<oci_rlimit>& limits, const v1::RunSpec& spec) {
  apply_each_ulimit(
    limits, spec,
    [](const v1::Ulimit& u, int) { return oci_rlimit{u.name(), u.soft(), u.hard()}; },
    [](const oci_rlimit& l) { return rlimit_resource(l.name).value_or(-1); });
}

void apply_ulimits(std::vector<std::pair<int, rlimit>>& limits, const v1::RunSpec& spec) {
  auto value = [](int64_t v) { return v < 0 ? RLIM_INFINITY : static_cast<rlim_t>(v); };
  apply_each_ulimit(
    limits, spec,
    [&](const v1::Ulimit& u, int resource) {
      return std::pair{resource, rlimit{value(u.soft()), value(u.hard())}};
    },
    [](const std::pair<int, rlimit>& l) { return l.first; });
}

const std::vector<std::string> numa_memory_policy_syscalls = {
  "get_mempolicy", "mbind", "migrate_pages", "move_pages", "set_mempolicy"};

const std::vector<std::string> denied_syscalls = {
  "_sysctl",         "acct",          "add_key",         "bpf",
  "clock_adjtime",   "clock_settime", "create_module",   "delete_module",
  "finit_module",    "fsconfig",      "fsmount",         "fsopen",
  "fspick",          "get_kernel_syms", "init_module",   "ioperm",
  "iopl",            "kcmp",          "kexec_file_load", "kexec_load",
  "keyctl",          "lookup_dcookie", "mount",          "mount_setattr",
  "move_mount",      "name_to_handle_at", "nfsservctl",  "open_by_handle_at",
  "open_tree",       "perf_event_open", "pivot_root",    "query_module",
  "quotactl",        "quotactl_fd",   "reboot",          "request_key",
  "setns",           "settimeofday",  "stime",           "swapoff",
  "swapon",          "sysfs",         "umount",          "umount2",
  "unshare",         "uselib",        "userfaultfd",     "ustat",
  "vm86",            "vm86old"};

json default_seccomp_profile() {
#if defined(__aarch64__)
  json arches = {"SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"};
#else
  json arches = {"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"};
#endif
  return {
    {"defaultAction", "SCMP_ACT_ALLOW"},
    {"architectures", arches},
    {"syscalls", json::array({{{"names", denied_syscalls},
                               {"action", "SCMP_ACT_ERRNO"},
                               {"errnoRet", 1}}})},
  };
}

json oci_config(const oci_worker& w, const std::string& rootfs) {
  json rl = json::array();
  for (const auto& r : w.rlimits) {
    std::string type = "RLIMIT_" + r.name;
    std::transform(type.begin(), type.end(), type.begin(), ::toupper);
    auto lim = [](int64_t v) -> uint64_t {
      return v < 0 ? UINT64_MAX : static_cast<uint64_t>(v);
    };
    rl.push_back({{"type", type}, {"soft", lim(r.soft)}, {"hard", lim(r.hard)}});
  }
  json user = {{"uid", w.user.uid}, {"gid", w.user.gid}};
  if (!w.user.groups.empty()) {
    // The primary group too, as `id` lists it (groups=0(root),10(wheel)).
    std::vector<uint32_t> gids{w.user.gid};
    for (auto g : w.user.groups)
      if (std::find(gids.begin(), gids.end(), g) == gids.end())
        gids.push_back(g);
    user["additionalGids"] = gids;
  }
  json caps = json::array({"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER",
                           "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID",
                           "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
                           "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"});
  json process = {
    {"terminal", false},
    {"user", user},
    {"args", w.args},
    {"env", w.env},
    {"cwd", w.cwd.empty() ? "/" : w.cwd},
    {"capabilities",
     {{"bounding", caps}, {"effective", caps}, {"permitted", caps}}},
    {"rlimits", rl},
    {"noNewPrivileges", true},
  };
  json mounts = json::array({
    {{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
    {{"destination", "/dev"}, {"type", "tmpfs"}, {"source", "tmpfs"},
     {"options", {"nosuid", "strictatime", "mode=755", "size=65536k"}}},
    {{"destination", "/dev/pts"}, {"type", "devpts"}, {"source", "devpts"},
     {"options", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}}},
    w.host_ipc  // ipc_mode: host: the machine's /dev/shm
      ? json{{"destination", "/dev/shm"}, {"type", "bind"}, {"source", "/dev/shm"},
             {"options", {"rbind", "rw", "nosuid", "nodev"}}}
      : json{{"destination", "/dev/shm"}, {"type", "tmpfs"}, {"source", "shm"},
             {"options", {"nosuid", "noexec", "nodev", "mode=1777",
                          "size=" + std::to_string(w.shm_bytes)}}},
    {{"destination", "/dev/mqueue"}, {"type", "mqueue"}, {"source", "mqueue"},
     {"options", {"nosuid", "noexec", "nodev"}}},
    {{"destination", "/sys"}, {"type", "sysfs"}, {"source", "sysfs"},
     {"options", {"nosuid", "noexec", "nodev", "ro"}}},
    {{"destination", "/etc/resolv.conf"}, {"type", "bind"}, {"source", "/etc/resolv.conf"},
     {"options", {"rbind", "ro"}}},
    {{"destination", "/etc/hosts"}, {"type", "bind"}, {"source", "/etc/hosts"},
     {"options", {"rbind", "ro"}}},
  });
  for (const auto& m : w.mounts) {
    auto options = m.options.empty() ? std::vector<std::string>{"rbind", "ro"} : m.options;
    if (std::find(options.begin(), options.end(), "bind") == options.end()
        && std::find(options.begin(), options.end(), "rbind") == options.end())
      options.push_back("rbind");
    mounts.push_back({{"destination", m.container_path}, {"type", "bind"},
                      {"source", m.host_path}, {"options", options}});
  }
  json devices = json::array();
  json allow = json::array({{{"allow", false}, {"access", "rwm"}}});
  for (const auto& d : w.devices) {
    devices.push_back({{"path", d.path}, {"type", std::string(1, d.type)},
                       {"major", d.major}, {"minor", d.minor},
                       {"fileMode", d.file_mode}, {"uid", 0}, {"gid", 0}});
    allow.push_back({{"allow", true}, {"type", std::string(1, d.type)},
                     {"major", d.major}, {"minor", d.minor}, {"access", "rwm"}});
  }
  json resources = {{"devices", allow}};
  if (w.memory_bytes > 0)
    resources["memory"] = {{"limit", w.memory_bytes}};
  if (w.cpus > 0) {
    json cpu = {{"shares", static_cast<uint64_t>(w.cpus * 1024)}};
    if (!w.cpu_burst) {
      cpu["period"] = 100000;
      cpu["quota"] = static_cast<int64_t>(w.cpus * 100000);
    }
    resources["cpu"] = cpu;
  }
  if (!w.cpuset_cpus.empty())
    resources["cpu"]["cpus"] = w.cpuset_cpus;
  if (!w.cpuset_mems.empty())
    resources["cpu"]["mems"] = w.cpuset_mems;
  json namespaces = json::array({{{"type", "pid"}}, {{"type", "uts"}}, {{"type", "mount"}}});
  if (!w.host_ipc)
    namespaces.push_back({{"type", "ipc"}});
  json linux_ = {
    {"namespaces", namespaces},
    {"resources", resources},
    {"devices", devices},
    {"seccomp", default_seccomp_profile()},
    {"maskedPaths", {"/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                     "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
                     "/proc/scsi", "/sys/firmware"}},
    {"readonlyPaths", {"/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq",
                       "/proc/sys", "/proc/sysrq-trigger"}},
  };
  json out = {
    {"ociVersion", "1.0.2"},
    {"process", process},
    {"root", {{"path", rootfs}, {"readonly", false}}},
    {"hostname", w.hostname},
    {"mounts", mounts},
    {"linux", linux_},
  };
  if (!w.hooks.empty()) {
    json hooks = json::object();
    for (const auto& h : w.hooks) {
      json one = {{"path", h.path}};
      if (!h.args.empty())
        one["args"] = h.args;
      if (!h.env.empty())
        one["env"] = h.env;
      hooks[h.stage].push_back(one);
    }
    out["hooks"] = hooks;
  }
  return out;
}

caf::error unpack_image(oci_image& image, const std::string& bundle,
                        const std::string& umoci, const std::string& skopeo) {
  std::error_code err;
  auto rootfs = fs::path{bundle} / "rootfs";
  fs::remove_all(rootfs, err);
  fs::create_directories(bundle, err);
  if (err)
    return caf::make_error(ec::store_failure,
                           "cannot create the bundle " + bundle + ": " + err.message());
  if (image.kind == "rootfs") {
    // As the image is: modes (/tmp's 1777 whatever the agent's umask),
    // owners (a user's 0700 home), links, device nodes and times, as
    // `cp -a` keeps them (std::filesystem::copy keeps none of the first two).
    auto [rc, out] = run_tool({"cp", "-a", "--", image.path, rootfs.string()});
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r'))
      out.pop_back();
    if (rc != 0)
      return caf::make_error(ec::store_failure,
                             "cannot copy the root filesystem " + image.path + ": " + out);
    return caf::none;
  }
  std::string layout = image.path;
  if (image.kind == "docker-archive") {
    layout = (fs::path{bundle} / "image").string();
    fs::remove_all(layout, err);
    auto [rc, out] = run_tool({skopeo, "copy", "--quiet",
                               "docker-archive:" + image.path, "oci:" + layout + ":latest"});
    if (rc != 0)
      return caf::make_error(ec::store_failure,
                             "skopeo could not read the docker archive " + image.path
                               + ": " + out);
    image.tag = "latest";
    if (auto e = read_oci_config(layout, image.tag, image))
      return e;
  }
  auto [rc, out] = run_tool({umoci, "raw", "unpack", "--image", layout + ":" + image.tag,
                             rootfs.string()});
  if (rc != 0)
    return caf::make_error(ec::store_failure, "umoci could not unpack " + layout + ":"
                                                + image.tag + ": " + out);
  return caf::none;
}

} // namespace astraeus
