#include "runtime/workers/run_spec.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/workers/run_spec_detail.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <sys/resource.h>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

namespace astraeus {

namespace run_spec_detail {

// -- text helpers -----------------------------------------------------------

bool is_digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

bool is_alnum(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0;
}

/// `x` in double quotes, with '"', '\\' and control characters escaped.
std::string quote(std::string_view x) {
  std::string out = "\"";
  for (auto c : x) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x",
                    static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

/// At most 60 characters of `x`, quoted, for error messages.
std::string quote_short(std::string_view x) {
  if (x.size() <= 60)
    return quote(x);
  return quote(x.substr(0, 57)) + "...";
}

caf::error spec_error(std::string text) {
  return caf::make_error(ec::invalid_request, std::move(text));
}

/// A run or group name: 1-63 letters, digits and '-', starting with a
/// letter or digit.
bool valid_name(std::string_view x) {
  if (x.empty() || x.size() > 63 || !is_alnum(x.front()))
    return false;
  return std::all_of(x.begin(), x.end(),
                     [](char c) { return is_alnum(c) || c == '-'; });
}

const char* const name_rule = "use 1-63 letters, digits and '-', starting with a "
                        "letter or digit";


} // namespace run_spec_detail

using namespace run_spec_detail;

namespace {


// -- the spec reader --------------------------------------------------------

/// Thrown inside the reader; becomes the error of `parse_run_spec`.
struct spec_failure {
  std::string text;
};

/// Fields of the seed (inside-a-worker.md) that Astraeus does not run yet:
/// refused as "not supported yet", not as unknown fields.
const std::set<std::string> not_supported_yet = {
  "datavolume_refs", "secret_refs", "identity", "model", "interactive",
  "external_accesses", "network.egress", "isolation", "task_template.isolation", "tools"};

/// What the reader remembers across fields that spell the same thing.
struct seed_state {
  std::string cpu_field;      ///< cpus or cpu_cores, whichever was given
  std::string memory_field;   ///< memory, memory_bytes or per_gpu.memory_bytes
  uint64_t per_gpu_bytes = 0;
  YAML::Node per_gpu_at;
};

/// Reads a YAML tree into a RunSpec; throws `spec_failure`.
class spec_reader {
public:
  explicit spec_reader(std::string_view source) : source_(source) {
  }

