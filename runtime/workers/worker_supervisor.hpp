#pragma once
/// @file
/// The worker supervisor: makes the processes on this machine match the
/// workers its ledger holds. Each held worker that has no process is
/// started (once: a worker that ended is not restarted); each process whose
/// worker left the set is stopped (that is also how a time limit stops it:
/// the scheduler keeps `time_limit_seconds` and sends a set without it; the
/// agent keeps no timer of its own): its stop signal (SIGTERM, or the image's
/// STOPSIGNAL) to the main process, then SIGKILL to all of it after the
/// stop grace (30 s by default, `stop.grace`, ASTRAEUS_STOP_GRACE), timed
/// on the boot clock from the stored moment of the stop signal, so neither a
/// wall clock set back or forward nor an agent restart moves the SIGKILL; it
/// is then `Cancelled`. Every state it finds is kept in the ledger (sync)
/// with the pid and start time, so a restarted agent finds its workers
/// again: same process, no restart. A worker's record is written (sync,
/// state `Starting`) before its fork, and a restarted agent resolves a
/// record left so by the worker's start marker (runtime/workers/worker_start.hpp):
/// a worker is never started twice. A host-process worker's shim ends every
/// descendant at the worker's end; where the host has a writable cgroup v2
/// hierarchy, the worker also has a cgroup of its own, stopped whole
/// (runtime/workers/worker_cgroup.hpp).
///
/// States (v1::WorkerStatus.state): Running (with pid), Stopping, Exited
/// (code 0), Failed (with the reason: "exited with code 3", "killed by
/// signal 11", "cannot start: ..."), OOMKilled ("the container exceeded
/// its memory limit": read from the container's memory cgroup, whose
/// `oom_kill` counter rose, never inferred from SIGKILL), Cancelled.
///
/// Runtimes: `process` runs the run's command as a host process with
/// CUDA_VISIBLE_DEVICES set to its GPUs; `runc` runs an OCI container from
/// the run's image (runtime/workers/oci_bundle.hpp). `auto` picks runc when the
/// runc program is found, else process; a run may ask for one
/// (RunSpec.runtime). Output goes to `<data>/workers/<worker>/log`,
/// rotated to `log.1` at `workers.log_max_bytes` (runtime/workers/worker_process.hpp).
/// Sources: shared/seeds/inside-a-worker.md ("Signals on stop", "Limits",
/// "Command and working directory"), issue 6.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"
#include "runtime/workers/cdi.hpp"
#include "runtime/workers/worker_process.hpp"
#include "runtime/workers/worker_cgroup.hpp"

