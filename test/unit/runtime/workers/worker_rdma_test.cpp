// RDMA devices for workers (runtime/workers/worker_rdma.cpp) on the dgx-h100
// fixture host: which workers get them, which nodes, their numbers from
// sysfs, and the container's config.json with devices, groups and memlock.
// Source: issue 22; shared/seeds/inside-a-worker.md ("Limits").

#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/host/host_facts.hpp"
#include "runtime/workers/oci_bundle.hpp"
#include "runtime/workers/worker_env.hpp"
#include "runtime/workers/worker_rdma.hpp"

using namespace astraeus;

namespace {

v1::HostFacts dgx_facts() {
  HostReaderOptions opts;
  opts.root = std::string{ASTRAEUS_FIXTURES} + "/hosts/dgx-h100";
  opts.statfs = [](const std::string&) { return std::optional<FilesystemUsage>{}; };
  return read_host_facts(opts);
}

std::string dgx_root() { return std::string{ASTRAEUS_FIXTURES} + "/hosts/dgx-h100"; }

std::vector<v1::RdmaPort> ports_of(const v1::HostFacts& f) {
  return {f.rdma_ports().begin(), f.rdma_ports().end()};
}

std::vector<std::string> nodes_of(const v1::HostFacts& f) {
  return {f.rdma_device_nodes().begin(), f.rdma_device_nodes().end()};
}

v1::WorkerOrder gang_order(uint32_t machines) {
  v1::WorkerOrder order;
  order.set_worker("train-0");
  order.set_run("train");
  order.add_gpu_ids("GPU-0");
  order.set_machine_count(machines);
  order.set_world_size(machines);
  return order;
}

} // namespace

TEST(WorkerRdma, AGangAcrossMachinesOnAFabricGetsTheDevicesOfItsHcaPorts) {
  auto facts = dgx_facts();
  worker_env_context ctx;
  ctx.machine = "dgx-01";
  ctx.rdma_ports = ports_of(facts);
  auto order = gang_order(2);
  auto env = worker_environment(order, ctx);
  ASSERT_TRUE(env.count("NCCL_IB_HCA"));
  ASSERT_TRUE(worker_gets_rdma(order, env));
  auto hcas = hcas_in(env.at("NCCL_IB_HCA"), ctx.rdma_ports);
  auto grant = rdma_devices_for(hcas, ctx.rdma_ports, nodes_of(facts), dgx_root());
  EXPECT_TRUE(grant.problems.empty()) << grant.problems.front();
  // Every port in NCCL_IB_HCA has its verbs node; rdma_cm comes last.
  for (const auto& hca : hcas) {
    auto uverbs = "/dev/infiniband/uverbs" + hca.substr(5);
    EXPECT_NE(std::find(grant.paths.begin(), grant.paths.end(), uverbs), grant.paths.end())
      << uverbs << " for " << hca << " in " << env.at("NCCL_IB_HCA");
  }
  ASSERT_FALSE(grant.paths.empty());
  EXPECT_EQ(grant.paths.back(), "/dev/infiniband/rdma_cm");
  EXPECT_EQ(grant.paths.size(), hcas.size() + 1);
  // The down RoCE port mlx5_11 is in no list.
  EXPECT_EQ(std::find(hcas.begin(), hcas.end(), "mlx5_11"), hcas.end());
  auto uverbs0 = std::find_if(grant.devices.begin(), grant.devices.end(),
                              [](const oci_device& d) { return d.path == "/dev/infiniband/uverbs0"; });
  ASSERT_NE(uverbs0, grant.devices.end());
  EXPECT_EQ(uverbs0->type, 'c');
  EXPECT_EQ(uverbs0->major, 231);
  EXPECT_EQ(uverbs0->minor, 192);
  EXPECT_EQ(grant.devices.back().major, 10);
  EXPECT_EQ(grant.devices.back().minor, 58);
}

