#pragma once
/// @file
/// Helpers for the real-process integration tests: temporary folders, free
/// ports, child processes (always killed by their owner), running a command
/// to completion, raw gate sockets, and bounded polling.

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>

#include "messages/error.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/gate_client.hpp"
#include "runtime/gate/secure_channel.hpp"

extern char** environ;

namespace astraeus::itest {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// Path of a built program (astraeus-controller, astraeus-agent, astra, astraeus).
inline std::string program(const std::string& name) {
  return (fs::path{ASTRAEUS_BIN_DIR} / name).string();
}

inline std::string read_text(const fs::path& path) {
  std::ifstream in{path, std::ios::binary};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << text;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

inline double seconds_since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

/// SIGKILLs every process whose command line names `dir` (other than this
/// one), and each one's children first: what a test leaves running under
/// its folder once it has killed its agents, above all a worker's shim
/// (the agent's fork that keeps a worker's output and outlives an agent
/// killed with SIGKILL, by design) and the worker under it.
inline void kill_processes_naming(const fs::path& dir) {
  const auto needle = dir.string();
  std::vector<pid_t> named;
  std::vector<std::pair<pid_t, pid_t>> parent_of;  // (pid, ppid)
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    auto name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit))
      continue;
    auto pid = static_cast<pid_t>(std::stol(name));
    std::ifstream cmd{e.path() / "cmdline", std::ios::binary};
    std::string line{std::istreambuf_iterator<char>{cmd}, {}};
    std::replace(line.begin(), line.end(), '\0', ' ');
    if (pid != ::getpid() && line.find(needle) != std::string::npos)
      named.push_back(pid);
    std::ifstream stat{e.path() / "stat"};
    std::string text{std::istreambuf_iterator<char>{stat}, {}};
    auto close = text.rfind(')');
    if (close != std::string::npos) {
      std::istringstream rest{text.substr(close + 1)};
      char state = 0;
      long ppid = 0;
      if (rest >> state >> ppid)
        parent_of.emplace_back(pid, static_cast<pid_t>(ppid));
    }
  }
  for (auto pid : named) {
    for (const auto& [child, parent] : parent_of)
      if (parent == pid)
        ::kill(child, SIGKILL);
    ::kill(pid, SIGKILL);
  }
}

/// A fresh folder under $TMPDIR (or /tmp), removed with everything in it
/// (and every process still naming it killed first).
class temp_dir {
public:
  explicit temp_dir(const std::string& tag = "astraeus-itest") {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string{base && *base ? base : "/tmp"} + "/" + tag
                       + "-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr)
      throw std::runtime_error("mkdtemp failed: " + std::string{std::strerror(errno)});
    path_ = fs::path{buf.data()};
  }
  ~temp_dir() {
    kill_processes_naming(path_);
    std::error_code err;
    fs::remove_all(path_, err);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const fs::path& path() const {
    return path_;
  }
  fs::path operator/(const std::string& sub) const {
    return path_ / sub;
  }

private:
  fs::path path_;
};

/// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0).
inline uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    socklen_t len = sizeof(addr);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

/// The environment for children: ours without ASTRAEUS_* variables, so a
/// developer's settings cannot change what the tests see.
inline std::vector<std::string> child_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, "ASTRAEUS_", 9) != 0)
      out.emplace_back(*e);
  return out;
}

/// One child process with stdout and stderr in files. Killed (SIGKILL to
/// its process group) and reaped when destroyed, and it dies with the test
/// binary (PR_SET_PDEATHSIG) should that be killed.
class process {
public:
  /// `extra_env`: "NAME=value" entries added to the child's environment
  /// (after the ASTRAEUS_* variables of ours were left out), e.g. the NVML
  /// stand-in's fixture.
  process(std::vector<std::string> argv, fs::path out_file, fs::path err_file,
          std::vector<std::string> extra_env = {})
    : argv_(std::move(argv)),
      extra_env_(std::move(extra_env)),
      out_file_(std::move(out_file)),
      err_file_(std::move(err_file)) {
    keep_off_the_default_api_port();
    start();
  }
  ~process() {
    kill_now();
  }
  process(const process&) = delete;
  process& operator=(const process&) = delete;

