#include "runtime/workers/worker_env.hpp"
#include "runtime/workers/worker_outputs.hpp"

#include <algorithm>
#include <cmath>

namespace astraeus {

namespace {

/// `name` with the order's namespace in front ("<namespace>.<name>"); a
/// worker name that carries it already (the scheduler names a workspace's
/// workers so since issue 13) is not prefixed again.
std::string prefixed(const v1::WorkerOrder& order, const std::string& name) {
  const auto& ns = order.namespace_();
  if (ns.empty() || (name.size() > ns.size() && name.compare(0, ns.size(), ns) == 0
                     && name[ns.size()] == '.'))
    return name;
  return ns + "." + name;
}

/// The leader's worker name: rank 0 of the same copy (ranks run leader
/// group first, so rank 0 is the leader group's rank 0).
std::string leader_worker_name(const v1::WorkerOrder& order) {
  if (order.array_index() < 0)
    return order.run() + "-0";
  return order.run() + "[" + std::to_string(order.array_index()) + "]-0";
}

/// "=mlx5_0:1,mlx5_2:1": one '=' for the whole list. NCCL reads a leading
/// '=' (after an optional '^') as "exact names" for every item and takes
/// the items after it literally, so the seed's `=mlx5_0:1,=mlx5_2:1`
/// (inside-a-worker.md) would name "=mlx5_2", which no device is, and NCCL
/// would use mlx5_0 alone (nccl src/transport/net_ib.cc, ncclIbInit). The
/// ports the order excludes (issue 12: marked degraded, "mlx5_5:1" or
/// "mlx5_5") are left out, unless that would leave none (then NCCL had
/// better use them than sockets). One fabric only: where the machine has
/// InfiniBand ports up, its RoCE (Ethernet) ports are left out, since a
/// collective over both would pair ports that cannot reach each other (the
/// DGX H100's storage/management RoCE port beside its eight IB rails).
struct ib_hca_lists {
  std::string all;   ///< every usable port
  std::string kept;  ///< less the excluded ones
};

ib_hca_lists ib_hca_of(const v1::WorkerOrder& order, const worker_env_context& ctx) {
  auto excluded = [&](const v1::RdmaPort& p) {
    auto port = p.device() + ":" + std::to_string(p.port());
    return std::any_of(order.excluded_ib_ports().begin(), order.excluded_ib_ports().end(),
                       [&](const std::string& x) { return x == port || x == p.device(); });
  };
  auto usable = [&](const v1::RdmaPort& p) {
    return p.state() == "ACTIVE" && p.rate_gbps() >= ctx.rdma_min_gbps;
  };
  const bool any_infiniband =
    std::any_of(ctx.rdma_ports.begin(), ctx.rdma_ports.end(), [&](const v1::RdmaPort& p) {
      return usable(p) && p.link_layer() == "InfiniBand";
    });
  std::string all, kept;
  for (const auto& p : ctx.rdma_ports) {
    if (!usable(p) || (any_infiniband && p.link_layer() != "InfiniBand"))
      continue;
    auto name = p.device() + ":" + std::to_string(p.port());
    all += (all.empty() ? "=" : ",") + name;
    if (!excluded(p))
      kept += (kept.empty() ? "=" : ",") + name;
  }
  return {all, kept};
}

std::string ib_hca(const v1::WorkerOrder& order, const worker_env_context& ctx) {
  auto l = ib_hca_of(order, ctx);
  return l.kept.empty() ? l.all : l.kept;
}

/// Whether every GPU of the order is an NVIDIA GPU (UUIDs "GPU-...";
/// AMD GPUs go by their unique id or PCI address).
bool nvidia_gpus(const v1::WorkerOrder& order) {
  return std::all_of(order.gpu_ids().begin(), order.gpu_ids().end(),
                     [](const std::string& id) { return id.rfind("GPU-", 0) == 0; });
}

} // namespace

std::string ib_hca_note(const v1::WorkerOrder& order, const worker_env_context& ctx) {
  if (order.excluded_ib_ports().empty() || order.gpu_ids().empty()
      || order.spec().env().count("NCCL_IB_HCA"))
    return {};
  auto l = ib_hca_of(order, ctx);
  if (!l.kept.empty() || l.all.empty())
    return {};
  return "NCCL_IB_HCA keeps " + l.all.substr(1) + " though the controller marked them "
         "degraded: leaving them out would leave no port";
}

std::string full_worker_name(const v1::WorkerOrder& order) {
  return prefixed(order, order.worker());
}

std::map<std::string, std::string>
worker_environment(const v1::WorkerOrder& order, const worker_env_context& ctx) {
  std::map<std::string, std::string> env;
  const auto& spec = order.spec();
  const auto rank = std::to_string(order.rank());
  const auto world = std::to_string(order.world_size());
  // Who and where.
  env["ASTRAEUS_TASK_NAME"] = full_worker_name(order);
  env["ASTRAEUS_JOB_NAME"] = prefixed(order, order.run());
  env["ASTRAEUS_NODE_NAME"] = ctx.machine;
  env["ASTRAEUS_REPLICA_INDEX"] = rank;
  env["ASTRAEUS_GROUP_NAME"] = order.group().empty() ? "default" : order.group();
  env["ASTRAEUS_GROUP_REPLICA_INDEX"] = std::to_string(order.group_rank());
  env["RANK"] = rank;
  env["WORLD_SIZE"] = world;
  env["ASTRAEUS_WORLD_SIZE"] = world;
  // Rendezvous.
  env["ASTRAEUS_LEADER_TASK_NAME"] = prefixed(order, leader_worker_name(order));
  if (!order.master_addr().empty()) {
    env["ASTRAEUS_LEADER_ADDRESS"] = order.master_addr();
    env["MASTER_ADDR"] = order.master_addr();
    env["MASTER_PORT"] = std::to_string(order.master_port() ? order.master_port() : 29500);
  }
  // GPUs and the network.
  const auto gpus = order.gpu_ids_size();
  if (gpus > 0) {
    env["ASTRAEUS_GPU_COUNT"] = std::to_string(gpus);
    env["NCCL_DEBUG"] = "WARN";
    env["NCCL_ASYNC_ERROR_HANDLING"] = "1";
    env["NCCL_SOCKET_IFNAME"] = "^lo,docker,virbr,veth,cni,wg";
    // The IMEX channel of a multi-machine NVLink domain: the agent hands
    // /dev/nvidia-caps-imex-channels/channel0 over to a container of NVIDIA
    // GPUs (UUIDs GPU-...), as the NVIDIA runtime hook would
    // (worker_supervisor); a host process needs no hand-over.
    if (!order.nvlink_domain().empty() && !ctx.host_process && nvidia_gpus(order))
      env["NVIDIA_IMEX_CHANNELS"] = "0";
    // Placed over Ethernet (a machine of the copy has no InfiniBand up, or
    // their fabrics differ: the scheduler says so): NCCL must not try
    // InfiniBand that cannot reach the other machines (gpus.md).
    auto hca = order.over_ethernet() ? std::string{} : ib_hca(order, ctx);
    if (!hca.empty())
      env["NCCL_IB_HCA"] = hca;
    else if (order.machine_count() > 1)
      env["NCCL_IB_DISABLE"] = "1";
    env["SLURM_GPUS_ON_NODE"] = std::to_string(gpus);
    env["SLURM_GPUS_PER_TASK"] = std::to_string(gpus);
  } else if (order.rdma() || spec.rdma()) {
    // A CPU worker that asks for RDMA (inside-a-worker.md: NCCL_IB_HCA when
    // "asking for RDMA, on a machine with RDMA ports up"): the same ports.
    if (auto hca = order.over_ethernet() ? std::string{} : ib_hca(order, ctx); !hca.empty())
      env["NCCL_IB_HCA"] = hca;
  }
  // Arrays.
  if (order.array_index() >= 0) {
    env["ASTRAEUS_ARRAY_TASK_ID"] = std::to_string(order.array_index());
    env["ASTRAEUS_ARRAY_SIZE"] = std::to_string(spec.array_size());
  }
  // Slurm's names: one worker per machine is Slurm's shape here.
  env["SLURM_JOB_ID"] = order.run();
  env["SLURM_JOBID"] = order.run();
  env["SLURM_JOB_NAME"] = order.run();
  env["SLURM_PROCID"] = rank;
  env["SLURM_NODEID"] = rank;
  env["SLURM_LOCALID"] = "0";
  env["SLURM_NTASKS"] = world;
  env["SLURM_NPROCS"] = world;
  env["SLURM_NNODES"] = world;
  env["SLURM_JOB_NUM_NODES"] = world;
  env["SLURM_NTASKS_PER_NODE"] = "1";
  env["SLURMD_NODENAME"] = ctx.machine;
  env["SLURM_CLUSTER_NAME"] = "astraeus";
  if (spec.cpus_per_worker() > 0)
    env["SLURM_CPUS_PER_TASK"] = std::to_string(
      static_cast<uint64_t>(std::ceil(spec.cpus_per_worker())));
  if (spec.memory_bytes_per_worker() > 0)
    env["SLURM_MEM_PER_NODE"] = std::to_string(spec.memory_bytes_per_worker() >> 20);
  if (!spec.validation().empty())
    for (const auto& [k, v] : ctx.check_settings)
      env[k] = v;
  // The run's env wins over everything injected above.
  for (const auto& [k, v] : spec.env())
    env[k] = v;
  // Features you turn on: above the run's env.
  if (spec.outputs())
    env["ASTRAEUS_OUTPUTS"] = ctx.outputs_file.empty() ? container_outputs_file
                                                        : ctx.outputs_file;
  if (ctx.host_process) {
    // Above the run's env (README, "Workers"): nothing else keeps a host
    // process off other runs' GPUs.
    // Empty for a CPU worker: it sees no GPU. AMD GPUs go to the variable
    // ROCm reads, with names it accepts; HIP reads CUDA_VISIBLE_DEVICES
    // too, so a worker of AMD GPUs only gets none of it.
    std::string ids, rocr;
    for (const auto& id : order.gpu_ids()) {
      if (auto a = ctx.rocr_names.find(id); a != ctx.rocr_names.end())
        rocr += (rocr.empty() ? "" : ",") + a->second;
      else
        ids += (ids.empty() ? "" : ",") + id;
    }
    if (!ids.empty() || rocr.empty())
      env["CUDA_VISIBLE_DEVICES"] = ids;
    if (!rocr.empty())
      env["ROCR_VISIBLE_DEVICES"] = rocr;
  }
  return env;
}

std::map<std::string, std::string> rocr_visible_names(const std::vector<v1::Gpu>& gpus) {
  std::vector<const v1::Gpu*> amd;
  for (const auto& g : gpus)
    if (g.vendor() == "amd" && !g.id().empty())
      amd.push_back(&g);
  std::sort(amd.begin(), amd.end(), [](const v1::Gpu* a, const v1::Gpu* b) {
    return a->pci_address() < b->pci_address();
  });
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < amd.size(); ++i) {
    const auto& id = amd[i]->id();
    out[id] = id.rfind("AMD-", 0) == 0 ? "GPU-" + id.substr(4) : std::to_string(i);
  }
  return out;
}

} // namespace astraeus