TEST(WorkerRdma, OneMachineWorkersGetNoneUnlessTheRunAsks) {
  auto facts = dgx_facts();
  worker_env_context ctx;
  ctx.rdma_ports = ports_of(facts);
  auto order = gang_order(1);
  auto env = worker_environment(order, ctx);
  EXPECT_FALSE(worker_gets_rdma(order, env));
  order.mutable_spec()->set_rdma(true);
  EXPECT_TRUE(worker_gets_rdma(order, env));
  // A CPU worker that asked gets NCCL_IB_HCA as a GPU worker does
  // (inside-a-worker.md: "or asking for RDMA"): the InfiniBand rails, not
  // the RoCE storage port beside them, and their verbs nodes.
  v1::WorkerOrder cpu;
  cpu.mutable_spec()->set_rdma(true);
  auto cpu_env = worker_environment(cpu, ctx);
  ASSERT_TRUE(cpu_env.count("NCCL_IB_HCA"));
  ASSERT_TRUE(worker_gets_rdma(cpu, cpu_env));
  EXPECT_EQ(hcas_in(cpu_env["NCCL_IB_HCA"], ctx.rdma_ports).size(), 8u) << "mlx5_0-7";
  auto hcas = hcas_in("", ctx.rdma_ports);
  EXPECT_EQ(hcas.size(), 9u) << "mlx5_0-7 and mlx5_10 are ACTIVE";
}

TEST(WorkerRdma, NcclHcaSyntaxSelectsPorts) {
  auto ports = ports_of(dgx_facts());
  EXPECT_EQ(hcas_in("=mlx5_0:1,=mlx5_2:1", ports), (std::vector<std::string>{"mlx5_0", "mlx5_2"}));
  // One leading '=' makes every item exact, as NCCL reads it.
  EXPECT_EQ(hcas_in("=mlx5_0:1,mlx5_1:1", ports), (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(hcas_in("=mlx5_1", ports), (std::vector<std::string>{"mlx5_1"}));
  EXPECT_EQ(hcas_in("mlx5_1", ports), (std::vector<std::string>{"mlx5_1", "mlx5_10"}))
    << "without '=' a name is a prefix";
  auto excluded = hcas_in("^=mlx5_0,=mlx5_10", ports);
  EXPECT_EQ(excluded.size(), 7u);
  EXPECT_EQ(std::find(excluded.begin(), excluded.end(), "mlx5_0"), excluded.end());
  // A run that excludes every port gets none without asking.
  auto order = gang_order(2);
  EXPECT_FALSE(worker_gets_rdma(order, {{"NCCL_IB_HCA", "^mlx5"}}));
}

TEST(WorkerRdma, AMachineWithoutRdmaGetsNoDevices) {
  auto none = rdma_devices_for({}, {}, {}, dgx_root());
  EXPECT_TRUE(none.devices.empty());
  EXPECT_TRUE(none.paths.empty());
  // A port whose node is missing from /dev is left out, named.
  auto facts = dgx_facts();
  auto grant = rdma_devices_for({"mlx5_0"}, ports_of(facts), {"/dev/infiniband/rdma_cm"}, dgx_root());
  EXPECT_EQ(grant.paths, std::vector<std::string>{"/dev/infiniband/rdma_cm"});
  ASSERT_EQ(grant.problems.size(), 1u);
  EXPECT_NE(grant.problems[0].find("/dev/infiniband/uverbs0"), std::string::npos);
}

TEST(WorkerRdma, ContainerConfigCarriesDevicesGroupsMemlockAndCpuset) {
  auto facts = dgx_facts();
  auto grant = rdma_devices_for({"mlx5_0"}, ports_of(facts), nodes_of(facts), dgx_root());
  oci_worker w;
  w.args = {"true"};
  w.devices = grant.devices;
  w.rlimits.push_back({"memlock", -1, -1});
  w.cpuset_cpus = "0-15";
  w.cpuset_mems = "0";
  auto config = oci_config(w, "rootfs");
  const auto& devices = config["linux"]["devices"];
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0]["path"], "/dev/infiniband/uverbs0");
  EXPECT_EQ(devices[0]["type"], "c");
  EXPECT_EQ(devices[0]["major"], 231);
  EXPECT_EQ(devices[0]["minor"], 192);
  EXPECT_EQ(devices[1]["path"], "/dev/infiniband/rdma_cm");
  bool allowed = false;
  for (const auto& rule : config["linux"]["resources"]["devices"])
    if (rule["allow"] == true && rule.value("major", -1) == 231 && rule.value("minor", -1) == 192)
      allowed = rule["access"] == "rwm";
  EXPECT_TRUE(allowed) << config["linux"]["resources"]["devices"].dump();
  bool memlock = false;
  for (const auto& rl : config["process"]["rlimits"])
    if (rl["type"] == "RLIMIT_MEMLOCK")
      memlock = rl["soft"] == UINT64_MAX && rl["hard"] == UINT64_MAX;
  EXPECT_TRUE(memlock) << config["process"]["rlimits"].dump();
  EXPECT_EQ(config["linux"]["resources"]["cpu"]["cpus"], "0-15");
  EXPECT_EQ(config["linux"]["resources"]["cpu"]["mems"], "0");
}
