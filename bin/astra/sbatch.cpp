// Reading a Slurm batch script's #SBATCH directives (bin/astra/sbatch.hpp).

#include "bin/astra/sbatch.hpp"

#include <cctype>
#include <cstdlib>
#include <map>

namespace astraeus::cli {

namespace {

/// The words of a directive line after `#SBATCH`: split on blanks, quotes
/// group, a word starting with `#` ends the line.
std::vector<std::string> words_of(std::string_view rest) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < rest.size()) {
    while (i < rest.size() && std::isspace(static_cast<unsigned char>(rest[i])))
      ++i;
    if (i >= rest.size() || rest[i] == '#')
      break;
    std::string word;
    while (i < rest.size() && !std::isspace(static_cast<unsigned char>(rest[i]))) {
      char c = rest[i];
      if (c == '"' || c == '\'') {
        auto end = rest.find(c, i + 1);
        if (end == std::string_view::npos)
          end = rest.size();
        word.append(rest.substr(i + 1, end - i - 1));
        i = end < rest.size() ? end + 1 : end;
        continue;
      }
      word.push_back(c);
      ++i;
    }
    out.push_back(std::move(word));
  }
  return out;
}

std::optional<uint64_t> number(std::string_view s) {
  if (s.empty() || s.size() > 18)
    return std::nullopt;
  uint64_t n = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

/// The long name of a short option that maps (or takes a value).
const std::map<char, std::string>& short_names() {
  static const std::map<char, std::string> names{
    {'J', "job-name"}, {'N', "nodes"}, {'c', "cpus-per-task"}, {'t', "time"},
    {'a', "array"},    {'o', "output"}, {'G', "gpus"},         {'n', "ntasks"},
    {'p', "partition"}, {'A', "account"}, {'q', "qos"},       {'e', "error"},
    {'w', "nodelist"}, {'x', "exclude"}, {'C', "constraint"}, {'D', "chdir"},
  };
  return names;
}

/// Options that take no value (anything else takes one).
bool is_flag(const std::string& name) {
  return name == "exclusive" || name == "requeue" || name == "no-requeue" ||
         name == "hold" || name == "wait" || name == "overcommit" || name == "oversubscribe" ||
         name == "contiguous" || name == "spread-job" || name == "test-only" ||
         name == "parsable" || name == "quiet" || name == "verbose";
}

/// The GPU count of `gpu:N` or `gpu:TYPE:N` (--gres), or of `N` or `TYPE:N`
/// (--gpus-per-node).
std::optional<uint32_t> gpu_count(std::string_view v, bool gres) {
  if (gres) {
    if (v.substr(0, 4) != "gpu:")
      return v == "gpu" ? std::optional<uint32_t>{1} : std::nullopt;
    v.remove_prefix(4);
  }
  auto colon = v.rfind(':');
  auto n = number(colon == std::string_view::npos ? v : v.substr(colon + 1));
  if (!n || *n == 0 || *n > 64)
    return std::nullopt;
  return static_cast<uint32_t>(*n);
}

/// Applies option `name`=`value` of line `line` to `s`; an error in words
/// when it does not map.
std::string apply(sbatch_script& s, const std::string& name, const std::string& value,
                  const std::string& shown, size_t line) {
  const std::string at = "line " + std::to_string(line) + ": #SBATCH " + shown;
  auto bad = [&](const std::string& why) { return at + ": " + why; };
  if (name == "job-name") {
    if (value.empty())
      return bad("give the job a name");
    s.job_name = value;
  } else if (name == "nodes") {
    auto n = number(value);
    if (!n || *n == 0 || *n > 4096)
      return bad("give one number of nodes (1-4096; a range min-max has no equivalent)");
    s.nodes = static_cast<uint32_t>(*n);
  } else if (name == "ntasks-per-node") {
    if (value != "1")
      return bad("Astraeus runs one task (worker) per node; only --ntasks-per-node=1 maps "
                 "(start more processes per node from your script, e.g. torchrun)");
  } else if (name == "gpus-per-node" || name == "gres") {
    auto n = gpu_count(value, name == "gres");
    if (!n)
      return bad(name == "gres" ? "only gpu:N or gpu:TYPE:N maps (1-64 GPUs)"
                                : "give N or TYPE:N GPUs (1-64)");
    s.gpus_per_node = *n;
  } else if (name == "cpus-per-task") {
    char* end = nullptr;
    double c = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(c > 0) || c > 4096)
      return bad("give a number of CPU cores (e.g. 8)");
    s.cpus_per_task = c;
  } else if (name == "mem") {
    auto m = parse_slurm_mem(value);
    if (!m)
      return bad("give memory as MB or with K, M, G or T (e.g. 64G); --mem=0 (all of it) "
                 "has no equivalent");
    s.memory_bytes = *m;
  } else if (name == "time") {
    auto t = parse_slurm_time(value);
    if (!t)
      return bad("give a time as minutes, MM:SS, HH:MM:SS or D-HH:MM:SS");
    s.time_limit_seconds = *t;
  } else if (name == "array") {
    auto dash = value.find('-');
    auto last = dash == std::string::npos ? std::nullopt : number(value.substr(dash + 1));
    if (dash == std::string::npos || value.substr(0, dash) != "0" || !last || *last >= 10000)
      return bad("only a range 0-N maps (N+1 copies, SLURM_ARRAY_TASK_ID 0 to N); lists, "
                 "steps, other starts and %throttles have no equivalent");
    s.array_size = static_cast<uint32_t>(*last + 1);
  } else if (name == "output") {
    if (value.empty())
      return bad("give a file name");
    s.output = value;
  } else {
    return bad("has no Astraeus equivalent; remove it (astra slurm sbatch maps --job-name, "
               "--nodes, --ntasks-per-node=1, --gpus-per-node, --gres=gpu:N, "
               "--cpus-per-task, --mem, --time, --array, --output; use astra slurm sbatch "
               "--pool for a partition)");
  }
  return {};
}