  v1::RunSpec read(const YAML::Node& root) {
    v1::RunSpec spec;
    if (!root.IsMap())
      fail(root, "", "expected a map of fields at the top level, got "
                       + kind(root));
    bool has_workers = false;
    std::optional<std::string> time_limit_field;
    std::vector<std::string> args;
    seed_state seed;
    fields(root, "",
           {"name", "image", "command", "args", "env", "gpus", "cpus",
            "memory", "workers", "task_groups", "array", "pool", "labels",
            "gpu_requests", "time_limit_seconds", "time_limit", "workspace",
            "runtime", "outputs", "cpu_burst", "security_context",
            "task_template", "cpu_cores", "memory_bytes", "per_gpu",
            "node_fraction", "volumes", "configs", "network", "on_gpu_fault",
            "rdma", "one_worker_per_machine"},
           [&](const std::string& key, const YAML::Node& value,
               const std::string& path) {
             if (seed_field(key, value, path, spec, seed))
               return;
             if (key == "name") {
               spec.set_name(text(value, path));
             } else if (key == "image") {
               spec.set_image(text(value, path));
             } else if (key == "workspace") {
               spec.set_workspace(text(value, path));
             } else if (key == "runtime") {
               spec.set_runtime(text(value, path));
             } else if (key == "on_gpu_fault") {
               spec.set_on_gpu_fault(text(value, path));
             } else if (key == "outputs") {
               spec.set_outputs(boolean(value, path));
             } else if (key == "cpu_burst") {
               spec.set_cpu_burst(boolean(value, path));
             } else if (key == "rdma") {
               spec.set_rdma(boolean(value, path));
             } else if (key == "one_worker_per_machine") {
               spec.set_one_worker_per_machine(boolean(value, path));
             } else if (key == "security_context") {
               fields(value, path, {"ulimits", "ipc_mode"},
                      [&](const std::string& k, const YAML::Node& v,
                          const std::string& p) {
                        if (k == "ipc_mode")
                          spec.set_ipc_mode(text(v, p));
                        else
                          ulimits(v, p, spec);
                      });
             } else if (key == "pool") {
               spec.set_pool(text(value, path));
             } else if (key == "command") {
               if (value.IsScalar()) { // a string S: [sh, -c, S]
                 spec.add_command("sh");
                 spec.add_command("-c");
                 spec.add_command(value.Scalar());
               } else {
                 for (auto& x : text_list(value, path))
                   spec.add_command(std::move(x));
               }
             } else if (key == "args") {
               args = text_list(value, path);
             } else if (key == "env") {
               for (auto& [k, v] : text_map(value, path))
                 (*spec.mutable_env())[k] = v;
             } else if (key == "labels") {
               for (auto& [k, v] : text_map(value, path))
                 (*spec.mutable_labels())[k] = v;
             } else if (key == "gpus") {
               spec.set_gpus_per_worker(
                 static_cast<uint32_t>(whole(value, path, u32_max)));
             } else if (key == "workers") {
               spec.set_workers(
                 static_cast<uint32_t>(whole(value, path, u32_max)));
               has_workers = true;
             } else if (key == "task_groups") {
               task_groups(value, path, spec);
             } else if (key == "array") {
               fields(value, path, {"size"},
                      [&](const std::string&, const YAML::Node& v,
                          const std::string& p) {
                        spec.set_array_size(
                          static_cast<uint32_t>(whole(v, p, u32_max)));
                      });
             } else if (key == "gpu_requests") {
               fields(value, path, {"healthy_only"},
                      [&](const std::string&, const YAML::Node& v,
                          const std::string& p) {
                        spec.set_healthy_only(boolean(v, p));
                      });
             } else if (key == "time_limit_seconds"
                        || key == "time_limit") {
               if (time_limit_field)
                 fail(value, path, "give either time_limit or "
                                   "time_limit_seconds, not both");
               time_limit_field = key;
               spec.set_time_limit_seconds(key == "time_limit"
                                             ? duration(value, path)
                                             : whole(value, path, u64_max));
             }
           });
    // With a command, args follow it; without one they go to the image's
    // ENTRYPOINT in place of its CMD (seed, "Command and working directory").
    for (auto& x : args)
      if (spec.command().empty())
        spec.add_args(std::move(x));
      else
        spec.add_command(std::move(x));
    finish_seed_fields(spec, seed);
    if (!has_workers && spec.task_groups().empty())
      spec.set_workers(1);
    return spec;
  }

private:
  using field_fn = std::function<void(const std::string& key,
                                      const YAML::Node& value,
                                      const std::string& path)>;

  [[noreturn]] void fail(const YAML::Node& at, const std::string& path,
                         const std::string& what) const {
    std::string out{source_};
    auto mark = at.Mark();
    if (!mark.is_null())
      out += ":" + std::to_string(mark.line + 1);
    out += ": ";
    if (!path.empty())
      out += path + ": ";
    out += what;
    throw spec_failure{std::move(out)};
  }

  /// What `x` is, for "expected ..., got X".
  static std::string kind(const YAML::Node& x) {
    if (!x.IsDefined() || x.IsNull())
      return "nothing";
    if (x.IsMap())
      return "a map";
    if (x.IsSequence())
      return "a list";
    if (x.Tag() == "!")
      return "the string " + quote_short(x.Scalar());
    return quote_short(x.Scalar());
  }

