#include "runtime/workers/worker_process.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "messages/error.hpp"

namespace astraeus {

namespace fs = std::filesystem;

namespace {

/// Writes the decimal digits of `v` into `out` (async-signal-safe).
size_t format_int(char* out, int v) {
  char tmp[16];
  size_t n = 0;
  bool neg = v < 0;
  unsigned u = neg ? static_cast<unsigned>(-(v + 1)) + 1u : static_cast<unsigned>(v);
  do {
    tmp[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  size_t k = 0;
  if (neg)
    out[k++] = '-';
  while (n > 0)
    out[k++] = tmp[--n];
  return k;
}

/// Writes the decimal digits of `v` into `out` (async-signal-safe).
size_t format_u64(char* out, uint64_t v) {
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  size_t k = 0;
  while (n > 0)
    out[k++] = tmp[--n];
  return k;
}

/// The shim's copy of the worker's output into its log (fd 1), rotating at
/// the cap. Only system calls (it runs in the forked shim).
struct log_pump {
  const char* log;        ///< <dir>/log
  const char* rotated;    ///< <dir>/log.1
  const char* start;      ///< <dir>/log.start
  const char* start_tmp;  ///< <dir>/log.start.tmp
  uint64_t cap;           ///< 0: none
  uint64_t base = 0;      ///< position of the current log's first byte

  void rotate(uint64_t size) {
    base += size;
    char text[24];
    size_t n = format_u64(text, base);
    text[n++] = '\n';
    int fd = ::open(start_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd >= 0) {
      ssize_t ignored = ::write(fd, text, n);
      (void)ignored;
      ::close(fd);
    }
    // Readers retry when log.start changes under them: the new base is in
    // place before the new log exists.
    ::rename(log, rotated);
    ::rename(start_tmp, start);
    fd = ::open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0640);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
  }

  void write_all(const char* p, size_t n) {
    while (n > 0) {
      size_t chunk = n;
      if (cap > 0) {
        off_t end = ::lseek(1, 0, SEEK_END);
        uint64_t size = end < 0 ? 0 : static_cast<uint64_t>(end);
        if (size >= cap) {
          rotate(size);
          continue;
        }
        if (chunk > cap - size)
          chunk = static_cast<size_t>(cap - size);
      }
      ssize_t w = ::write(1, p, chunk);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        return;  // the disk is full: drop the output, keep the worker
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
};

/// `fd` moved to a number of 10 or more (close-on-exec), so that the
/// shim's dup2 onto 0..5 never overwrites a descriptor it still needs.
int above_std(int fd) {
  if (fd < 0 || fd >= 10)
    return fd;
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  if (moved < 0)
    return fd;
  ::close(fd);
  return moved;
}

void close_from(int first) {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, first, ~0U, 0) == 0)
    return;
#endif
  long max = ::sysconf(_SC_OPEN_MAX);
  if (max < 0 || max > 1 << 20)
    max = 1 << 16;
  for (int fd = first; fd < max; ++fd)
    ::close(fd);
}

void reset_signals() {
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP)
      ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

/// Reaps every child that has ended (never waits). Returns the status of
/// `worker` when it was among them, with `worker_ended` set; false once the
/// shim has no children left. Only system calls (it runs in the shim).
bool reap_ended(pid_t worker, int& status, bool& worker_ended) {
  for (;;) {
    int st = 0;
    pid_t r = ::waitpid(-1, &st, WNOHANG);
    if (r > 0) {
      if (r == worker) {
        status = st;
        worker_ended = true;
      }
      continue;
    }
    if (r < 0 && errno == EINTR)
      continue;
    return !(r < 0 && errno == ECHILD);
  }
}

/// The shim's last duty (issue 23 item 8): every process the worker left
/// behind became the shim's child (it is a child subreaper); SIGKILL them,
/// reap them, and again for their own children as they are handed over,
/// until none is left (at most about 5 s: a process stuck in the kernel is
/// not waited for). Reads the shim's children from
/// /proc/self/task/<pid>/children. Only system calls.
void end_descendants() {
  static char path[64];
  static const char prefix[] = "/proc/self/task/";
  size_t n = sizeof(prefix) - 1;
  std::memcpy(path, prefix, n);
  n += format_int(path + n, static_cast<int>(::getpid()));
  std::memcpy(path + n, "/children", 10);
  static char buf[16384];
  int ignored_status = 0;
  bool ignored_end = false;
  for (int round = 0; round < 1000; ++round) {
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t got = 0, r;
      while (got < static_cast<ssize_t>(sizeof(buf)) - 1
             && (r = ::read(fd, buf + got, sizeof(buf) - 1 - static_cast<size_t>(got))) > 0)
        got += r;
      ::close(fd);
      long pid = 0;
      bool digits = false;
      for (ssize_t i = 0; i <= got; ++i) {
        char c = i < got ? buf[i] : ' ';
        if (c >= '0' && c <= '9') {
          pid = pid * 10 + (c - '0');
          digits = true;
        } else if (digits) {
          ::kill(static_cast<pid_t>(pid), SIGKILL);
          pid = 0;
          digits = false;
        }
      }
    }
    if (!reap_ended(-1, ignored_status, ignored_end))
      return;  // no child left
    if (fd < 0)
      return;  // the kernel does not list children: nothing more to do
    struct timespec pause = {0, 5 * 1000 * 1000};
    ::nanosleep(&pause, nullptr);
  }
}

constexpr unsigned long max_mask_nodes = 1024;

/// A launch's cores and NUMA nodes as the system calls take them, built
/// before the fork so the child only makes system calls.
struct placement_masks {
  bool pin_cpus = false;
  bool bind_memory = false;
  cpu_set_t cpus;
  unsigned long nodes[max_mask_nodes / (8 * sizeof(unsigned long))] = {};
};

placement_masks placement_masks_of(const process_launch& what) {
  placement_masks m;
  CPU_ZERO(&m.cpus);
  for (auto c : what.cpus)
    if (c < CPU_SETSIZE)
      CPU_SET(c, &m.cpus);
  constexpr unsigned long bits = 8 * sizeof(unsigned long);
  for (auto n : what.mems)
    if (n < max_mask_nodes)
      m.nodes[n / bits] |= 1ul << (n % bits);
  m.pin_cpus = !what.cpus.empty();
  m.bind_memory = !what.mems.empty();
  return m;
}

/// In the worker before exec: its affinity and memory policy; a refusal
/// (a kernel without NUMA) leaves the defaults.
void apply_placement_masks(const placement_masks& m) {
  if (m.pin_cpus)
    ::sched_setaffinity(0, sizeof(m.cpus), &m.cpus);
  if (m.bind_memory)  // MPOL_BIND (linux/mempolicy.h); no libnuma needed
    ::syscall(SYS_set_mempolicy, 2, m.nodes, max_mask_nodes + 1);
}


/// What the shim needs, prepared before the fork (after it, the shim and
/// the worker run only system calls).
struct shim_plan {
  const char* program;
  char* const* argv;
  char* const* envp;
  const char* cwd;
  const std::vector<std::pair<int, rlimit>>* rlimits;
  int null_fd, log_fd;
  int pipe_w;         ///< tells the agent the worker's pid
  int out_r, out_w;   ///< the worker's output pipe
  int lock_fd;        ///< the start lock, or -1
  int cgroup_fd;      ///< the worker's cgroup.procs, or -1
  const char* cgroup_dir;   ///< the worker's cgroup, or ""
  const char* cgroup_kill;  ///< its cgroup.kill
  log_pump pump;
  const char* exit_path;
  const char* exit_tmp;
  const placement_masks* masks;  ///< its cores and NUMA nodes (issue 22)
};

/// The worker, forked by the shim: into its cgroup and its own process
/// group, its limits, its folder, then exec. Shim fds: 3 pid pipe, 4 and 5
/// output pipe, 6 start lock, 7 cgroup.procs.
[[noreturn]] void exec_worker(const shim_plan& p) {
  static const char exec_failed[] = "astraeus: cannot execute the worker's command\n";
  // Into its cgroup first, so every process it starts is there too.
  if (p.cgroup_fd >= 0) {
    ssize_t joined = ::write(7, "0", 1);
    (void)joined;
  }
  // stdout and stderr: the pipe to the shim.
  ::dup2(5, 1);
  ::dup2(5, 2);
  for (int fd : {3, 4, 5, 6, 7})
    ::close(fd);
  ::setpgid(0, 0);
  for (const auto& [resource, limit] : *p.rlimits)
    ::setrlimit(resource, &limit);
  apply_placement_masks(*p.masks);
  if (::chdir(p.cwd) != 0)
    ::_exit(126);
  ::execve(p.program, p.argv, p.envp);
  ssize_t ignored = ::write(2, exec_failed, sizeof(exec_failed) - 1);
  (void)ignored;
  ::_exit(127);
}

/// Kills what is left in the worker's cgroup (cgroup.kill) and removes it
/// once empty (at most about 1 s), so a cgroup is gone with its worker even
/// when no agent runs then. Only system calls.
void end_cgroup_of(const shim_plan& p) {
  if (p.cgroup_dir[0] == '\0')
    return;
  int fd = ::open(p.cgroup_kill, O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t ignored = ::write(fd, "1", 1);
    (void)ignored;
    ::close(fd);
  }
  for (int round = 0; round < 200; ++round) {
    if (::rmdir(p.cgroup_dir) == 0 || errno == ENOENT)
      return;
    struct timespec pause = {0, 5 * 1000 * 1000};
    ::nanosleep(&pause, nullptr);
  }
}

/// Writes how the worker ended (`exit N` or `signal N`) to a temporary
/// name, synced, then renamed to the exit file.
void write_exit_file(const shim_plan& p, int status) {
  char text[32];
  size_t n = 0;
  if (WIFSIGNALED(status)) {
    std::memcpy(text, "signal ", 7);
    n = 7 + format_int(text + 7, WTERMSIG(status));
  } else {
    std::memcpy(text, "exit ", 5);
    n = 5 + format_int(text + 5, WEXITSTATUS(status));
  }
  text[n++] = '\n';
  int fd = ::open(p.exit_tmp, O_WRONLY | O_CREAT | O_TRUNC, 0640);
  if (fd >= 0) {
    ssize_t ignored = ::write(fd, text, n);
    (void)ignored;
    ::fsync(fd);
    ::close(fd);
    ::rename(p.exit_tmp, p.exit_path);
  }
}

/// The shim, forked by the agent (see the file comment of worker_process.hpp).
[[noreturn]] void run_shim(shim_plan& p) {
  // The shim: a session of its own, outlives the agent; the subreaper of
  // whatever the worker leaves orphaned.
  ::setsid();
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  reset_signals();
  ::dup2(p.null_fd, 0);
  ::dup2(p.log_fd, 1);
  ::dup2(p.log_fd, 2);
  ::dup2(p.pipe_w, 3);
  ::dup2(p.out_r, 4);
  ::dup2(p.out_w, 5);
  // 6: the start lock, 7: the cgroup's cgroup.procs (or nothing).
  for (int kept : {6, 7}) {
    int from = kept == 6 ? p.lock_fd : p.cgroup_fd;
    if (from >= 0) {
      ::dup2(from, kept);
      ::fcntl(kept, F_SETFD, FD_CLOEXEC);
    } else {
      ::close(kept);
    }
  }
  close_from(8);
  pid_t worker = ::fork();
  if (worker == 0)
    exec_worker(p);
  ::close(5);
  ::close(7);
  if (worker > 0)
    ::setpgid(worker, worker);
  pid_t sent = worker > 0 ? worker : 0;
  ssize_t ignored = ::write(3, &sent, sizeof(sent));
  (void)ignored;
  ::close(3);
  if (worker < 0)
    ::_exit(1);
  // Copy the output until the pipe closes or the worker has ended (a
  // process it left behind may hold the pipe open: what it has written
  // by then is copied, the rest is not waited for).
  int status = 0;
  bool ended = false;
  static char buf[65536];
  int drained = 0;
  for (;;) {
    struct pollfd pfd = {4, POLLIN, 0};
    int ready = ::poll(&pfd, 1, ended ? 0 : 250);
    if (ready > 0) {
      ssize_t n = ::read(4, buf, sizeof(buf));
      if (n > 0) {
        p.pump.write_all(buf, static_cast<size_t>(n));
        if (ended && ++drained > 64)
          break;
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      break;  // end of output
    }
    if (ready < 0 && errno == EINTR)
      continue;
    if (ended)
      break;
    // Orphans handed to the shim are reaped as they end, so a long run
    // that leaves many behind piles up no zombies.
    reap_ended(worker, status, ended);
  }
  ::close(4);
  while (!ended && ::waitpid(worker, &status, 0) < 0 && errno == EINTR) {
  }
  // As when a container's first process ends: whatever the worker left
  // running ends with it: its process group, then every descendant that
  // left the group (setsid) and was handed to the shim.
  ::kill(-worker, SIGKILL);
  end_descendants();
  end_cgroup_of(p);
  write_exit_file(p, status);
  ::_exit(0);
}

std::string env_value(const std::vector<std::string>& env, const std::string& name) {
  for (const auto& e : env)
    if (e.size() > name.size() && e.compare(0, name.size(), name) == 0
        && e[name.size()] == '=')
      return e.substr(name.size() + 1);
  return {};
}

} // namespace

std::string find_executable(const std::string& name, const std::string& path_var) {
  auto usable = [](const std::string& p) {
    struct stat sb;
    return ::stat(p.c_str(), &sb) == 0 && S_ISREG(sb.st_mode)
           && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.empty())
    return {};
  if (name.find('/') != std::string::npos)
    return usable(name) ? name : std::string{};
  std::stringstream dirs{path_var};
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty())
      dir = ".";
    auto candidate = dir + "/" + name;
    if (usable(candidate))
      return candidate;
  }
  return {};
}


