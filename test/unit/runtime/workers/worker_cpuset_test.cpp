// NUMA-local cores and memory (runtime/workers/worker_cpuset.cpp): Drove's
// rule, shared/seeds/drove-gpu-scheduling.md ("NUMA locality"); issue 22.

#include <gtest/gtest.h>

#include "actor_fixture.hpp"
#include "messages/worker_state.hpp"
#include "runtime/host/numa_facts.hpp"
#include "runtime/workers/worker_cpuset.hpp"
#include "runtime/workers/worker_ledger.hpp"
#include "runtime/workers/worker_supervisor.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

constexpr uint64_t GiB = 1ull << 30;

/// Two NUMA nodes of 32 cores and 256 GiB each (4 GPUs on each).
std::vector<v1::NumaNode> two_nodes() {
  std::vector<v1::NumaNode> nodes(2);
  nodes[0].set_id(0);
  nodes[0].set_cpulist("0-31");
  nodes[0].set_cpus(32);
  nodes[0].set_memory_total_bytes(256 * GiB);
  nodes[1].set_id(1);
  nodes[1].set_cpulist("32-63");
  nodes[1].set_cpus(32);
  nodes[1].set_memory_total_bytes(256 * GiB);
  return nodes;
}

std::set<uint32_t> members(const std::string& list) {
  auto m = cpu_list_members(list);
  return {m->begin(), m->end()};
}

} // namespace

TEST(WorkerCpuset, TwoGpuWorkerGetsCoresAndMemoryOfItsGpusNode) {
  auto nodes = two_nodes();
  // GPUs 4-5 are on node 1.
  auto first = choose_cpuset(16, 64 * GiB, 1, nodes, {});
  EXPECT_EQ(first.cpus, "32-47");
  EXPECT_EQ(first.mems, "1");
  EXPECT_TRUE(first.problem.empty());
  // A second worker on the same GPUs' node does not get the same cores.
  auto second = choose_cpuset(16, 64 * GiB, 1, nodes, members(first.cpus));
  EXPECT_EQ(second.cpus, "48-63");
  EXPECT_EQ(second.mems, "1");
  for (auto c : members(second.cpus))
    EXPECT_FALSE(members(first.cpus).count(c)) << "core " << c << " given twice";
  // GPUs 0-1 on node 0.
  auto third = choose_cpuset(16, 64 * GiB, 0, nodes, {});
  EXPECT_EQ(third.cpus, "0-15");
  EXPECT_EQ(third.mems, "0");
}

TEST(WorkerCpuset, SpillsToTheNextNodeOnlyWhenTheyDoNotFit) {
  auto nodes = two_nodes();
  std::set<uint32_t> taken = members("32-55");  // 8 cores left on node 1
  auto spilled = choose_cpuset(16, 64 * GiB, 1, nodes, taken);
  EXPECT_EQ(spilled.cpus, "0-7,56-63");
  EXPECT_EQ(spilled.mems, "0-1");
  // Memory larger than the node's: a second node for memory only.
  auto big = choose_cpuset(8, 300 * GiB, 0, nodes, {});
  EXPECT_EQ(big.cpus, "0-7");
  EXPECT_EQ(big.mems, "0-1");
}

TEST(WorkerCpuset, NotPinnedWithoutCoresOrWhenTheyAreNotFree) {
  auto nodes = two_nodes();
  auto none = choose_cpuset(0, GiB, 0, nodes, {});
  EXPECT_EQ(none.cpus, "");
  EXPECT_EQ(none.mems, "");
  EXPECT_TRUE(none.problem.empty());
  auto full = choose_cpuset(16, GiB, 0, nodes, members("0-55"));
  EXPECT_EQ(full.cpus, "");
  EXPECT_EQ(full.problem, "16 cores asked, 8 free");
  auto unknown = choose_cpuset(4, GiB, -1, nodes, {});
  EXPECT_EQ(unknown.cpus, "0-3") << "unknown GPU node: the lowest node first";
  EXPECT_EQ(choose_cpuset(4, GiB, 0, {}, {}).cpus, "") << "no NUMA facts: not pinned";
}

TEST(WorkerCpuset, CoresWantedRoundsUp) {
  v1::RunSpec spec;
  EXPECT_EQ(cores_wanted(spec), 0u);
  spec.set_cpus_per_worker(0.5);
  EXPECT_EQ(cores_wanted(spec), 1u);
  spec.set_cpus_per_worker(16);
  EXPECT_EQ(cores_wanted(spec), 16u);
}