  static bool plain(const YAML::Node& x) {
    return x.IsScalar() && x.Tag() != "!";
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  /// Walks the map `node`: rejects unknown and repeated keys, skips null
  /// values (= not given), calls `fn` for the others.
  void fields(const YAML::Node& node, const std::string& path,
              const std::vector<std::string>& known, const field_fn& fn) {
    if (!node.IsMap())
      fail(node, path, "expected a map, got " + kind(node));
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      // yaml-cpp's iterator hands out a temporary pair: copy the nodes.
      YAML::Node name = it->first;
      YAML::Node value = it->second;
      if (!name.IsScalar())
        fail(name, path, "field names must be plain text, got " + kind(name));
      auto key = name.Scalar();
      auto key_path = join(path, key);
      if (not_supported_yet.count(key_path))
        fail(name, "", "not supported yet: " + key_path
                         + (key == "isolation"
                              // gpus.md: "A sandboxed worker (isolation:
                              // sandbox, gVisor) cannot have GPUs."
                              ? std::string{" (a gVisor sandbox; a sandboxed worker could not "
                                            "have GPUs)"}
                              : std::string{" (see the README's list of run-spec fields)"}));
      if (std::find(known.begin(), known.end(), key) == known.end())
        fail(name, key_path, "unknown field" + hint(key, known));
      if (!seen.insert(key).second)
        fail(name, key_path, "given twice");
      if (value.IsNull())
        continue;
      fn(key, value, key_path);
    }
  }

  static std::string hint(const std::string& key,
                          const std::vector<std::string>& known) {
    const std::string* best = nullptr;
    size_t best_distance = 4;
    for (auto& k : known) {
      // A prefix ("healthy" of "healthy_only") counts as close.
      auto prefix = key.size() >= 3 && k.compare(0, key.size(), key) == 0;
      auto d = prefix ? 1 : edit_distance(key, k);
      if (d < best_distance && d < std::max<size_t>(key.size(), 2)) {
        best = &k;
        best_distance = d;
      }
    }
    if (best != nullptr)
      return " (did you mean " + *best + "?)";
    if (known.empty())
      return " (it has no fields Astraeus runs yet)";
    std::string out = " (known fields:";
    for (auto& k : known)
      out += " " + k;
    return out + ")";
  }

  std::string text(const YAML::Node& x, const std::string& path) {
    if (!x.IsScalar())
      fail(x, path, "expected a string, got " + kind(x));
    return x.Scalar();
  }

  std::vector<std::string> text_list(const YAML::Node& x,
                                     const std::string& path) {
    if (!x.IsSequence())
      fail(x, path, "expected a list of strings, got " + kind(x));
    std::vector<std::string> out;
    for (size_t i = 0; i < x.size(); ++i) {
      YAML::Node item = x[i];
      auto item_path = path + "[" + std::to_string(i) + "]";
      if (!item.IsScalar())
        fail(item.IsNull() ? x : item, item_path,
             "expected a string, got " + kind(item));
      out.push_back(item.Scalar());
    }
    return out;
  }

  std::map<std::string, std::string> text_map(const YAML::Node& x,
                                               const std::string& path) {
    if (!x.IsMap())
      fail(x, path, "expected a map of strings, got " + kind(x));
    std::map<std::string, std::string> out;
    for (auto it = x.begin(); it != x.end(); ++it) {
      YAML::Node name = it->first;
      YAML::Node value = it->second;
      if (!name.IsScalar())
        fail(name, path, "keys must be plain text, got " + kind(name));
      auto key_path = path + "." + name.Scalar();
      if (!value.IsScalar())
        fail(value.IsNull() ? name : value, key_path,
             "expected a string, got " + kind(value));
      if (!out.emplace(name.Scalar(), value.Scalar()).second)
        fail(name, key_path, "given twice");
    }
    return out;
  }

  uint64_t whole(const YAML::Node& x, const std::string& path, uint64_t max) {
    auto s = plain(x) ? x.Scalar() : std::string{};
    if (s.empty() || !std::all_of(s.begin(), s.end(), is_digit))
      fail(x, path, "expected a whole number, got " + kind(x));
    unsigned __int128 value = 0;
    for (auto c : s) {
      value = value * 10 + static_cast<unsigned>(c - '0');
      if (value > max)
        fail(x, path, quote_short(s) + " is too large (at most "
                        + std::to_string(max) + ")");
    }
    return static_cast<uint64_t>(value);
  }

  double number(const YAML::Node& x, const std::string& path) {
    auto got = [&] { return "expected a number, got " + kind(x); };
    if (!plain(x))
      fail(x, path, got());
    auto s = x.Scalar();
    if (s.empty()
        || s.find_first_not_of("0123456789.+-eE") != std::string::npos)
      fail(x, path, got());
    char* end = nullptr;
    errno = 0;
    auto value = std::strtod(s.c_str(), &end);
    if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(value))
      fail(x, path, got());
    return value;
  }

