// One label rule for `astra label`, join tokens and grants (messages/labels.cpp).

#include "messages/labels.hpp"

#include <gtest/gtest.h>

#include "messages/error.hpp"

namespace astraeus {
namespace {

TEST(Labels, TopologyKeysWithAPrefixAreAccepted) {
  EXPECT_FALSE(check_label("topology.astraeus.io/rack", "r12"));
  EXPECT_FALSE(check_label("pool", "h100"));
}

TEST(Labels, ABadKeyOrValueIsNamedWithTheRule) {
  auto err = check_label("rack!", "r1");
  ASSERT_TRUE(err);
  EXPECT_EQ(render_error(err),
            "label key 'rack!': use letters, digits, '-', '_', '.' and '/' (at most 253)");
  err = check_label("pool", "a/b");
  ASSERT_TRUE(err);
  EXPECT_EQ(render_error(err), "label pool='a/b': use 1-63 letters, digits, '-', '_' and '.'");
  EXPECT_TRUE(check_label("pool", ""));
  EXPECT_TRUE(check_label(std::string(254, 'k'), "v"));
  EXPECT_TRUE(check_label("k", std::string(64, 'v')));
}

} // namespace
} // namespace astraeus
