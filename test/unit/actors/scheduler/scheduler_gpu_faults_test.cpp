// The job on a failing GPU is told (issue 17, rule 8;
// actors/scheduler/scheduler_gpu_faults.cpp): a GPU a worker holds turns
// Faulty in its machine's snapshot; the run shows which worker's GPU failed
// and why, and by default keeps running; `on_gpu_fault: stop` stops its gang
// and fails it so it can be resubmitted. Deterministic: CAF's test
// coordinator, no sleeping.

#include "actor_fixture.hpp"

#include <string>
#include <vector>

#include <caf/event_based_actor.hpp>

#include "actors/scheduler/scheduler_actor.hpp"
#include "bin/cli_format.hpp"
#include "runtime/workers/run_spec.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

/// A machine with `n` healthy GPUs "<name>-gpu<i>"; GPU `faulty` (if >= 0)
/// Faulty for `reason`.
v1::SchedulerMachine machine_with(const std::string& name, int n, int faulty = -1,
                                  const std::string& reason = "Xid 79 fault") {
  v1::SchedulerMachine m;
  m.set_name(name);
  m.set_schedulable(true);
  for (int i = 0; i < n; ++i) {
    auto* g = m.add_gpus();
    g->set_id(name + "-gpu" + std::to_string(i));
    g->set_numa_node(0);
    g->set_health(i == faulty ? "Faulty" : "Healthy");
    if (i == faulty)
      g->set_fault_reason(reason);
  }
  return m;
}

v1::RunSpec spec_of(const std::string& name, uint32_t gpus, uint32_t workers,
                    const std::string& on_fault = {}) {
  v1::RunSpec s;
  s.set_name(name);
  s.set_image("ghcr.io/acme/train:1");
  s.add_command("train");
  s.set_gpus_per_worker(gpus);
  s.set_workers(workers);
  s.set_on_gpu_fault(on_fault);
  return s;
}

struct orders_log {
  std::vector<v1::WorkerOrders> sets;
};

caf::behavior orders_recorder(caf::event_based_actor*, std::shared_ptr<orders_log> log) {
  return {
    [log](atom::assign, v1::WorkerOrders& orders) { log->sets.push_back(std::move(orders)); },
    [](v1::SchedulerNotes&) {},
  };
}

class SchedulerGpuFaults : public test::actor_test {
protected:
  SchedulerGpuFaults() {
    auto s = Store::open(dir.path() + "/controller");
    if (!s)
      ADD_FAILURE() << render_error(s.error());
    else
      db = std::shared_ptr<Store>{std::move(*s)};
    scheduler_config sc;
    sc.store = db;
    sched = spawn(scheduler, std::move(sc));
    run();
    log = std::make_shared<orders_log>();
    auto rec = spawn(orders_recorder, log);
    (*self)->send(sched, atom::attach_v, std::string{"gpu-01"},
                  caf::actor_cast<machine_actor>(rec));
    run();
  }

  void snapshot(v1::SchedulerMachine m) {
    (*self)->send(sched, std::move(m));
    run();
  }

  v1::Run submit(v1::RunSpec spec) { return ask<v1::Run>(sched, atom::submit_v, std::move(spec)); }
  v1::Run get(const std::string& name) { return ask<v1::Run>(sched, atom::get_v, name); }

  /// The agent runs every worker named.
  void running(std::vector<std::string> workers) {
    v1::WorkerStatuses st;
    st.set_machine("gpu-01");
    for (auto& w : workers) {
      auto* s = st.add_workers();
      s->set_worker(w);
      s->set_state("Running");
    }
    (*self)->send(sched, std::move(st));
    run();
  }

  /// The index of the GPU worker `rank` of `run` holds.
  static int gpu_index(const v1::Run& run, int rank) {
    auto id = run.workers(rank).gpu_ids(0);
    return std::stoi(id.substr(id.rfind("gpu") + 3));
  }

  v1::Run stored(const std::string& name) {
    v1::Run out;
    auto found = db->get(family::runs, name, out);
    EXPECT_TRUE(found && *found);
    return out;
  }

  test::temp_dir dir;
  std::shared_ptr<Store> db;
  scheduler_actor sched;
  std::shared_ptr<orders_log> log;
};

} // namespace