  pid_t pid() const {
    return pid_;
  }
  const fs::path& out_file() const {
    return out_file_;
  }
  const fs::path& err_file() const {
    return err_file_;
  }
  std::string out() const {
    return read_text(out_file_);
  }
  std::string err() const {
    return read_text(err_file_);
  }
  std::string command_line() const {
    std::string s;
    for (const auto& a : argv_)
      s += (s.empty() ? "" : " ") + a;
    return s;
  }

  /// True while the child has not exited (reaps it when it has).
  bool running() {
    if (pid_ <= 0 || exited_)
      return false;
    int status = 0;
    auto rc = ::waitpid(pid_, &status, WNOHANG);
    if (rc == pid_) {
      record(status);
      return false;
    }
    if (rc < 0 && errno == ECHILD)
      exited_ = true; // reaped elsewhere; the exit code is unknown
    return rc == 0;
  }

  /// Waits up to `timeout` for the child to exit; its exit code, or 128 +
  /// signal number, or nullopt when it is still running.
  std::optional<int> wait_exit(milliseconds timeout) {
    auto deadline = steady::now() + timeout;
    for (;;) {
      if (!running())
        return exit_code_;
      if (steady::now() >= deadline)
        return std::nullopt;
      std::this_thread::sleep_for(10ms);
    }
  }

  /// Sends `sig` to the child (not reaping it).
  void signal(int sig) {
    if (pid_ > 0 && running())
      ::kill(pid_, sig);
  }

  /// SIGKILL (to the child's process group) and reap, at once.
  void kill_now() {
    if (pid_ <= 0 || exited_)
      return;
    if (running()) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      record(status);
    }
  }

  /// The exit code once exited (128 + signal for a signal).
  std::optional<int> exit_code() const {
    return exit_code_;
  }

private:
  void record(int status) {
    if (WIFEXITED(status))
      exit_code_ = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
      exit_code_ = 128 + WTERMSIG(status);
    exited_ = true; // never signal or wait for this pid again
  }

  void start() {
    // Everything the child needs is prepared before fork: after it only
    // async-signal-safe calls are made.
    std::vector<char*> args;
    for (auto& a : argv_)
      args.push_back(a.data());
    args.push_back(nullptr);
    env_ = child_environment();
    // An addition names a variable the child would inherit (PATH): it
    // replaces it (getenv finds the first).
    for (const auto& add : extra_env_) {
      auto name = add.substr(0, add.find('=') + 1);
      env_.erase(std::remove_if(env_.begin(), env_.end(),
                                [&](const std::string& e) { return e.rfind(name, 0) == 0; }),
                 env_.end());
    }
    env_.insert(env_.end(), extra_env_.begin(), extra_env_.end());
    std::vector<char*> envp;
    for (auto& e : env_)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    auto out_path = out_file_.string();
    auto err_path = err_file_.string();
    int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (out_fd < 0 || err_fd < 0 || null_fd < 0)
      throw std::runtime_error("cannot open the child's output files");
    auto parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0)
      throw std::runtime_error("fork failed: " + std::string{std::strerror(errno)});
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent)
        ::_exit(127);
      // Signals blocked or ignored in the test binary must not leak into
      // the child (the programs sigwait for SIGTERM themselves).
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::signal(SIGPIPE, SIG_DFL);
      ::dup2(null_fd, 0);
      ::dup2(out_fd, 1);
      ::dup2(err_fd, 2);
      ::execve(args[0], args.data(), envp.data());
      static const char msg[] = "exec failed\n";
      (void) !::write(2, msg, sizeof(msg) - 1);
      ::_exit(127);
    }
    ::setpgid(pid, pid); // also from here, so kill(-pid) works at once
    ::close(out_fd);
    ::close(err_fd);
    ::close(null_fd);
    pid_ = pid;
  }

  // A controller started without an API address of the test's own serves
  // it on a free loopback port: the default (0.0.0.0:7451) is the one
  // `astraeus dev` of the README's first command holds on this machine, and
  // a test run beside it would fail to start every controller.
  void keep_off_the_default_api_port() {
    if (argv_.empty() || fs::path{argv_[0]}.filename() != "astraeus-controller")
      return;
    for (const auto& a : argv_)
      if (a.find("api.listen") != std::string::npos || a == "--api-listen")
        return;
    for (const auto& e : extra_env_)
      if (e.rfind("ASTRAEUS_API_LISTEN=", 0) == 0)
        return;
    argv_.push_back("--set");
    argv_.push_back("api.listen=127.0.0.1:0");
  }

  std::vector<std::string> argv_;
  std::vector<std::string> extra_env_;
  std::vector<std::string> env_;
  fs::path out_file_;
  fs::path err_file_;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::optional<int> exit_code_;
};

