// `astra completion bash|zsh`: a completion script generated from the same
// command tree astra parses with (issue 13 item 6), so it never lists a
// command astra does not have.

#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "bin/astra/commands.hpp"

namespace astraeus::cli {

namespace {

/// Every command path of `app` ("", "gpu", "gpu clear-fault", …) with the
/// words that may follow it: its commands and its flags.
void collect(CLI::App* app, const std::string& path,
             std::map<std::string, std::string>& words) {
  std::string w;
  for (auto* sub : app->get_subcommands([](CLI::App*) { return true; })) {
    w += sub->get_name() + " ";
    collect(sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), words);
  }
  std::set<std::string> flags;
  for (const CLI::App* a = app; a != nullptr; a = a->get_parent())
    for (const auto* opt : a->get_options())
      for (const auto& l : opt->get_lnames())
        flags.insert("--" + l);
  for (const auto& f : flags)
    w += f + " ";
  words[path] = w;
}

/// The bash script: `_astra` walks the words typed so far through the
/// command paths and offers what may follow the deepest one.
std::string bash_script(CLI::App& root) {
  std::map<std::string, std::string> words;
  collect(&root, "", words);
  std::string out = "# astra completion for bash: source <(astra completion bash)\n"
                    "_astra_words() {\n  case \"$1\" in\n";
  for (const auto& [path, w] : words)
    out += "    \"" + path + "\") echo \"" + w + "\" ;;\n";
  out += "  esac\n}\n"
         "_astra() {\n"
         "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" path=\"\" next i\n"
         "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
         "    next=\"${path:+$path }${COMP_WORDS[i]}\"\n"
         "    [[ -n \"$(_astra_words \"$next\")\" ]] && path=\"$next\"\n"
         "  done\n"
         "  COMPREPLY=($(compgen -W \"$(_astra_words \"$path\")\" -- \"$cur\"))\n"
         "}\n"
         "complete -F _astra astra\n";
  return out;
}

} // namespace

void add_completion_command(CLI::App& app, invocation& inv) {
  auto* cmd = app.add_subcommand(
    "completion", "print a shell completion script: source <(astra completion bash)");
  auto& shell = inv.keep<std::string>();
  cmd->add_option("SHELL", shell, "bash or zsh")
    ->required()
    ->check(CLI::IsMember({"bash", "zsh"}));
  cmd->callback([&inv, &shell, &app] {
    CLI::App* root = &app;
    while (root->get_parent() != nullptr)
      root = root->get_parent();
    auto script = bash_script(*root);
    if (shell == "zsh")
      script = "# astra completion for zsh: source <(astra completion zsh)\n"
               "autoload -U +X bashcompinit && bashcompinit\n"
               + script;
    std::fputs(script.c_str(), stdout);
    inv.rc = 0;
  });
}

} // namespace astraeus::cli