caf::expected<launched_process> launch_process(const process_launch& what) {
  if (what.argv.empty())
    return caf::make_error(ec::invalid_request, "the worker has no command to run");
  auto path_var = env_value(what.env, "PATH");
  if (path_var.empty()) {
    const char* p = std::getenv("PATH");
    path_var = p ? p : "/usr/local/bin:/usr/bin:/bin";
  }
  auto program = find_executable(what.argv[0], path_var);
  if (program.empty())
    return caf::make_error(ec::invalid_request,
                           "command '" + what.argv[0]
                             + "' is not found or not executable (PATH="
                             + path_var + ")");
  std::error_code err;
  fs::create_directories(what.dir, err);
  if (err)
    return caf::make_error(ec::store_failure, "cannot create the worker's folder "
                                                + what.dir + ": " + err.message());
  const std::string log_path = what.dir + "/log";
  const std::string exit_path = what.dir + "/exit";
  const std::string exit_tmp = what.dir + "/exit.tmp";
  const std::string rotated_path = what.dir + "/log.1";
  const std::string start_path = what.dir + "/log.start";
  const std::string start_tmp = what.dir + "/log.start.tmp";
  const std::string cgroup_kill = what.cgroup_dir + "/cgroup.kill";
  fs::remove(exit_path, err);
  fs::remove(rotated_path, err);
  fs::remove(start_path, err);
  const std::string cwd = what.cwd.empty() ? what.dir : what.cwd;
  // Everything the children use is prepared here: after fork only system
  // calls run (the agent has other threads; malloc could deadlock).
  std::vector<char*> argv;
  for (const auto& a : what.argv)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : what.env)
    envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int log_fd =
    ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0640);
  if (log_fd < 0)
    return caf::make_error(ec::store_failure, "cannot create the worker's log "
                                                + log_path + ": " + std::strerror(errno));
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int pipe_fds[2];
  int out_fds[2] = {-1, -1};
  if (null_fd < 0 || ::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    auto why = std::string{std::strerror(errno)};
    ::close(log_fd);
    if (null_fd >= 0)
      ::close(null_fd);
    return caf::make_error(ec::store_failure, "cannot start the worker: " + why);
  }
  if (::pipe2(out_fds, O_CLOEXEC) != 0) {
    auto why = std::string{std::strerror(errno)};
    for (int fd : {log_fd, null_fd, pipe_fds[0], pipe_fds[1]})
      ::close(fd);
    return caf::make_error(ec::store_failure, "cannot start the worker: " + why);
  }
  // The start lock (held by the shim until it ends) and the worker's cgroup
  // (joined by the worker before exec).
  int lock_fd = -1, cgroup_fd = -1;
  std::string setup_error;
  if (!what.start_lock.empty()) {
    ::unlink(what.start_lock.c_str());
    lock_fd = ::open(what.start_lock.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0)
      setup_error = "cannot take the start lock " + what.start_lock + ": " + std::strerror(errno);
  }
  if (setup_error.empty() && !what.cgroup_dir.empty()) {
    auto procs = what.cgroup_dir + "/cgroup.procs";
    cgroup_fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (cgroup_fd < 0)
      setup_error = "cannot open " + procs + ": " + std::strerror(errno);
  }
  if (!setup_error.empty()) {
    for (int fd : {log_fd, null_fd, pipe_fds[0], pipe_fds[1], out_fds[0], out_fds[1], lock_fd,
                   cgroup_fd})
      if (fd >= 0)
        ::close(fd);
    return caf::make_error(ec::store_failure, setup_error);
  }
  for (int* fd : {&log_fd, &null_fd, &pipe_fds[0], &pipe_fds[1], &out_fds[0], &out_fds[1],
                  &lock_fd, &cgroup_fd})
    *fd = above_std(*fd);
  log_pump pump{log_path.c_str(), rotated_path.c_str(), start_path.c_str(), start_tmp.c_str(),
                what.log_max_bytes};
  const auto masks = placement_masks_of(what);  // before the fork
  pid_t shim = ::fork();
  if (shim < 0) {
    auto why = std::string{std::strerror(errno)};
    for (int fd : {log_fd, null_fd, pipe_fds[0], pipe_fds[1], out_fds[0], out_fds[1], lock_fd,
                   cgroup_fd})
      if (fd >= 0)
        ::close(fd);
    return caf::make_error(ec::store_failure, "cannot fork the worker's shim: " + why);
  }
  if (shim == 0) {
    shim_plan plan{program.c_str(), argv.data(), envp.data(), cwd.c_str(), &what.rlimits,
                   null_fd, log_fd, pipe_fds[1], out_fds[0], out_fds[1], lock_fd, cgroup_fd,
                   what.cgroup_dir.c_str(), cgroup_kill.c_str(), pump, exit_path.c_str(),
                   exit_tmp.c_str(), &masks};
    run_shim(plan);
  }
  ::close(pipe_fds[1]);
  ::close(out_fds[0]);
  ::close(out_fds[1]);
  ::close(log_fd);
  ::close(null_fd);
  // The shim holds the lock now (the same open file); ours goes.
  for (int fd : {lock_fd, cgroup_fd})
    if (fd >= 0)
      ::close(fd);
  pid_t worker = 0;
  ssize_t got;
  do {
    got = ::read(pipe_fds[0], &worker, sizeof(worker));
  } while (got < 0 && errno == EINTR);
  ::close(pipe_fds[0]);
  if (got != static_cast<ssize_t>(sizeof(worker)) || worker <= 0) {
    reap_child(shim);
    return caf::make_error(ec::store_failure, "the worker's shim could not fork it");
  }
  launched_process out;
  out.shim_pid = shim;
  out.pid = worker;
  out.start_ticks = process_start_ticks(worker);
  return out;
}