namespace astraeus {

class worker_ledger;
struct rdma_grant;

/// Settings of the supervisor (agent config keys in brackets).
struct supervisor_options {
  /// The agent's data folder: workers live in `<data_dir>/workers/<name>`.
  std::string data_dir;
  /// This machine's name (ASTRAEUS_NODE_NAME).
  std::string machine;
  /// [workers.runtime] auto, process or runc.
  std::string runtime = "auto";
  /// [workers.runc] the runc program.
  std::string runc = "runc";
  /// [workers.umoci], [workers.skopeo]: image unpacking tools.
  std::string umoci = "umoci";
  std::string skopeo = "skopeo";
  /// [workers.images_dir] where image names ("busybox") are looked up.
  std::string images_dir;
  /// [stop.grace] time between the stop signal and SIGKILL.
  std::chrono::milliseconds stop_grace{30000};
  /// Prefix of the /proc where the workers' processes are seen ("/": they
  /// are the agent's descendants, whatever host.root says).
  std::string proc_root = "/";
  /// Prefix under which the containers' cgroups (`/sys/fs/cgroup/...`, as
  /// runc names them) are read for their OOM-kill counters ("/": the host's).
  std::string cgroup_root = "/";
  /// Open files per worker (seed: 1 048 576); like `memlock` unlimited for
  /// GPU workers, clamped with a warning to the agent's own hard limit when
  /// the agent lacks CAP_SYS_RESOURCE.
  uint64_t nofile = 1048576;
  /// [workers.log_max_bytes] a worker's log is rotated at this size: the
  /// machine keeps `log` and `log.1`, at most twice this; 0: no cap.
  uint64_t log_max_bytes = 64ull << 20;
  /// RDMA ports slower than this (Gb/s) are left out of NCCL_IB_HCA.
  double rdma_min_gbps = 100;
  /// Where host-process workers get cgroups of their own (under
  /// `cgroup_root`; `prepare_worker_cgroups`); nullopt: none (the shim, a
  /// child subreaper, still ends every descendant).
  std::optional<cgroup_place> cgroups;
  /// How a signal reaches a worker: `signal_process` (pid, signal, whole
  /// process group). Tests record the signals instead.
  std::function<void(pid_t pid, int sig, bool group)> send_signal;
  /// How GPUs are handed to containers (CDI specs); may be empty.
  cdi_options cdi;
  /// Prefix of the /sys where RDMA device numbers are read (the agent's
  /// host.root; "/": this machine's).
  std::string host_root = "/";
  /// [gpu.nvml_library] the NVML library the agent reads GPUs through; a
  /// validation's check is given it (with `cdi`'s folders and host root).
  std::string nvml_library = "libnvidia-ml.so.1";
};

/// The agent's settings a validation's check runs with
/// (`worker_context::check_settings`, validation::check_env): where the
/// agent's CDI specs are, its NVML library, the host root device nodes and
/// sysfs are read under, and a stand-in NVML's or CUDA's answers
/// (`ASTRAEUS_NVML_FIXTURE`, `ASTRAEUS_CUDA_FIXTURE` from the agent's
/// environment). Paths are made absolute against the agent's working folder,
/// as the check runs in its worker's folder (README, "Try it without a GPU",
/// gives them relative); a bare library name is left to the loader.
std::map<std::string, std::string> check_settings(const supervisor_options& o);

/// A GPU whose hand-over cannot work (issue 18, rule 3): a worker failed
/// with "hand-over failing: <node> missing"; the agent latches the GPU.
struct hand_over_failure {
  std::string gpu_id;      ///< the GPU to fence
  std::string reason;      ///< "hand-over failing: /dev/nvidia3 missing"
  std::string evidence;    ///< the worker's whole error
};

/// The GPUs that hand-over error `error` of a worker holding `gpu_ids`
/// fences: those whose CDI device it names ("=<id>"); else, for a GPU's own
/// node (/dev/nvidiaN, /dev/dri/renderDN or cardN), the worker's GPUs; else,
/// for a node every GPU of the vendor shares (/dev/nvidiactl,
/// /dev/nvidia-uvm, /dev/kfd), `machine_gpu_ids` (the machine's GPUs of
/// that vendor; the worker's when empty): no GPU of the machine can be
/// handed over, so none is offered to the next run only to fail it (an
/// eighth-trial machine lost two GPUs per run). Empty when `error` is no
/// hand-over failure.
std::vector<hand_over_failure>
hand_over_failures_of(const std::string& error, const std::vector<std::string>& gpu_ids,
                      const std::vector<std::string>& machine_gpu_ids = {});

/// Runs `work` away from the caller's actor (it may block: image unpacking,
/// nvidia-ctk), then `done` on that actor again. The agent's runs each job
/// on a detached CAF actor; a supervisor without one runs both inline.
using offload_fn = std::function<void(std::function<void()> work, std::function<void()> done)>;

/// One supervisor per agent; not thread-safe (the agent's actor calls it;
/// the blocking parts of a start and of a CDI sync run through the offload
/// on copies of what they need, and only their results come back).
class worker_supervisor {
public:
  explicit worker_supervisor(supervisor_options options);

