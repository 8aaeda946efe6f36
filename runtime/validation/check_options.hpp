#pragma once
/// @file
/// What every check of `astraeus-check` is told: where the host is, which
/// libraries and programs to use, and the thresholds in force.

#include <chrono>
#include <optional>
#include <string>

#include "runtime/validation/check_policy.hpp"

namespace astraeus::validation {

/// The common options (`--host-root`, `--cuda-lib`, `--nvml-lib`,
/// `--policy`) and each check's own.
struct check_options {
  /// sysfs, procfs, /dev and /etc/cdi are read under this ("/": this machine).
  std::string host_root = "/";
  /// The CUDA driver library dlopen()ed by copies and burn.
  std::string cuda_lib = "libcuda.so.1";
  /// The NVML library dlopen()ed by quick and burn.
  std::string nvml_lib = "libnvidia-ml.so.1";
  /// quick: the CDI spec folders as the agent uses them (--cdi-static-dir,
  /// --cdi-dynamic-dir); empty: /etc/cdi and /var/run/cdi under host_root.
  std::string cdi_static_dir;
  std::string cdi_dynamic_dir;
  /// The thresholds in force (built-in values plus --policy FILE).
  check_policy policy;
  /// burn: how long (--duration); absent: burn.duration_s.
  std::optional<std::chrono::milliseconds> duration;
  /// disk: the data directory to test (--data-dir).
  std::string data_dir;
  /// disk: the fio program (--fio); empty: the built-in test only.
  std::string fio = "fio";
  /// disk: earlier disk results of peer machines, JSON lines (--peers FILE).
  std::string peers_file;
  /// dcgm: the dcgmi program (--dcgmi).
  std::string dcgmi = "dcgmi";
  /// dcgm: diag level (--level); absent: dcgm.level.
  std::optional<int> dcgm_level;
  /// pair: "server" or "client" (--role).
  std::string pair_role;
  /// pair: the server's address, for the client (--peer).
  std::string pair_peer;
  /// pair: the rails, "device:port:rate,..." (--rails).
  std::string pair_rails;
  /// pair: perftest's ib_write_bw (--ib-write-bw).
  std::string ib_write_bw = "ib_write_bw";
  /// allreduce: this machine's rank (--rank) and the group's size (--ranks).
  int allreduce_rank = -1;
  int allreduce_ranks = 0;
  /// allreduce: where rank 0 listens, "HOST:PORT" (--root; rank 0 may give
  /// ":PORT": its own address, MASTER_ADDR).
  std::string allreduce_root;
  /// allreduce: GPUs to drive (--gpus); 0: every GPU CUDA lists.
  int allreduce_gpus = 0;
  /// allreduce: the sweep, bytes (--min-bytes, --max-bytes).
  uint64_t allreduce_min_bytes = 8;
  uint64_t allreduce_max_bytes = uint64_t{1} << 30;
  /// allreduce: how long the ranks may take to meet (--connect-timeout).
  std::chrono::milliseconds allreduce_connect_timeout{std::chrono::seconds{120}};
  /// allreduce: the NCCL library dlopen()ed (--nccl-lib).
  std::string nccl_lib = "libnccl.so.2";
};

/// The environment through which the agent hands a check it runs (a
/// validation's worker) the agent's own settings, which the check cannot know
/// otherwise; the check reads them as its defaults and its options win.
namespace check_env {
/// `--host-root`: the agent's host.root.
inline constexpr const char* host_root = "ASTRAEUS_CHECK_HOST_ROOT";
/// `--nvml-lib`: the agent's gpu.nvml_library.
inline constexpr const char* nvml_lib = "ASTRAEUS_CHECK_NVML_LIB";
/// `--cdi-static-dir`, `--cdi-dynamic-dir`: the agent's cdi.static_dir and
/// cdi.dynamic_dir (where it writes the NVIDIA spec).
inline constexpr const char* cdi_static_dir = "ASTRAEUS_CHECK_CDI_STATIC_DIR";
inline constexpr const char* cdi_dynamic_dir = "ASTRAEUS_CHECK_CDI_DYNAMIC_DIR";
}  // namespace check_env

}  // namespace astraeus::validation
