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

namespace {

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

} // namespace

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
  for (int* fd : {&log_fd, &null_fd, &pipe_fds[0], &pipe_fds[1], &out_fds[0], &out_fds[1]})
    *fd = above_std(*fd);
  log_pump pump{log_path.c_str(), rotated_path.c_str(), start_path.c_str(), start_tmp.c_str(),
                what.log_max_bytes};
  static const char exec_failed[] = "astraeus: cannot execute the worker's command\n";
  const auto masks = placement_masks_of(what);  // before the fork
  pid_t shim = ::fork();
  if (shim < 0) {
    auto why = std::string{std::strerror(errno)};
    for (int fd : {log_fd, null_fd, pipe_fds[0], pipe_fds[1], out_fds[0], out_fds[1]})
      ::close(fd);
    return caf::make_error(ec::store_failure, "cannot fork the worker's shim: " + why);
  }
  if (shim == 0) {
    // The shim: a session of its own, outlives the agent.
    ::setsid();
    reset_signals();
    ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::dup2(pipe_fds[1], 3);
    ::dup2(out_fds[0], 4);
    ::dup2(out_fds[1], 5);
    close_from(6);
    pid_t worker = ::fork();
    if (worker == 0) {
      // stdout and stderr: the pipe to the shim.
      ::dup2(5, 1);
      ::dup2(5, 2);
      ::close(3);
      ::close(4);
      ::close(5);
      ::setpgid(0, 0);
      for (const auto& [resource, limit] : what.rlimits)
        ::setrlimit(resource, &limit);
      apply_placement_masks(masks);
      if (::chdir(cwd.c_str()) != 0)
        ::_exit(126);
      ::execve(program.c_str(), argv.data(), envp.data());
      ssize_t ignored = ::write(2, exec_failed, sizeof(exec_failed) - 1);
      (void)ignored;
      ::_exit(127);
    }
    ::close(5);
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
          pump.write_all(buf, static_cast<size_t>(n));
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
      if (::waitpid(worker, &status, WNOHANG) == worker)
        ended = true;
    }
    ::close(4);
    while (!ended && ::waitpid(worker, &status, 0) < 0 && errno == EINTR) {
    }
    // As when a container's first process ends: whatever the worker left
    // running in its process group ends with it.
    ::kill(-worker, SIGKILL);
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
    int fd = ::open(exit_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0640);
    if (fd >= 0) {
      ignored = ::write(fd, text, n);
      ::fsync(fd);
      ::close(fd);
      ::rename(exit_tmp.c_str(), exit_path.c_str());
    }
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  ::close(out_fds[0]);
  ::close(out_fds[1]);
  ::close(log_fd);
  ::close(null_fd);
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

uint64_t process_start_ticks(pid_t pid, const std::string& proc_root) {
  if (pid <= 0)
    return 0;
  auto root = proc_root.empty() || proc_root == "/" ? std::string{} : proc_root;
  std::ifstream in{root + "/proc/" + std::to_string(pid) + "/stat"};
  if (!in)
    return 0;
  std::string line;
  std::getline(in, line);
  auto close = line.rfind(')');
  if (close == std::string::npos)
    return 0;
  std::istringstream rest{line.substr(close + 1)};
  std::string field;
  // Field 3 (state) is the first after the name; field 22 is the 20th.
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field))
      return 0;
    if (i == 3 && (field == "Z" || field == "X" || field == "x"))
      return 0;
  }
  try {
    return std::stoull(field);
  } catch (...) {
    return 0;
  }
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