  /// Sends blocking work (each worker's start: image unpacking, CDI checks;
  /// CDI spec writing) through `offload` from now on. While a worker starts
  /// it has no process record (the controller sees it Assigned); the
  /// reconcile after its `done` stores the record and reports it.
  void set_offload(offload_fn offload) { offload_ = std::move(offload); }

  /// Starts, checks and stops workers so that the processes match
  /// `ledger`'s workers. `now_ms` (the wall clock) only dates the records
  /// users read (started, stop requested); `boot_ms` (the boot clock,
  /// runtime/process/boot_clock.hpp: suspend included, the same across an
  /// agent restart) times the stop grace from the stored
  /// `stop_requested_boot_ms`, so a wall clock set back or forward neither
  /// delays nor hastens the SIGKILL, nor does an agent restart. A stopping
  /// record without a boot-clock reading (an older agent's, or one from
  /// before a reboot) gets the whole grace from this check. Returns true
  /// when a worker's status changed (the agent then reports at once). Store
  /// failures are logged; the record is written again at the next call.
  bool reconcile(worker_ledger& ledger, int64_t now_ms, int64_t boot_ms);

  /// The machine's RDMA ports (from its host facts), for NCCL_IB_HCA.
  void set_rdma_ports(std::vector<v1::RdmaPort> ports) { rdma_ports_ = std::move(ports); }

  /// The machine's NUMA nodes (cores, memory) and the RDMA device nodes
  /// under /dev/infiniband, from its host facts (issue 22): where a worker's
  /// cores and memory are taken, which RDMA devices it can be given.
  void set_host_layout(const v1::HostFacts& facts);

  /// The cores and memory nodes for a worker of `order` that has none yet
  /// (WorkerOrder.cpuset_cpus empty): on its GPUs' NUMA node first, or
  /// shared among its GPUs' nodes when they are on several (as the last GPU
  /// read placed them; runtime/workers/worker_cpuset.hpp), without the cores of the workers
  /// in `ledger` that have not ended or are starting. Returns `order` with
  /// cpuset_cpus/_mems set (unchanged when it has them, asks no cores, or
  /// they are not free: then the problem is logged and it runs unpinned).
  v1::WorkerOrder with_cpuset(const v1::WorkerOrder& order, const worker_ledger& ledger) const;

  /// Keeps the CDI specs in step with a discovery pass (a complete read:
  /// `read_as` "driver: healthy", nvidia-smi or no-gpu; or "unavailable"
  /// because the driver went away, when NVML cannot be loaded or reports
  /// NVML_ERROR_DRIVER_NOT_LOADED, which removes the agent's NVIDIA spec):
  /// NVIDIA's through nvidia-ctk under the fingerprint rule, the AMD spec
  /// from sysfs (`sys_root`). The writing runs through the offload, one
  /// sync at a time (the latest pass asked for runs next). Failures are
  /// logged (a GPU worker then fails to start with the reason).
  void sync_cdi(const v1::GpuSection& gpus, const std::string& sys_root);

  /// The hand-over failures since the last call (the agent latches them).
  std::vector<hand_over_failure> take_hand_over_failures();

  /// Up to `max_bytes` (at most 1 MiB) of `worker`'s log from `offset`, a
  /// position in its whole output across rotations (`read_log_piece`). Errors:
  /// ec::invalid_request when this machine has no log for that worker.
  caf::expected<v1::LogChunk> read_log(const worker_ledger& ledger,
                                       const std::string& worker, uint64_t offset,
                                       uint32_t max_bytes) const;

  /// The runtime a worker of `spec` gets here ("process" or "runc"): the
  /// run's own, else this machine's `workers.runtime`; with auto, "process"
  /// for a run without an image, else "runc" where the runc program is found.
  std::string runtime_for(const v1::RunSpec& spec) const;
  /// Why `order` is not started here, or "" when it may be: a named
  /// workspace's run with an image (a container, as its workspace allows)
  /// on a machine that would run it as a host process (workers.runtime
  /// process, or auto without runc), where it would be root on the machine.
  std::string host_process_refusal(const v1::WorkerOrder& order) const;

