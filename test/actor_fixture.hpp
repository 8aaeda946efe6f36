#pragma once
// Deterministic actor tests under GoogleTest: an actor system on CAF's test
// coordinator (scheduler.policy = testing), so every message is delivered by
// `run()` and every timer fires only when the test advances virtual time.
// Nothing sleeps.

#include <chrono>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/exit_reason.hpp>
#include <caf/actor_cast.hpp>
#include <spdlog/spdlog.h>

#include "messages/error.hpp"
#include "runtime/process/system_setup.hpp"

namespace astraeus::test {

/// Base fixture: `sys`, `sched`, a scoped actor `self`, and helpers.
class actor_test : public ::testing::Test {
protected:
  actor_test() : sys(init(cfg)), sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())) {
    self = std::make_unique<caf::scoped_actor>(sys, true);
    spdlog::set_level(spdlog::level::warn);
  }

  ~actor_test() override {
    // Timers still pending in the virtual clock keep actors alive: stop
    // every actor the test spawned so the system can shut down.
    for (auto& addr : spawned_)
      caf::anon_send_exit(addr, caf::exit_reason::user_shutdown);
    sched.run();
  }

  /// Spawns an actor that the fixture stops at the end of the test.
  template <class... Ts>
  auto spawn(Ts&&... xs) {
    auto handle = sys.spawn(std::forward<Ts>(xs)...);
    spawned_.push_back(caf::actor_cast<caf::actor_addr>(handle));
    return handle;
  }

  static caf::actor_system_config& init(caf::actor_system_config& c) {
    register_astraeus_types(c);
    c.set("scheduler.policy", caf::atom("testing"));
    c.set("logger.file-verbosity", caf::atom("quiet"));
    return c;
  }

  /// Delivers every pending message.
  void run() {
    sched.run();
  }

  /// Moves virtual time forward by `d`, firing due timers, then runs.
  void advance(caf::timespan d) {
    sched.clock().advance_time(d);
    sched.run();
  }

  /// Sends `xs` to `dest` from `self` and returns the answer of type T;
  /// fails the test on an error.
  template <class T, class Handle, class... Ts>
  T ask(const Handle& dest, Ts&&... xs) {
    T out{};
    auto rh = (*self)->request(dest, caf::infinite, std::forward<Ts>(xs)...);
    sched.run();
    rh.receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) {
                 ADD_FAILURE() << "unexpected error: " << render_error(err);
               });
    return out;
  }

  /// Like `ask`, but expects an error and returns it.
  template <class T, class Handle, class... Ts>
  caf::error ask_error(const Handle& dest, Ts&&... xs) {
    caf::error out;
    auto rh = (*self)->request(dest, caf::infinite, std::forward<Ts>(xs)...);
    sched.run();
    rh.receive([&](T&) { ADD_FAILURE() << "expected an error"; },
               [&](caf::error& err) { out = std::move(err); });
    return out;
  }

  std::vector<caf::actor_addr> spawned_;
  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scheduler::test_coordinator& sched;
  std::unique_ptr<caf::scoped_actor> self;
};

/// A fresh temporary folder, removed when the object dies.
class temp_dir {
public:
  temp_dir();
  ~temp_dir();
  const std::string& path() const {
    return path_;
  }

private:
  std::string path_;
};

} // namespace astraeus::test
