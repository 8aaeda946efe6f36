#include "runtime/process/program_run.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <system_error>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#if __has_include(<linux/close_range.h>)
#include <linux/close_range.h>
#endif

#include "runtime/host/sysfs_text.hpp"

extern char** environ;

namespace astraeus {

namespace {

using clock_type = std::chrono::steady_clock;



void close_fd(int& fd) {
  if (fd >= 0)
    ::close(fd);
  fd = -1;
}

}  // namespace

// `program` itself when it holds a '/', else the first executable
// $PATH/<program>; empty when none.
std::string resolve_program(const std::string& program) {
  if (program.empty() || program.find('/') != std::string::npos)
    return program;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (auto dir : split(dirs, ':')) {
    std::string candidate = (dir.empty() ? std::string{"."} : std::string{dir}) + "/" + program;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)
        && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return {};
}

namespace {

int remaining_ms(clock_type::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
  return static_cast<int>(std::clamp<long long>(left.count(), 0, 1 << 30));
}

// Whether the child has exited, without reaping it (it stays a zombie, so
// its pid, and so its process group id, cannot be reused yet).
bool has_exited(pid_t pid) {
  siginfo_t info{};
  while (true) {
    int rc = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (rc == 0)
      return info.si_pid == pid;
    if (errno == EINTR)
      continue;
    return true;  // ECHILD: reaped elsewhere (SIGCHLD ignored); nothing to wait for
  }
}

// Reaps `pid` and fills exit status into `outcome`.
void reap(pid_t pid, run_outcome& outcome) {
  int status = 0;
  pid_t rc;
  do {
    rc = ::waitpid(pid, &status, 0);
  } while (rc < 0 && errno == EINTR);
  if (rc == pid) {
    if (WIFEXITED(status)) {
      outcome.exited = true;
      outcome.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      outcome.signal = WTERMSIG(status);
    }
  } else {
    // ECHILD: SIGCHLD is ignored and the kernel reaped it; status unknown.
    outcome.exited = true;
    outcome.exit_code = 0;
  }
}

// Kills the child's process group (the child and anything it started), then
// reaps the child: within `grace`, else on a detached thread, so a process
// stuck in the kernel (uninterruptible sleep in the driver) does not hold
// the caller.
void kill_and_reap(pid_t pid, std::chrono::milliseconds grace, run_outcome& outcome) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  auto until = clock_type::now() + grace;
  while (!has_exited(pid)) {
    if (clock_type::now() >= until) {
      try {
        std::thread([pid] {
          int status = 0;
          while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
          }
        }).detach();
      } catch (const std::system_error&) {
        // No thread to spare: the zombie stays until the agent exits.
      }
      return;
    }
    ::usleep(2000);
  }
  reap(pid, outcome);
}

}  // namespace

run_outcome run_program(const std::string& program, const std::vector<std::string>& args,
                        clock_type::time_point deadline, std::size_t max_output_bytes) {
  run_outcome outcome;
  std::string path = resolve_program(program);
  if (path.empty()) {
    outcome.error = program.empty() ? "no program given" : "not found in PATH";
    return outcome;
  }

  // Everything the child needs is prepared before fork: after fork in a
  // multithreaded process only async-signal-safe calls are allowed.
  std::vector<std::string> argv_storage;
  argv_storage.push_back(path);
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : argv_storage)
    argv.push_back(arg.data());
  argv.push_back(nullptr);

  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, exec_pipe[2] = {-1, -1};
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto cleanup = [&] {
    for (int* fd : {&out_pipe[0], &out_pipe[1], &err_pipe[0], &err_pipe[1], &exec_pipe[0],
                    &exec_pipe[1], &devnull})
      close_fd(*fd);
  };
  if (devnull < 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0
      || ::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    outcome.error = std::string{"cannot create pipes: "} + std::strerror(errno);
    cleanup();
    return outcome;
  }

  pid_t pid = ::fork();
  if (pid < 0) {
    outcome.error = std::string{"fork: "} + std::strerror(errno);
    cleanup();
    return outcome;
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGPIPE, &dfl, nullptr);
    ::dup2(devnull, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
#if defined(SYS_close_range) && defined(CLOSE_RANGE_CLOEXEC)
    // Descriptors the rest of the agent opened without O_CLOEXEC must not
    // leak into the program.
    ::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
#endif
    ::execve(argv[0], argv.data(), environ);
    int code = errno;
    ssize_t ignored = ::write(exec_pipe[1], &code, sizeof code);
    (void)ignored;
    ::_exit(127);
  }

  // Parent. Also set the group here: whichever of the two runs first wins,
  // and kill(-pid) below must not hit our own group.
  ::setpgid(pid, pid);
  close_fd(out_pipe[1]);
  close_fd(err_pipe[1]);
  close_fd(exec_pipe[1]);
  close_fd(devnull);

  // exec_pipe closes at a successful exec (O_CLOEXEC), or carries errno.
  {
    pollfd p{exec_pipe[0], POLLIN, 0};
    int rc;
    do {
      rc = ::poll(&p, 1, remaining_ms(deadline));
    } while (rc < 0 && errno == EINTR);
    if (rc > 0) {
      int code = 0;
      ssize_t n;
      do {
        n = ::read(exec_pipe[0], &code, sizeof code);
      } while (n < 0 && errno == EINTR);
      if (n == static_cast<ssize_t>(sizeof code)) {
        outcome.error = std::string{"cannot run: "} + std::strerror(code);
        reap(pid, outcome);
        cleanup();
        return outcome;
      }
    }
  }
  close_fd(exec_pipe[0]);
  outcome.started = true;

  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  out_pipe[0] = err_pipe[0] = -1;  // owned by fds now
  std::string* sinks[2] = {&outcome.out, &outcome.err};
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    int left = remaining_ms(deadline);
    if (left == 0) {
      outcome.timed_out = true;
      break;
    }
    // Short slices: a process that exited while something it started still
    // holds the pipes open is noticed without waiting for the deadline.
    int rc = ::poll(fds, 2, std::min(left, 50));
    if (rc < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (rc == 0) {
      if (has_exited(pid))
        break;
      continue;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0)
        continue;
      char buf[8192];
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n < 0 && (errno == EINTR || errno == EAGAIN))
        continue;
      if (n <= 0) {
        close_fd(fds[i].fd);
        fds[i].fd = -1;
        continue;
      }
      sinks[i]->append(buf, static_cast<size_t>(n));
      if (outcome.out.size() + outcome.err.size() > max_output_bytes)
        outcome.overflow = true;
    }
    if (outcome.overflow)
      break;
  }

  if (outcome.timed_out || outcome.overflow) {
    kill_and_reap(pid, std::chrono::milliseconds{200}, outcome);
  } else {
    // The pipes are closed (or the program exited with something holding
    // them): wait for the exit within what is left of the deadline.
    while (!has_exited(pid)) {
      if (remaining_ms(deadline) == 0) {
        outcome.timed_out = true;
        break;
      }
      ::usleep(2000);
    }
    if (outcome.timed_out) {
      kill_and_reap(pid, std::chrono::milliseconds{200}, outcome);
    } else {
      ::kill(-pid, SIGKILL);  // anything it left behind; the zombie holds the group id
      reap(pid, outcome);
    }
  }
  close_fd(fds[0].fd);
  close_fd(fds[1].fd);
  cleanup();
  return outcome;
}

}  // namespace astraeus