TEST_F(SchedulerGpuFaults, ByDefaultTheRunKeepsRunningAndShowsWhichWorkersGpuFailedAndWhy) {
  snapshot(machine_with("gpu-01", 4));
  auto placed = submit(spec_of("train", 1, 2));
  ASSERT_EQ(placed.state(), "Placed");
  running({"train-0", "train-1"});
  ASSERT_EQ(get("train").state(), "Running");
  const int bad = gpu_index(placed, 1);
  snapshot(machine_with("gpu-01", 4, bad, "Xid 79 fault"));
  auto r = get("train");
  EXPECT_EQ(r.state(), "Running") << "report is the default: it keeps running";
  const auto gpu = "gpu-01-gpu" + std::to_string(bad);
  EXPECT_EQ(r.gpu_fault(), "GPU " + gpu + " of worker train-1 on gpu-01 failed: Xid 79 "
                           "fault (kept running: on_gpu_fault: report)");
  ASSERT_EQ(r.workers(1).gpu_faults_size(), 1);
  const auto& f = r.workers(1).gpu_faults(0);
  EXPECT_EQ(f.gpu_id(), gpu);
  EXPECT_EQ(f.machine(), "gpu-01");
  EXPECT_EQ(f.reason(), "Xid 79 fault");
  EXPECT_EQ(f.action(), "reported");
  EXPECT_GT(f.unix_ms(), 0);
  EXPECT_EQ(r.workers(0).gpu_faults_size(), 0) << "rank 0's GPU is fine";
  // Stored as shown; the same snapshot again adds nothing.
  EXPECT_EQ(stored("train").workers(1).gpu_faults_size(), 1);
  snapshot(machine_with("gpu-01", 4, bad, "Xid 79 fault"));
  EXPECT_EQ(get("train").workers(1).gpu_faults_size(), 1);
  // What `astra runs` and `astra run show` print.
  v1::RunList list;
  *list.add_runs() = get("train");
  auto table = cli::format_run_list(list, r.submitted_unix_ms());
  EXPECT_NE(table.find("worker train-1 on gpu-01 failed: Xid 79 fault"), std::string::npos)
    << table;
  auto show = cli::format_run(get("train"), r.submitted_unix_ms());
  EXPECT_NE(show.find("GPU fault:   GPU " + gpu + " of worker train-1"), std::string::npos)
    << show;
  EXPECT_NE(show.find("GPU faults"), std::string::npos) << show;
  EXPECT_NE(show.find("reported"), std::string::npos) << show;
  // JSON (`-o json`, the HTTP API) carries the worker's fault.
  auto json = cli::to_json(get("train"));
  EXPECT_NE(json.find("\"gpu_faults\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"gpu_fault\""), std::string::npos) << json;
}

// Fourth new-user trial: a hung GPU's reason counts the time ("has not
// returned for 10003 ms", then 20002 ms, ...), and each report added an entry
// (a store write and a warning each, ~8,600 a day). One entry per fault; a
// different fault of the same GPU (a latch's words) is its own entry.
TEST_F(SchedulerGpuFaults, AHungGpuIsRecordedOnceWhateverTimeItsWordsCount) {
  snapshot(machine_with("gpu-01", 2));
  auto placed = submit(spec_of("train", 1, 1));
  ASSERT_EQ(placed.state(), "Placed");
  running({"train-0"});
  const int bad = gpu_index(placed, 0);
  for (int s = 10; s <= 50; s += 10)
    snapshot(machine_with("gpu-01", 2, bad,
                          "unresponsive: nvmlDeviceGetMemoryInfo has not returned for "
                            + std::to_string(s) + "003 ms (deadline 2000 ms)"));
  auto r = get("train");
  ASSERT_EQ(r.workers(0).gpu_faults_size(), 1) << r.DebugString();
  EXPECT_EQ(r.workers(0).gpu_faults(0).reason(),
            "unresponsive: nvmlDeviceGetMemoryInfo has not returned for 10003 ms (deadline "
            "2000 ms)");
  snapshot(machine_with("gpu-01", 2, bad, "Xid 79 fault"));
  EXPECT_EQ(get("train").workers(0).gpu_faults_size(), 2) << "a latch is a fault of its own";
  snapshot(machine_with("gpu-01", 2, bad, "lost: missing from NVML"));
  EXPECT_EQ(get("train").workers(0).gpu_faults_size(), 3) << "lost is not unresponsive";
}