/// Starts `argv` (environment additions `env`) as a child kept in `kept`,
/// so its owner kills it; its output goes to <dir>/<label><n>.out and .err.
inline process* spawn_kept(std::vector<std::unique_ptr<process>>& kept, const fs::path& dir,
                           const std::string& label, std::vector<std::string> argv,
                           std::vector<std::string> env = {}) {
  auto n = std::to_string(kept.size());
  kept.push_back(std::make_unique<process>(std::move(argv), dir / (label + n + ".out"),
                                           dir / (label + n + ".err"), std::move(env)));
  return kept.back().get();
}

/// Kills every process of `kept`; when the test `failed`, first prints each
/// one's command line and the last 6,000 bytes of its stderr.
inline void end_processes(std::vector<std::unique_ptr<process>>& kept, bool failed) {
  for (auto& p : kept) {
    if (failed) {
      auto err = p->err();
      std::fprintf(stderr, "---- %s\n---- stderr:\n%s\n", p->command_line().c_str(),
                   err.substr(err.size() > 6000 ? err.size() - 6000 : 0).c_str());
    }
    p->kill_now();
  }
}

/// Makes the FIFO at `path` that stands in for /dev/kmsg (and ignores
/// SIGPIPE: a write whose reader went away must fail, not kill the test).
/// Returns why it could not, or "".
inline std::string make_kmsg_fifo(const fs::path& path) {
  ::signal(SIGPIPE, SIG_IGN);
  if (::mkfifo(path.c_str(), 0600) != 0)
    return "mkfifo " + path.string() + ": " + std::strerror(errno);
  return {};
}

/// What a finished command printed and returned.
struct command_result {
  int rc = -1;            ///< exit code; 128+signal; -1 = had to be killed
  std::string out;
  std::string err;
  bool timed_out = false;
};

/// Runs `argv` to completion (killed after `timeout`), output in `dir`.
inline command_result run_command(const std::vector<std::string>& argv,
                                  const fs::path& dir,
                                  milliseconds timeout = 15s) {
  static int counter = 0;
  auto stem = dir / ("cmd-" + std::to_string(::getpid()) + "-"
                     + std::to_string(counter++));
  auto out_file = fs::path{stem.string() + ".out"};
  auto err_file = fs::path{stem.string() + ".err"};
  command_result res;
  {
    process p{argv, out_file, err_file};
    auto rc = p.wait_exit(timeout);
    if (!rc) {
      res.timed_out = true;
      p.kill_now();
      res.rc = -1;
    } else {
      res.rc = *rc;
    }
  }
  res.out = read_text(out_file);
  res.err = read_text(err_file);
  std::error_code ec;
  fs::remove(out_file, ec);
  fs::remove(err_file, ec);
  return res;
}

/// Force-deletes every runc container under `root` (an agent's
/// `<data-dir>/runc`): a test that ends by SIGKILLing its agent leaves the
/// agent's workers running by design (they outlive an agent crash), and
/// they must not outlive the test (a worker that ignores SIGTERM would go
/// on for the rest of the suite).
inline void delete_runc_containers(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    return;
  std::string runc = fs::exists("/usr/sbin/runc") ? "/usr/sbin/runc" : "/usr/bin/runc";
  std::vector<std::string> ids;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.is_directory(ec))
      ids.push_back(e.path().filename().string());
  for (const auto& id : ids)
    run_command({runc, "--root", root.string(), "delete", "--force", id}, root.parent_path());
}

