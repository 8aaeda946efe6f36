#include "runtime/workers/run_spec.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/workers/run_spec_detail.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <sys/resource.h>

#include <yaml-cpp/yaml.h>

// The run-spec checks (validate_run_spec), resource-limit names, the run's
// shape and the YAML writer; the reader is in run_spec.cpp.

namespace astraeus {

using namespace run_spec_detail;

// -- validation -------------------------------------------------------------

namespace {

/// One part of a user: a name (letters, digits, '_', '.', '-', not starting
/// with '-') or a number.
bool valid_user_part(std::string_view x) {
  if (x.empty() || x.size() > 64 || x.front() == '-')
    return false;
  return std::all_of(x.begin(), x.end(), [](char c) {
    return is_alnum(c) || c == '_' || c == '.' || c == '-';
  });
}

/// A path in the worker (`field`: its name in errors): absolute, no "." or
/// ".." parts, not / and not on the paths the worker's runtime owns.
caf::error check_mount_path(const std::string& field, const std::string& path,
                            const v1::RunSpec& spec, std::set<std::string>& taken) {
  if (path.empty() || path.front() != '/')
    return spec_error(field + ": " + quote_short(path) + " is not an absolute path");
  if (path.find('\0') != std::string::npos)
    return spec_error(field + ": the path holds a NUL");
  std::string normal;
  size_t start = 1;
  while (start <= path.size()) {
    auto end = path.find('/', start);
    if (end == std::string::npos)
      end = path.size();
    auto part = path.substr(start, end - start);
    if (part == "." || part == "..")
      return spec_error(field + ": " + quote_short(path) + " has a '" + part + "' part");
    if (!part.empty())
      normal += "/" + part;
    start = end + 1;
  }
  if (normal.empty())
    return spec_error(field + ": cannot mount over /");
  auto under = [&](const std::string& top) {
    return normal == top || normal.rfind(top + "/", 0) == 0;
  };
  // `astra slurm sbatch` mounts the batch script at /astra/job.sbatch
  // (shared/seeds/inside-a-worker.md, "Filesystem"); the rest of /astra is
  // the runtime's.
  bool batch_script = normal == "/astra/job.sbatch";
  for (const char* owned : {"/proc", "/sys", "/dev", "/astra", "/var/run/astraeus"})
    if (under(owned) && !batch_script)
      return spec_error(field + ": " + quote_short(path) + " is under " + owned
                        + ", which the worker's runtime owns");
  if (!spec.code_tgz().empty() && under("/workspace"))
    return spec_error(field + ": " + quote_short(path) + " is under /workspace, "
                      "where the run's code (--code) is");
  if (!taken.insert(normal).second)
    return spec_error(field + ": " + quote_short(path) + " is mounted twice");
  return caf::none;
}

/// The checks of the seed's fields: user, node_fraction, volumes, configs,
/// ipc_mode, code.
caf::error validate_seed_fields(const v1::RunSpec& spec) {
  if (!spec.user().empty()) {
    auto colon = spec.user().find(':');
    auto name = spec.user().substr(0, colon);
    auto group = colon == std::string::npos ? std::string{"x"} : spec.user().substr(colon + 1);
    if (!valid_user_part(name) || !valid_user_part(group))
      return spec_error("task_template.user: " + quote_short(spec.user())
                        + " is not a user (use a name, a uid or uid:gid)");
  }
  if (auto f = spec.node_fraction(); f != 0) {
    if (!std::isfinite(f) || f <= 0 || f > 1)
      return spec_error("node_fraction: must be more than 0 and at most 1, got "
                        + show_number(f));
    if (spec.cpus_per_worker() > 0 || spec.memory_bytes_per_worker() > 0)
      return spec_error("node_fraction: a node_fraction worker has no CPU or memory "
                        "limit; leave out cpus and memory");
  }
  if (spec.volumes_size() > max_run_volumes)
    return spec_error("volumes: at most " + std::to_string(max_run_volumes)
                      + " volumes, got " + std::to_string(spec.volumes_size()));
  std::set<std::string> taken, names;
  for (int i = 0; i < spec.volumes_size(); ++i) {
    const auto& v = spec.volumes(i);
    auto at = "volumes[" + std::to_string(i) + "]";
    if (!valid_name(v.name()))
      return spec_error(at + ".name: " + quote_short(v.name())
                        + " is not a valid volume name (" + name_rule + ")");
    if (!names.insert(v.name()).second)
      return spec_error("volumes: two volumes are named '" + v.name() + "'");
    if (v.type() != "EmptyDir" && v.type() != "Bind")
      return spec_error(at + ".type: " + quote_short(v.type())
                        + " is not a volume type (use EmptyDir or Bind)");
    if (auto e = check_mount_path(at + ".mount_path", v.mount_path(), spec, taken))
      return e;
    if (v.type() != "Bind")
      continue;
    if (v.host_path().empty() || v.host_path().front() != '/'
        || v.host_path().find("/../") != std::string::npos
        || v.host_path().find('\0') != std::string::npos
        || (v.host_path().size() >= 3
            && v.host_path().compare(v.host_path().size() - 3, 3, "/..") == 0))
      return spec_error(at + ".host_path: " + quote_short(v.host_path())
                        + " is not an absolute path of the machine (without '..')");
    // Whether the run's workspace is granted the path is the controller's
    // check (check_workspace_grants): it holds the workspace.
  }
  int files = 0;
  size_t config_bytes = 0;
  for (int i = 0; i < spec.configs_size(); ++i) {
    const auto& c = spec.configs(i);
    auto at = "configs[" + std::to_string(i) + "]";
    if (!c.name().empty() && !valid_name(c.name()))
      return spec_error(at + ".name: " + quote_short(c.name())
                        + " is not a valid config name (" + name_rule + ")");
    for (int j = 0; j < c.mounts_size(); ++j) {
      auto mat = at + ".mounts[" + std::to_string(j) + "]";
      if (++files > max_run_config_files)
        return spec_error("configs: at most " + std::to_string(max_run_config_files)
                          + " files in all");
      if (auto e = check_mount_path(mat + ".mount_path", c.mounts(j).mount_path(), spec,
                                    taken))
        return e;
      config_bytes += c.mounts(j).content().size();
      if (config_bytes > max_run_config_bytes)
        return spec_error(mat + ".content: the configs' files hold more than 256 KiB in "
                          "all (" + std::to_string(config_bytes) + " bytes so far)");
    }
  }
  if (!spec.ipc_mode().empty() && spec.ipc_mode() != "host")
    return spec_error("security_context.ipc_mode: " + quote_short(spec.ipc_mode())
                      + " is not an IPC mode (use host, or leave it out)");
  if (spec.code_tgz().size() > max_run_code_bytes)
    return spec_error("code: the packed code is " + std::to_string(spec.code_tgz().size())
                      + " bytes, more than the " + std::to_string(max_run_code_bytes >> 10)
                      + " KiB a run may carry");
  if (spec.ByteSizeLong() > max_run_message_bytes)
    return spec_error("the run is " + std::to_string(spec.ByteSizeLong())
                      + " bytes with its code and configs, more than the "
                      + std::to_string(max_run_message_bytes >> 10)
                      + " KiB one run may be (it travels in one message)");
  if (!spec.args().empty() && spec.image().empty())
    return spec_error("args: without command, args go to the image's ENTRYPOINT, and "
                      "the run has no image");
  return caf::none;
}

} // namespace

std::string runc_only_fields(const v1::RunSpec& spec) {
  std::vector<std::string> parts;
  if (!spec.user().empty())
    parts.emplace_back("task_template.user");
  auto named = [](const char* field, const auto& items, auto&& name_of) {
    std::string names;
    for (const auto& item : items)
      names += (names.empty() ? "" : ", ") + name_of(item);
    return std::string{field} + (names.empty() ? "" : " (" + names + ")");
  };
  if (!spec.volumes().empty())
    parts.push_back(named("volumes", spec.volumes(),
                          [](const v1::RunVolume& v) { return v.name(); }));
  if (!spec.configs().empty())
    parts.push_back(named("configs", spec.configs(), [](const v1::RunConfig& c) {
      // astra slurm sbatch mounts its script as config "sbatch".
      return c.name() == "sbatch" ? std::string{"sbatch: the batch script of astra slurm sbatch"}
                                  : c.name();
    }));
  if (!spec.ipc_mode().empty())
    parts.emplace_back("ipc_mode");
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i)
    out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return out;
}

