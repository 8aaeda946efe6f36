#pragma once
/// @file
/// The `runc` runtime's pieces that need no process: finding a run's image
/// (a root filesystem folder, an OCI image layout, or a docker archive),
/// reading its configuration, unpacking it into a bundle, and writing the
/// bundle's `config.json` (OCI runtime spec 1.0) with the environment,
/// mounts, shared-memory size, limits, user and command that
/// shared/seeds/inside-a-worker.md describes.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// Where an image is and what its configuration says.
struct oci_image {
  /// "rootfs" (a folder holding the root filesystem), "oci" (an OCI image
  /// layout, `tag` naming the image), or "docker-archive" (a `docker save`
  /// tar, converted with skopeo).
  std::string kind;
  std::string path;             ///< the folder or the archive
  std::string tag = "latest";   ///< OCI layouts: the image's ref name
  std::vector<std::string> env;         ///< the image's Env ("K=V")
  std::vector<std::string> entrypoint;  ///< ENTRYPOINT
  std::vector<std::string> cmd;         ///< CMD
  std::string user;                     ///< USER ("" = root)
  std::string workdir;                  ///< WORKDIR ("" = /)
  std::string stop_signal;              ///< STOPSIGNAL ("" = SIGTERM)
};

/// Finds `image`: an absolute path (a folder with `oci-layout` is an OCI
/// layout, "path:tag" names a tag in one; another folder is a root
/// filesystem; a file is a docker archive), else a name looked up as
/// `<images_dir>/<name>` the same way ("busybox", "busybox:1.36"). Reads an
/// OCI layout's configuration (index.json, manifest, config blob).
/// Errors: ec::invalid_request naming the image and where it was looked
/// for, or what in the layout is missing or malformed.
caf::expected<oci_image> find_image(const std::string& image,
                                    const std::string& images_dir);

/// Reads the configuration of the image tagged `tag` in the OCI layout
/// `layout` into `out` (env, entrypoint, cmd, user, workdir, stop signal).
/// Errors: ec::invalid_request naming the file that is missing or bad.
caf::error read_oci_config(const std::string& layout, const std::string& tag,
                           oci_image& out);

/// The command a worker runs (seed, "Command and working directory"):
/// `command` replaces the image's ENTRYPOINT and CMD; without it the
/// ENTRYPOINT runs with `args`, or with the CMD when `args` is empty.
/// Empty when neither gives anything.
std::vector<std::string> worker_command(const std::vector<std::string>& command,
                                        const oci_image& image,
                                        const std::vector<std::string>& args = {});

/// The size of a worker's /dev/shm in bytes (seed, "Shared memory"):
/// 64 MiB without GPUs; with GPUs half the memory limit, at least 1 GiB and
/// at most 64 GiB, or 8 GiB without a memory limit.
uint64_t shm_size_bytes(uint32_t gpus, uint64_t memory_limit_bytes);

/// A uid, gid and supplementary groups.
struct oci_user {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
};

/// Resolves `user` ("name", "uid", "uid:gid", "name:group"; "" = root)
/// against the root filesystem's /etc/passwd and /etc/group. Errors:
/// ec::invalid_request naming a user or group the image does not know.
caf::expected<oci_user> resolve_user(const std::string& user,
                                     const std::string& rootfs);

/// One resource limit: `soft`/`hard`, -1 = unlimited.
struct oci_rlimit {
  std::string name;   ///< "nofile", "memlock", "stack" (RLIMIT_<NAME>)
  int64_t soft = 0;
  int64_t hard = 0;
};

/// Applies the run's `security_context.ulimits` to a worker's limits (seed,
/// "Limits": "Your values replace the defaults above"): a limit of the same
/// resource is replaced, another is added; -1 is unlimited. Names the spec
/// validation refused (`rlimit_resource`) are skipped.
void apply_ulimits(std::vector<oci_rlimit>& limits, const v1::RunSpec& spec);

/// The same for a host process's limits (RLIMIT_* resource, soft/hard;
/// -1 becomes RLIM_INFINITY), set in the worker before exec.
void apply_ulimits(std::vector<std::pair<int, rlimit>>& limits, const v1::RunSpec& spec);

/// A device node handed to the container (from CDI).
struct oci_device {
  std::string path;          ///< in the container: /dev/nvidia0
  std::string host_path;     ///< on the machine (empty: `path`)
  char type = 'c';
  int64_t major = 0;
  int64_t minor = 0;
  uint32_t file_mode = 0666;
};

/// A bind mount (from CDI: driver libraries, binaries).
struct oci_mount {
  std::string host_path;
  std::string container_path;
  std::vector<std::string> options;  ///< "ro", "nosuid", "nodev", "bind"
};

