// Issue 21 in the scheduler: a validation's check (a run below priority 0)
// gives way to real work, and an Accepting machine takes only checks.
// Deterministic: CAF's test coordinator, no sleeping.

#include "actor_fixture.hpp"
#include "snapshot_fixtures.hpp"

#include "actors/scheduler/scheduler_actor.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

v1::SchedulerMachine machine_of(const std::string& name, int n, bool accepting = false) {
  v1::SchedulerMachine m;
  m.set_name(name);
  m.set_schedulable(true);
  m.set_accepting(accepting);
  // As machine_state::not_schedulable_why() says it (issue 21).
  if (accepting)
    m.set_not_schedulable("is Accepting (acceptance val-20261006-7f3a2c runs there)");
  (*m.mutable_labels())["pool"] = "h100";
  for (int i = 0; i < n; ++i) {
    auto* g = m.add_gpus();
    g->set_id(name + "-gpu" + std::to_string(i));
    g->set_numa_node(0);
    g->set_health("Healthy");
  }
  return m;
}

v1::RunSpec real_run(const std::string& name, uint32_t gpus) {
  auto s = test::fixture_run(name, gpus);
  s.set_pool("h100");
  return s;
}

v1::RunSpec check_run(const std::string& name, const std::string& machine, uint32_t gpus) {
  v1::RunSpec s;
  s.set_name(name);
  s.add_command("astraeus-check");
  s.add_command("burn");
  s.set_runtime("process");
  s.set_gpus_per_worker(gpus);
  s.set_workers(1);
  (*s.mutable_labels())[machine_label] = machine;
  s.set_priority(-1000);
  s.set_validation("val-20261006-7f3a2c");
  return s;
}

class SchedulerGiveWay : public test::actor_test {
protected:
  SchedulerGiveWay() {
    auto s = Store::open(dir.path() + "/controller");
    if (!s)
      ADD_FAILURE() << render_error(s.error());
    else
      db = std::shared_ptr<Store>{std::move(*s)};
    scheduler_config sc;
    sc.store = db;
    sched_ = spawn(scheduler, std::move(sc));
    run();
  }

  void snapshot(v1::SchedulerMachine m) {
    (*self)->send(sched_, std::move(m));
    run();
  }

  v1::Run submit(v1::RunSpec spec) {
    return ask<v1::Run>(sched_, atom::submit_v, std::move(spec));
  }

  v1::Run get(const std::string& name) {
    return ask<v1::Run>(sched_, atom::get_v, name);
  }

  test::temp_dir dir;
  std::shared_ptr<Store> db;
  scheduler_actor sched_;
};

} // namespace

TEST_F(SchedulerGiveWay, ARealRunPreemptsABurnInAndStartsOnItsGpus) {
  snapshot(machine_of("gpu-01", 8));
  auto burn = submit(check_run("val-burn-1", "gpu-01", 8));
  EXPECT_EQ(burn.state(), "Placed");
  auto train = submit(real_run("train", 8));
  EXPECT_EQ(train.state(), "Placed") << train.waiting_reason();
  auto after = get("val-burn-1");
  EXPECT_EQ(after.state(), "Stopped");
  EXPECT_TRUE(after.preempted()) << "the check is marked as having given way";
  EXPECT_EQ(after.waiting_reason(), "gave way to real work");
  // The check queued again waits behind the real run; it is not failed.
  auto again = submit(check_run("val-burn-2", "gpu-01", 8));
  EXPECT_EQ(again.state(), "Waiting");
}

TEST_F(SchedulerGiveWay, ARealRunThatCanNeverFitPreemptsNothing) {
  snapshot(machine_of("gpu-01", 8));
  submit(check_run("val-burn-1", "gpu-01", 8));
  auto huge = submit(real_run("huge", 16));
  EXPECT_EQ(huge.state(), "Waiting");
  EXPECT_EQ(get("val-burn-1").state(), "Placed");
}

