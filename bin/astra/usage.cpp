// astra's words for a command line it cannot parse (issue 13, items 2 and 3).

#include "bin/astra/usage.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string_view>
#include <vector>

#include "actors/controller/cluster_actor.hpp"
#include "messages/error.hpp"
#include "runtime/host/sysfs_text.hpp"

namespace astraeus::cli {

CLI::Validator machine_name_check() {
  return CLI::Validator(
    [](std::string& name) -> std::string {
      if (valid_machine_name(name))
        return {};
      return "machine name '" + name + "' is not valid: 1-63 letters, digits, '-', '_' "
             "or '.', starting with a letter or digit";
    },
    "NAME");
}

CLI::Validator value_check(caf::error (*rule)(const std::string&)) {
  return CLI::Validator(
    [rule](std::string& value) -> std::string {
      auto err = rule(value);
      return err ? render_error(err) : std::string{};
    },
    "");
}

CLI::Validator wait_time_check() {
  return CLI::Validator(
    [](std::string& v) -> std::string {
      char* end = nullptr;
      double x = std::strtod(v.c_str(), &end);
      std::string unit = end == nullptr ? std::string{} : std::string{end};
      double scale = unit.empty() || unit == "s" ? 1.0
                     : unit == "ms"              ? 0.001
                     : unit == "m"               ? 60.0
                                                 : -1.0;
      if (end == v.c_str() || scale < 0 || !(x * scale >= 0.1 && x * scale <= 3600))
        return "a time from 0.1 s to 3600 s (e.g. 5, 5s, 500ms, 2m), not '" + v + "'";
      v = std::to_string(x * scale);
      return {};
    },
    "SECONDS");
}

namespace {

/// Levenshtein's distance with two neighbours swapped counting one edit (the
/// optimal string alignment distance): "--nmae" is one from "--name", two
/// from "--image", and the hint names the flag the user meant.
size_t typo_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

} // namespace

std::string nearest(const std::string& word, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& k : known) {
    auto d = typo_distance(word, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  size_t allowed = std::max<size_t>(2, word.size() / 3);
  if (!best.empty() && best_d <= allowed && best_d < std::max(word.size(), best.size()))
    return best;
  // A unique prefix ("maint" for "maintenance").
  std::string only;
  for (const auto& k : known)
    if (word.size() >= 2 && k.rfind(word, 0) == 0) {
      if (!only.empty())
        return {};
      only = k;
    }
  return only;
}

split_command_line split_at_double_dash(int argc, const char* const* argv) {
  split_command_line out;
  for (int i = 0; i < argc; ++i) {
    if (!out.has_double_dash && i > 0 && std::strcmp(argv[i], "--") == 0) {
      out.has_double_dash = true;
      continue;
    }
    (out.has_double_dash ? out.trailing : out.head).emplace_back(argv[i]);
  }
  return out;
}

namespace {

/// The option named `name` ("--gpus", "-o") on `app` or, as astra's
/// commands fall through, on one of its parents; null when none has it.
const CLI::Option* find_option(const CLI::App* app, const std::string& name) {
  for (; app != nullptr; app = app->get_parent())
    if (auto* opt = app->get_option_no_throw(name); opt != nullptr && !opt->get_positional())
      return opt;
  return nullptr;
}

/// Every flag spelling known to `app` and its parents ("--gpus", "-o").
std::vector<std::string> option_names(const CLI::App* app) {
  std::set<std::string> out;
  for (; app != nullptr; app = app->get_parent())
    for (const auto* opt : app->get_options()) {
      for (const auto& l : opt->get_lnames())
        out.insert("--" + l);
      for (const auto& s : opt->get_snames())
        out.insert("-" + s);
    }
  return {out.begin(), out.end()};
}

/// The names of `app`'s commands.
std::vector<std::string> command_names(CLI::App* app) {
  std::vector<std::string> out;
  for (auto* sub : app->get_subcommands([](CLI::App*) { return true; }))
    out.push_back(sub->get_name());
  return out;
}

/// `app`'s command named `name`; null when it has none.
CLI::App* find_command(CLI::App* app, const std::string& name) {
  for (auto* sub : app->get_subcommands([](CLI::App*) { return true; }))
    if (sub->check_name(name))
      return sub;
  return nullptr;
}

/// "astra machine" for the commands walked so far.
std::string spelt(const std::vector<std::string>& path) {
  std::string out = "astra";
  for (const auto& p : path)
    out += " " + p;
  return out;
}

/// "; did you mean 'x'?" or nothing.
std::string suggestion(const std::string& near) {
  return near.empty() ? std::string{} : "; did you mean '" + near + "'?";
}

} // namespace

std::string explain_usage_error(CLI::App& app, const std::vector<std::string>& head,
                                const CLI::ParseError& err) {
  CLI::App* at = &app;
  std::vector<std::string> path;
  for (size_t i = 1; i < head.size(); ++i) {
    const auto& tok = head[i];
    if (tok.size() > 1 && tok[0] == '-') {
      auto name = tok.substr(0, tok.find('='));
      const auto* opt = find_option(at, name);
      if (opt == nullptr)
        return "unknown flag '" + name + "' for '" + spelt(path) + "'"
               + suggestion(nearest(name, option_names(at)))
               + " (see '" + spelt(path) + " --help')";
      bool long_form = name.rfind("--", 0) == 0;
      bool value_attached = long_form ? tok.find('=') != std::string::npos : tok.size() > 2;
      if (opt->get_type_size_max() > 0 && !value_attached)
        ++i;  // its value ("--addr h:1", "-o json")
      continue;
    }
    if (auto* sub = find_command(at, tok); sub != nullptr) {
      at = sub;
      path.push_back(tok);
      continue;
    }
    if (at->get_require_subcommand_min() > 0) {
      // A command one level down ("sbatch" is `astra slurm sbatch`).
      std::string deeper;
      for (const auto& group : command_names(at))
        if (auto* g = find_command(at, group); g != nullptr && deeper.empty())
          for (const auto& n : command_names(g))
            if (n == tok)
              deeper = group + " " + n;
      auto near = nearest(tok, command_names(at));
      return "unknown command '" + tok + "'"
             + (path.empty() ? std::string{} : " for '" + spelt(path) + "'")
             + suggestion(near.empty() ? deeper : near)
             + " (see '" + spelt(path) + " --help')";
    }
  }
  if (at->get_require_subcommand_min() > 0 && at->get_subcommands().empty()) {
    std::string list;
    for (const auto& n : command_names(at))
      if (n != "astraeus")
        list += (list.empty() ? "" : ", ") + n;
    return "'" + spelt(path) + "' needs a command: " + list
           + " (see '" + spelt(path) + " --help')";
  }
  return std::string{err.what()} + " (see '" + spelt(path) + " --help')";
}

} // namespace astraeus::cli