/// The directives of one `#SBATCH` line.
std::string apply_line(sbatch_script& s, std::string_view rest, size_t line) {
  auto words = words_of(rest);
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    std::string name, value, shown = w;
    bool has_value = false;
    if (w.size() > 2 && w.compare(0, 2, "--") == 0) {
      auto eq = w.find('=');
      name = w.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      if (eq != std::string::npos) {
        value = w.substr(eq + 1);
        has_value = true;
      }
    } else if (w.size() >= 2 && w[0] == '-' && w[1] != '-') {
      auto it = short_names().find(w[1]);
      name = it == short_names().end() ? std::string{w.substr(1, 1)} : it->second;
      if (w.size() > 2) {
        value = w.substr(w[2] == '=' ? 3 : 2);
        has_value = true;
      }
    } else {
      return "line " + std::to_string(line) + ": #SBATCH: '" + w +
             "' is not an option (options start with - or --)";
    }
    if (!has_value && !is_flag(name)) {
      if (i + 1 >= words.size())
        return "line " + std::to_string(line) + ": #SBATCH " + w + " needs a value";
      value = words[++i];
      shown += " " + value;
    }
    if (auto err = apply(s, name, value, shown, line); !err.empty())
      return err;
  }
  return {};
}

} // namespace

std::optional<uint64_t> parse_slurm_time(std::string_view t) {
  if (t == "UNLIMITED" || t == "INFINITE" || t == "unlimited" || t == "infinite")
    return uint64_t{0};
  uint64_t days = 0;
  bool with_days = false;
  if (auto dash = t.find('-'); dash != std::string_view::npos) {
    auto d = number(t.substr(0, dash));
    if (!d)
      return std::nullopt;
    days = *d;
    with_days = true;
    t = t.substr(dash + 1);
  }
  std::vector<uint64_t> parts;
  while (true) {
    auto colon = t.find(':');
    auto n = number(t.substr(0, colon));
    if (!n)
      return std::nullopt;
    parts.push_back(*n);
    if (colon == std::string_view::npos)
      break;
    t = t.substr(colon + 1);
  }
  if (parts.size() > 3)
    return std::nullopt;
  uint64_t secs = 0;
  if (with_days) {
    // D-HH, D-HH:MM, D-HH:MM:SS.
    secs = parts[0] * 3600 + (parts.size() > 1 ? parts[1] * 60 : 0) +
           (parts.size() > 2 ? parts[2] : 0);
  } else if (parts.size() == 1) {
    secs = parts[0] * 60;  // minutes
  } else if (parts.size() == 2) {
    secs = parts[0] * 60 + parts[1];  // MM:SS
  } else {
    secs = parts[0] * 3600 + parts[1] * 60 + parts[2];
  }
  return days * 86400 + secs;
}

