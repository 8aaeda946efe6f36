// astra's words for a command line it cannot parse (bin/astra/usage.cpp):
// what a user sees for a typo, a stray flag or a missing command.

#include "bin/astra/usage.hpp"

#include <gtest/gtest.h>

namespace astraeus::cli {
namespace {

/// A tree shaped like astra's: global options falling through to commands.
struct mini_astra {
  CLI::App app{"astra"};
  std::string addr, out;
  std::vector<std::string> env, command;
  uint32_t gpus = 0;
  std::string machine, gpu;

  mini_astra() {
    app.require_subcommand(1);
    app.fallthrough();
    app.add_option("--addr", addr);
    app.add_option("-o,--output", out);
    app.add_subcommand("machines", "");
    app.add_subcommand("machine", "");
    app.add_subcommand("maintenance", "");
    auto* run = app.add_subcommand("run", "");
    run->add_option("--gpus", gpus);
    run->add_option("--env", env)->allow_extra_args(false);
    run->add_option("command", command);
    auto* g = app.add_subcommand("gpu", "");
    g->require_subcommand(1);
    auto* clear = g->add_subcommand("clear-fault", "");
    clear->add_option("MACHINE", machine)->required();
    clear->add_option("GPU-ID", gpu)->required();
    auto* slurm = app.add_subcommand("slurm", "");
    slurm->require_subcommand(1);
    slurm->add_subcommand("sbatch", "");
  }

  /// The message for `args` (after "astra"), or "" when they parse.
  std::string says(std::vector<std::string> args) {
    args.insert(args.begin(), "astra");
    std::vector<const char*> argv;
    for (const auto& a : args)
      argv.push_back(a.c_str());
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      return explain_usage_error(app, args, e);
    }
    return {};
  }
};

TEST(AstraUsage, AMistypedCommandIsNamedWithTheNearestOne) {
  mini_astra a;
  EXPECT_EQ(a.says({"machnes"}),
            "unknown command 'machnes'; did you mean 'machines'? (see 'astra --help')");
}

TEST(AstraUsage, AMistypedSubcommandNamesItsCommand) {
  mini_astra a;
  EXPECT_EQ(a.says({"gpu", "clear-falt", "gpu-01", "GPU-1"}),
            "unknown command 'clear-falt' for 'astra gpu'; did you mean 'clear-fault'? "
            "(see 'astra gpu --help')");
}

TEST(AstraUsage, AnUnknownFlagIsNamedWithTheNearestOne) {
  mini_astra a;
  EXPECT_EQ(a.says({"--addr", "h:1", "run", "--gpu", "2"}),
            "unknown flag '--gpu' for 'astra run'; did you mean '--gpus'? "
            "(see 'astra run --help')");
}

TEST(AstraUsage, SomethingFarFromEveryNameGetsNoGuess) {
  mini_astra a;
  EXPECT_EQ(a.says({"zzzzzzzz"}), "unknown command 'zzzzzzzz' (see 'astra --help')");
}

TEST(AstraUsage, ACommandThatNeedsASubcommandListsThem) {
  mini_astra a;
  EXPECT_EQ(a.says({"gpu"}), "'astra gpu' needs a command: clear-fault (see 'astra gpu --help')");
}

TEST(AstraUsage, AGlobalOptionsValueIsNotTakenForACommand) {
  mini_astra a;
  // "h:1" is --addr's value, "-o json" the output's: the typo is machnes.
  EXPECT_EQ(a.says({"--addr", "h:1", "-o", "json", "machnes"}),
            "unknown command 'machnes'; did you mean 'machines'? (see 'astra --help')");
}

TEST(AstraUsage, EachEnvTakesOneValueSoTheCommandIsNotEaten) {
  mini_astra a;
  EXPECT_EQ(a.says({"run", "--env", "A=1", "--env", "B=2", "echo", "hi"}), "");
  EXPECT_EQ(a.env, (std::vector<std::string>{"A=1", "B=2"}));
  EXPECT_EQ(a.command, (std::vector<std::string>{"echo", "hi"}));
}

TEST(AstraUsage, TheCommandAfterDoubleDashIsKeptWhole) {
  const char* argv[] = {"astra", "run", "--env", "K=V", "--", "sh", "-c", "echo $K", "--", "x"};
  auto line = split_at_double_dash(10, argv);
  EXPECT_TRUE(line.has_double_dash);
  EXPECT_EQ(line.head, (std::vector<std::string>{"astra", "run", "--env", "K=V"}));
  EXPECT_EQ(line.trailing, (std::vector<std::string>{"sh", "-c", "echo $K", "--", "x"}));
}

TEST(AstraUsage, NearestAllowsAFewEditsOrAUniquePrefix) {
  EXPECT_EQ(nearest("cordn", {"cordon", "uncordon"}), "cordon");
  EXPECT_EQ(nearest("maint", {"machines", "maintenance"}), "maintenance");
  EXPECT_EQ(nearest("x", {"machines"}), "");
  // Two letters swapped are one slip (eighth trial: --nmae suggested --image).
  EXPECT_EQ(nearest("--nmae", {"--image", "--name", "--pool"}), "--name");
}

TEST(AstraUsage, TimeoutTakesSecondsOrAUnit) {
  auto parse = [](std::string value) -> std::pair<double, std::string> {
    CLI::App app{"astra"};
    double seconds = 0;
    app.add_option("--timeout", seconds)->transform(wait_time_check());
    std::vector<const char*> argv{"astra", "--timeout", value.c_str()};
    try {
      app.parse(3, argv.data());
    } catch (const CLI::ParseError& e) {
      return {0, e.what()};
    }
    return {seconds, ""};
  };
  EXPECT_DOUBLE_EQ(parse("5").first, 5);
  EXPECT_DOUBLE_EQ(parse("5s").first, 5);
  EXPECT_DOUBLE_EQ(parse("500ms").first, 0.5);
  EXPECT_DOUBLE_EQ(parse("2m").first, 120);
  EXPECT_DOUBLE_EQ(parse("0.25").first, 0.25);
  for (const char* bad : {"5h", "soon", "0", "50ms", "2h", "61m"}) {
    auto [s, why] = parse(bad);
    EXPECT_NE(why.find("a time from 0.1 s to 3600 s"), std::string::npos) << bad << ": " << why;
    EXPECT_NE(why.find(std::string{"not '"} + bad + "'"), std::string::npos) << why;
  }
}

// A new-user trial typed `astra sbatch job.sh`: a command one level down
// is named with its group.
TEST(AstraUsage, ACommandOfAGroupIsNamedWithItsGroup) {
  mini_astra a;
  EXPECT_EQ(a.says({"sbatch", "job.sh"}),
            "unknown command 'sbatch'; did you mean 'slurm sbatch'? (see 'astra --help')");
}

} // namespace
} // namespace astraeus::cli
