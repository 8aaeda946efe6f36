#pragma once
/// @file
/// The boot clock: milliseconds since the machine booted, counting the time
/// it was suspended (Linux CLOCK_BOOTTIME). Setting the wall clock back or
/// forward does not move it, and a restarted agent reads the same clock as
/// the agent before it, so a duration that must outlive an agent restart
/// (a worker's stop grace: `v1::WorkerProcess.stop_requested_boot_ms`) is
/// measured on it. Durations inside one process run on the actor clock
/// (CAF's, std::chrono::steady_clock) instead; dates users read run on the
/// wall clock (runtime/process/wall_clock.hpp). Every user of the boot clock
/// is handed one in its config, so a test moves it by hand.
/// Source: issue 23, item 4; shared/DESIGN.md ("Time").

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>

namespace astraeus {

/// A source of boot-clock time. Implementations are thread-safe.
class boot_clock {
public:
  virtual ~boot_clock() = default;

  /// Milliseconds since boot, suspend included; never goes back.
  virtual int64_t now_boot_ms() const = 0;
};

/// The kernel's CLOCK_BOOTTIME (CLOCK_MONOTONIC where it is missing).
class system_boot_clock final : public boot_clock {
public:
  int64_t now_boot_ms() const override {
    timespec ts{};
#ifdef CLOCK_BOOTTIME
    if (::clock_gettime(CLOCK_BOOTTIME, &ts) != 0)
#endif
      ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
  }
};

/// A boot clock that moves only when a test moves it.
class test_boot_clock final : public boot_clock {
public:
  /// Starts at `start_ms` (default: an hour after boot).
  explicit test_boot_clock(int64_t start_ms = 3'600'000) : now_(start_ms) {}

  int64_t now_boot_ms() const override {
    return now_.load();
  }

  /// Moves the time forward by `d` (a boot clock never goes back).
  void advance(std::chrono::milliseconds d) {
    if (d.count() > 0)
      now_.fetch_add(d.count());
  }

private:
  std::atomic<int64_t> now_;
};

/// The process's system boot clock, shared: the default of every config.
inline std::shared_ptr<const boot_clock> real_boot_clock() {
  static const auto clock = std::make_shared<const system_boot_clock>();
  return clock;
}

} // namespace astraeus
