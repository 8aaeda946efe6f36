// The JSON mapping's partial update (messages/json.hpp, merge_json_keys): a
// PUT of some of a policy's fields keeps the others.

#include <gtest/gtest.h>

#include "messages/astraeus.pb.h"
#include "messages/error.hpp"
#include "messages/json.hpp"

using namespace astraeus;

namespace {

v1::ValidationPolicy h100() {
  v1::ValidationPolicy p;
  p.set_pool("h100");
  p.set_require_acceptance(true);
  p.set_burn_in_seconds(60);
  p.set_dcgm_level(3);
  return p;
}

} // namespace

TEST(JsonMerge, OnlyTheKeysTheObjectHasChange) {
  auto p = h100();
  ASSERT_FALSE(merge_json_keys(R"({"burn_in_seconds": 120})", p));
  EXPECT_EQ(p.burn_in_seconds(), 120u);
  EXPECT_TRUE(p.require_acceptance()) << "a key the body lacks keeps its value";
  EXPECT_EQ(p.dcgm_level(), 3u);
  EXPECT_EQ(p.pool(), "h100");
}

TEST(JsonMerge, AKeyGivenItsDefaultValueIsSetAndJsonNamesCountToo) {
  auto p = h100();
  ASSERT_FALSE(merge_json_keys(R"({"requireAcceptance": false, "dcgm_level": 2})", p));
  EXPECT_FALSE(p.require_acceptance());
  EXPECT_EQ(p.dcgm_level(), 2u);
  EXPECT_EQ(p.burn_in_seconds(), 60u);
}

TEST(JsonMerge, ABadBodyChangesNothingAndSaysWhy) {
  auto p = h100();
  auto err = merge_json_keys(R"({"burn_in_secs": 120})", p);
  ASSERT_TRUE(err);
  EXPECT_NE(render_error(err).find("body"), std::string::npos) << render_error(err);
  EXPECT_EQ(p.burn_in_seconds(), 60u);
  EXPECT_TRUE(p.require_acceptance());
}

// A new-user trial sent PATCH /v1/nodes/NAME/labels {"labels": {...}} and
// the error named only the field it did not know. It names those it takes.
TEST(JsonParse, AnUnknownFieldIsNamedWithTheFieldsTheObjectTakes) {
  v1::SetLabels labels;
  auto err = message_from_json(R"({"labels": {"rack": "r1"}})", labels, "body");
  ASSERT_TRUE(err);
  EXPECT_EQ(render_error(err),
            "body: labels: unknown field (SetLabels takes name, set, remove)");
  // Within an object of the body: that object's fields.
  v1::RunSpec spec;
  err = message_from_json(R"({"name": "t", "task_groups": [{"gpu": 1}]})", spec, "body");
  ASSERT_TRUE(err);
  EXPECT_EQ(render_error(err).rfind("body: task_groups[0].gpu: unknown field (TaskGroup takes ", 0),
            0u)
    << render_error(err);
}

// A new-user trial: {"maintenance": "yes"} was read as true (Protobuf's
// parser takes "yes", "t" and "1" for a bool), {"name": 5} was refused in
// the parser's words. A value of the wrong JSON type is refused, naming
// the field and what to give.
TEST(JsonParse, AValueOfTheWrongJsonTypeIsRefusedNamingTheField) {
  v1::SetMaintenance m;
  auto err = message_from_json(R"({"maintenance": "yes"})", m, "body");
  ASSERT_TRUE(err);
  EXPECT_EQ(render_error(err), "body: maintenance: \"yes\" is not true or false");
  ASSERT_FALSE(message_from_json(R"({"maintenance": false})", m, "body"));
  EXPECT_FALSE(m.maintenance());
  v1::SetLabels l;
  err = message_from_json(R"({"name": 5})", l, "body");
  ASSERT_TRUE(err);
  EXPECT_EQ(render_error(err), "body: name: 5 is not a string (give \"...\")");
  err = message_from_json(R"({"set": {"rack": 12}})", l, "body");
  ASSERT_TRUE(err);
  EXPECT_EQ(render_error(err), "body: set.rack: 12 is not a string (give \"...\")");
  // Nested objects and lists are checked too; numbers as strings stay
  // allowed where the JSON mapping allows them (64-bit integers).
  v1::RunSpec spec;
  err = message_from_json(R"({"name": "t", "task_groups": [{"name": ["a"]}]})", spec, "body");
  ASSERT_TRUE(err);
  EXPECT_EQ(render_error(err), "body: task_groups[0].name: [\"a\"] is not a string (give \"...\")");
  EXPECT_FALSE(message_from_json(R"({"name": "t", "time_limit_seconds": "60"})", spec, "body"));
}
