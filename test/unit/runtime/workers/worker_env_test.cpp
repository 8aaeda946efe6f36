// The environment a worker starts with: the seed's whoami example, its
// tables' conditions, and "Which value wins" (shared/seeds/inside-a-worker.md).

#include <gtest/gtest.h>

#include "runtime/workers/worker_env.hpp"
#include "runtime/workers/worker_outputs.hpp"

using namespace astraeus;

namespace {

/// The seed's whoami run: one CPU, 256 MiB, in workspace ws-7f3c2a, placed
/// on gpu-09 whose address is 10.0.4.17.
v1::WorkerOrder whoami() {
  v1::WorkerOrder o;
  o.set_worker("whoami-0");
  o.set_run("whoami");
  o.set_rank(0);
  o.set_group("default");
  o.set_group_rank(0);
  o.set_world_size(1);
  o.set_master_addr("10.0.4.17");
  o.set_master_port(29500);
  o.set_array_index(-1);
  o.set_leader_machine("gpu-09");
  o.set_namespace_("ws-7f3c2a");
  auto* spec = o.mutable_spec();
  spec->set_name("whoami");
  spec->set_image("busybox");
  spec->set_cpus_per_worker(1);
  spec->set_memory_bytes_per_worker(256ull << 20);
  return o;
}

worker_env_context on_gpu09() {
  worker_env_context ctx;
  ctx.machine = "gpu-09";
  return ctx;
}

v1::RdmaPort port(const std::string& dev, uint32_t n, const std::string& state,
                  double gbps) {
  v1::RdmaPort p;
  p.set_device(dev);
  p.set_port(n);
  p.set_state(state);
  p.set_rate_gbps(gbps);
  return p;
}

} // namespace

TEST(WorkerEnv, WhoamiGetsExactlyTheSeedsVariables) {
  // The seed's `env | grep -E "^(ASTRAEUS|SLURM|RANK|WORLD|MASTER)" | sort`.
  const std::map<std::string, std::string> seed = {
    {"ASTRAEUS_GROUP_NAME", "default"},
    {"ASTRAEUS_GROUP_REPLICA_INDEX", "0"},
    {"ASTRAEUS_JOB_NAME", "ws-7f3c2a.whoami"},
    {"ASTRAEUS_LEADER_ADDRESS", "10.0.4.17"},
    {"ASTRAEUS_LEADER_TASK_NAME", "ws-7f3c2a.whoami-0"},
    {"ASTRAEUS_NODE_NAME", "gpu-09"},
    {"ASTRAEUS_REPLICA_INDEX", "0"},
    {"ASTRAEUS_TASK_NAME", "ws-7f3c2a.whoami-0"},
    {"ASTRAEUS_WORLD_SIZE", "1"},
    {"MASTER_ADDR", "10.0.4.17"},
    {"MASTER_PORT", "29500"},
    {"RANK", "0"},
    {"SLURMD_NODENAME", "gpu-09"},
    {"SLURM_CLUSTER_NAME", "astraeus"},
    {"SLURM_CPUS_PER_TASK", "1"},
    {"SLURM_JOBID", "whoami"},
    {"SLURM_JOB_ID", "whoami"},
    {"SLURM_JOB_NAME", "whoami"},
    {"SLURM_JOB_NUM_NODES", "1"},
    {"SLURM_LOCALID", "0"},
    {"SLURM_MEM_PER_NODE", "256"},
    {"SLURM_NNODES", "1"},
    {"SLURM_NODEID", "0"},
    {"SLURM_NPROCS", "1"},
    {"SLURM_NTASKS", "1"},
    {"SLURM_NTASKS_PER_NODE", "1"},
    {"SLURM_PROCID", "0"},
    {"WORLD_SIZE", "1"},
  };
  EXPECT_EQ(worker_environment(whoami(), on_gpu09()), seed);
}

TEST(WorkerEnv, OutsideAWorkspaceFullNamesAreTheRunsOwn) {
  auto o = whoami();
  o.clear_namespace_();
  auto env = worker_environment(o, on_gpu09());
  EXPECT_EQ(env["ASTRAEUS_TASK_NAME"], "whoami-0");
  EXPECT_EQ(env["ASTRAEUS_JOB_NAME"], "whoami");
  EXPECT_EQ(env["ASTRAEUS_LEADER_TASK_NAME"], "whoami-0");
}