namespace {

/// The number in `path`, 0 when there is none.
uint64_t read_u64(const std::string& path) {
  std::ifstream in{path};
  uint64_t v = 0;
  return (in >> v) ? v : 0;
}

} // namespace

std::optional<log_piece> read_log_piece(const std::string& dir, uint64_t offset,
                                        uint32_t max_bytes) {
  // The shim may rotate meanwhile: read log.start before and after opening
  // the files, and again when it changed.
  for (int attempt = 0;; ++attempt) {
    uint64_t base = read_u64(dir + "/log.start");
    std::ifstream log{dir + "/log", std::ios::binary};
    std::ifstream old{dir + "/log.1", std::ios::binary};
    if (read_u64(dir + "/log.start") != base && attempt < 5)
      continue;
    if (!log)
      return std::nullopt;
    auto size_of = [](std::ifstream& f) -> uint64_t {
      if (!f)
        return 0;
      f.seekg(0, std::ios::end);
      auto n = f.tellg();
      return n < 0 ? 0 : static_cast<uint64_t>(n);
    };
    uint64_t size = size_of(log);
    uint64_t old_size = size_of(old);
    uint64_t old_start = old_size <= base ? base - old_size : 0;
    std::ifstream* from = &log;
    uint64_t pos, end;
    if (offset >= base) {
      if (offset - base > size)
        offset = base + size;  // the log was started again
      pos = offset - base;
      end = size;
    } else if (old && old_size > 0) {
      if (offset < old_start)
        offset = old_start;  // older output is gone
      from = &old;
      pos = offset - old_start;
      end = old_size;
    } else {
      offset = base;
      pos = 0;
      end = size;
    }
    log_piece out;
    from->clear();
    from->seekg(static_cast<std::streamoff>(pos));
    out.data.resize(std::min<uint64_t>(max_bytes, end - pos));
    from->read(out.data.data(), static_cast<std::streamsize>(out.data.size()));
    out.data.resize(static_cast<size_t>(from->gcount()));
    out.next_offset = offset + out.data.size();
    return out;
  }
}

