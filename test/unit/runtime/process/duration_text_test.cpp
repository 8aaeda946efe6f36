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
