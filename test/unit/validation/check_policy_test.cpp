// The checks' threshold table: every rule with its source, overridable.
#include <set>

#include <gtest/gtest.h>

#include "runtime/validation/check_policy.hpp"

namespace astraeus::validation {
namespace {

TEST(CheckPolicy, EveryRowNamesItsSourceAndEveryCheckHasRules) {
  check_policy p;
  std::set<std::string> checks;
  for (const auto& r : p.rows()) {
    EXPECT_FALSE(r.source.empty()) << r.key << " " << r.rule;
    EXPECT_FALSE(r.rule.empty());
    EXPECT_EQ(r.rule.find("{}"), std::string::npos) << r.rule;
    checks.insert(r.check);
  }
  EXPECT_EQ(checks, (std::set<std::string>{"quick", "copies", "burn", "disk", "dcgm", "pair",
                                           "allreduce"}));
}

TEST(CheckPolicy, TheAnchorsFiguresAreTheDefaults) {
  check_policy p;
  EXPECT_DOUBLE_EQ(p.values().copies_nvswitch_floor_gbs, 335);
  EXPECT_DOUBLE_EQ(p.values().burn_peer_fraction, 0.9);
  EXPECT_DOUBLE_EQ(p.values().burn_duration_s, 600);
  EXPECT_DOUBLE_EQ(p.values().dcgm_level, 2);
}

TEST(CheckPolicy, YamlOverridesFlatAndNestedKeysAndMarksThem) {
  check_policy p;
  ASSERT_FALSE(p.apply_yaml("copies.peer_fraction: 0.85\nburn:\n  duration_s: 60\n", "p.yaml"));
  EXPECT_DOUBLE_EQ(p.values().copies_peer_fraction, 0.85);
  EXPECT_DOUBLE_EQ(p.values().burn_duration_s, 60);
  auto text = render_policy_table(p);
  EXPECT_NE(text.find("copies.peer_fraction"), std::string::npos);
  EXPECT_NE(text.find("0.85*"), std::string::npos) << text;
  EXPECT_NE(text.find("below 0.85 x the best GPU of the machine: warn"), std::string::npos);
  EXPECT_NE(text.find("Azure NHC"), std::string::npos);
}

TEST(CheckPolicy, AnUnknownKeyOrBadValueIsRefusedNamingIt) {
  check_policy p;
  auto err = p.apply_yaml("copies.peer_fracton: 0.8\n", "p.yaml");
  ASSERT_TRUE(err);
  EXPECT_NE(to_string(err).find("p.yaml: validation policy: unknown key copies.peer_fracton; "
                                "did you mean copies.peer_fraction?"),
            std::string::npos)
    << to_string(err);
  err = p.apply_yaml("copies.peer_fraction: 1.5\n", "p.yaml");
  ASSERT_TRUE(err);
  EXPECT_NE(to_string(err).find("out of range"), std::string::npos);
  err = p.apply_yaml("burn.duration_s: soon\n", "p.yaml");
  ASSERT_TRUE(err);
  EXPECT_NE(to_string(err).find("'soon' is not a number"), std::string::npos);
  EXPECT_TRUE(p.apply_file("/nonexistent/policy.yaml"));
  EXPECT_DOUBLE_EQ(p.values().copies_peer_fraction, 0.9);
}

}  // namespace
}  // namespace astraeus::validation
