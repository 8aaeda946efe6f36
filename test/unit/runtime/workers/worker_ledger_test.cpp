// The agent's worker ledger: the controller's whole worker set applied,
// stored before it is acknowledged, and held across an agent restart.

#include <gtest/gtest.h>

#include "actor_fixture.hpp"
#include "messages/worker_state.hpp"
#include "runtime/workers/worker_ledger.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

v1::WorkerOrders orders_of(uint64_t generation, std::vector<std::string> workers) {
  v1::WorkerOrders o;
  o.set_machine("gpu-01");
  o.set_generation(generation);
  for (auto& w : workers) {
    auto* order = o.add_workers();
    order->set_worker(w);
    order->set_run(w.substr(0, w.rfind('-')));
  }
  return o;
}

std::vector<std::string> names(const v1::WorkerStatuses& s) {
  std::vector<std::string> out;
  for (const auto& w : s.workers())
    out.push_back(w.worker());
  return out;
}

} // namespace

TEST(WorkerLedger, AppliesTheWholeSetAndKeepsItAcrossARestart) {
  test::temp_dir dir;
  {
    auto store = std::shared_ptr<Store>{std::move(*Store::open(dir.path() + "/agent"))};
    auto ledger = worker_ledger::load(store);
    ASSERT_TRUE(ledger);
    auto held = ledger->apply("gpu-01", orders_of(5, {"a-0", "b-0"}));
    ASSERT_TRUE(held) << render_error(held.error());
    EXPECT_EQ(held->generation(), 5u);
    EXPECT_EQ(names(*held), (std::vector<std::string>{"a-0", "b-0"}));
    EXPECT_EQ(held->workers(0).state(), "Assigned");
    EXPECT_EQ(held->workers(0).run(), "a");
    // The next set drops b-0.
    held = ledger->apply("gpu-01", orders_of(6, {"a-0"}));
    ASSERT_TRUE(held);
    EXPECT_EQ(names(*held), (std::vector<std::string>{"a-0"}));
  }
  auto store = std::shared_ptr<Store>{std::move(*Store::open(dir.path() + "/agent"))};
  auto ledger = worker_ledger::load(store);
  ASSERT_TRUE(ledger);
  auto held = ledger->statuses("gpu-01");
  EXPECT_EQ(names(held), (std::vector<std::string>{"a-0"}));
  EXPECT_EQ(held.generation(), 0u) << "after a restart the controller sends its set again";
}

TEST(WorkerLedger, RefusesOrdersForAnotherMachineAndKeepsWhatItHolds) {
  test::temp_dir dir;
  auto store = std::shared_ptr<Store>{std::move(*Store::open(dir.path() + "/agent"))};
  auto ledger = worker_ledger::load(store);
  ASSERT_TRUE(ledger);
  ASSERT_TRUE(ledger->apply("gpu-01", orders_of(1, {"a-0"})));
  auto other = orders_of(2, {});
  other.set_machine("gpu-02");
  auto err = ledger->apply("gpu-01", other);
  ASSERT_FALSE(err);
  EXPECT_EQ(render_error(err.error()),
            "worker orders for machine 'gpu-02' reached machine 'gpu-01'");
  auto nameless = orders_of(3, {"a-0"});
  nameless.add_workers();
  EXPECT_FALSE(ledger->apply("gpu-01", nameless));
  EXPECT_EQ(names(ledger->statuses("gpu-01")), (std::vector<std::string>{"a-0"}));
}

// Issue 23 item 6: a worker that left the set is reported while its
// process record is kept (stopping, then how it ended), so the controller
// shows a deleted run's worker Stopping and then how it ended.
TEST(WorkerLedger, ReportsAWorkerThatLeftTheSetUntilItsProcessIsForgotten) {
  test::temp_dir dir;
  auto store = std::shared_ptr<Store>{std::move(*Store::open(dir.path() + "/agent"))};
  auto ledger = worker_ledger::load(store);
  ASSERT_TRUE(ledger);
  ASSERT_TRUE(ledger->apply("gpu-01", orders_of(1, {"a-0"})));
  v1::WorkerProcess p;
  p.set_worker("a-0");
  p.set_run("a");
  p.set_pid(4242);
  set_state(p, worker_state::stopping);
  ASSERT_FALSE(ledger->put_process(p));
  auto held = ledger->apply("gpu-01", orders_of(2, {}));
  ASSERT_TRUE(held);
  ASSERT_EQ(names(*held), (std::vector<std::string>{"a-0"}));
  EXPECT_EQ(held->workers(0).run(), "a");
  EXPECT_EQ(state_of(held->workers(0)), worker_state::stopping);
  set_state(p, worker_state::cancelled);
  p.set_exit_code(137);
  p.set_detail("stopped: killed after the stop grace");
  ASSERT_FALSE(ledger->put_process(p));
  auto ended = ledger->statuses("gpu-01");
  ASSERT_EQ(ended.workers_size(), 1);
  EXPECT_EQ(state_of(ended.workers(0)), worker_state::cancelled);
  EXPECT_EQ(ended.workers(0).exit_code(), 137);
  EXPECT_EQ(ended.workers(0).detail(), "stopped: killed after the stop grace");
  ASSERT_FALSE(ledger->erase_process("a-0"));
  EXPECT_TRUE(names(ledger->statuses("gpu-01")).empty());
}

TEST(RouteSourceAddress, LoopbackRoutesFromLoopback) {
  auto addr = route_source_address("127.0.0.1", 7450);
  ASSERT_TRUE(addr) << render_error(addr.error());
  EXPECT_EQ(*addr, "127.0.0.1");
  auto bad = route_source_address("no-such-host.invalid", 7450);
  ASSERT_FALSE(bad);
  EXPECT_NE(render_error(bad.error()).find("no-such-host.invalid"), std::string::npos);
}