caf::error validate_run_spec(const v1::RunSpec& spec) {
  auto& name = spec.name();
  if (name.empty())
    return spec_error("name: a run needs a name");
  if (!valid_name(name))
    return spec_error("name: " + quote_short(name) + " is not a valid run "
                      "name (" + name_rule + ")");
  if (spec.image().empty() && spec.command().empty())
    return spec_error("image: a run needs an image or a command");
  // An image name is looked up in the machine's images folder: a ".."
  // component would leave it (the agent's data folder is its parent).
  {
    const auto& img = spec.image();
    for (size_t start = 0; start <= img.size();) {
      auto end = std::min(img.find('/', start), img.size());
      if (img.compare(start, end - start, "..") == 0)
        return spec_error("image: " + quote_short(img) + " has a '..' component: name an "
                          "image of the machine's images folder, or give its absolute path");
      start = end + 1;
    }
    if (img.find('\0') != std::string::npos)
      return spec_error("image: the name holds a NUL");
  }
  if (!spec.command().empty() && spec.command(0).empty())
    return spec_error("command[0]: the program to run is empty");
  auto& groups = spec.task_groups();
  if (groups.empty()) {
    if (spec.workers() == 0)
      return spec_error("workers: a run needs at least 1 worker");
  } else {
    std::map<std::string, int> index_of;
    std::vector<int> leaders;
    uint64_t total = 0;
    for (int i = 0; i < groups.size(); ++i) {
      auto& g = groups[i];
      auto at = "task_groups[" + std::to_string(i) + "]";
      if (g.name().empty())
        return spec_error(at + ".name: a group needs a name");
      if (!valid_name(g.name()))
        return spec_error(at + ".name: " + quote_short(g.name())
                          + " is not a valid group name (" + name_rule + ")");
      if (!index_of.emplace(g.name(), i).second)
        return spec_error("task_groups: two groups are named '" + g.name()
                          + "'");
      if (g.size() == 0)
        return spec_error(at + ".size: group '" + g.name()
                          + "' needs at least 1 worker");
      if (g.leader())
        leaders.push_back(i);
      total += g.size();
    }
    if (leaders.size() > 1)
      return spec_error("task_groups: only one group can be the leader; '"
                        + groups[leaders[0]].name() + "' and '"
                        + groups[leaders[1]].name() + "' are both marked "
                        "leader");
    if (total > u32_max)
      return spec_error("task_groups: " + std::to_string(total)
                        + " workers in all is too many (at most "
                        + std::to_string(u32_max) + ")");
    if (spec.workers() > 1)
      return spec_error("workers: give either workers or task_groups, not "
                        "both (the groups have "
                        + std::to_string(total) + " workers in all)");
  }
  uint64_t per_copy = spec.workers();
  if (!groups.empty()) {
    per_copy = 0;
    for (const auto& g : groups)
      per_copy += g.size();
  }
  if (per_copy > max_run_workers)
    return spec_error((groups.empty() ? "workers: " : "task_groups: ")
                      + std::to_string(per_copy) + " workers is too many for one run "
                      "(at most " + std::to_string(max_run_workers) + ")");
  auto copies = std::max<uint64_t>(1, spec.array_size());
  if (per_copy * copies > max_run_workers_all_copies)
    return spec_error("array.size: " + std::to_string(copies) + " copies of "
                      + std::to_string(per_copy) + " worker(s) is "
                      + std::to_string(per_copy * copies) + " workers, too many (at most "
                      + std::to_string(max_run_workers_all_copies) + " in all)");
  if (spec.gpus_per_worker() > max_run_gpus_per_worker)
    return spec_error("gpus: at most "
                      + std::to_string(max_run_gpus_per_worker)
                      + " GPUs per worker, got "
                      + std::to_string(spec.gpus_per_worker()));
  if (!std::isfinite(spec.cpus_per_worker()) || spec.cpus_per_worker() < 0)
    return spec_error("cpus: must be a number of cores, 0 or more, got "
                      + show_number(spec.cpus_per_worker()));
  if (spec.cpus_per_worker() > max_run_cpus_per_worker)
    return spec_error("cpus: at most " + show_number(max_run_cpus_per_worker)
                      + " cores per worker (the most a Linux machine runs), got "
                      + show_number(spec.cpus_per_worker()));
  if (spec.array_size() > max_run_array_size)
    return spec_error("array.size: at most "
                      + std::to_string(max_run_array_size)
                      + " copies of a run, got "
                      + std::to_string(spec.array_size()));
  // issue 17, rule 8: what a GPU that fails under the run does to it.
  if (!spec.on_gpu_fault().empty() && spec.on_gpu_fault() != "stop"
      && spec.on_gpu_fault() != "report")
    return spec_error("on_gpu_fault: '" + spec.on_gpu_fault()
                      + "' is not a choice (use stop or report; report is the default)");
  if (!spec.runtime().empty() && spec.runtime() != "runc"
      && spec.runtime() != "process")
    return spec_error("runtime: '" + spec.runtime()
                      + "' is not a runtime (use runc or process, or leave it "
                        "out for the machine's choice)");
  // A runtime named in the spec is known now: what it cannot do is refused
  // at submit, not when the worker starts (left to the machine, the agent
  // refuses it then).
  if (spec.runtime() == "process"
      && (!spec.user().empty() || !spec.volumes().empty() || !spec.configs().empty()
          || !spec.ipc_mode().empty()))
    return spec_error("runtime: process: task_template.user, volumes, configs and ipc_mode "
                      "need the runc runtime (a host process runs as the agent and sees "
                      "the machine's files)");
  // Without an image a machine runs the command as a host process (runtime
  // auto or process), where these cannot be given: refused here, not when
  // the worker starts (`astra slurm sbatch` without --image was).
  if (spec.runtime().empty() && spec.image().empty()
      && (!spec.user().empty() || !spec.volumes().empty() || !spec.configs().empty()
          || !spec.ipc_mode().empty()))
    return spec_error("image: task_template.user, volumes, configs and ipc_mode need the runc "
                      "runtime, which runs an image; give one (--image busybox works on any "
                      "machine)");
  if (spec.runtime() == "runc" && spec.image().empty())
    return spec_error("image: the runc runtime runs an image; give one (--image busybox "
                      "works on any machine), or use runtime process for a host command");
  if (spec.time_limit_seconds() > max_run_time_limit_seconds)
    return spec_error("time_limit_seconds: at most 30 days ("
                      + std::to_string(max_run_time_limit_seconds)
                      + " s), got "
                      + std::to_string(spec.time_limit_seconds()));
  std::map<std::string, std::string> env{spec.env().begin(), spec.env().end()};
  for (auto& [k, v] : env) {
    if (k.empty())
      return spec_error("env: a variable needs a name");
    if (k.find('=') != std::string::npos || k.find('\0') != std::string::npos)
      return spec_error("env: " + quote_short(k) + " is not a variable name "
                        "(it holds '=' or a NUL)");
    // Kubernetes' rule for a container's variable names: a shell or a
    // launcher reads nothing else ("BAD KEY" was taken; eighth trial).
    const bool starts_ok = !(k.front() >= '0' && k.front() <= '9');
    const bool chars_ok = std::all_of(k.begin(), k.end(), [](char c) {
      return is_alnum(c) || c == '_' || c == '-' || c == '.';
    });
    if (!starts_ok || !chars_ok)
      return spec_error("env: " + quote_short(k) + " is not a variable name (use letters, "
                        "digits, '_', '-' and '.', not starting with a digit)");
    if (v.find('\0') != std::string::npos)
      return spec_error("env." + k + ": the value holds a NUL");
  }
  std::set<std::string> limited;
  for (int i = 0; i < spec.ulimits_size(); ++i) {
    const auto& u = spec.ulimits(i);
    auto at = "security_context.ulimits[" + std::to_string(i) + "]";
    if (!rlimit_resource(u.name()))
      return spec_error(at + ".name: " + quote_short(u.name())
                        + " is not a resource limit (use one of " + rlimit_names()
                        + ")");
    if (!limited.insert(u.name()).second)
      return spec_error(at + ".name: " + u.name() + " is limited twice");
    if (u.soft() < -1 || u.hard() < -1)
      return spec_error(at + ": a limit is a whole number or -1 (unlimited)");
    if (u.hard() != -1 && (u.soft() == -1 || u.soft() > u.hard()))
      return spec_error(at + ": soft " + std::to_string(u.soft())
                        + " is above hard " + std::to_string(u.hard()));
  }
  std::map<std::string, std::string> labels{spec.labels().begin(),
                                            spec.labels().end()};
  for (auto& [k, v] : labels)
    if (k.empty())
      return spec_error("labels: a label needs a key");
  if (auto i = labels.find("pool");
      i != labels.end() && !spec.pool().empty() && i->second != spec.pool())
    return spec_error("labels.pool: '" + i->second + "' contradicts pool '"
                      + spec.pool() + "' (set pool only)");
  return validate_seed_fields(spec);
}

