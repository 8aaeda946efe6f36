// The queue with reservation and backfill (actors/scheduler/
// scheduler_queue.cpp), with explicit times.

#include "actors/scheduler/placement.hpp"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "messages/error.hpp"
#include "test/unit/actors/scheduler/placement_test_support.hpp"

using namespace astraeus;
using namespace astraeus::placement_test;

TEST(Placement, BackfillThatWouldDelayTheHeadGangIsRefused) {
  placement_index idx;
  auto m1 = add(idx, dgx("m1"));
  auto m2 = add(idx, dgx("m2"));
  auto small = add(idx, dgx("small", h100, 2)); // too small for the head gang
  scheduler_queue q{idx};
  auto a = single("a", 8);
  a.time_limit_seconds = 1000;
  auto b = single("b", 4);
  b.time_limit_seconds = 500;
  ASSERT_FALSE(q.submit(a, 0));
  ASSERT_FALSE(q.submit(b, 0));
  auto first = q.schedule(0);
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(first[0].where.workers[0].machine, m1);
  ASSERT_EQ(first[1].where.workers[0].machine, m2);
  // The head: two whole machines, which it gets when a ends at t=1000.
  auto head = gang("head", 2, 8);
  head.time_limit_seconds = 100;
  auto long_one = single("long", 4);
  long_one.time_limit_seconds = 2000; // would still run at t=1000
  auto short_one = single("short", 4);
  short_one.time_limit_seconds = 300; // ends at t=310, before the reservation
  auto elsewhere = single("elsewhere", 2); // no limit, but off the reserved GPUs
  for (const auto& r : {head, long_one, short_one, elsewhere})
    ASSERT_FALSE(q.submit(r, 5));
  auto started = q.schedule(10);
  ASSERT_TRUE(q.reservation());
  EXPECT_EQ(q.reservation()->run, "head");
  EXPECT_EQ(q.reservation()->start, 1000);
  ASSERT_EQ(started.size(), 2u);
  EXPECT_EQ(started[0].run, "short");
  EXPECT_TRUE(started[0].backfilled);
  EXPECT_EQ(started[0].where.workers[0].machine, m2);
  EXPECT_EQ(started[0].end, 310);
  EXPECT_EQ(started[1].run, "elsewhere");
  EXPECT_EQ(started[1].where.workers[0].machine, small);
  ASSERT_NE(q.waiting("long"), nullptr);
  EXPECT_EQ(q.waiting("long")->code, waiting_code::reserved);
  EXPECT_EQ(q.waiting("long")->message,
            "waiting: the GPUs it fits on are reserved for head, due to start in 16m, before "
            "this run's time limit would end it");
  EXPECT_EQ(q.waiting("head")->message,
            "waiting: needs 2 workers of 8 GPUs each (16 GPUs) in pool h100; the machines have "
            "room for 0 workers; GPUs are reserved for it, due to start in 16m");
  EXPECT_EQ(idx.totals().allocations, 4u) << "the reservation is not left held";
  // Time passes; b and short end; still nobody takes the reserved GPUs.
  ASSERT_FALSE(q.complete("b"));
  ASSERT_FALSE(q.complete("short"));
  EXPECT_TRUE(q.schedule(600).empty());
  EXPECT_EQ(q.waiting("long")->code, waiting_code::reserved);
  // a ends: the head starts before "long".
  ASSERT_FALSE(q.complete("a"));
  auto later = q.schedule(1000);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].run, "head");
  EXPECT_FALSE(later[0].backfilled);
  EXPECT_EQ(idx.check_invariants(), "");
}