  bool boolean(const YAML::Node& x, const std::string& path) {
    if (plain(x)) {
      auto s = ascii_lower(x.Scalar());
      if (s == "true")
        return true;
      if (s == "false")
        return false;
    }
    fail(x, path, "expected true or false, got " + kind(x));
  }

  uint64_t memory(const YAML::Node& x, const std::string& path) {
    if (plain(x) && !x.Scalar().empty() && x.Scalar()[0] == '-')
      fail(x, path, "a memory size cannot be negative, got " + kind(x));
    if (!x.IsScalar())
      fail(x, path, "expected a memory size (256M, 16GiB) or a number of "
                    "bytes, got " + kind(x));
    auto bytes = parse_memory_size(x.Scalar());
    if (!bytes)
      fail(x, path, render_error(bytes.error()));
    return *bytes;
  }

  uint64_t duration(const YAML::Node& x, const std::string& path) {
    if (!x.IsScalar())
      fail(x, path, "expected a duration (2h, 90m, 1h30m, 45s), got "
                      + kind(x));
    auto seconds = parse_seconds(x.Scalar());
    if (!seconds)
      fail(x, path, quote_short(x.Scalar()) + " is not a duration (use 2h, "
                      "90m, 1h30m, 1d, 45s or a number of seconds)");
    return *seconds;
  }

  /// A limit's value: a whole number, or -1 (unlimited).
  int64_t limit_value(const YAML::Node& x, const std::string& path) {
    if (plain(x) && x.Scalar() == "-1")
      return -1;
    if (!plain(x) || x.Scalar().empty() || !is_digit(x.Scalar()[0]))
      fail(x, path, "expected a whole number or -1 (unlimited), got " + kind(x));
    return static_cast<int64_t>(
      whole(x, path, static_cast<uint64_t>(std::numeric_limits<int64_t>::max())));
  }

  /// Walks a list of maps: `x` must be a list (of `plural`), each item a
  /// map (`one`; `shape` shows its fields in errors); calls `fn` for each
  /// with its path (`task_groups[1]`).
  void map_items(const YAML::Node& x, const std::string& path, const char* plural,
                 const char* one, const char* shape,
                 const std::function<void(const YAML::Node&, const std::string&)>& fn) {
    if (!x.IsSequence())
      fail(x, path, std::string{"expected a list of "} + plural + " (" + shape
                      + "), got " + kind(x));
    for (size_t i = 0; i < x.size(); ++i) {
      YAML::Node item = x[i];
      auto item_path = path + "[" + std::to_string(i) + "]";
      if (!item.IsMap())
        fail(item.IsNull() ? x : item, item_path,
             std::string{"expected "} + one + " (" + shape + "), got " + kind(item));
      fn(item, item_path);
    }
  }

  /// security_context.ulimits: [{name, soft, hard}]; hard defaults to soft.
  void ulimits(const YAML::Node& x, const std::string& path, v1::RunSpec& spec) {
    map_items(x, path, "limits", "a limit", "{name, soft, hard}",
              [&](const YAML::Node& item, const std::string& item_path) {
      auto& u = *spec.add_ulimits();
      bool has_name = false, has_soft = false, has_hard = false;
      fields(item, item_path, {"name", "soft", "hard"},
             [&](const std::string& key, const YAML::Node& v, const std::string& p) {
               if (key == "name") {
                 u.set_name(text(v, p));
                 has_name = true;
               } else if (key == "soft") {
                 u.set_soft(limit_value(v, p));
                 has_soft = true;
               } else {
                 u.set_hard(limit_value(v, p));
                 has_hard = true;
               }
             });
      if (!has_name)
        fail(item, item_path + ".name", "missing (which limit: stack, nofile, ...)");
      if (!has_soft)
        fail(item, item_path + ".soft", "missing (a whole number, or -1 for unlimited)");
      if (!has_hard)
        u.set_hard(u.soft());
    });
  }

