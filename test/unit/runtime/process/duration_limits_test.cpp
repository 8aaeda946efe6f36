// Durations people type and their bounds (runtime/process/duration_limits.hpp).
// Trial: `--burn-in -5m` became 18446744073709551316 s, `--ttl 99999999d` a
// token valid until the year 275817.

#include "runtime/process/duration_limits.hpp"

#include <gtest/gtest.h>

#include "messages/error.hpp"

using namespace astraeus;

namespace {

/// The error `text` gets for `what` with bound `max`, "" when it parses.
std::string refusal(const std::string& text, uint64_t max = max_burn_in_seconds) {
  auto secs = parse_bounded_seconds(text, "--burn-in", max);
  return secs ? std::string{} : render_error(secs.error());
}

} // namespace

TEST(DurationLimits, ANegativeDurationIsRefusedNotWrapped) {
  EXPECT_EQ(refusal("-5m"), "--burn-in: '-5m' is not a duration: it is negative");
  EXPECT_EQ(refusal(" -1"), "--burn-in: ' -1' is not a duration: it is negative");
}

TEST(DurationLimits, TooLongIsRefusedNamingTheLimit) {
  EXPECT_EQ(refusal("99999999h"), "--burn-in: '99999999h' is too long: at most 7d");
  EXPECT_EQ(refusal("99999999999999999999999d"),
            "--burn-in: '99999999999999999999999d' is too long: at most 7d")
    << "an overflow is too long, not malformed";
  EXPECT_EQ(refusal("7d1s"), "--burn-in: '7d1s' is too long: at most 7d");
  EXPECT_EQ(*parse_bounded_seconds("7d", "--burn-in", max_burn_in_seconds), 7u * 86400);
  auto ttl = parse_bounded_seconds("99999999d", "--ttl", max_api_token_ttl_seconds);
  ASSERT_FALSE(ttl);
  EXPECT_EQ(render_error(ttl.error()), "--ttl: '99999999d' is too long: at most 3650d");
  EXPECT_EQ(render_error(parse_bounded_seconds("31d", "--deadline", max_drain_deadline_seconds)
                           .error()),
            "--deadline: '31d' is too long: at most 30d");
}

TEST(DurationLimits, GoodValuesParseAndBadOnesSayWhatToUse) {
  EXPECT_EQ(*parse_bounded_seconds("1h30m", "--burn-in", max_burn_in_seconds), 5400u);
  EXPECT_EQ(*parse_bounded_seconds("90", "--burn-in", max_burn_in_seconds), 90u);
  EXPECT_EQ(*parse_bounded_seconds("0", "--deadline", max_drain_deadline_seconds), 0u);
  for (auto bad : {"5x", "m5", "5m5", "", "ten"})
    EXPECT_EQ(refusal(bad), std::string{"--burn-in: '"} + bad
                              + "' is not a duration (use 10m, 90s, 2h, 7d or a number of "
                                "seconds)");  // A seventh new-user trial: a fraction read as "not a duration".
  EXPECT_EQ(refusal("1.5m"),
            "--burn-in: '1.5m' has a fraction: give whole units (90s, not 1.5m; 1s at least)");
}

TEST(DurationLimits, ApiFieldsAreBoundedToo) {
  EXPECT_FALSE(check_seconds_bound(604800, "burn_in_seconds", max_burn_in_seconds));
  EXPECT_EQ(render_error(check_seconds_bound(18446744073709551615ull, "burn_in_seconds",
                                             max_burn_in_seconds)),
            "burn_in_seconds: 18446744073709551615 is too long: at most 604800 (7d)");
}