/// Polls `pred` every `every` until it holds or `timeout` passes.
inline bool wait_until(const std::function<bool()>& pred, milliseconds timeout,
                       milliseconds every = 50ms) {
  auto deadline = steady::now() + timeout;
  for (;;) {
    if (pred())
      return true;
    if (steady::now() >= deadline)
      return false;
    std::this_thread::sleep_for(every);
  }
}

// -- the gate, as a well-behaved client ---------------------------------------

inline gate_address loopback(uint16_t port) {
  return gate_address{"127.0.0.1", port};
}

/// The keys folder of a controller whose store is `store_dir` (the default
/// keys.path): gate.pub, owner-token.
inline fs::path keys_dir_of(const std::string& store_dir) {
  return fs::path{store_dir + "-keys"};
}

/// The owner's credentials for the controller on each port, as the tests
/// learnt them from its keys folder (`use_owner_credentials`).
inline std::map<uint16_t, gate_credentials>& credentials_by_port() {
  static std::map<uint16_t, gate_credentials> all;
  return all;
}

/// Reads the first owner API token and the gate's key a controller with
/// keys folder `keys` wrote, and uses them for every later call to `port`.
/// False while the files are not there yet.
inline bool use_owner_credentials(uint16_t port, const fs::path& keys) {
  auto token = read_text(keys / "owner-token");
  auto pub = read_text(keys / "gate.pub");
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back())))
    token.pop_back();
  if (token.empty() || pub.size() < 64)
    return false;
  auto key = parse_public_key(pub, "gate.pub");
  if (!key)
    return false;
  gate_credentials c;
  c.api_token = token;
  c.pinned = *key;
  credentials_by_port()[port] = c;
  return true;
}

/// A controller started by start_api_controller: its process, its HTTP
/// API's port (0: it did not come up) and the owner API token.
struct api_controller {
  process* proc = nullptr;
  uint16_t api_port = 0;
  std::string owner_token;
};

/// Starts the controller (gate on `gate_port`, store in <dir>/controller,
/// `extra` flags) with its HTTP API on 127.0.0.1, any port, plain HTTP when
/// `plain` (as `astraeus dev`; true: the tests' usual), and waits up to
/// 10 s for the API's line and the owner credentials.
inline api_controller start_api_controller(std::vector<std::unique_ptr<process>>& kept,
                                           const fs::path& dir, uint16_t gate_port,
                                           std::vector<std::string> extra, bool plain) {
  std::vector<std::string> argv{program("astraeus-controller"), "--port",
                                std::to_string(gate_port), "--data-dir",
                                (dir / "controller").string(), "--set", "api.view_refresh=50ms"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  std::vector<std::string> env{"ASTRAEUS_API_LISTEN=127.0.0.1:0"};
  if (plain)
    env.push_back("ASTRAEUS_API_PLAIN_HTTP=true");
  api_controller out;
  out.proc = spawn_kept(kept, dir, "controller", argv, env);
  std::regex line{R"(HTTP API on https?:[/][/]127\.0\.0\.1:(\d+))"};
  std::smatch m;
  std::string err;
  bool ok = wait_until(
    [&] {
      err = out.proc->err();
      return !out.proc->running() || std::regex_search(err, m, line);
    },
    10s);
  if (!ok || !out.proc->running())
    return out;
  auto keys = keys_dir_of((dir / "controller").string());
  out.owner_token = read_text(keys / "owner-token");
  while (!out.owner_token.empty()
         && std::isspace(static_cast<unsigned char>(out.owner_token.back())))
    out.owner_token.pop_back();
  if (use_owner_credentials(gate_port, keys))
    out.api_port = static_cast<uint16_t>(std::stoi(m[1].str()));
  return out;
}

/// The owner's credentials for `port` (empty when not learnt).
inline gate_credentials owner_credentials(uint16_t port) {
  auto i = credentials_by_port().find(port);
  return i == credentials_by_port().end() ? gate_credentials{} : i->second;
}

/// One request through a fresh CLI connection, as the owner.
inline caf::expected<v1::Response> gate_call(uint16_t port, v1::Request req,
                                             milliseconds timeout = 3s) {
  auto client = gate_client::connect_cli(loopback(port), timeout,
                                         owner_credentials(port));
  if (!client)
    return client.error();
  return client->call(std::move(req), timeout);
}

/// A fresh join token from the controller on `port` (as the owner), with
/// `labels`; empty when it cannot be had.
inline std::string mint_join_token(uint16_t port,
                                   std::map<std::string, std::string> labels = {},
                                   uint64_t ttl_seconds = 0) {
  v1::Request req;
  auto* body = req.mutable_create_join_token();
  body->set_ttl_seconds(ttl_seconds);
  for (auto& [k, v] : labels)
    (*body->mutable_labels())[k] = v;
  auto resp = gate_call(port, std::move(req));
  if (!resp || resp->has_error() || !resp->has_join_token())
    return {};
  return resp->join_token().token();
}

/// The next refusal on `client`, skipping what the controller sends an
/// agent meanwhile (worker orders); an error when none comes within
/// `timeout` or the connection closes first.
inline caf::expected<v1::Refusal> next_refusal(gate_client& client,
                                               milliseconds timeout = 2s) {
  auto deadline = steady::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - steady::now());
    if (left.count() <= 0)
      return caf::make_error(ec::timeout, "no refusal");
    auto frame = client.receive(left);
    if (!frame)
      return frame.error();
    if (frame->has_refusal())
      return frame->refusal();
  }
}