std::optional<uint64_t> parse_slurm_mem(std::string_view m) {
  if (m.empty())
    return std::nullopt;
  uint64_t unit = uint64_t{1} << 20;  // MB by default
  char last = static_cast<char>(std::toupper(static_cast<unsigned char>(m.back())));
  if (last == 'B' && m.size() > 1) {
    m.remove_suffix(1);
    last = static_cast<char>(std::toupper(static_cast<unsigned char>(m.back())));
  }
  if (!std::isdigit(static_cast<unsigned char>(last))) {
    switch (last) {
      case 'K': unit = uint64_t{1} << 10; break;
      case 'M': unit = uint64_t{1} << 20; break;
      case 'G': unit = uint64_t{1} << 30; break;
      case 'T': unit = uint64_t{1} << 40; break;
      default: return std::nullopt;
    }
    m.remove_suffix(1);
  }
  auto n = number(m);
  if (!n || *n == 0 || *n > (uint64_t{1} << 62) / unit)
    return std::nullopt;
  return *n * unit;
}

sbatch_parse parse_sbatch(std::string_view text) {
  sbatch_script s;
  size_t line = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    auto end = text.find('\n', pos);
    std::string_view l = text.substr(pos, end == std::string_view::npos ? text.size() - pos
                                                                        : end - pos);
    pos = end == std::string_view::npos ? text.size() + 1 : end + 1;
    ++line;
    if (!l.empty() && l.back() == '\r')
      l.remove_suffix(1);
    if (line == 1 && l.substr(0, 2) == "#!") {
      auto interp = words_of(l.substr(2));
      if (!interp.empty()) {
        // "#!/usr/bin/env bash" runs bash.
        s.interpreter = interp[0] == "/usr/bin/env" && interp.size() > 1 ? interp[1]
                                                                          : interp[0];
      }
      continue;
    }
    if (l.substr(0, 7) == "#SBATCH" &&
        (l.size() == 7 || l[7] == ' ' || l[7] == '\t')) {
      if (auto err = apply_line(s, l.substr(7), line); !err.empty())
        return {std::nullopt, err};
      continue;
    }
    size_t first = 0;
    while (first < l.size() && std::isspace(static_cast<unsigned char>(l[first])))
      ++first;
    if (first == l.size() || l[first] == '#')
      continue;  // blank or a comment
    break;       // the first command: later #SBATCH lines are ignored
  }
  return {std::move(s), {}};
}


std::vector<std::string> sbatch_command(const sbatch_script& s,
                                        const std::vector<std::string>& args) {
  std::string script =
    "if [ -n \"${ASTRAEUS_ARRAY_TASK_ID}\" ]; then export "
    "SLURM_ARRAY_TASK_ID=\"${ASTRAEUS_ARRAY_TASK_ID}\" SLURM_ARRAY_JOB_ID=\"${SLURM_JOB_ID}\" "
    "SLURM_ARRAY_TASK_COUNT=\"${ASTRAEUS_ARRAY_SIZE}\"; fi; ";
  // --output is not followed: a file would be in the container's own
  // filesystem (a batch run has no volume), lost when it ends, and the
  // output gone from `astra logs` too (new-user trials lost it, relative
  // and absolute): the output stays in the worker's log.
  script += "exec \"$0\" " + std::string{sbatch_mount_path} + " \"$@\"";
  std::vector<std::string> out{"/bin/sh", "-c", script, s.interpreter};
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

} // namespace astraeus::cli