TEST_F(SchedulerGpuFaults, OnGpuFaultStopStopsTheGangAndFailsTheRunSoItCanBeResubmitted) {
  snapshot(machine_with("gpu-01", 4));
  auto placed = submit(spec_of("gang", 1, 2, "stop"));
  ASSERT_EQ(placed.state(), "Placed");
  running({"gang-0", "gang-1"});
  const int bad = gpu_index(placed, 0);
  snapshot(machine_with("gpu-01", 4, bad, "row-remap failure — GPU needs RMA"));
  auto r = get("gang");
  EXPECT_EQ(r.state(), "Failed");
  const auto gpu = "gpu-01-gpu" + std::to_string(bad);
  EXPECT_EQ(r.waiting_reason(), "GPU " + gpu + " of worker gang-0 on gpu-01 failed: "
                                "row-remap failure — GPU needs RMA (on_gpu_fault: stop: "
                                "its gang was stopped)");
  for (const auto& w : r.workers())
    EXPECT_EQ(w.state(), "Stopped") << w.name();
  EXPECT_EQ(r.workers(0).gpu_faults(0).action(), "stopped");
  EXPECT_EQ(log->sets.back().workers_size(), 0) << "the agent is told to stop both workers";
  EXPECT_EQ(stored("gang").state(), "Failed");
  // Resubmitted under its name: it lands on the three GPUs left, never the
  // fenced one.
  ask<v1::Run>(sched, atom::remove_v, std::string{"gang"});
  auto again = submit(spec_of("gang", 1, 3, "stop"));
  ASSERT_EQ(again.state(), "Placed");
  for (const auto& w : again.workers())
    EXPECT_NE(w.gpu_ids(0), gpu);
}

TEST_F(SchedulerGpuFaults, AFaultOnAGpuNoWorkerHoldsTouchesNoRun) {
  snapshot(machine_with("gpu-01", 2));
  auto placed = submit(spec_of("one", 1, 1, "stop"));
  const int other = 1 - gpu_index(placed, 0);
  snapshot(machine_with("gpu-01", 2, other));
  auto r = get("one");
  EXPECT_EQ(r.state(), "Placed");
  EXPECT_TRUE(r.gpu_fault().empty());
}

TEST_F(SchedulerGpuFaults, AnArrayCopyOnAFailingGpuStopsAloneAndTheOtherCopyGoesOn) {
  snapshot(machine_with("gpu-01", 2));
  auto spec = spec_of("sweep", 1, 1, "stop");
  spec.set_array_size(2);
  auto placed = submit(spec);
  ASSERT_EQ(placed.workers_size(), 2);
  int bad = -1, copy = -1;
  for (int i = 0; i < 2; ++i)
    if (placed.workers(i).array_index() == 0) {
      bad = gpu_index(placed, i);
      copy = i;
    }
  ASSERT_GE(bad, 0);
  snapshot(machine_with("gpu-01", 2, bad));
  auto r = get("sweep");
  EXPECT_EQ(r.workers(copy).state(), "Stopped");
  EXPECT_NE(r.workers(1 - copy).state(), "Stopped") << "copy 1 goes on";
  EXPECT_NE(r.state(), "Failed");
  EXPECT_NE(r.gpu_fault().find("of worker sweep[0]-0"), std::string::npos) << r.gpu_fault();
}

TEST(RunSpecOnGpuFault, OnlyStopOrReport) {
  auto spec = spec_of("x", 1, 1, "halt");
  auto err = validate_run_spec(spec);
  ASSERT_TRUE(err);
  EXPECT_NE(render_error(err).find("on_gpu_fault: 'halt' is not a choice (use stop or report"),
            std::string::npos)
    << render_error(err);
  spec.set_on_gpu_fault("stop");
  EXPECT_FALSE(validate_run_spec(spec));
}