TEST(WorkerEnv, InAWorkspaceEveryRankHasFullNamesButSlurmKeepsTheRunsName) {
  auto o = whoami();
  o.set_worker("whoami-1");
  o.set_rank(1);
  o.set_world_size(2);
  auto env = worker_environment(o, on_gpu09());
  EXPECT_EQ(env["ASTRAEUS_TASK_NAME"], "ws-7f3c2a.whoami-1");
  EXPECT_EQ(env["ASTRAEUS_JOB_NAME"], "ws-7f3c2a.whoami");
  EXPECT_EQ(env["ASTRAEUS_LEADER_TASK_NAME"], "ws-7f3c2a.whoami-0");
  for (const char* v : {"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NAME"})
    EXPECT_EQ(env[v], "whoami") << v;
}

// Issue 13: the scheduler names a workspace's workers by their full name
// (one name per machine whatever other workspace has a run of that name):
// it is not prefixed twice.
TEST(WorkerEnv, AWorkerNamedByItsFullNameKeepsIt) {
  auto o = whoami();
  o.set_worker("ws-7f3c2a.whoami-0");
  auto env = worker_environment(o, on_gpu09());
  EXPECT_EQ(env["ASTRAEUS_TASK_NAME"], "ws-7f3c2a.whoami-0");
  EXPECT_EQ(env["ASTRAEUS_JOB_NAME"], "ws-7f3c2a.whoami");
  EXPECT_EQ(env["ASTRAEUS_LEADER_TASK_NAME"], "ws-7f3c2a.whoami-0");
  EXPECT_EQ(full_worker_name(o), "ws-7f3c2a.whoami-0");
}