/// A hook (from CDI: e.g. nvidia-ctk's ldcache update).
struct oci_hook {
  std::string stage;  ///< createContainer, startContainer, prestart, poststart, poststop
  std::string path;
  std::vector<std::string> args;
  std::vector<std::string> env;
};

/// The NUMA memory-policy system calls (set_mempolicy, get_mempolicy, mbind,
/// move_pages, migrate_pages): AMD's ROCm runtime places its buffers with
/// them, so `default_seccomp_profile` never denies them (Docker's default
/// profile does, unless the container has CAP_SYS_NICE).
/// Source: issue 6 (AMD CDI).
extern const std::vector<std::string> numa_memory_policy_syscalls;

/// The system calls `default_seccomp_profile` denies (EPERM): in the style
/// of Docker's default profile, those that reach past the container into
/// the machine: kernel modules and kexec (init_module, finit_module,
/// delete_module, kexec_load, ...), mounts and namespaces (mount, umount2,
/// pivot_root, setns, unshare, the new mount API), the kernel keyring
/// (keyctl, add_key, request_key), bpf, perf_event_open, userfaultfd, the
/// clock (settimeofday, clock_settime, clock_adjtime), swap, quotas,
/// reboot, raw I/O ports (iopl, ioperm), file handles (open_by_handle_at),
/// accounting, and obsolete calls (uselib, ustat, sysfs, _sysctl, vm86).
/// ptrace and process_vm_readv/writev stay allowed (debuggers, profilers;
/// Docker allows them on kernels from 4.8).
extern const std::vector<std::string> denied_syscalls;

/// The seccomp profile every container gets (OCI runtime spec,
/// linux.seccomp): `defaultAction` SCMP_ACT_ALLOW with one rule denying
/// `denied_syscalls` with SCMP_ACT_ERRNO (errnoRet 1, EPERM), for the
/// machine's architectures (x86-64 with its 32-bit ABIs, or AArch64 with
/// 32-bit ARM) so a 32-bit call is filtered too. A deny list rather than
/// Docker's allow list of ~350 calls: a new system call is allowed until it
/// is added here. Calls the kernel or libseccomp does not know are skipped
/// by runc.
nlohmann::json default_seccomp_profile();

/// Everything that goes into one worker's config.json.
struct oci_worker {
  std::vector<std::string> args;  ///< the command
  std::vector<std::string> env;   ///< "K=V", the whole environment
  std::string cwd = "/";
  oci_user user;
  std::string hostname;
  uint64_t memory_bytes = 0;      ///< hard limit; 0 = none
  double cpus = 0;                ///< quota and weight; 0 = none
  bool cpu_burst = false;         ///< weight only, no quota (RunSpec.cpu_burst)
  /// NUMA-local cores and memory nodes ("0-15", "0"; runtime/workers/worker_cpuset.hpp):
  /// linux.resources.cpu.cpus and .mems; "" = not pinned.
  std::string cpuset_cpus;
  std::string cpuset_mems;
  uint64_t shm_bytes = 64ull << 20;
  /// `security_context.ipc_mode: host`: the machine's IPC namespace and
  /// its /dev/shm (bind-mounted) instead of a sized tmpfs.
  bool host_ipc = false;
  std::vector<oci_rlimit> rlimits;
  std::vector<oci_device> devices;
  std::vector<oci_mount> mounts;
  std::vector<oci_hook> hooks;
};

/// The bundle's config.json for `w`, its root filesystem at `rootfs`
/// (absolute, or relative to the bundle): host network, its own PID, IPC,
/// UTS and mount namespaces, /dev/shm sized `w.shm_bytes`, the memory limit
/// and CPU quota (period 100 ms, weight 1024 per core; with `w.cpu_burst`
/// the weight only) and the cpuset (`w.cpuset_cpus`, `w.cpuset_mems`) in
/// linux.resources, `w.devices` allowed in the
/// device cgroup, and `default_seccomp_profile()`.
nlohmann::json oci_config(const oci_worker& w, const std::string& rootfs);

/// Unpacks `image` into `<bundle>/rootfs` (a copy of a root filesystem
/// folder with `cp -a`: its modes, owners, links and device nodes as they
/// are; `umoci raw unpack` of an OCI layout; a docker archive is first
/// copied to an OCI layout under `<bundle>/image` with `skopeo`). Blocks
/// until done; a docker archive's configuration is read into `image`
/// then. Errors: ec::store_failure naming the step and its output.
caf::error unpack_image(oci_image& image, const std::string& bundle,
                        const std::string& umoci, const std::string& skopeo);

/// Runs `argv` (argv[0] a program, through the shell, each word quoted)
/// to completion; returns its wait status (0 = success) and its output
/// (stdout and stderr, the first 4 KiB).
std::pair<int, std::string> run_tool(const std::vector<std::string>& argv);

} // namespace astraeus