std::optional<process_end> read_process_end(const std::string& dir) {
  std::ifstream in{dir + "/exit"};
  if (!in)
    return std::nullopt;
  std::string kind;
  int value = 0;
  if (!(in >> kind >> value))
    return std::nullopt;
  process_end out;
  if (kind == "signal") {
    out.signal = value;
    out.exit_code = 128 + value;
  } else {
    out.exit_code = value;
  }
  return out;
}

std::optional<proc_stat> read_proc_stat(pid_t pid, const std::string& proc_root) {
  if (pid <= 0)
    return std::nullopt;
  auto root = proc_root.empty() || proc_root == "/" ? std::string{} : proc_root;
  std::ifstream in{root + "/proc/" + std::to_string(pid) + "/stat"};
  if (!in)
    return std::nullopt;
  std::string line;
  std::getline(in, line);
  auto close = line.rfind(')');
  if (close == std::string::npos)
    return std::nullopt;
  std::istringstream rest{line.substr(close + 1)};
  std::string field;
  proc_stat out;
  out.pid = pid;
  // Field 3 (state) is the first after the name; field 22 is the 20th.
  try {
    for (int i = 3; i <= 22; ++i) {
      if (!(rest >> field))
        return std::nullopt;
      if (i == 3 && (field == "Z" || field == "X" || field == "x"))
        return std::nullopt;
      if (i == 4)
        out.ppid = static_cast<pid_t>(std::stol(field));
      else if (i == 5)
        out.pgid = static_cast<pid_t>(std::stol(field));
      else if (i == 6)
        out.sid = static_cast<pid_t>(std::stol(field));
    }
    out.start_ticks = std::stoull(field);
  } catch (...) {
    return std::nullopt;
  }
  return out;
}