TEST(WorkerEnv, GpuWorkerGetsNcclAndSlurmGpuVariablesButNoCudaVisibleDevices) {
  auto o = whoami();
  o.add_gpu_ids("GPU-a");
  o.add_gpu_ids("GPU-b");
  auto env = worker_environment(o, on_gpu09());
  EXPECT_EQ(env["ASTRAEUS_GPU_COUNT"], "2");
  EXPECT_EQ(env["SLURM_GPUS_ON_NODE"], "2");
  EXPECT_EQ(env["SLURM_GPUS_PER_TASK"], "2");
  EXPECT_EQ(env["NCCL_DEBUG"], "WARN");
  EXPECT_EQ(env["NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "^lo,docker,virbr,veth,cni,wg");
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u) << "a container shows only its GPUs";
  EXPECT_EQ(env.count("NCCL_IB_HCA"), 0u);
  EXPECT_EQ(env.count("NCCL_IB_DISABLE"), 0u) << "a one-machine run";
}

TEST(WorkerEnv, HostProcessSeesOnlyItsGpusThroughCudaVisibleDevices) {
  auto o = whoami();
  o.add_gpu_ids("GPU-a");
  o.add_gpu_ids("GPU-b");
  (*o.mutable_spec()->mutable_env())["CUDA_VISIBLE_DEVICES"] = "0,1,2,3";
  auto ctx = on_gpu09();
  ctx.host_process = true;
  EXPECT_EQ(worker_environment(o, ctx)["CUDA_VISIBLE_DEVICES"], "GPU-a,GPU-b");
  o.clear_gpu_ids();
  EXPECT_EQ(worker_environment(o, ctx)["CUDA_VISIBLE_DEVICES"], "")
    << "a CPU worker sees no GPU";
}

TEST(WorkerEnv, CpuWorkerGetsNoGpuVariables) {
  auto env = worker_environment(whoami(), on_gpu09());
  for (const char* v : {"ASTRAEUS_GPU_COUNT", "NCCL_DEBUG", "SLURM_GPUS_ON_NODE",
                        "NCCL_IB_HCA", "NCCL_IB_DISABLE"})
    EXPECT_EQ(env.count(v), 0u) << v;
}

TEST(WorkerEnv, IbHcaListsThePortsThatAreUpAndFastEnough) {
  auto o = whoami();
  o.add_gpu_ids("GPU-a");
  o.set_machine_count(2);
  auto ctx = on_gpu09();
  ctx.rdma_ports = {port("mlx5_0", 1, "ACTIVE", 400), port("mlx5_1", 1, "DOWN", 400),
                    port("mlx5_2", 1, "ACTIVE", 200), port("mlx5_3", 1, "ACTIVE", 25)};
  auto env = worker_environment(o, ctx);
  // One '=' for the list: NCCL takes a later "=mlx5_2" literally.
  EXPECT_EQ(env["NCCL_IB_HCA"], "=mlx5_0:1,mlx5_2:1");
  EXPECT_EQ(env.count("NCCL_IB_DISABLE"), 0u);
}

// Issue 12: a port the policy marks degraded is left out, unless it is the
// only one (sockets would be slower still).
TEST(WorkerEnv, IbHcaLeavesOutThePortsTheOrderExcludes) {
  auto o = whoami();
  o.add_gpu_ids("GPU-a");
  o.set_machine_count(2);
  o.add_excluded_ib_ports("mlx5_2:1");
  auto ctx = on_gpu09();
  ctx.rdma_ports = {port("mlx5_0", 1, "ACTIVE", 400), port("mlx5_2", 1, "ACTIVE", 200)};
  EXPECT_EQ(worker_environment(o, ctx)["NCCL_IB_HCA"], "=mlx5_0:1");
  EXPECT_EQ(ib_hca_note(o, ctx), "") << "a port is left: nothing to say";
  o.add_excluded_ib_ports("mlx5_0");
  EXPECT_EQ(worker_environment(o, ctx)["NCCL_IB_HCA"], "=mlx5_0:1,mlx5_2:1");
  // The agent's log says why the degraded ports are used all the same.
  EXPECT_EQ(ib_hca_note(o, ctx), "NCCL_IB_HCA keeps mlx5_0:1,mlx5_2:1 though the controller "
                                 "marked them degraded: leaving them out would leave no port");
  (*o.mutable_spec()->mutable_env())["NCCL_IB_HCA"] = "=mlx5_2:1";
  EXPECT_EQ(ib_hca_note(o, ctx), "") << "the run's own value wins: nothing was kept";
}

// One fabric: with InfiniBand rails up, the RoCE port beside them (a DGX's
// storage port) is left out; a machine with RoCE alone uses RoCE.
TEST(WorkerEnv, IbHcaKeepsToTheInfiniBandPortsWhereThereAreAny) {
  auto o = whoami();
  o.add_gpu_ids("GPU-a");
  o.set_machine_count(2);
  auto ctx = on_gpu09();
  auto ib = port("mlx5_0", 1, "ACTIVE", 400), ib1 = port("mlx5_1", 1, "ACTIVE", 400),
       roce = port("mlx5_10", 1, "ACTIVE", 400);
  ib.set_link_layer("InfiniBand");
  ib1.set_link_layer("InfiniBand");
  roce.set_link_layer("Ethernet");
  ctx.rdma_ports = {ib, roce, ib1};
  EXPECT_EQ(worker_environment(o, ctx)["NCCL_IB_HCA"], "=mlx5_0:1,mlx5_1:1");
  ctx.rdma_ports = {roce};
  EXPECT_EQ(worker_environment(o, ctx)["NCCL_IB_HCA"], "=mlx5_10:1");
}

TEST(WorkerEnv, MultiMachineRunOverEthernetDisablesIb) {
  auto o = whoami();
  o.add_gpu_ids("GPU-a");
  o.set_machine_count(2);
  auto ctx = on_gpu09();
  ctx.rdma_ports = {port("mlx5_0", 1, "DOWN", 400)};
  auto env = worker_environment(o, ctx);
  EXPECT_EQ(env["NCCL_IB_DISABLE"], "1");
  EXPECT_EQ(env.count("NCCL_IB_HCA"), 0u);
}

// gpus.md: "NCCL_IB_DISABLE 1 when a multi-machine run was placed over
// Ethernet, so NCCL does not try InfiniBand that cannot reach the other
// machines": this machine's ports are up, but the scheduler placed the copy
// on machines sharing no fabric (one without InfiniBand, or another subnet).
TEST(WorkerEnv, ACopyPlacedAcrossFabricsDisablesIbThoughThisMachinesPortsAreUp) {
  auto o = whoami();
  o.add_gpu_ids("GPU-a");
  o.set_machine_count(2);
  o.set_over_ethernet(true);
  auto ctx = on_gpu09();
  ctx.rdma_ports = {port("mlx5_0", 1, "ACTIVE", 400)};
  auto env = worker_environment(o, ctx);
  EXPECT_EQ(env["NCCL_IB_DISABLE"], "1");
  EXPECT_EQ(env.count("NCCL_IB_HCA"), 0u);
  // The run's own value wins, as for every network variable.
  (*o.mutable_spec()->mutable_env())["NCCL_IB_DISABLE"] = "0";
  EXPECT_EQ(worker_environment(o, ctx)["NCCL_IB_DISABLE"], "0");
}

// inside-a-worker.md: NCCL_IB_HCA when "asking for RDMA, on a machine with
// RDMA ports up", GPUs or not (a helper's audit: a CPU worker with rdma:
// true was given the devices but no NCCL_IB_HCA).
TEST(WorkerEnv, ACpuWorkerAskingForRdmaGetsIbHca) {
  auto o = whoami();
  o.mutable_spec()->set_rdma(true);
  auto ctx = on_gpu09();
  ctx.rdma_ports = {port("mlx5_0", 1, "ACTIVE", 400), port("mlx5_1", 1, "DOWN", 400)};
  auto env = worker_environment(o, ctx);
  EXPECT_EQ(env["NCCL_IB_HCA"], "=mlx5_0:1");
  EXPECT_EQ(env.count("ASTRAEUS_GPU_COUNT"), 0u);
  o.mutable_spec()->set_rdma(false);
  EXPECT_EQ(worker_environment(o, ctx).count("NCCL_IB_HCA"), 0u) << "not asked";
}

TEST(WorkerEnv, TheRunsEnvWinsOverInjectedValues) {
  // Seed, "Which value wins": {"MASTER_PORT": "1234"} replaces the default
  // port, {"NCCL_DEBUG": "INFO"} turns on NCCL's logging; a network variable
  // the run sets is not replaced.
  auto o = whoami();
  o.add_gpu_ids("GPU-a");
  o.set_machine_count(2);
  auto& env_in = *o.mutable_spec()->mutable_env();
  env_in["MASTER_PORT"] = "1234";
  env_in["NCCL_DEBUG"] = "INFO";
  env_in["NCCL_IB_DISABLE"] = "0";
  env_in["MY_OWN"] = "yes";
  auto env = worker_environment(o, on_gpu09());
  EXPECT_EQ(env["MASTER_PORT"], "1234");
  EXPECT_EQ(env["NCCL_DEBUG"], "INFO");
  EXPECT_EQ(env["NCCL_IB_DISABLE"], "0");
  EXPECT_EQ(env["MY_OWN"], "yes");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.4.17") << "what the run does not set stays";
}

TEST(WorkerEnv, BeforeTheLeaderIsPlacedThereIsNoRendezvousAddress) {
  auto o = whoami();
  o.clear_master_addr();
  auto env = worker_environment(o, on_gpu09());
  EXPECT_EQ(env.count("MASTER_ADDR"), 0u);
  EXPECT_EQ(env.count("MASTER_PORT"), 0u);
  EXPECT_EQ(env.count("ASTRAEUS_LEADER_ADDRESS"), 0u);
  EXPECT_EQ(env["ASTRAEUS_LEADER_TASK_NAME"], "ws-7f3c2a.whoami-0");
}

TEST(WorkerEnv, ArrayCopyKnowsItsIndexAndItsOwnLeader) {
  auto o = whoami();
  o.clear_namespace_();
  o.set_worker("sweep[3]-1");
  o.set_run("sweep");
  o.set_rank(1);
  o.set_world_size(2);
  o.set_array_index(3);
  o.mutable_spec()->set_array_size(8);
  auto env = worker_environment(o, on_gpu09());
  EXPECT_EQ(env["ASTRAEUS_ARRAY_TASK_ID"], "3");
  EXPECT_EQ(env["ASTRAEUS_ARRAY_SIZE"], "8");
  EXPECT_EQ(env["ASTRAEUS_LEADER_TASK_NAME"], "sweep[3]-0");
  EXPECT_EQ(env["SLURM_JOB_NAME"], "sweep");
  EXPECT_EQ(env["RANK"], "1");
  EXPECT_EQ(env["SLURM_PROCID"], "1");
  EXPECT_EQ(env["SLURM_NTASKS"], "2");
  EXPECT_EQ(env.count("SLURM_ARRAY_TASK_ID"), 0u) << "the seed: not set";
}

TEST(WorkerEnv, OutputsFileIsGivenOnlyWhenAskedForAndWinsOverTheRunsEnv) {
  auto o = whoami();
  EXPECT_EQ(worker_environment(o, on_gpu09()).count("ASTRAEUS_OUTPUTS"), 0u);
  o.mutable_spec()->set_outputs(true);
  // Seed, "Which value wins": ASTRAEUS_OUTPUTS is above the run's env.
  (*o.mutable_spec()->mutable_env())["ASTRAEUS_OUTPUTS"] = "/tmp/mine";
  EXPECT_EQ(worker_environment(o, on_gpu09())["ASTRAEUS_OUTPUTS"],
            "/var/run/astraeus/outputs/outputs");
  // A host process writes to its folder on the machine.
  auto ctx = on_gpu09();
  ctx.host_process = true;
  ctx.outputs_file = "/var/lib/astraeus/workers/whoami-0/outputs/outputs";
  EXPECT_EQ(worker_environment(o, ctx)["ASTRAEUS_OUTPUTS"], ctx.outputs_file);
}

TEST(WorkerEnv, ImexChannelZeroInAMultiMachineNvlinkDomainForNvidiaContainers) {
  // Seed, "GPUs and the network": NVIDIA_IMEX_CHANNELS=0 when placed in a
  // multi-node NVLink domain, on a machine whose GPUs the NVIDIA runtime
  // hook hands over.
  auto o = whoami();
  o.add_gpu_ids("GPU-5a1e0000-0000-0000-0000-000000000001");
  EXPECT_EQ(worker_environment(o, on_gpu09()).count("NVIDIA_IMEX_CHANNELS"), 0u)
    << "no NVLink domain";
  o.set_nvlink_domain("c0ffee/7");
  EXPECT_EQ(worker_environment(o, on_gpu09())["NVIDIA_IMEX_CHANNELS"], "0");
  auto host = on_gpu09();
  host.host_process = true;
  EXPECT_EQ(worker_environment(o, host).count("NVIDIA_IMEX_CHANNELS"), 0u)
    << "no runtime hook hands GPUs to a host process";
  auto amd = whoami();
  amd.set_nvlink_domain("c0ffee/7");
  amd.add_gpu_ids("0000:0c:00.0");
  EXPECT_EQ(worker_environment(amd, on_gpu09()).count("NVIDIA_IMEX_CHANNELS"), 0u);
  auto cpu = whoami();
  cpu.set_nvlink_domain("c0ffee/7");
  EXPECT_EQ(worker_environment(cpu, on_gpu09()).count("NVIDIA_IMEX_CHANNELS"), 0u);
}

// Issue 18, rule 9: a host-process worker with AMD GPUs gets the variable
// ROCm reads, with names it accepts, and no CUDA_VISIBLE_DEVICES of PCI
// addresses (HIP reads that one too).
TEST(WorkerEnv, AHostProcessWithAmdGpusGetsRocrVisibleDevices) {
  std::vector<v1::Gpu> gpus(3);
  gpus[0].set_vendor("amd");
  gpus[0].set_id("0000:c1:00.0");
  gpus[0].set_pci_address("0000:c1:00.0");
  gpus[1].set_vendor("amd");
  gpus[1].set_id("AMD-1e3c5a7f00b2d4e6");
  gpus[1].set_pci_address("0000:03:00.0");
  gpus[2].set_vendor("nvidia");
  gpus[2].set_id("GPU-n");
  auto names = rocr_visible_names(gpus);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names["AMD-1e3c5a7f00b2d4e6"], "GPU-1e3c5a7f00b2d4e6");
  EXPECT_EQ(names["0000:c1:00.0"], "1") << "its ordinal in PCI order";
  auto o = whoami();
  o.add_gpu_ids("0000:c1:00.0");
  o.add_gpu_ids("AMD-1e3c5a7f00b2d4e6");
  auto ctx = on_gpu09();
  ctx.host_process = true;
  ctx.rocr_names = names;
  auto env = worker_environment(o, ctx);
  EXPECT_EQ(env["ROCR_VISIBLE_DEVICES"], "1,GPU-1e3c5a7f00b2d4e6");
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
  // A container gets neither.
  ctx.host_process = false;
  env = worker_environment(o, ctx);
  EXPECT_EQ(env.count("ROCR_VISIBLE_DEVICES"), 0u);
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
}

