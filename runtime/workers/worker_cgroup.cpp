#include "runtime/workers/worker_cgroup.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "messages/error.hpp"

namespace astraeus {

namespace fs = std::filesystem;

namespace {

std::string prefix(const std::string& root) {
  return root.empty() || root == "/" ? std::string{} : root;
}

/// Writes `text` to the existing file `path`; false on failure.
bool write_existing(const std::string& path, const char* text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  auto n = std::strlen(text);
  bool ok = ::write(fd, text, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

} // namespace

std::optional<std::string> cgroup2_mount(const std::string& proc_root) {
  std::ifstream in{prefix(proc_root) + "/proc/self/mountinfo"};
  std::string line;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
    auto dash = line.find(" - ");
    if (dash == std::string::npos)
      continue;
    std::istringstream tail{line.substr(dash + 3)};
    std::string type;
    tail >> type;
    if (type != "cgroup2")
      continue;
    std::istringstream head{line.substr(0, dash)};
    std::string id, parent, dev, root, mount;
    if (head >> id >> parent >> dev >> root >> mount)
      return mount;
  }
  return std::nullopt;
}

std::optional<std::string> own_cgroup2(const std::string& proc_root) {
  std::ifstream in{prefix(proc_root) + "/proc/self/cgroup"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0)
      return line.substr(3);
  return std::nullopt;
}

caf::expected<cgroup_place> prepare_worker_cgroups(const std::string& proc_root,
                                                   const std::string& root) {
  auto mount = cgroup2_mount(proc_root);
  if (!mount)
    return caf::make_error(ec::invalid_config, "the host has no cgroup v2 hierarchy");
  auto own = own_cgroup2(proc_root);
  if (!own)
    return caf::make_error(ec::invalid_config, "this process is in no cgroup v2 cgroup");
  cgroup_place place;
  place.mount = *mount;
  place.parent = (*own == "/" ? std::string{} : *own) + "/astraeus-workers";
  auto dir = cgroup_dir(place, place.parent, root);
  std::error_code err;
  fs::create_directory(dir, err);
  if (err || !fs::exists(dir + "/cgroup.procs", err))
    return caf::make_error(ec::invalid_config,
                           "cannot create the workers' cgroup " + dir + ": "
                             + (err ? err.message() : std::string{"not a cgroup"}));
  return place;
}

std::string cgroup_dir(const cgroup_place& place, const std::string& cgroup,
                       const std::string& root) {
  return prefix(root) + place.mount + cgroup;
}

caf::expected<std::string> create_worker_cgroup(const cgroup_place& place,
                                                const std::string& name,
                                                const std::string& root) {
  auto rel = place.parent + "/" + name;
  auto dir = cgroup_dir(place, rel, root);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return caf::make_error(ec::store_failure,
                           "cannot create the worker's cgroup " + dir + ": " + std::strerror(errno));
  return rel;
}

std::vector<pid_t> cgroup_pids(const std::string& dir) {
  std::vector<pid_t> out;
  std::ifstream in{dir + "/cgroup.procs"};
  long pid;
  while (in >> pid)
    if (pid > 0)
      out.push_back(static_cast<pid_t>(pid));
  return out;
}

void kill_cgroup(const std::string& dir) {
  if (write_existing(dir + "/cgroup.kill", "1"))
    return;
  // Before cgroup.kill (kernel < 5.14): freeze, kill what is there, thaw so
  // the kills take effect, and again for what was forked meanwhile.
  bool frozen = write_existing(dir + "/cgroup.freeze", "1");
  for (int round = 0; round < 5; ++round) {
    auto pids = cgroup_pids(dir);
    if (pids.empty())
      break;
    for (auto pid : pids)
      ::kill(pid, SIGKILL);
  }
  if (frozen)
    write_existing(dir + "/cgroup.freeze", "0");
}

bool remove_cgroup(const std::string& dir) {
  if (::rmdir(dir.c_str()) == 0 || errno == ENOENT)
    return true;
  return false;
}

} // namespace astraeus
