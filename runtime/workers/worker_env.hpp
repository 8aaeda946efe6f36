#pragma once
/// @file
/// The environment a worker starts with: a pure function of its order (what
/// the scheduler decided) and a few facts of its machine, exactly as
/// shared/seeds/inside-a-worker.md ("Environment variables", its tables and
/// "Which value wins") and shared/seeds/gpus.md ("Inside the worker")
/// describe it.

#include <map>
#include <string>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// What the environment needs to know of the machine a worker runs on.
struct worker_env_context {
  /// The machine's name: ASTRAEUS_NODE_NAME, SLURMD_NODENAME.
  std::string machine;
  /// The machine's RDMA ports (host facts). Those ACTIVE at or above
  /// `rdma_min_gbps` make NCCL_IB_HCA (`=mlx5_0:1,mlx5_2:1`: one `=` for the
  /// list), less those in the order's `excluded_ib_ports` (issue 12: marked
  /// degraded; "mlx5_5:1" or "mlx5_5") unless that would leave none.
  std::vector<v1::RdmaPort> rdma_ports;
  /// A port slower than this (Gb/s) is not "fast enough" for NCCL.
  double rdma_min_gbps = 100;
  /// The worker is a host process (the `process` runtime): nothing hides
  /// the other GPUs, so CUDA_VISIBLE_DEVICES is set to the worker's GPU ids
  /// (comma-separated UUIDs; empty for a CPU worker, which then sees none),
  /// above every other value. In a container it is
  /// never set (shared/seeds/gpus.md, "Inside the worker").
  bool host_process = false;
  /// For a host process: each AMD GPU's id -> the name ROCm accepts in
  /// ROCR_VISIBLE_DEVICES (`rocr_visible_names`). A host-process worker's
  /// AMD GPUs go to ROCR_VISIBLE_DEVICES, its NVIDIA GPUs to
  /// CUDA_VISIBLE_DEVICES (issue 18, rule 9); a container gets neither.
  std::map<std::string, std::string> rocr_names;
  /// ASTRAEUS_OUTPUTS for a run with `outputs`: the file the worker writes
  /// `key=value` lines to. Empty: the container's path,
  /// `/var/run/astraeus/outputs/outputs` (runtime/workers/worker_outputs.hpp); a
  /// host process is given its host file instead.
  std::string outputs_file;
  /// A validation's check (the order's run has `validation`: the check
  /// program) cannot know the agent's own settings otherwise: these
  /// variables (runtime/validation/check_options.hpp, check_env: the CDI
  /// folders, the NVML library, the host root) are set for it, below the
  /// run's own `env`. Other runs never get them.
  std::map<std::string, std::string> check_settings;
};

/// The worker's environment, by variable name. Precedence, lowest first
/// (seed, "Which value wins"): the injected variables of the seed's tables;
/// the run's `env`; ASTRAEUS_OUTPUTS (with `spec.outputs`, see
/// `ctx.outputs_file`). NCCL_IB_HCA and NCCL_IB_DISABLE are only set when
/// the run does not set them (the run's value wins either way). With
/// `ctx.host_process`, CUDA_VISIBLE_DEVICES overrides the run's value.
/// Variables whose condition does not hold are absent (e.g. no GPU
/// variables for a CPU worker, no MASTER_ADDR before the leader is placed).
/// NVIDIA_IMEX_CHANNELS=0 (seed, "GPUs and the network") is set for a
/// container worker whose GPUs are all NVIDIA's (ids "GPU-<uuid>", handed
/// over by the NVIDIA runtime hook / CDI) on a machine in a multi-machine
/// NVLink domain (`order.nvlink_domain`, from the machine's
/// topology.astraeus.io/nvlink-domain label); never for a host process.
/// Never fails: every field of `order` has a meaning when empty.
std::map<std::string, std::string>
worker_environment(const v1::WorkerOrder& order, const worker_env_context& ctx);

/// Issue 12: "" unless every usable RDMA port of the machine is among the
/// order's `excluded_ib_ports`, so that NCCL_IB_HCA (of a GPU worker whose
/// run does not set it) keeps them all the same; then the sentence that says
/// so ("NCCL_IB_HCA keeps mlx5_0:1 though the controller marked them
/// degraded: leaving them out would leave no port"), for the agent's log.
std::string ib_hca_note(const v1::WorkerOrder& order, const worker_env_context& ctx);

/// The worker's full name: "<namespace>.<worker>" in a workspace with a
/// namespace, else the worker's name (ASTRAEUS_TASK_NAME).
std::string full_worker_name(const v1::WorkerOrder& order);

/// The names ROCm accepts in ROCR_VISIBLE_DEVICES for the AMD GPUs of
/// `gpus`, by GPU id: "GPU-<hex>" for a GPU with a unique id ("AMD-<hex>"),
/// else its ordinal among the machine's AMD GPUs in PCI-address order (the
/// order ROCm enumerates them in).
std::map<std::string, std::string> rocr_visible_names(const std::vector<v1::Gpu>& gpus);

} // namespace astraeus
