#pragma once
/// @file
/// Host-side mechanics of a worker's process, shared by the `process` and
/// `runc` runtimes: starting it under a small waiter (the "shim") that
/// outlives the agent, finding it again by pid and start time, signalling
/// it, and reading how it ended.
///
/// The agent forks the shim, which starts a session of its own (so a
/// `kill -9` of the agent, or a signal to its process group, leaves the
/// worker running), forks the worker (its own process group, stdin from
/// /dev/null, stdout and stderr a pipe to the shim, signal mask and
/// dispositions reset, every other descriptor closed), copies its output
/// to the worker's log file (rotating it at the cap: `log`, `log.1`), waits
/// for it and writes how it ended to the exit file (`exit N` or `signal N`,
/// written to a temporary name, then renamed). The agent needs nothing
/// but the worker's pid and start time to find it again after a restart.
/// Source: issue 6 ("kill -9 of the agent leaves its workers running").

#include <cstdint>
#include <optional>
#include <string>
#include <sys/resource.h>
#include <sys/types.h>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

namespace astraeus {

/// What to start.
struct process_launch {
  /// argv[0] is resolved on PATH (of `env`, else the agent's) before the
  /// fork; a name that does not resolve is an error.
  std::vector<std::string> argv;
  /// "NAME=value" entries: the whole environment of the process.
  std::vector<std::string> env;
  /// Working directory; empty: the data folder of the worker (`dir`).
  std::string cwd;
  /// The worker's folder: its log ("log") and exit file ("exit") live here;
  /// created when missing.
  std::string dir;
  /// Resource limits set in the worker before exec (e.g. RLIMIT_NOFILE).
  std::vector<std::pair<int, rlimit>> rlimits;
  /// The log's cap in bytes (`workers.log_max_bytes`); 0: none. At the cap
  /// the shim rotates: `log` becomes `log.1` (the older `log.1` is
  /// dropped), a new `log` starts, and `log.start` holds the position of
  /// the new `log`'s first byte in the worker's whole output.
  uint64_t log_max_bytes = 0;
  /// CPUs the worker may run on (sched_setaffinity before exec); empty:
  /// the agent's own. CPUs from CPU_SETSIZE (1024) on are ignored.
  std::vector<uint32_t> cpus;
  /// NUMA nodes its memory is bound to (set_mempolicy MPOL_BIND before
  /// exec, ignored where the kernel refuses); empty: the default policy.
  std::vector<uint32_t> mems;
};

/// A started worker.
struct launched_process {
  pid_t shim_pid = 0;        ///< the waiter, a child of the agent
  pid_t pid = 0;             ///< the worker's main process
  uint64_t start_ticks = 0;  ///< /proc/<pid>/stat field 22; 0 = it had already ended
};

/// Starts `what` under a shim. Errors: ec::invalid_request when argv is
/// empty or argv[0] is not found or not executable; ec::store_failure when
/// the folder or the log file cannot be created or fork fails (naming the
/// path or the system error).
caf::expected<launched_process> launch_process(const process_launch& what);

/// How a process ended, from its exit file.
struct process_end {
  int exit_code = 0;   ///< exit status, or 128 + signal
  int signal = 0;      ///< the signal that ended it; 0 = it exited
};

/// A piece of a worker's log.
struct log_piece {
  std::string data;
  uint64_t next_offset = 0;  ///< where the next read starts
};

/// Up to `max_bytes` of the log in `dir` from `offset`, a position in the
/// worker's whole output (it counts the bytes rotated away, so a reader
/// that follows with `next_offset` reads every byte once across
/// rotations): from `log.1` while `offset` is before the current `log`'s
/// first byte (`log.start`), else from `log`. An offset older than what is
/// kept starts at the oldest byte kept; one past the end (a log started
/// again) at its end. `nullopt` when `dir` has no log.
std::optional<log_piece> read_log_piece(const std::string& dir, uint64_t offset,
                                        uint32_t max_bytes);

/// Reads `<dir>/exit`. `nullopt` when the file is not there (yet).
std::optional<process_end> read_process_end(const std::string& dir);

/// The start time of `pid` (field 22 of `<proc_root>/proc/<pid>/stat`), or
/// 0 when there is no such live process (gone, or a zombie).
uint64_t process_start_ticks(pid_t pid, const std::string& proc_root = "/");

/// Whether `pid` is the process that started at `start_ticks` and has not
/// ended (a reused pid has another start time). `start_ticks` 0 (unknown):
/// whether any live process has that pid.
bool process_alive(pid_t pid, uint64_t start_ticks,
                   const std::string& proc_root = "/");

/// Sends `sig` to `pid` (the main process only) or, with `group`, to its
/// whole process group. A process already gone is no error.
void signal_process(pid_t pid, int sig, bool group);

/// The memory cgroup runc put container `id` in, from runc's own record of
/// it, `<runc_root>/<id>/state.json` ("cgroup_paths": key "memory" on
/// cgroup v1 and hybrid hosts, else "" on cgroup v2): a host path such as
/// `/sys/fs/cgroup/memory/system.slice/astraeus-w-0`. It is there while the
/// container exists, also after it exited when runc ran with `--keep`.
/// `nullopt` when there is no such record or it names no memory cgroup.
std::optional<std::string> runc_memory_cgroup(const std::string& runc_root,
                                              const std::string& id);

/// How many processes the kernel's OOM killer killed in the memory cgroup
/// `cgroup_dir` (a host path, read under `root`): the `oom_kill` line of
/// cgroup v2's `memory.events`, else of cgroup v1's `memory.oom_control`
/// (kernel 4.13+). `nullopt` when neither file has the counter.
std::optional<uint64_t> cgroup_oom_kills(const std::string& cgroup_dir,
                                         const std::string& root = "/");

/// Reaps the shim `shim_pid` if it has ended (never waits). Only this pid:
/// other code of the agent waits for children of its own.
void reap_child(pid_t shim_pid);

/// The path of `name` on `path_var` (colon-separated), or `name` itself
/// when it contains a '/'; empty when not found or not executable.
std::string find_executable(const std::string& name, const std::string& path_var);

/// Parses a signal name or number: "SIGTERM", "TERM", "15", "SIGRTMIN+3".
/// Errors: ec::invalid_request naming the text.
caf::expected<int> parse_signal(const std::string& text);

} // namespace astraeus