  /// The folder of `worker`.
  std::string worker_dir(const std::string& worker) const;

  /// The options.
  const supervisor_options& options() const { return options_; }

  /// Whether a worker's start is in flight or back from the offload but not
  /// yet recorded in the ledger (the next `reconcile` records it): its
  /// process may exist although the ledger has no record of it yet.
  bool starts_pending() const { return !starting_.empty() || !started_.empty(); }

private:
  v1::WorkerProcess start(const v1::WorkerOrder& order, int64_t now_ms, int64_t boot_ms);
  /// What to launch for `order`, everything prepared (image, bundle, CDI).
  caf::expected<process_launch> prepare_process(const v1::WorkerOrder& order,
                                                v1::WorkerProcess& rec);
  caf::expected<process_launch> prepare_runc(const v1::WorkerOrder& order,
                                             v1::WorkerProcess& rec);
  /// Marks, records (`Starting`, sync) and launches `what` for `rec`.
  caf::error launch(process_launch what, v1::WorkerProcess& rec);
  /// Checks the process of worker `name` (stop, grace, end); true when its
  /// status changed.
  bool check(worker_ledger& ledger, const std::string& name, int64_t now_ms, int64_t boot_ms);
  /// Resolves a record a killed agent left `Starting`; true on a change.
  bool resolve_starting(worker_ledger& ledger, v1::WorkerProcess rec);
  /// The RDMA devices a worker of `order` with environment `env` gets
  /// (runtime/workers/worker_rdma.hpp), named in `rec`; nullopt when it gets
  /// none (then it needs no memlock either).
  std::optional<rdma_grant> rdma_grant_for(const v1::WorkerOrder& order,
                                           const std::map<std::string, std::string>& env,
                                           v1::WorkerProcess& rec) const;
  /// Sets the final state of `rec` from its exit file; false while unknown.
  bool finish(v1::WorkerProcess& rec);
  void kill_now(const v1::WorkerProcess& rec);
  /// Stops and removes the cgroup of `rec`, if it has one.
  void end_cgroup(const v1::WorkerProcess& rec, bool remove);
  void signal(pid_t pid, int sig, bool group) const;

  /// What a CDI sync writes, computed from a discovery pass.
  struct cdi_wanted {
    std::string driver;
    std::vector<std::string> nvidia;
    std::vector<amd_cdi_gpu> amd;
    std::string sys_root;
  };
  void run_cdi_sync(cdi_wanted wanted);

  supervisor_options options_;
  std::vector<v1::RdmaPort> rdma_ports_;
  std::vector<v1::NumaNode> numa_nodes_;    ///< the machine's, from its host facts
  std::vector<std::string> rdma_nodes_;     ///< /dev/infiniband nodes that exist
  std::map<std::string, std::string> starting_cpus_;  ///< cores of workers starting
  std::string nvidia_driver_;               ///< of the last complete read
  std::vector<cdi_gpu> nvidia_gpus_;        ///< its NVIDIA GPUs
  std::set<std::string> amd_gpu_ids_;       ///< its AMD GPUs (amd.com/gpu)
  std::map<std::string, std::string> rocr_names_;  ///< ROCR_VISIBLE_DEVICES names
  std::map<std::string, int32_t> gpu_numa_;  ///< GPU id -> its NUMA node, from the last read
  std::vector<hand_over_failure> hand_over_failures_;  ///< not yet taken
  offload_fn offload_;
  std::set<std::string> starting_;          ///< workers whose start is in flight
  std::map<std::string, v1::WorkerProcess> started_;  ///< their records, back
  /// Writes a record durably (sync) from any thread: the ledger's store.
  std::function<caf::error(const v1::WorkerProcess&)> record_start_;
  bool cdi_syncing_ = false;
  std::optional<cdi_wanted> cdi_next_;      ///< a sync asked for while one ran
};

} // namespace astraeus