uint64_t process_start_ticks(pid_t pid, const std::string& proc_root) {
  auto st = read_proc_stat(pid, proc_root);
  return st ? st->start_ticks : 0;
}

bool process_alive(pid_t pid, uint64_t start_ticks, const std::string& proc_root) {
  auto now = process_start_ticks(pid, proc_root);
  if (now == 0)
    return false;
  return start_ticks == 0 || now == start_ticks;
}

void signal_process(pid_t pid, int sig, bool group) {
  if (pid <= 0)
    return;
  ::kill(group ? -pid : pid, sig);
  if (group)
    ::kill(pid, sig);  // in case it left its group
}

std::optional<std::string> runc_memory_cgroup(const std::string& runc_root,
                                              const std::string& id) {
  std::ifstream in{runc_root + "/" + id + "/state.json"};
  if (!in)
    return std::nullopt;
  auto state = nlohmann::json::parse(in, nullptr, false);
  if (state.is_discarded() || !state.contains("cgroup_paths")
      || !state["cgroup_paths"].is_object())
    return std::nullopt;
  const auto& paths = state["cgroup_paths"];
  // "memory" first: on a hybrid host "" is the unified hierarchy without
  // the memory controller.
  for (const char* key : {"memory", ""})
    if (paths.contains(key) && paths[key].is_string() && !paths[key].get<std::string>().empty())
      return paths[key].get<std::string>();
  return std::nullopt;
}

