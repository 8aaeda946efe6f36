#include "runtime/workers/run_spec.hpp"
#include "runtime/host/sysfs_text.hpp"

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

namespace {

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = KiB * 1024;
constexpr uint64_t GiB = MiB * 1024;
constexpr uint64_t TiB = GiB * 1024;
constexpr uint64_t u64_max = std::numeric_limits<uint64_t>::max();
constexpr uint64_t u32_max = std::numeric_limits<uint32_t>::max();

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

const char* name_rule = "use 1-63 letters, digits and '-', starting with a "
                        "letter or digit";


// -- the spec reader --------------------------------------------------------

/// Thrown inside the reader; becomes the error of `parse_run_spec`.
struct spec_failure {
  std::string text;
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
    YAML::Node args_at;
    fields(root, "",
           {"name", "image", "command", "args", "env", "gpus", "cpus",
            "memory", "workers", "task_groups", "array", "pool", "labels",
            "gpu_requests", "time_limit_seconds", "time_limit", "workspace",
            "runtime", "outputs", "cpu_burst", "security_context"},
           [&](const std::string& key, const YAML::Node& value,
               const std::string& path) {
             if (key == "name") {
               spec.set_name(text(value, path));
             } else if (key == "image") {
               spec.set_image(text(value, path));
             } else if (key == "workspace") {
               spec.set_workspace(text(value, path));
             } else if (key == "runtime") {
               spec.set_runtime(text(value, path));
             } else if (key == "outputs") {
               spec.set_outputs(boolean(value, path));
             } else if (key == "cpu_burst") {
               spec.set_cpu_burst(boolean(value, path));
             } else if (key == "security_context") {
               fields(value, path, {"ulimits"},
                      [&](const std::string&, const YAML::Node& v,
                          const std::string& p) { ulimits(v, p, spec); });
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
               args_at = value;
             } else if (key == "env") {
               for (auto& [k, v] : text_map(value, path))
                 (*spec.mutable_env())[k] = v;
             } else if (key == "labels") {
               for (auto& [k, v] : text_map(value, path))
                 (*spec.mutable_labels())[k] = v;
             } else if (key == "gpus") {
               spec.set_gpus_per_worker(
                 static_cast<uint32_t>(whole(value, path, u32_max)));
             } else if (key == "cpus") {
               spec.set_cpus_per_worker(number(value, path));
             } else if (key == "memory") {
               spec.set_memory_bytes_per_worker(memory(value, path));
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
    if (!args.empty()) {
      if (spec.command().empty())
        fail(args_at, "args",
             "args need a command to follow (give command as well; "
             "the image's entrypoint cannot be kept)");
      for (auto& x : args)
        spec.add_command(std::move(x));
    }
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

// -- validation -------------------------------------------------------------

caf::error validate_run_spec(const v1::RunSpec& spec) {
  auto& name = spec.name();
  if (name.empty())
    return spec_error("name: a run needs a name");
  if (!valid_name(name))
    return spec_error("name: " + quote_short(name) + " is not a valid run "
                      "name (" + name_rule + ")");
  if (spec.image().empty() && spec.command().empty())
    return spec_error("image: a run needs an image or a command");
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
  if (spec.array_size() > max_run_array_size)
    return spec_error("array.size: at most "
                      + std::to_string(max_run_array_size)
                      + " copies of a run, got "
                      + std::to_string(spec.array_size()));
  if (!spec.runtime().empty() && spec.runtime() != "runc"
      && spec.runtime() != "process")
    return spec_error("runtime: '" + spec.runtime()
                      + "' is not a runtime (use runc or process, or leave it "
                        "out for the machine's choice)");
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
  return caf::none;
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
  if (!spec.command().empty()) {
    out << YAML::Key << "command" << YAML::Value << YAML::BeginSeq;
    for (auto& x : spec.command())
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
  if (spec.outputs())
    out << YAML::Key << "outputs" << YAML::Value << true;
  if (spec.cpu_burst())
    out << YAML::Key << "cpu_burst" << YAML::Value << true;
  if (!spec.ulimits().empty()) {
    out << YAML::Key << "security_context" << YAML::Value << YAML::BeginMap
        << YAML::Key << "ulimits" << YAML::Value << YAML::BeginSeq;
    for (const auto& u : spec.ulimits())
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << u.name()
          << YAML::Key << "soft" << YAML::Value << u.soft() << YAML::Key << "hard"
          << YAML::Value << u.hard() << YAML::EndMap;
    out << YAML::EndSeq << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string{out.c_str()} + "\n";
}

} // namespace astraeus