  void task_groups(const YAML::Node& x, const std::string& path,
                   v1::RunSpec& spec) {
    map_items(x, path, "groups", "a group", "{name, size, leader}",
              [&](const YAML::Node& item, const std::string& item_path) {
      auto& group = *spec.add_task_groups();
      bool has_size = false;
      fields(item, item_path, {"name", "size", "leader"},
             [&](const std::string& key, const YAML::Node& v,
                 const std::string& p) {
               if (key == "name") {
                 group.set_name(text(v, p));
               } else if (key == "size") {
                 group.set_size(static_cast<uint32_t>(whole(v, p, u32_max)));
                 has_size = true;
               } else {
                 group.set_leader(boolean(v, p));
               }
             });
      if (!has_size)
        fail(item, item_path + ".size", "missing (how many workers the group "
                                        "has)");
    });
  }

  /// The fields that spell one thing two ways (cpus and cpu_cores; memory,
  /// memory_bytes and per_gpu.memory_bytes) and the seed's other fields;
  /// false for a field `read` handles itself.
  bool seed_field(const std::string& key, const YAML::Node& value,
                  const std::string& path, v1::RunSpec& spec, seed_state& seed) {
    auto once = [&](std::string& field, const std::string& now, const YAML::Node& at) {
      if (!field.empty())
        fail(at, now, "give either " + field + " or " + now + ", not both");
      field = now;
    };
    if (key == "cpus" || key == "cpu_cores") {
      once(seed.cpu_field, key, value);
      auto cores = number(value, path);
      if (key == "cpu_cores" && cores < 0)  // cpus: -1 is told by validate_run_spec
        fail(value, path, "a number of cores cannot be negative, got " + kind(value));
      spec.set_cpus_per_worker(cores);
    } else if (key == "memory" || key == "memory_bytes") {
      once(seed.memory_field, key, value);
      spec.set_memory_bytes_per_worker(memory(value, path));
    } else if (key == "per_gpu") {
      fields(value, path, {"memory_bytes"},
             [&](const std::string&, const YAML::Node& v, const std::string& p) {
               once(seed.memory_field, p, v);
               seed.per_gpu_bytes = memory(v, p);
               seed.per_gpu_at = v;
             });
    } else if (key == "node_fraction") {
      spec.set_node_fraction(number(value, path));
    } else if (key == "task_template") {
      fields(value, path, {"user"},
             [&](const std::string&, const YAML::Node& v, const std::string& p) {
               spec.set_user(text(v, p));
             });
    } else if (key == "network") {
      fields(value, path, {}, [](const std::string&, const YAML::Node&,
                                 const std::string&) {});
    } else if (key == "volumes") {
      volumes(value, path, spec);
    } else if (key == "configs") {
      configs(value, path, spec);
    } else {
      return false;
    }
    return true;
  }

  /// After every field: per_gpu.memory_bytes becomes the worker's memory.
  void finish_seed_fields(v1::RunSpec& spec, const seed_state& seed) {
    if (seed.per_gpu_bytes == 0)
      return;
    if (spec.gpus_per_worker() == 0)
      fail(seed.per_gpu_at, "per_gpu.memory_bytes",
           "needs gpus (the memory is per GPU; without GPUs use memory_bytes)");
    auto total = static_cast<unsigned __int128>(seed.per_gpu_bytes) * spec.gpus_per_worker();
    if (total > u64_max)
      fail(seed.per_gpu_at, "per_gpu.memory_bytes", "times gpus is too large");
    spec.set_memory_bytes_per_worker(static_cast<uint64_t>(total));
  }

