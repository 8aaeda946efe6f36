#include "runtime/workers/worker_start.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <system_error>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>

namespace astraeus {

namespace fs = std::filesystem;

std::string new_start_marker(const std::string& worker) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(rng()));
  return worker + "." + hex;
}

bool is_starting(const v1::WorkerProcess& rec) {
  return !rec.has_state_code() && rec.state() == starting_state;
}

void set_starting(v1::WorkerProcess& rec) {
  rec.clear_state_code();
  rec.set_state(starting_state);
}

std::string start_lock_path(const std::string& dir) {
  return dir + "/start.lock";
}

bool start_lock_held(const std::string& dir) {
  int fd = ::open(start_lock_path(dir).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return false;
  bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases ours, if we took it
  return held;
}

std::vector<proc_stat> processes_with_marker(const std::string& marker,
                                             const std::string& proc_root) {
  std::vector<proc_stat> out;
  const auto root = proc_root.empty() || proc_root == "/" ? std::string{} : proc_root;
  const std::string wanted = std::string{worker_start_variable} + "=" + marker;
  std::error_code err;
  for (const auto& entry : fs::directory_iterator{root + "/proc", err}) {
    const auto name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit))
      continue;
    std::ifstream in{entry.path() / "environ", std::ios::binary};
    if (!in)
      continue;
    std::string env{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    // Entries are NUL-terminated: match a whole entry.
    bool found = false;
    for (size_t at = 0; at < env.size() && !found;) {
      auto end = env.find('\0', at);
      if (end == std::string::npos)
        end = env.size();
      found = env.compare(at, end - at, wanted) == 0;
      at = end + 1;
    }
    if (!found)
      continue;
    if (auto st = read_proc_stat(static_cast<pid_t>(std::stol(name)), proc_root))
      out.push_back(*st);
  }
  return out;
}

std::optional<proc_stat> main_of_marked(const std::vector<proc_stat>& marked) {
  std::optional<proc_stat> best;
  for (const auto& p : marked) {
    if (p.pgid != p.pid || p.sid != p.ppid)
      continue;
    if (!best || p.start_ticks < best->start_ticks
        || (p.start_ticks == best->start_ticks && p.pid < best->pid))
      best = p;
  }
  return best;
}

start_resolution resolve_start(const v1::WorkerProcess& rec, const std::string& proc_root) {
  start_resolution out;
  if (!rec.start_marker().empty())
    if (auto main = main_of_marked(processes_with_marker(rec.start_marker(), proc_root))) {
      out.outcome = start_outcome::adopt;
      out.main = *main;
      return out;
    }
  if (start_lock_held(rec.dir())) {
    out.outcome = start_outcome::wait;
    return out;
  }
  std::error_code err;
  out.outcome = fs::exists(fs::path{rec.dir()} / "exit", err) ? start_outcome::ended
                                                             : start_outcome::not_started;
  return out;
}

const char* to_string(start_outcome x) {
  switch (x) {
    case start_outcome::adopt:
      return "adopt";
    case start_outcome::wait:
      return "wait";
    case start_outcome::ended:
      return "ended";
    case start_outcome::not_started:
      return "not started";
  }
  return "?";
}

} // namespace astraeus