// -- resource limits ----------------------------------------------------------

namespace {

/// The limits `security_context.ulimits` may name, as RLIMIT_<NAME>.
const std::pair<const char*, int> rlimits[] = {
  {"as", RLIMIT_AS},           {"core", RLIMIT_CORE},
  {"cpu", RLIMIT_CPU},         {"data", RLIMIT_DATA},
  {"fsize", RLIMIT_FSIZE},     {"locks", RLIMIT_LOCKS},
  {"memlock", RLIMIT_MEMLOCK}, {"msgqueue", RLIMIT_MSGQUEUE},
  {"nice", RLIMIT_NICE},       {"nofile", RLIMIT_NOFILE},
  {"nproc", RLIMIT_NPROC},     {"rss", RLIMIT_RSS},
  {"rtprio", RLIMIT_RTPRIO},   {"rttime", RLIMIT_RTTIME},
  {"sigpending", RLIMIT_SIGPENDING}, {"stack", RLIMIT_STACK},
};

} // namespace

std::optional<int> rlimit_resource(std::string_view name) {
  for (const auto& [n, r] : rlimits)
    if (name == n)
      return r;
  return std::nullopt;
}

std::string rlimit_names() {
  std::string out;
  for (const auto& [n, r] : rlimits)
    out += (out.empty() ? "" : ", ") + std::string{n};
  return out;
}