  /// volumes: [{name, type: EmptyDir|Bind, mount_path, host_path, mode}].
  void volumes(const YAML::Node& x, const std::string& path, v1::RunSpec& spec) {
    map_items(x, path, "volumes", "a volume", "{name, type, mount_path, host_path, mode}",
              [&](const YAML::Node& item, const std::string& item_path) {
      auto& v = *spec.add_volumes();
      YAML::Node host_at, mode_at;  // where host_path and mode were given
      bool has_host = false, has_mode = false;
      std::string mode;
      fields(item, item_path, {"name", "type", "mount_path", "host_path", "mode"},
             [&](const std::string& key, const YAML::Node& f, const std::string& p) {
               if (key == "name") {
                 v.set_name(text(f, p));
               } else if (key == "type") {
                 v.set_type(text(f, p));
                 if (v.type() != "EmptyDir" && v.type() != "Bind")
                   fail(f, p, quote_short(v.type()) + " is not a volume type (use "
                                                      "EmptyDir or Bind)");
               } else if (key == "mount_path") {
                 v.set_mount_path(text(f, p));
               } else if (key == "host_path") {
                 v.set_host_path(text(f, p));
                 host_at = f;
                 has_host = true;
               } else {
                 mode = text(f, p);
                 mode_at = f;
                 has_mode = true;
                 if (mode != "ReadOnly" && mode != "ReadWrite")
                   fail(f, p, quote_short(mode) + " is not a mode (use ReadOnly or "
                                                  "ReadWrite)");
                 v.set_read_write(mode == "ReadWrite");
               }
             });
      if (v.type().empty())
        fail(item, item_path + ".type", "missing (EmptyDir or Bind)");
      if (v.mount_path().empty())
        fail(item, item_path + ".mount_path", "missing (where the worker sees it)");
      if (v.type() == "Bind" && v.host_path().empty())
        fail(item, item_path + ".host_path", "missing (the machine's path to mount)");
      if (v.type() == "EmptyDir" && has_host)
        fail(host_at, item_path + ".host_path", "only a Bind volume has one");
      if (v.type() == "EmptyDir" && has_mode && mode != "ReadWrite")
        fail(mode_at, item_path + ".mode", "an EmptyDir volume is always writable");
      if (v.type() == "EmptyDir")
        v.set_read_write(false);  // read_write is a Bind's mode only
    });
  }

  /// configs: [{name, mounts: [{mount_path, content}]}].
  void configs(const YAML::Node& x, const std::string& path, v1::RunSpec& spec) {
    map_items(x, path, "configs", "a config", "{name, mounts}",
              [&](const YAML::Node& item, const std::string& item_path) {
      auto& c = *spec.add_configs();
      fields(item, item_path, {"name", "mounts"},
             [&](const std::string& key, const YAML::Node& f, const std::string& p) {
               if (key == "name") {
                 c.set_name(text(f, p));
                 return;
               }
               map_items(f, p, "files", "a file", "{mount_path, content}",
                         [&](const YAML::Node& m, const std::string& mp) {
                 auto& file = *c.add_mounts();
                 bool has_content = false;
                 fields(m, mp, {"mount_path", "content"},
                        [&](const std::string& k, const YAML::Node& v,
                            const std::string& vp) {
                          if (k == "mount_path") {
                            file.set_mount_path(text(v, vp));
                          } else {
                            file.set_content(text(v, vp));
                            has_content = true;
                          }
                        });
                 if (file.mount_path().empty())
                   fail(m, mp + ".mount_path", "missing (where the file is mounted)");
                 if (!has_content)
                   fail(m, mp + ".content", "missing (the file's text)");
               });
             });
    });
  }

