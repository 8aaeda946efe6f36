#pragma once
/// @file
/// Wall-clock time for what users read as dates and for the rules that are
/// stated in dates: registered and last-report times, audit records, token
/// expiry, the 24 h incident window, the interval between stored facts, a
/// run's elapsed time across a controller restart. Every actor and rule that
/// needs it is handed a `wall_clock` in its config, so a test sets the time
/// (`test_wall_clock`) and checks those rules deterministically.
///
/// Durations that time something (heartbeat lapses, the stop grace,
/// deadlines, back-off, the AMD reset window) never use this clock: they run
/// on the actor clock (virtual in tests), on std::chrono::steady_clock, or,
/// when they must outlive an agent restart (a worker's stop grace), on the
/// boot clock (runtime/process/boot_clock.hpp), so a wall clock set back or
/// forward neither delays nor hastens them (issue 23, item 4). Token expiry
/// stays on this clock: it is a date (README, "Clocks").
/// Source: shared/DESIGN.md ("Time").

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>

namespace astraeus {

/// A source of wall-clock time. Implementations are thread-safe: one clock
/// is shared by every actor of a process.
class wall_clock {
public:
  virtual ~wall_clock() = default;

  /// Milliseconds since the Unix epoch, now.
  virtual int64_t now_unix_ms() const = 0;
};

/// The system's wall clock (std::chrono::system_clock): what production runs.
class system_wall_clock final : public wall_clock {
public:
  int64_t now_unix_ms() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
  }
};

/// A wall clock that moves only when a test moves it.
class test_wall_clock final : public wall_clock {
public:
  /// Starts at `start_unix_ms` (default 2026-12-01 00:00:00 UTC).
  explicit test_wall_clock(int64_t start_unix_ms = 1'796'083'200'000) : now_(start_unix_ms) {}

  int64_t now_unix_ms() const override {
    return now_.load();
  }

  /// Sets the time (it may go back, as a real clock set by hand does).
  void set(int64_t unix_ms) {
    now_.store(unix_ms);
  }

  /// Moves the time by `d` (negative: back).
  void advance(std::chrono::milliseconds d) {
    now_.fetch_add(d.count());
  }

private:
  std::atomic<int64_t> now_;
};

/// The process's system wall clock, shared: the default of every config.
inline std::shared_ptr<const wall_clock> real_wall_clock() {
  static const auto clock = std::make_shared<const system_wall_clock>();
  return clock;
}

/// Milliseconds since the Unix epoch on the system's wall clock. For the
/// process's edges only (a `main`, a benchmark, a test's fixture); actors
/// and rules read the `wall_clock` of their config instead.
inline int64_t unix_ms_now() {
  return real_wall_clock()->now_unix_ms();
}

/// `unix_ms` as "2026-12-01 14:05:09 UTC" (token expiry, audit records).
inline std::string format_utc(int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

} // namespace astraeus
