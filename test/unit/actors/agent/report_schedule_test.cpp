// When the agent reports (actors/agent/report_schedule.hpp; issue 18, rule
// 10): by deadline, without drift, and never less often than the controller
// asks.

#include "actors/agent/report_schedule.hpp"

#include <gtest/gtest.h>

using namespace astraeus;
using namespace std::chrono_literals;

TEST(ReportSchedule, ReportsAreDueByDeadlineWithoutDrift) {
  caf::actor_clock::time_point t0{};
  caf::timespan interval = 10s;
  auto due = t0 + interval;
  // Each report takes 300 ms: the next is still due on the 10 s grid.
  for (int i = 1; i <= 100; ++i) {
    auto now = due + 300ms;
    due = next_report_due(due, now, interval);
    EXPECT_EQ(due, t0 + interval * (i + 1));
  }
  // Fallen behind by more than an interval: one report now, then the grid
  // from there (no burst of missed reports).
  auto late = due + 25s;
  EXPECT_EQ(next_report_due(due, late, interval), late + interval);
}

TEST(ReportSchedule, TheControllersShorterIntervalWins) {
  EXPECT_EQ(effective_report_interval(10s, caf::timespan{0}), caf::timespan{10s});
  EXPECT_EQ(effective_report_interval(10s, 3s), caf::timespan{3s});
  EXPECT_EQ(effective_report_interval(1s, 3s), caf::timespan{1s});
}