  std::string_view source_;
};

} // namespace

std::optional<uint64_t> parse_seconds(std::string_view text) {
  auto x = ascii_lower(trim(text));
  if (x.empty())
    return std::nullopt;
  if (std::all_of(x.begin(), x.end(), is_digit)) {
    if (x.size() > 19)
      return std::nullopt;
    return std::stoull(x);
  }
  uint64_t total = 0;
  size_t i = 0;
  while (i < x.size()) {
    uint64_t n = 0;
    size_t start = i;
    while (i < x.size() && is_digit(x[i])) {
      auto digit = static_cast<uint64_t>(x[i] - '0');
      if (n > (u64_max - digit) / 10)
        return std::nullopt;
      n = n * 10 + digit;
      ++i;
    }
    if (i == start || i == x.size())
      return std::nullopt;
    uint64_t factor = 0;
    switch (x[i]) {
      case 'd': factor = 86400; break;
      case 'h': factor = 3600; break;
      case 'm': factor = 60; break;
      case 's': factor = 1; break;
      default: return std::nullopt;
    }
    ++i;
    if (n > (u64_max - total) / factor)
      return std::nullopt;
    total += n * factor;
  }
  return total;
}

// -- parsing ----------------------------------------------------------------

caf::expected<v1::RunSpec> parse_run_spec(std::string_view text,
                                          std::string_view source) {
  std::string where{source};
  if (text.size() > max_run_spec_bytes)
    return spec_error(where + ": the spec is larger than 1 MiB");
  // A spec that starts as JSON is held to JSON's grammar first: YAML would
  // take some broken JSON (text after the closing brace) without a word.
  auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '{') {
    try {
      (void) nlohmann::json::parse(text.begin(), text.end());
    } catch (const nlohmann::json::exception& e) {
      // parse_error, and out_of_range for a number too large (1e400).
      return spec_error(where + ": not valid JSON: " + e.what());
    }
  }
  YAML::Node root;
  try {
    root = YAML::Load(std::string{text});
  } catch (const YAML::Exception& e) {
    return spec_error(where + ":" + std::to_string(e.mark.line + 1) + ":"
                      + std::to_string(e.mark.column + 1)
                      + ": syntax error: " + e.msg);
  } catch (const std::exception& e) {
    return spec_error(where + ": syntax error: " + e.what());
  }
  if (!root.IsDefined() || root.IsNull())
    return spec_error(where + ": the spec is empty");
  try {
    return spec_reader{source}.read(root);
  } catch (const spec_failure& f) {
    return spec_error(f.text);
  } catch (const std::exception& e) {
    return spec_error(where + ": " + e.what());
  }
}

caf::expected<uint64_t> parse_memory_size(std::string_view text) {
  auto invalid = [&] {
    return spec_error(quote_short(text) + " is not a memory size (use 256M, "
                      "16G, 16GiB, 1.5G or a number of bytes)");
  };
  auto x = trim(text);
  size_t i = 0;
  std::string whole_digits;
  std::string fraction_digits;
  while (i < x.size() && is_digit(x[i]))
    whole_digits += x[i++];
  bool has_point = i < x.size() && x[i] == '.';
  if (has_point) {
    ++i;
    while (i < x.size() && is_digit(x[i]))
      fraction_digits += x[i++];
  }
  if (whole_digits.empty() && fraction_digits.empty())
    return invalid();
  auto unit = ascii_lower(trim(x.substr(i)));
  static const std::pair<const char*, uint64_t> units[] = {
    {"", 1},          {"b", 1},
    {"k", KiB},       {"ki", KiB},      {"kib", KiB},
    {"m", MiB},       {"mi", MiB},      {"mib", MiB},
    {"g", GiB},       {"gi", GiB},      {"gib", GiB},
    {"t", TiB},       {"ti", TiB},      {"tib", TiB},
    {"kb", 1000},     {"mb", 1000000},  {"gb", 1000000000},
    {"tb", 1000000000000},
  };
  uint64_t factor = 0;
  for (auto& [name, f] : units)
    if (unit == name)
      factor = f;
  if (factor == 0)
    return invalid();
  if (factor == 1 && !fraction_digits.empty()
      && fraction_digits.find_first_not_of('0') != std::string::npos)
    return spec_error(quote_short(text) + " is not a memory size: a number "
                      "of bytes must be whole");
  auto too_large = [&] {
    return spec_error(quote_short(text) + " is too large for a memory size");
  };
  // Exact arithmetic: whole * factor + fraction * factor / 10^digits.
  using u128 = unsigned __int128;
  u128 value = 0;
  for (auto c : whole_digits) {
    value = value * 10 + static_cast<unsigned>(c - '0');
    if (value > u64_max)
      return too_large();
  }
  value *= factor;
  if (value > u64_max)
    return too_large();
  if (fraction_digits.size() > 18)
    fraction_digits.resize(18);
  u128 numerator = 0;
  u128 denominator = 1;
  for (auto c : fraction_digits) {
    numerator = numerator * 10 + static_cast<unsigned>(c - '0');
    denominator *= 10;
  }
  value += numerator * factor / denominator;
  if (value > u64_max)
    return too_large();
  return static_cast<uint64_t>(value);
}

} // namespace astraeus