std::optional<uint64_t> cgroup_oom_kills(const std::string& cgroup_dir,
                                         const std::string& root) {
  auto base = (root.empty() || root == "/" ? std::string{} : root) + cgroup_dir;
  for (const char* file : {"/memory.events", "/memory.oom_control"}) {
    std::ifstream in{base + file};
    std::string key;
    uint64_t value = 0;
    while (in >> key >> value)
      if (key == "oom_kill")
        return value;
  }
  return std::nullopt;
}

void reap_child(pid_t shim_pid) {
  if (shim_pid > 0)
    ::waitpid(shim_pid, nullptr, WNOHANG);
}

caf::expected<int> parse_signal(const std::string& text) {
  static const std::map<std::string, int> names = {
    {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"STOP", SIGSTOP},
    {"CONT", SIGCONT}, {"WINCH", SIGWINCH}, {"PWR", SIGPWR}, {"ABRT", SIGABRT},
  };
  auto bad = [&] {
    return caf::make_error(ec::invalid_request,
                           "'" + text + "' is not a signal (use SIGTERM, TERM or 15)");
  };
  if (text.empty())
    return bad();
  std::string t = text;
  for (auto& c : t)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (t.rfind("SIG", 0) == 0)
    t = t.substr(3);
  if (std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    if (t.size() > 3)
      return bad();
    int n = std::stoi(t);
    if (n <= 0 || n >= NSIG)
      return bad();
    return n;
  }
  if (auto i = names.find(t); i != names.end())
    return i->second;
  if (t.rfind("RTMIN+", 0) == 0 && t.size() > 6) {
    auto n = std::atoi(t.c_str() + 6);
    if (SIGRTMIN + n < SIGRTMAX)
      return SIGRTMIN + n;
  }
  return bad();
}

} // namespace astraeus