// -- shape --------------------------------------------------------------------

uint32_t run_world_size(const v1::RunSpec& spec) {
  if (spec.task_groups().empty())
    return spec.workers();
  uint64_t total = 0;
  for (auto& g : spec.task_groups())
    total += g.size();
  return static_cast<uint32_t>(std::min<uint64_t>(total, u32_max));
}

std::vector<std::pair<std::string, uint32_t>>
run_groups_in_rank_order(const v1::RunSpec& spec) {
  std::vector<std::pair<std::string, uint32_t>> out;
  auto& groups = spec.task_groups();
  if (groups.empty()) {
    out.emplace_back("default", spec.workers());
    return out;
  }
  int leader = 0;
  for (int i = 0; i < groups.size(); ++i)
    if (groups[i].leader()) {
      leader = i;
      break;
    }
  out.emplace_back(groups[leader].name(), groups[leader].size());
  for (int i = 0; i < groups.size(); ++i)
    if (i != leader)
      out.emplace_back(groups[i].name(), groups[i].size());
  return out;
}

// -- YAML output --------------------------------------------------------------

namespace {

/// The seed's fields (task_template.user, node_fraction, volumes, configs)
/// into the open map of `out`. The packed code (`--code`) is not written.
void write_seed_fields(YAML::Emitter& out, const v1::RunSpec& spec) {
  if (!spec.user().empty())
    out << YAML::Key << "task_template" << YAML::Value << YAML::BeginMap << YAML::Key
        << "user" << YAML::Value << spec.user() << YAML::EndMap;
  if (spec.node_fraction() != 0)
    out << YAML::Key << "node_fraction" << YAML::Value << show_number(spec.node_fraction());
  if (!spec.volumes().empty()) {
    out << YAML::Key << "volumes" << YAML::Value << YAML::BeginSeq;
    for (const auto& v : spec.volumes()) {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << v.name()
          << YAML::Key << "type" << YAML::Value << v.type() << YAML::Key << "mount_path"
          << YAML::Value << v.mount_path();
      if (!v.host_path().empty())
        out << YAML::Key << "host_path" << YAML::Value << v.host_path();
      if (v.read_write() && v.type() == "Bind")
        out << YAML::Key << "mode" << YAML::Value << "ReadWrite";
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  if (!spec.configs().empty()) {
    out << YAML::Key << "configs" << YAML::Value << YAML::BeginSeq;
    for (const auto& c : spec.configs()) {
      out << YAML::BeginMap;
      if (!c.name().empty())
        out << YAML::Key << "name" << YAML::Value << c.name();
      out << YAML::Key << "mounts" << YAML::Value << YAML::BeginSeq;
      for (const auto& m : c.mounts())
        out << YAML::BeginMap << YAML::Key << "mount_path" << YAML::Value << m.mount_path()
            << YAML::Key << "content" << YAML::Value << YAML::DoubleQuoted << m.content()
            << YAML::EndMap;
      out << YAML::EndSeq << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
}

} // namespace

std::string to_yaml(const v1::RunSpec& spec) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  auto text = [&](const char* key, const std::string& value) {
    if (!value.empty())
      out << YAML::Key << key << YAML::Value << value;
  };
  auto sorted_map = [&](const char* key, const auto& map) {
    if (map.empty())
      return;
    std::map<std::string, std::string> sorted{map.begin(), map.end()};
    out << YAML::Key << key << YAML::Value << YAML::BeginMap;
    for (auto& [k, v] : sorted)
      out << YAML::Key << k << YAML::Value << v;
    out << YAML::EndMap;
  };
  text("name", spec.name());
  text("workspace", spec.workspace());
  text("image", spec.image());
  text("runtime", spec.runtime());
  using list_field = std::pair<const char*, const google::protobuf::RepeatedPtrField<std::string>*>;
  for (auto [key, list] : {list_field{"command", &spec.command()},
                           list_field{"args", &spec.args()}}) {
    if (list->empty())
      continue;
    out << YAML::Key << key << YAML::Value << YAML::BeginSeq;
    for (auto& x : *list)
      out << x;
    out << YAML::EndSeq;
  }
  sorted_map("env", spec.env());
  if (spec.gpus_per_worker() != 0)
    out << YAML::Key << "gpus" << YAML::Value << spec.gpus_per_worker();
  if (spec.cpus_per_worker() != 0)
    out << YAML::Key << "cpus" << YAML::Value
        << show_number(spec.cpus_per_worker());
  if (auto bytes = spec.memory_bytes_per_worker(); bytes != 0) {
    std::string shown = std::to_string(bytes);
    static const std::pair<const char*, uint64_t> units[] = {
      {"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}};
    for (auto& [name, factor] : units)
      if (bytes % factor == 0) {
        shown = std::to_string(bytes / factor) + name;
        break;
      }
    out << YAML::Key << "memory" << YAML::Value << shown;
  }
  if (spec.workers() != 0)
    out << YAML::Key << "workers" << YAML::Value << spec.workers();
  if (!spec.task_groups().empty()) {
    out << YAML::Key << "task_groups" << YAML::Value << YAML::BeginSeq;
    for (auto& g : spec.task_groups()) {
      out << YAML::Flow << YAML::BeginMap;
      out << YAML::Key << "name" << YAML::Value << g.name();
      out << YAML::Key << "size" << YAML::Value << g.size();
      if (g.leader())
        out << YAML::Key << "leader" << YAML::Value << true;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  if (spec.array_size() != 0)
    out << YAML::Key << "array" << YAML::Value << YAML::BeginMap
        << YAML::Key << "size" << YAML::Value << spec.array_size()
        << YAML::EndMap;
  text("pool", spec.pool());
  sorted_map("labels", spec.labels());
  if (spec.healthy_only())
    out << YAML::Key << "gpu_requests" << YAML::Value << YAML::BeginMap
        << YAML::Key << "healthy_only" << YAML::Value << true << YAML::EndMap;
  if (spec.time_limit_seconds() != 0)
    out << YAML::Key << "time_limit_seconds" << YAML::Value
        << spec.time_limit_seconds();
  text("on_gpu_fault", spec.on_gpu_fault());
  if (spec.outputs())
    out << YAML::Key << "outputs" << YAML::Value << true;
  if (spec.cpu_burst())
    out << YAML::Key << "cpu_burst" << YAML::Value << true;
  if (spec.rdma())
    out << YAML::Key << "rdma" << YAML::Value << true;
  if (spec.one_worker_per_machine())
    out << YAML::Key << "one_worker_per_machine" << YAML::Value << true;
  if (!spec.ulimits().empty() || !spec.ipc_mode().empty()) {
    out << YAML::Key << "security_context" << YAML::Value << YAML::BeginMap;
    if (!spec.ulimits().empty()) {
      out << YAML::Key << "ulimits" << YAML::Value << YAML::BeginSeq;
      for (const auto& u : spec.ulimits())
        out << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << u.name()
            << YAML::Key << "soft" << YAML::Value << u.soft() << YAML::Key << "hard"
            << YAML::Value << u.hard() << YAML::EndMap;
      out << YAML::EndSeq;
    }
    text("ipc_mode", spec.ipc_mode());
    out << YAML::EndMap;
  }
  write_seed_fields(out, spec);
  out << YAML::EndMap;
  return std::string{out.c_str()} + "\n";
}

} // namespace astraeus