TEST_F(SchedulerGiveWay, ChecksNeverPreemptEachOtherOrRealWork) {
  snapshot(machine_of("gpu-01", 8));
  auto train = submit(real_run("train", 8));
  EXPECT_EQ(train.state(), "Placed");
  auto burn = submit(check_run("val-burn-1", "gpu-01", 8));
  EXPECT_EQ(burn.state(), "Waiting");
  EXPECT_EQ(get("train").state(), "Placed");
}

TEST_F(SchedulerGiveWay, AnAcceptingMachineTakesItsChecksButNoWork) {
  snapshot(machine_of("gpu-03", 8, true));
  auto train = submit(real_run("train", 1));
  EXPECT_EQ(train.state(), "Waiting") << "work was placed on an Accepting machine";
  EXPECT_EQ(get("train").waiting_reason(),
            "waiting: needs 1 GPU in pool h100; gpu-03 is Accepting (acceptance "
            "val-20261006-7f3a2c runs there)");
  auto quick = submit(check_run("val-quick-1", "gpu-03", 8));
  EXPECT_EQ(quick.state(), "Placed") << "its checks run there";
  // Once accepted, the work goes there, and the check gives way.
  snapshot(machine_of("gpu-03", 8, false));
  EXPECT_EQ(get("train").state(), "Placed");
  EXPECT_TRUE(get("val-quick-1").preempted());
}

// A sixth new-user trial: a burn-in on a machine with one fenced GPU gave way
// to a run of 8 GPUs that could never go there, again and again (31 times
// in a minute), so the burn-in never finished.
TEST_F(SchedulerGiveWay, ACheckGivesWayOnlyToARunItsGpusWouldLetStart) {
  auto m = machine_of("gpu-03", 8);
  m.mutable_gpus(7)->set_health("Faulty");
  snapshot(m);
  EXPECT_EQ(submit(check_run("val-burn-1", "gpu-03", 7)).state(), "Placed");
  auto big = submit(real_run("big8", 8));
  EXPECT_EQ(big.state(), "Waiting");
  auto burn = get("val-burn-1");
  EXPECT_EQ(burn.state(), "Placed") << "8 GPUs never fit on gpu-03's 7 healthy ones";
  EXPECT_FALSE(burn.preempted());
  // A run that its GPUs would let start still gets them.
  EXPECT_EQ(submit(real_run("seven", 7)).state(), "Placed");
  EXPECT_TRUE(get("val-burn-1").preempted());
}

// The same trial: a 2-GPU run stopped the burn-ins of all three machines of
// its pool, though it went to one; each stopped burn-in starts from zero.
TEST_F(SchedulerGiveWay, ASmallRunStopsOneCheckNotEveryCheckOfItsPool) {
  for (int n = 1; n <= 3; ++n) {
    auto name = "gpu-0" + std::to_string(n);
    snapshot(machine_of(name, 8));
    EXPECT_EQ(submit(check_run("val-burn-" + std::to_string(n), name, 8)).state(), "Placed");
  }
  auto small = submit(real_run("small", 2));
  ASSERT_EQ(small.state(), "Placed") << small.waiting_reason();
  ASSERT_EQ(small.workers_size(), 1);
  int stopped = 0;
  for (int n = 1; n <= 3; ++n) {
    auto burn = get("val-burn-" + std::to_string(n));
    if (burn.state() == "Stopped") {
      ++stopped;
      EXPECT_EQ(burn.workers(0).machine(), small.workers(0).machine())
        << "the check that gave way is the one on the machine the run went to";
    } else {
      EXPECT_EQ(burn.state(), "Placed");
    }
  }
  EXPECT_EQ(stopped, 1);
  // Two more such runs take the stopped machine's other GPUs: no other
  // check gives way.
  EXPECT_EQ(submit(real_run("small2", 2)).state(), "Placed");
  EXPECT_EQ(submit(real_run("small3", 4)).state(), "Placed");
  stopped = 0;
  for (int n = 1; n <= 3; ++n)
    stopped += get("val-burn-" + std::to_string(n)).state() == "Stopped";
  EXPECT_EQ(stopped, 1);
}