TEST(Placement, BackfillThatEndsBeforeTheReservationIsAllowed) {
  placement_index idx;
  add(idx, dgx("m1"));
  add(idx, dgx("m2"));
  scheduler_queue q{idx};
  auto a = single("a", 8);
  a.time_limit_seconds = 3600;
  ASSERT_FALSE(q.submit(a, 0));
  ASSERT_EQ(q.schedule(0).size(), 1u);
  ASSERT_FALSE(q.submit(gang("head", 2, 8), 1));
  // Exactly up to the reservation (t=3600) is fine.
  auto fits = single("fits", 8);
  fits.time_limit_seconds = 3590;
  ASSERT_FALSE(q.submit(fits, 2));
  auto started = q.schedule(10);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].run, "fits");
  EXPECT_TRUE(started[0].backfilled);
  // Without a time limit it could delay the head forever: refused.
  ASSERT_FALSE(q.complete("fits"));
  ASSERT_FALSE(q.submit(single("forever", 1), 11));
  EXPECT_TRUE(q.schedule(11).empty());
  EXPECT_EQ(q.waiting("forever")->code, waiting_code::reserved);
  // With no reservation (a has no time limit, so no start time can be
  // promised), small runs are not held back.
  placement_index idx2;
  add(idx2, dgx("m1"));
  add(idx2, dgx("m2"));
  scheduler_queue q2{idx2};
  ASSERT_FALSE(q2.submit(single("a", 8), 0));
  ASSERT_EQ(q2.schedule(0).size(), 1u);
  ASSERT_FALSE(q2.submit(gang("head", 2, 8), 1));
  ASSERT_FALSE(q2.submit(single("small", 4), 2));
  auto s2 = q2.schedule(3);
  EXPECT_FALSE(q2.reservation());
  ASSERT_EQ(s2.size(), 1u);
  EXPECT_EQ(s2[0].run, "small");
}

TEST(Placement, QueueOrderIsPriorityThenSubmission) {
  placement_index idx;
  add(idx, dgx("m1"));
  scheduler_queue q{idx};
  auto low = single("low", 8);
  auto high = single("high", 8);
  high.priority = 10;
  ASSERT_FALSE(q.submit(low, 0));
  ASSERT_FALSE(q.submit(high, 5));
  EXPECT_TRUE(q.submit(single("low", 1), 6)) << "duplicate names are refused";
  auto started = q.schedule(10);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].run, "high");
  ASSERT_FALSE(q.cancel("low"));
  EXPECT_EQ(q.waiting_count(), 0u);
}

// Issue 22: a run short of cores gets the reservation like one short of
// GPUs: the reservation keeps the cores free now, and a run that would take
// them without ending first waits.
TEST(Placement, ARunShortOfCoresIsReservedAndStartsWhenTheyAreFree) {
  placement_index idx;
  auto m = add(idx, sized(dgx("m1"), 64, 512));
  scheduler_queue q{idx};
  auto a = asking(single("a", 2), 48);
  a.time_limit_seconds = 1000;
  ASSERT_FALSE(q.submit(a, 0));
  ASSERT_EQ(q.schedule(0).size(), 1u);
  ASSERT_FALSE(q.submit(asking(single("b", 2), 32), 1));
  ASSERT_FALSE(q.submit(asking(single("c", 1), 16), 2)); // no time limit
  EXPECT_TRUE(q.schedule(10).empty());
  ASSERT_TRUE(q.reservation());
  EXPECT_EQ(q.reservation()->run, "b");
  EXPECT_EQ(q.reservation()->start, 1000);
  ASSERT_EQ(q.reservation()->use.size(), 1u);
  EXPECT_EQ(q.reservation()->use[0].cpu_millis, 32000u);
  ASSERT_NE(q.waiting("b"), nullptr);
  EXPECT_EQ(q.waiting("b")->code, waiting_code::not_enough_cores_or_memory);
  EXPECT_EQ(q.waiting("b")->message,
            "waiting: no machine in pool h100 has 2 free GPUs with 32 free cores; m1 has the GPUs "
            "but only 16 free cores; GPUs are reserved for it, due to start in 16m");
  ASSERT_NE(q.waiting("c"), nullptr);
  EXPECT_EQ(q.waiting("c")->code, waiting_code::reserved);
  EXPECT_EQ(idx.free_cpu_millis(m), 16000u) << "the reservation is not left held";
  ASSERT_FALSE(q.complete("a"));
  auto started = q.schedule(20);
  ASSERT_EQ(started.size(), 2u);
  EXPECT_EQ(started[0].run, "b");
  EXPECT_EQ(started[1].run, "c");
  EXPECT_EQ(idx.free_cpu_millis(m), 16000u);
  EXPECT_EQ(idx.check_invariants(), "");
}

