// Durations for people (runtime/process/duration_text.hpp).

#include <gtest/gtest.h>

#include "runtime/process/duration_text.hpp"

using namespace astraeus;

TEST(DurationText, LargestUnitAndTheNextWhenNotZero) {
  EXPECT_EQ(format_duration(-5), "0s");
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(60), "1m");
  EXPECT_EQ(format_duration(16 * 60 + 59), "16m");
  EXPECT_EQ(format_duration(7200), "2h");
  EXPECT_EQ(format_duration(5400), "1h 30m");
  EXPECT_EQ(format_duration(86400), "1d");
  EXPECT_EQ(format_duration(2 * 86400 + 3 * 3600 + 59), "2d 3h");
}

// A new-user trial: a pool's 7-day burn-in printed as "burn-in 10080m"; a
// duration reads back as it was given, and parses back to the same seconds.
TEST(DurationText, ExactlyAsItIsGiven) {
  EXPECT_EQ(format_duration_exact(0), "0s");
  EXPECT_EQ(format_duration_exact(7 * 86400), "7d");
  EXPECT_EQ(format_duration_exact(600), "10m");
  EXPECT_EQ(format_duration_exact(5400), "1h30m");
  EXPECT_EQ(format_duration_exact(90), "1m30s");
  EXPECT_EQ(format_duration_exact(86400 + 59), "1d59s");
}
