// The actor system's scheduler (runtime/process/wake_stealing.hpp). A
// scheduler can only be tested on real threads: these tests use a real
// caf::actor_system with 2 workers and wait on futures, with a bound only
// for a failure (a job left in a queue would otherwise hang the test).

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/policy/work_sharing.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>
#include <gtest/gtest.h>

#include "runtime/process/system_setup.hpp"
#include "runtime/process/wake_stealing.hpp"

using namespace astraeus;
using namespace std::chrono_literals;

namespace {

/// Two workers, as on the 2-core machines the figures are taken on, and a
/// relaxed sleep far longer than any test: a worker finds work only when it
/// is woken for it (CAF's own work stealing would look once per sleep).
void two_workers(caf::actor_system_config& cfg) {
  cfg.set("scheduler.max-threads", int64_t{2});
  cfg.set("work-stealing.relaxed-sleep-duration", caf::timespan{std::chrono::hours{1}});
  use_wake_stealing(cfg);
}

// An actor sent a message from an actor that keeps its worker busy runs on
// the other, idle worker at once (issue 14: a requester and the scheduler
// actor feeding each other used one core of two).
TEST(WakeStealing, AnActorSentToFromABusyWorkerRunsOnTheIdleOne) {
  caf::actor_system_config cfg;
  two_workers(cfg);
  caf::actor_system sys{cfg};
  auto ran = std::make_shared<std::promise<void>>();
  auto helper = sys.spawn([ran](caf::event_based_actor*) -> caf::behavior {
    return {[ran](int) { ran->set_value(); }};
  });
  std::promise<bool> verdict;
  auto seen = verdict.get_future();
  auto busy = sys.spawn([&, ran, helper](caf::event_based_actor* self) -> caf::behavior {
    return {[&, ran, helper, self](int) {
      // Queued on this worker, which then stays busy until the helper ran.
      self->send(helper, 1);
      verdict.set_value(ran->get_future().wait_for(20s) == std::future_status::ready);
    }};
  });
  caf::anon_send(busy, 1);
  ASSERT_EQ(seen.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(seen.get()) << "the helper waited in the busy worker's queue";
}

// Every message reaches its actor, whoever sends it (actors on the workers,
// threads outside them), and the system shuts down with nothing left queued.
TEST(WakeStealing, EveryMessageArrivesFromActorsAndFromOutside) {
  constexpr int ring_size = 8;
  constexpr int laps = 2000;
  constexpr int outside = 20000;
  auto tokens = std::make_shared<std::atomic<int>>(0);
  auto received = std::make_shared<std::atomic<int>>(0);
  std::promise<void> ring_done, all_received;
  auto ring_finished = ring_done.get_future();
  auto counted = all_received.get_future();
  {
    caf::actor_system_config cfg;
    two_workers(cfg);
    caf::actor_system sys{cfg};
    // A ring of actors passing a token (each hop a send between workers'
    // actors), and a counter that threads outside the workers send to.
    std::vector<caf::actor> ring(ring_size);
    auto last = sys.spawn([&ring_done, tokens](caf::event_based_actor*) -> caf::behavior {
      return {[&ring_done, tokens](int hops) {
        // The token arrives once, after every hop of every lap.
        if (++*tokens == 1 && hops == laps * ring_size)
          ring_done.set_value();
      }};
    });
    for (int i = ring_size - 1; i >= 0; --i) {
      auto next = i == ring_size - 1 ? last : ring[i + 1];
      ring[i] = sys.spawn([next, &ring, laps](caf::event_based_actor* self) -> caf::behavior {
        return {[=, &ring](int hops) {
          if (hops + 1 >= laps * ring_size)
            self->send(next, hops + 1);
          else
            self->send(ring[(hops + 1) % ring_size], hops + 1);
        }};
      });
    }
    auto counter = sys.spawn([&all_received, received](caf::event_based_actor*) -> caf::behavior {
      return {[&all_received, received](int) {
        if (++*received == outside)
          all_received.set_value();
      }};
    });
    caf::anon_send(ring[0], 0);
    std::vector<std::thread> senders;
    for (int t = 0; t < 2; ++t)
      senders.emplace_back([&] {
        for (int i = 0; i < outside / 2; ++i)
          caf::anon_send(counter, i);
      });
    for (auto& t : senders)
      t.join();
    ASSERT_EQ(ring_finished.wait_for(30s), std::future_status::ready);
    ASSERT_EQ(counted.wait_for(30s), std::future_status::ready);
  }
  EXPECT_EQ(tokens->load(), 1);
  EXPECT_EQ(received->load(), outside);
}

// configure_actor_system gives the wake_stealing scheduler, unless the
// process asks CAF for another: the tests' deterministic coordinator
// (`scheduler.policy` testing, set after configure_actor_system) or work
// sharing.
TEST(WakeStealing, AnotherPolicyAskedForIsCafsOwn) {
  {
    caf::actor_system_config cfg;
    register_astraeus_types(cfg);
    use_wake_stealing(cfg);
    cfg.set("scheduler.policy", caf::atom("testing"));
    caf::actor_system sys{cfg};
    EXPECT_NE(dynamic_cast<caf::scheduler::test_coordinator*>(&sys.scheduler()), nullptr);
  }
  {
    caf::actor_system_config cfg;
    use_wake_stealing(cfg);
    cfg.set("scheduler.policy", caf::atom("sharing"));
    caf::actor_system sys{cfg};
    EXPECT_NE(dynamic_cast<caf::scheduler::coordinator<caf::policy::work_sharing>*>(
                &sys.scheduler()),
              nullptr);
  }
  {
    caf::actor_system_config cfg;
    use_wake_stealing(cfg);
    caf::actor_system sys{cfg};
    EXPECT_EQ(dynamic_cast<caf::scheduler::test_coordinator*>(&sys.scheduler()), nullptr);
    EXPECT_EQ(dynamic_cast<caf::scheduler::coordinator<caf::policy::work_sharing>*>(
                &sys.scheduler()),
              nullptr);
  }
}

} // namespace