// A pass skips the runs the index refused with nothing freed since; its
// decisions must be exactly those of trying every run in every pass, through
// submissions, ends, cancels, reservations with backfill, cordons, fences
// and a machine that comes and goes.
TEST(Placement, AQueueThatSkipsRefusedRunsDecidesAsOneThatTriesEveryRun) {
  placement_index fast_idx, full_idx;
  queue_options full_opts;
  full_opts.skip_refused = false;
  scheduler_queue fast{fast_idx}, full{full_idx, full_opts};
  auto both_add = [&](const machine_spec& m) {
    auto a = add(fast_idx, m);
    auto b = add(full_idx, m);
    EXPECT_EQ(a, b);
    return a;
  };
  std::vector<machine_id> ms;
  for (int i = 0; i < 4; ++i)
    ms.push_back(both_add(dgx("m" + std::to_string(i))));
  ms.push_back(both_add(dgx("half", h100, 4)));
  std::mt19937_64 rng{20261206};
  auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<std::string> running, queued;
  int64_t now = 0;
  size_t started = 0;
  uint64_t last_epoch = UINT64_MAX;
  for (int step = 0; step < 1500; ++step) {
    now += static_cast<int64_t>(pick(30));
    const auto op = pick(100);
    if (op < 55) {
      const auto name = "r" + std::to_string(step);
      auto r = pick(4) == 0 ? gang(name, 1 + static_cast<uint32_t>(pick(3)), 8)
                            : single(name, 1 + static_cast<uint32_t>(pick(8)));
      if (pick(3) != 0)
        r.time_limit_seconds = 60 + static_cast<int64_t>(pick(2000));
      r.priority = static_cast<int32_t>(pick(3)) - 1;
      ASSERT_FALSE(fast.submit(r, now));
      ASSERT_FALSE(full.submit(r, now));
      queued.push_back(name);
    } else if (op < 80 && !running.empty()) {
      auto i = pick(running.size());
      ASSERT_FALSE(fast.complete(running[i]));
      ASSERT_FALSE(full.complete(running[i]));
      running.erase(running.begin() + static_cast<long>(i));
    } else if (op < 85 && !queued.empty()) {
      auto i = pick(queued.size());
      if (fast.waiting(queued[i]) || full.waiting(queued[i])) {
        ASSERT_FALSE(fast.cancel(queued[i]));
        ASSERT_FALSE(full.cancel(queued[i]));
      }
      queued.erase(queued.begin() + static_cast<long>(i));
    } else if (op < 92) {
      auto m = ms[pick(ms.size())];
      bool on = pick(2) == 0;
      ASSERT_FALSE(fast_idx.set_schedulable(m, on));
      ASSERT_FALSE(full_idx.set_schedulable(m, on));
    } else {
      auto m = ms[pick(ms.size())];
      auto id = fast_idx.machine_name(m) + "-g" + std::to_string(pick(4));
      auto h = pick(3) == 0 ? gpu_health::faulty : gpu_health::healthy;
      ASSERT_FALSE(fast_idx.set_gpu_health(id, h));
      ASSERT_FALSE(full_idx.set_gpu_health(id, h));
    }
    const auto epoch_before = fast_idx.capacity_epoch();
    // Something was freed since the last pass: every run is tried (or refused
    // as a like run just was), so every reason is exact.
    const bool tries_all = epoch_before != last_epoch;
    last_epoch = epoch_before;
    auto a = fast.schedule(now);
    auto b = full.schedule(now);
    EXPECT_EQ(fast_idx.capacity_epoch(), epoch_before) << "a pass frees nothing";
    ASSERT_EQ(a.size(), b.size()) << "step " << step;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].run, b[i].run) << "step " << step;
      EXPECT_EQ(a[i].backfilled, b[i].backfilled) << "step " << step;
      EXPECT_EQ(a[i].end, b[i].end);
      ASSERT_EQ(a[i].where.workers.size(), b[i].where.workers.size());
      for (size_t w = 0; w < a[i].where.workers.size(); ++w) {
        EXPECT_EQ(a[i].where.workers[w].machine, b[i].where.workers[w].machine);
        EXPECT_EQ(a[i].where.workers[w].gpus, b[i].where.workers[w].gpus);
      }
      running.push_back(a[i].run);
      ++started;
    }
    ASSERT_EQ(fast.reservation().has_value(), full.reservation().has_value()) << "step " << step;
    if (fast.reservation()) {
      EXPECT_EQ(fast.reservation()->run, full.reservation()->run);
      EXPECT_EQ(fast.reservation()->start, full.reservation()->start);
    }
    for (const auto& name : queued) {
      const auto* x = fast.waiting(name);
      const auto* y = full.waiting(name);
      ASSERT_EQ(x == nullptr, y == nullptr) << name << " at step " << step;
      // Only the counts in a skipped run's words may lag ("best machine
      // has 3"): its code is the same.
      if (x)
        EXPECT_EQ(x->code, y->code) << name << " at step " << step;
      if (x && tries_all)
        EXPECT_EQ(x->message, y->message) << name << " at step " << step;
    }
    ASSERT_EQ(fast_idx.check_invariants(), "");
    // Which GPUs are held (allocation ids differ: the skipping queue takes
    // and gives back its reservation's hold less often).
    ASSERT_EQ(fingerprint(fast_idx, false), fingerprint(full_idx, false)) << "step " << step;
  }
  EXPECT_GT(started, 300u) << "the sequence exercised the queue";
}