// A validation's check (astraeus-check) is given the agent's own settings
// (its CDI folders, NVML library, host root); no other run gets them, and
// the run's own env still wins.
TEST(WorkerEnv, AValidationsCheckGetsTheAgentsSettingsAndNoOtherRunDoes) {
  auto ctx = on_gpu09();
  ctx.check_settings = {{"ASTRAEUS_CHECK_CDI_DYNAMIC_DIR", "/srv/cdi"},
                        {"ASTRAEUS_CHECK_NVML_LIB", "/opt/stand-in/libnvidia-ml.so"}};
  auto order = whoami();
  EXPECT_EQ(worker_environment(order, ctx).count("ASTRAEUS_CHECK_CDI_DYNAMIC_DIR"), 0u);
  order.mutable_spec()->set_validation("val-20261006-7f3a2c");
  auto env = worker_environment(order, ctx);
  EXPECT_EQ(env["ASTRAEUS_CHECK_CDI_DYNAMIC_DIR"], "/srv/cdi");
  EXPECT_EQ(env["ASTRAEUS_CHECK_NVML_LIB"], "/opt/stand-in/libnvidia-ml.so");
  (*order.mutable_spec()->mutable_env())["ASTRAEUS_CHECK_NVML_LIB"] = "/mine.so";
  EXPECT_EQ(worker_environment(order, ctx)["ASTRAEUS_CHECK_NVML_LIB"], "/mine.so");
}
