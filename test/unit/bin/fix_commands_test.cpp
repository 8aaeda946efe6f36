// Every `astra` command a fix text names (runtime/validation/fix_commands.hpp)
// parses with astra's own command tree. Trial: the report's "What to fix"
// named `astra gpus dgx-02` and `astra clear-fault dgx-02 GPU-…`, which
// astra refuses.

#include "runtime/validation/fix_commands.hpp"

#include <sstream>

#include <gtest/gtest.h>

#include "bin/astra/commands.hpp"

namespace astraeus::cli {
namespace {

/// Removes every command's callback below `app`: parsing must send nothing.
void silence(CLI::App& app) {
  app.callback({});
  for (auto* sub : app.get_subcommands([](CLI::App*) { return true; }))
    silence(*sub);
}

/// Why astra refuses `line` ("astra gpus --machine x"), "" when it parses.
std::string refusal(const std::string& line) {
  CLI::App app{"astra"};
  app.require_subcommand(1);
  app.fallthrough();
  invocation inv;
  add_commands(app, inv);
  auto* prefixed = app.add_subcommand("astraeus", "");
  prefixed->require_subcommand(1);
  prefixed->fallthrough();
  add_commands(*prefixed, inv);
  silence(app);
  std::vector<std::string> words;
  std::istringstream in{line};
  for (std::string w; in >> w;)
    words.push_back(w);
  std::vector<const char*> argv;
  for (const auto& w : words)
    argv.push_back(w.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return {};
}

TEST(FixCommands, EveryCommandAFixTextNamesParses) {
  for (const auto& line :
       {fix_command::gpus("dgx-02"),
        fix_command::clear_fault("dgx-02", "GPU-5f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"),
        fix_command::xids(), fix_command::data_location("dgx-02"),
        fix_command::validate_machine("burn", "dgx-02"),
        fix_command::validate_machine("disk", "dgx-02"),
        fix_command::validate_pool("network", "h100"), fix_command::validate_pool("acceptance", ""),
        fix_command::topology()}) {
    EXPECT_EQ(line.rfind("astra ", 0), 0u) << line;
    EXPECT_EQ(refusal(line), "") << line;
  }
  EXPECT_EQ(fix_command::gpus("dgx-02"), "astra gpus --machine dgx-02");
  EXPECT_EQ(fix_command::clear_fault("dgx-02", "GPU-1"), "astra gpu clear-fault dgx-02 GPU-1");
}

TEST(FixCommands, TheTrialsWrongCommandsAreRefused) {
  EXPECT_NE(refusal("astra gpus dgx-02"), "");
  EXPECT_NE(refusal("astra clear-fault dgx-02 GPU-1"), "");
}

} // namespace
} // namespace astraeus::cli