TEST(Placement, AWaitingRunsReasonIsRenewedOnceGpusAreFreed) {
  placement_index idx;
  add(idx, dgx("m1"));
  scheduler_queue q{idx};
  ASSERT_FALSE(q.submit(single("a", 6), 0));
  ASSERT_FALSE(q.submit(single("c", 1), 0));
  ASSERT_EQ(q.schedule(0).size(), 2u);
  ASSERT_FALSE(q.submit(single("b", 4), 1));
  EXPECT_TRUE(q.schedule(1).empty());
  ASSERT_NE(q.waiting("b"), nullptr);
  EXPECT_EQ(q.waiting("b")->message,
            "waiting: needs 4 GPUs on one machine in pool h100; best machine has 1");
  EXPECT_EQ(q.reasons_changed(), std::vector<std::string>{"b"});
  // Nothing freed: b is not tried again, and its reason does not change.
  EXPECT_TRUE(q.schedule(2).empty());
  EXPECT_TRUE(q.reasons_changed().empty());
  // c ends: b is tried again and says what is free now.
  ASSERT_FALSE(q.complete("c"));
  EXPECT_TRUE(q.schedule(3).empty());
  EXPECT_EQ(q.waiting("b")->message,
            "waiting: needs 4 GPUs on one machine in pool h100; best machine has 2");
  EXPECT_EQ(q.reasons_changed(), std::vector<std::string>{"b"});
  ASSERT_FALSE(q.complete("a"));
  auto later = q.schedule(4);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].run, "b");
  EXPECT_EQ(q.waiting("b"), nullptr);
}

// Issue 14: releasing a run that may not be running takes one look-up;
// it frees a running run's GPUs and leaves a waiting or unknown one as it
// is (`complete` still names a run that is not running).
TEST(Placement, CompleteIfRunningFreesARunningRunAndLeavesOthersAsTheyAre) {
  placement_index idx;
  add(idx, dgx("m1"));
  scheduler_queue q{idx};
  ASSERT_FALSE(q.submit(single("a", 8), 0));
  ASSERT_FALSE(q.submit(single("b", 8), 0));
  ASSERT_EQ(q.schedule(0).size(), 1u);
  ASSERT_NE(q.waiting("b"), nullptr);

  auto waiting = q.complete_if_running("b");
  ASSERT_TRUE(waiting);
  EXPECT_FALSE(*waiting);
  EXPECT_NE(q.waiting("b"), nullptr) << "a waiting run stays queued";
  auto unknown = q.complete_if_running("nobody");
  ASSERT_TRUE(unknown);
  EXPECT_FALSE(*unknown);
  EXPECT_NE(render_error(q.complete("nobody")).find("run nobody is not running"),
            std::string::npos);

  auto running = q.complete_if_running("a");
  ASSERT_TRUE(running);
  EXPECT_TRUE(*running);
  EXPECT_FALSE(q.allocation_of("a"));
  auto next = q.schedule(1);
  ASSERT_EQ(next.size(), 1u) << "a's GPUs are free for b";
  EXPECT_EQ(next[0].run, "b");
  auto again = q.complete_if_running("a");
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again) << "a is no longer running";
  EXPECT_EQ(idx.check_invariants(), "");
}