// The agent keeps the cores it gave in the workers' records: a restarted
// agent (a new supervisor on the same store) does not give them again, and
// the worker's status reports them.
TEST(WorkerCpuset, CoresGivenSurviveAnAgentRestart) {
  test::temp_dir dir;
  auto store = std::shared_ptr<Store>{std::move(*Store::open(dir.path() + "/agent"))};
  auto ledger = worker_ledger::load(store);
  ASSERT_TRUE(ledger);
  v1::WorkerOrders orders;
  orders.set_machine("gpu-01");
  orders.set_generation(1);
  for (const char* name : {"a-0", "b-0"}) {
    auto* o = orders.add_workers();
    o->set_worker(name);
    o->set_run(std::string{name}.substr(0, 1));
    o->set_numa_node(1);
    o->add_gpu_ids("GPU-4");
    o->add_gpu_ids("GPU-5");
    o->mutable_spec()->set_cpus_per_worker(16);
    o->mutable_spec()->set_memory_bytes_per_worker(64 * GiB);
  }
  ASSERT_TRUE(ledger->apply("gpu-01", orders));
  v1::HostFacts layout;
  for (const auto& n : two_nodes())
    *layout.mutable_cpu()->add_nodes() = n;
  // The first agent placed a-0 and recorded it.
  supervisor_options opts;
  opts.data_dir = dir.path();
  worker_supervisor first{opts};
  first.set_host_layout(layout);
  auto a = first.with_cpuset(ledger->workers().at("a-0"), *ledger);
  EXPECT_EQ(a.cpuset_cpus(), "32-47");
  EXPECT_EQ(a.cpuset_mems(), "1");
  v1::WorkerProcess rec;
  rec.set_worker("a-0");
  rec.set_run("a");
  rec.set_cpus(a.cpuset_cpus());
  rec.set_mems(a.cpuset_mems());
  rec.add_rdma_devices("/dev/infiniband/uverbs4");
  set_state(rec, worker_state::running);
  ASSERT_FALSE(ledger->put_process(rec));
  // A restarted agent: its records come back from the store.
  auto reloaded = worker_ledger::load(store);
  ASSERT_TRUE(reloaded);
  worker_supervisor second{opts};
  second.set_host_layout(layout);
  auto b = second.with_cpuset(reloaded->workers().at("b-0"), *reloaded);
  EXPECT_EQ(b.cpuset_cpus(), "48-63");
  EXPECT_EQ(b.cpuset_mems(), "1");
  auto statuses = reloaded->statuses("gpu-01");
  const v1::WorkerStatus* status = nullptr;
  for (const auto& w : statuses.workers())
    if (w.worker() == "a-0")
      status = &w;
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(status->cpus(), "32-47");
  EXPECT_EQ(status->mems(), "1");
  ASSERT_EQ(status->rdma_devices_size(), 1);
  EXPECT_EQ(status->rdma_devices(0), "/dev/infiniband/uverbs4");
  // An order whose cores the controller chose keeps them.
  auto chosen = reloaded->workers().at("b-0");
  chosen.set_cpuset_cpus("0-3");
  EXPECT_EQ(second.with_cpuset(chosen, *reloaded).cpuset_cpus(), "0-3");
}

// A sixth new-user trial: an 8-GPU worker with 4 GPUs on each socket, asking
// 16 cores and 8 GiB, was pinned to cores 0-15 and memory node 0 only.
TEST(WorkerCpuset, AWorkerWhoseGpusSpanTwoNodesGetsCoresAndMemoryOfBoth) {
  auto both = choose_cpuset(16, 8 * GiB, {{0, 4}, {1, 4}}, two_nodes(), {});
  EXPECT_EQ(both.cpus, "0-7,32-39");
  EXPECT_EQ(both.mems, "0-1");
  EXPECT_EQ(both.problem, "");
  // In proportion to its GPUs, the remainder to the node with more.
  auto uneven = choose_cpuset(7, 0, {{0, 1}, {1, 3}}, two_nodes(), {});
  EXPECT_EQ(uneven.cpus, "0,32-37");
  EXPECT_EQ(uneven.mems, "0-1");
  // A node short of free cores leaves the rest to the other.
  std::set<uint32_t> taken;
  for (uint32_t c = 0; c < 30; ++c)
    taken.insert(c);
  auto short_node = choose_cpuset(16, 0, {{0, 4}, {1, 4}}, two_nodes(), taken);
  EXPECT_EQ(short_node.cpus, "30-45");
  EXPECT_EQ(short_node.mems, "0-1");
  // One node: as before.
  EXPECT_EQ(choose_cpuset(16, 0, {{1, 2}}, two_nodes(), {}).cpus, "32-47");
}

// The agent knows which node each GPU is on from its GPU read.
TEST(WorkerCpuset, TheAgentSharesCoresAmongTheNodesOfAWorkersGpus) {
  test::temp_dir dir;
  supervisor_options opts;
  opts.data_dir = dir.path();
  worker_supervisor sup{opts};
  v1::HostFacts layout;
  for (const auto& n : two_nodes())
    *layout.mutable_cpu()->add_nodes() = n;
  sup.set_host_layout(layout);
  v1::GpuSection gpus;
  for (int i = 0; i < 8; ++i) {
    auto* g = gpus.add_gpus();
    g->set_id("GPU-" + std::to_string(i));
    g->set_vendor("amd");  // no CDI spec to write for this test
    g->set_numa_node(i < 4 ? 0 : 1);
  }
  sup.sync_cdi(gpus, "/");
  auto store = std::shared_ptr<Store>{std::move(*Store::open(dir.path() + "/agent"))};
  auto ledger = worker_ledger::load(store);
  ASSERT_TRUE(ledger);
  v1::WorkerOrder order;
  order.set_worker("numa8-0");
  order.set_numa_node(0);
  for (int i = 0; i < 8; ++i)
    order.add_gpu_ids("GPU-" + std::to_string(i));
  order.mutable_spec()->set_cpus_per_worker(16);
  auto pinned = sup.with_cpuset(order, *ledger);
  EXPECT_EQ(pinned.cpuset_cpus(), "0-7,32-39");
  EXPECT_EQ(pinned.cpuset_mems(), "0-1");
}