/// Whether the controller ended the session on `client` within `timeout`
/// (frames it sends before closing are skipped).
inline bool session_ended(gate_client& client, milliseconds timeout = 2s) {
  auto deadline = steady::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - steady::now());
    if (left.count() <= 0)
      return false;
    auto frame = client.receive(left);
    if (!frame)
      return frame.error() != ec::timeout;
  }
}

/// The flags that let a new agent enrol with the controller on `port`: a
/// join token in a file under `dir` (named after `name`), and the gate's
/// key to pin. Empty when no token could be minted.
inline std::vector<std::string> enrol_flags(uint16_t port, const fs::path& dir,
                                            const std::string& name) {
  auto token = mint_join_token(port);
  if (token.empty())
    return {};
  static int counter = 0;
  auto file = dir / ("join-token-" + name + "-" + std::to_string(counter++));
  write_text(file, token + "\n");
  auto creds = owner_credentials(port);
  std::vector<std::string> out{"--token-file", file.string()};
  if (creds.pinned) {
    out.push_back("--controller-key");
    out.push_back(to_hex(*creds.pinned));
  }
  return out;
}

/// Every GPU the controller on `port` knows (through the gate, cheap for
/// polling); empty when it cannot be asked.
inline std::vector<v1::GpuView> list_gpu_views(uint16_t port) {
  v1::Request req;
  req.mutable_list_gpus();
  auto resp = gate_call(port, std::move(req));
  if (!resp || resp->has_error() || !resp->has_gpus())
    return {};
  return {resp->gpus().gpus().begin(), resp->gpus().gpus().end()};
}

/// Every machine the controller knows; nullopt when it cannot be asked.
inline std::optional<std::vector<v1::MachineView>> list_machines(uint16_t port) {
  v1::Request req;
  req.mutable_list_machines();
  auto resp = gate_call(port, std::move(req));
  if (!resp || resp->has_error() || !resp->has_machines())
    return std::nullopt;
  return std::vector<v1::MachineView>(resp->machines().machines().begin(),
                                      resp->machines().machines().end());
}

/// One machine; nullopt when it is unknown or the controller cannot be asked.
inline std::optional<v1::MachineView> get_machine(uint16_t port,
                                                  const std::string& name) {
  v1::Request req;
  req.mutable_get_machine()->set_name(name);
  auto resp = gate_call(port, std::move(req));
  if (!resp || resp->has_error() || !resp->has_machine())
    return std::nullopt;
  return resp->machine();
}

