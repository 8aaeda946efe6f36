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

TEST(WorkerLedger, ListsAWorkerThatLeftTheSetUntilItsProcessRecordIsForgotten) {
  // A drained machine's worker is stopped by leaving the set: the controller
  // must see it Stopping through its grace and then its end, or it takes
  // the machine for drained while the process still runs.
  test::temp_dir dir;
  auto store = std::shared_ptr<Store>{std::move(*Store::open(dir.path() + "/agent"))};
  auto ledger = worker_ledger::load(store);
  ASSERT_TRUE(ledger);
  ASSERT_TRUE(ledger->apply("gpu-01", orders_of(1, {"long-0", "b-0"})));
  v1::WorkerProcess p;
  p.set_worker("long-0");
  p.set_run("long");
  p.set_pid(4242);
  set_state(p, worker_state::running);
  ASSERT_FALSE(ledger->put_process(p));
  auto held = ledger->apply("gpu-01", orders_of(2, {"b-0"}));
  ASSERT_TRUE(held);
  ASSERT_EQ(names(*held), (std::vector<std::string>{"b-0", "long-0"}));
  EXPECT_EQ(held->workers(1).run(), "long");
  EXPECT_EQ(held->workers(1).pid(), 4242);
  set_state(p, worker_state::stopping);
  ASSERT_FALSE(ledger->put_process(p));
  EXPECT_EQ(ledger->statuses("gpu-01").workers(1).state(), "Stopping");
  set_state(p, worker_state::cancelled);
  ASSERT_FALSE(ledger->put_process(p));
  EXPECT_EQ(ledger->statuses("gpu-01").workers(1).state(), "Cancelled");
  ASSERT_FALSE(ledger->erase_process("long-0"));
  EXPECT_EQ(names(ledger->statuses("gpu-01")), (std::vector<std::string>{"b-0"}));
}

TEST(RouteSourceAddress, LoopbackRoutesFromLoopback) {
  auto addr = route_source_address("127.0.0.1", 7450);
  ASSERT_TRUE(addr) << render_error(addr.error());
  EXPECT_EQ(*addr, "127.0.0.1");
  auto bad = route_source_address("no-such-host.invalid", 7450);
  ASSERT_FALSE(bad);
  EXPECT_NE(render_error(bad.error()).find("no-such-host.invalid"), std::string::npos);
}
