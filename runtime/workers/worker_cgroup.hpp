#pragma once
/// @file
/// A cgroup of its own for each host-process worker, where the host has a
/// writable cgroup v2 hierarchy (issue 23, item 8): every process the worker
/// starts is in it, also one that left its process group with `setsid`, and
/// the worker's end stops the whole cgroup (`cgroup.kill`, kernel 5.14+;
/// else SIGKILL to every pid in `cgroup.procs` until it is empty). The
/// cgroups live under `<the agent's own cgroup>/astraeus-workers`, named
/// after the worker's start marker. Without such a hierarchy the worker's
/// shim, a child subreaper, still collects and ends every descendant
/// (runtime/workers/worker_process.hpp).
///
/// Paths: a cgroup is named relative to the cgroup v2 mount
/// (`v1::WorkerProcess.cgroup`, "/astraeus-workers/w-0.1f2e..."); its host
/// folder is `<root><mount><cgroup>`, `root` being a prefix that tests point
/// at a fixture tree.

#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include <caf/expected.hpp>

namespace astraeus {

/// Where workers' cgroups are made on this host.
struct cgroup_place {
  std::string mount;   ///< the cgroup v2 mount point ("/sys/fs/cgroup")
  std::string parent;  ///< the folder for workers, relative to `mount`
};

/// The cgroup v2 mount point named in `<proc_root>/proc/self/mountinfo`
/// (file-system type cgroup2), or `nullopt` when there is none.
std::optional<std::string> cgroup2_mount(const std::string& proc_root = "/");

/// This process's cgroup v2 path, the "0::" line of
/// `<proc_root>/proc/self/cgroup` ("/system.slice/astraeus-agent.service"),
/// or `nullopt` when there is none.
std::optional<std::string> own_cgroup2(const std::string& proc_root = "/");

/// Finds the cgroup v2 hierarchy and creates (or finds) the workers' folder
/// `<own cgroup>/astraeus-workers` in it, under `root`. Errors:
/// ec::invalid_config naming why not (no cgroup v2, not writable), in which
/// case workers get no cgroup.
caf::expected<cgroup_place> prepare_worker_cgroups(const std::string& proc_root = "/",
                                                   const std::string& root = "/");

/// The host folder of cgroup `cgroup` (relative to `place.mount`) under
/// `root`.
std::string cgroup_dir(const cgroup_place& place, const std::string& cgroup,
                       const std::string& root = "/");

/// Creates cgroup `<place.parent>/<name>`; returns its path relative to the
/// mount. Errors: ec::store_failure naming the folder and the system error.
caf::expected<std::string> create_worker_cgroup(const cgroup_place& place,
                                                const std::string& name,
                                                const std::string& root = "/");

/// The pids in the cgroup folder `dir` (its `cgroup.procs`); empty when
/// there is none or it is gone.
std::vector<pid_t> cgroup_pids(const std::string& dir);

/// Stops every process in the cgroup folder `dir`: writes "1" to its
/// `cgroup.kill`, else SIGKILLs each pid of `cgroup.procs` (a few rounds,
/// for processes forked meanwhile). A cgroup already gone is no error.
void kill_cgroup(const std::string& dir);

/// Removes the (empty) cgroup folder `dir`; true when it is gone.
bool remove_cgroup(const std::string& dir);

} // namespace astraeus