inline bool machine_in_state(uint16_t port, const std::string& name,
                             v1::Machine::State state) {
  auto m = get_machine(port, name);
  return m && m->state() == state;
}

// -- the gate, as a raw socket ------------------------------------------------

/// A plain TCP connection to 127.0.0.1:port, for sending whatever we like.
class raw_socket {
public:
  explicit raw_socket(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (fd_ >= 0
        && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
    if (fd_ >= 0) {
      int one = 1;
      ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
  }
  ~raw_socket() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  raw_socket(const raw_socket&) = delete;
  raw_socket& operator=(const raw_socket&) = delete;

  bool connected() const {
    return fd_ >= 0;
  }

  bool send_bytes(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      auto n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR)
          continue;
        return false;
      }
      off += static_cast<size_t>(n);
    }
    return true;
  }

  bool send_frame(const v1::Frame& frame) {
    return send_bytes(encode_frame(frame));
  }

  /// Reads until the peer closes (EOF or reset) or `timeout` passes.
  /// Returns true when it closed; everything read lands in `received`.
  bool wait_closed(milliseconds timeout) {
    auto deadline = steady::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline - steady::now());
      if (left.count() <= 0)
        return false;
      pollfd p{fd_, POLLIN, 0};
      auto rc = ::poll(&p, 1, static_cast<int>(left.count()));
      if (rc < 0 && errno == EINTR)
        continue;
      if (rc <= 0)
        return false;
      char buf[4096];
      auto n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0)
        return true;
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN)
          continue;
        return true; // reset: closed as well
      }
      received.append(buf, static_cast<size_t>(n));
    }
  }

  /// The frames in what was received (stops at the first undecodable one).
  std::vector<v1::Frame> frames() const {
    frame_reader reader;
    reader.feed(received.data(), received.size());
    std::vector<v1::Frame> out;
    for (;;) {
      auto next = reader.next();
      if (!next || !*next)
        return out;
      out.push_back(std::move(**next));
    }
  }

  std::string received;

private:
  int fd_ = -1;
};

/// The bytes of a 4-byte big-endian length prefix.
inline std::string length_prefix(uint32_t n) {
  std::string out(4, '\0');
  out[0] = static_cast<char>((n >> 24) & 0xff);
  out[1] = static_cast<char>((n >> 16) & 0xff);
  out[2] = static_cast<char>((n >> 8) & 0xff);
  out[3] = static_cast<char>(n & 0xff);
  return out;
}

/// Number of CPUs listed in /sys/devices/system/cpu/online ("0-3,5,7-8").
inline unsigned online_cpus() {
  auto text = read_text("/sys/devices/system/cpu/online");
  unsigned count = 0;
  std::stringstream in{text};
  std::string part;
  while (std::getline(in, part, ',')) {
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.back())))
      part.pop_back();
    if (part.empty())
      continue;
    auto dash = part.find('-');
    if (dash == std::string::npos) {
      ++count;
    } else {
      auto lo = std::stoul(part.substr(0, dash));
      auto hi = std::stoul(part.substr(dash + 1));
      count += static_cast<unsigned>(hi - lo + 1);
    }
  }
  return count;
}

/// Whether the controller on `port` with its store in `store` answers its
/// owner within `timeout` (its owner credentials are learnt on the way).
inline bool controller_answers_owner(uint16_t port, const std::string& store,
                                     milliseconds timeout = 10s) {
  auto keys = keys_dir_of(store);
  return wait_until(
    [&] {
      return use_owner_credentials(port, keys)
             && static_cast<bool>(
               gate_client::connect_cli(loopback(port), 300ms, owner_credentials(port)));
    },
    timeout);
}

/// `astra args...` as the owner of the controller on `port` whose store is
/// `store`; its output files in `dir`.
inline command_result astra_as_owner(uint16_t port, const std::string& store,
                                     const fs::path& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv{program("astra"), "--addr", "127.0.0.1:" + std::to_string(port),
                                "--token-file", (keys_dir_of(store) / "owner-token").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, dir);
}

} // namespace astraeus::itest
