// Real-process integration tests: a controller, agents and the `astra` CLI
// on loopback, each test in its own temporary folder on its own free port.
// Every process a test starts is killed in TearDown, failing or not.

#include <algorithm>
#include <chrono>
#include <csignal>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "integration/cluster_harness.hpp"
#include "messages/error.hpp"

using namespace astraeus;
using namespace astraeus::itest;
using json = nlohmann::json;

namespace {

/// The controller's heartbeat lapse and the agents' report interval.
constexpr auto lapse = 2000ms;
constexpr auto report_interval = 200ms;
/// The gate's hello timeout in these tests.
constexpr auto hello_timeout = 1000ms;

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0)
    return {};
  return buf;
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

std::string tail(const std::string& text, size_t n = 4000) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

class Cluster : public ::testing::Test {
protected:
  void SetUp() override {
    port_ = free_port();
    ASSERT_NE(port_, 0) << "no free port on 127.0.0.1";
  }

  void TearDown() override {
    bool failed = HasFailure();
    for (auto& p : procs_) {
      if (failed) {
        std::fprintf(stderr, "---- %s (pid %d)\n---- stderr:\n%s\n---- stdout:\n%s\n",
                     p->command_line().c_str(), p->pid(),
                     tail(p->err()).c_str(), tail(p->out(), 1500).c_str());
      }
      p->kill_now();
    }
    procs_.clear();
  }

  /// Starts `argv` with its output in this test's folder.
  process* spawn(const std::string& label, std::vector<std::string> argv) {
    auto n = std::to_string(procs_.size());
    procs_.push_back(std::make_unique<process>(
      std::move(argv), dir_ / (label + "-" + n + ".out"),
      dir_ / (label + "-" + n + ".err")));
    return procs_.back().get();
  }

  std::string controller_dir() const {
    return (dir_ / "controller").string();
  }

  std::string addr() const {
    return "127.0.0.1:" + std::to_string(port_);
  }

  process* start_controller(std::vector<std::string> extra = {},
                            const std::string& data_dir = {}) {
    ctl_store_ = data_dir.empty() ? controller_dir() : data_dir;
    std::vector<std::string> argv{program("astraeus-controller"),
                                  "--port", std::to_string(port_),
                                  "--data-dir", ctl_store_,
                                  "--heartbeat-lapse", "2s",
                                  "--set", "heartbeat.report_interval=600ms",
                                  "--set", "gate.hello_timeout=1s"};
    // The API on a free loopback port: the default (7451) may be another
    // controller's on this machine (a tryout, a second test run).
    if (std::none_of(extra.begin(), extra.end(),
                     [](const std::string& a) { return a.rfind("api.listen=", 0) == 0; })) {
      argv.push_back("--set");
      argv.push_back("api.listen=127.0.0.1:0");
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    return spawn("controller", std::move(argv));
  }

  /// True once the controller answers a CLI hello with its first owner
  /// token (fails the test when the process exits first or 10 s pass).
  bool wait_ready(process* ctl) {
    bool ok = wait_until(
      [&] {
        if (!ctl->running())
          return true;
        return use_owner_credentials(port_, keys_dir_of(ctl_store_))
               && static_cast<bool>(gate_client::connect_cli(
                 loopback(port_), 500ms, owner_credentials(port_)));
      },
      10s);
    if (!ctl->running()) {
      ADD_FAILURE() << "the controller exited with "
                    << ctl->exit_code().value_or(-1) << ":\n" << ctl->err();
      return false;
    }
    if (!ok)
      ADD_FAILURE() << "the controller did not answer on " << addr()
                    << " within 10 s";
    return ok;
  }

  /// An agent for `name`; it enrols with a fresh join token on its first
  /// start (the same data folder later keeps its identity).
  process* start_agent(const std::string& name, const std::string& data_dir,
                       std::vector<std::string> extra = {}, bool enrol = true) {
    std::vector<std::string> argv{program("astraeus-agent"),
                                  "--controller", addr(),
                                  "--data-dir", data_dir,
                                  "--name", name,
                                  "--report-interval", "200ms",
                                  "--set", "reconnect.max_backoff=1s"};
    if (enrol) {
      auto flags = enrol_flags(port_, dir_.path(), name);
      EXPECT_FALSE(flags.empty()) << "no join token from the controller";
      argv.insert(argv.end(), flags.begin(), flags.end());
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    return spawn("agent-" + name, std::move(argv));
  }

  /// Waits up to `timeout` for `name` to be in `state`; returns its view.
  std::optional<v1::MachineView> wait_state(const std::string& name,
                                            v1::Machine::State state,
                                            milliseconds timeout = 5s) {
    std::optional<v1::MachineView> last;
    auto ok = wait_until(
      [&] {
        last = get_machine(port_, name);
        return last && last->state() == state;
      },
      timeout);
    if (!ok) {
      ADD_FAILURE() << "machine " << name << " not "
                    << v1::Machine::State_Name(state) << " within "
                    << timeout.count() << " ms; last seen: "
                    << (last ? v1::Machine::State_Name(last->state())
                             : std::string{"(unknown)"});
      return std::nullopt;
    }
    return last;
  }

  /// A controller and one agent named `name`, the machine Up.
  bool start_cluster(const std::string& name = "gpu-01") {
    ctl_ = start_controller();
    if (!wait_ready(ctl_))
      return false;
    agent_ = start_agent(name, (dir_ / ("agent-" + name)).string());
    return wait_state(name, v1::Machine::Up).has_value();
  }

  /// `astra` as the owner (the controller's first owner token).
  command_result astra(std::vector<std::string> args) {
    std::vector<std::string> argv{program("astra"), "--addr", addr(),
                                  "--token-file",
                                  (keys_dir_of(ctl_store_) / "owner-token").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, dir_.path());
  }

  /// The real agent still reports (Up, a fresh report) and `astra
  /// machines` still answers with it.
  void expect_still_serving(const std::string& name) {
    auto before = get_machine(port_, name);
    ASSERT_TRUE(before) << "the controller no longer answers";
    EXPECT_EQ(before->state(), v1::Machine::Up);
    auto advanced = wait_until(
      [&] {
        auto m = get_machine(port_, name);
        return m && m->state() == v1::Machine::Up
               && m->last_report_unix_ms() > before->last_report_unix_ms();
      },
      3s);
    EXPECT_TRUE(advanced) << "the agent's reports stopped arriving";
    auto res = astra({"machines"});
    EXPECT_EQ(res.rc, 0) << res.err;
    EXPECT_TRUE(contains(res.out, name)) << res.out;
    EXPECT_TRUE(ctl_->running()) << "the controller died";
  }

  temp_dir dir_;
  std::string ctl_store_;
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<process>> procs_;
  process* ctl_ = nullptr;
  process* agent_ = nullptr;
};

/// The line of `table` whose first column is `name`.
std::string table_line(const std::string& table, const std::string& name) {
  std::stringstream in{table};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + " ", 0) == 0)
      return line;
  return {};
}

// -- 1. start-up -------------------------------------------------------------

TEST_F(Cluster, AgentRegistersAndMachineIsUpWithHostFacts) {
  ASSERT_TRUE(start_cluster("gpu-01"));
  auto m = get_machine(port_, "gpu-01");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->state(), v1::Machine::Up);
  EXPECT_TRUE(m->connected());
  EXPECT_EQ(m->machine_id().size(), 32u);
  EXPECT_GT(m->last_report_unix_ms(), 0);
  const auto& f = m->facts();
  EXPECT_EQ(f.cpu().logical_cpus(), online_cpus())
    << "CPUs in /sys/devices/system/cpu/online";
  EXPECT_EQ(f.hostname(), hostname());
  utsname u{};
  ASSERT_EQ(::uname(&u), 0);
  EXPECT_EQ(f.kernel(), u.release);
  EXPECT_EQ(f.cpu().architecture(), u.machine);
  if (fs::exists("/etc/os-release")) {
    EXPECT_FALSE(f.os().empty());
  }
  EXPECT_GT(f.memory().total_bytes(), 0u);

  // The table.
  auto res = astra({"machines"});
  ASSERT_EQ(res.rc, 0) << res.err;
  auto line = table_line(res.out, "gpu-01");
  ASSERT_FALSE(line.empty()) << res.out;
  EXPECT_TRUE(contains(line, " Up ")) << line;

  // JSON.
  res = astra({"machines", "-o", "json"});
  ASSERT_EQ(res.rc, 0) << res.err;
  json doc;
  ASSERT_NO_THROW(doc = json::parse(res.out)) << res.out;
  ASSERT_TRUE(doc.contains("machines")) << res.out;
  bool found = false;
  for (const auto& x : doc["machines"]) {
    if (x.value("name", "") != "gpu-01")
      continue;
    found = true;
    EXPECT_EQ(x.value("state", ""), "Up") << x.dump();
    EXPECT_EQ(x["facts"]["cpu"].value("logical_cpus", 0u), online_cpus());
  }
  EXPECT_TRUE(found) << res.out;

  // One machine in full.
  res = astra({"machine", "gpu-01", "-o", "json"});
  ASSERT_EQ(res.rc, 0) << res.err;
  ASSERT_NO_THROW(doc = json::parse(res.out)) << res.out;
  EXPECT_EQ(doc.value("state", ""), "Up");
  EXPECT_EQ(doc["facts"].value("hostname", ""), hostname());
}

// -- 2. heartbeat lapse and agent restart ---------------------------------------

TEST_F(Cluster, KilledAgentGoesDownAfterLapseAndComesBackWithSameIdentity) {
  ASSERT_TRUE(start_cluster("gpu-01"));
  auto agent_dir = dir_ / "agent-gpu-01";
  auto before = get_machine(port_, "gpu-01");
  ASSERT_TRUE(before);
  auto id = before->machine_id();
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(read_text(agent_dir / "machine-id").substr(0, 32), id);
  // Let a few reports in, so the heartbeat runs from a report.
  ASSERT_TRUE(wait_until(
    [&] {
      auto m = get_machine(port_, "gpu-01");
      return m && m->last_report_unix_ms() >= before->last_report_unix_ms() + 300;
    },
    3s));

  auto killed = steady::now();
  agent_->kill_now();
  std::optional<double> down_after;
  std::optional<v1::MachineView> down_view;
  auto deadline_s = std::chrono::duration<double>(lapse + 1s).count() + 1.0;
  while (seconds_since(killed) < deadline_s) {
    auto m = get_machine(port_, "gpu-01");
    auto t = seconds_since(killed);
    ASSERT_TRUE(m) << "the controller stopped answering";
    if (m->state() == v1::Machine::Down) {
      down_after = t;
      down_view = m;
      break;
    }
    EXPECT_EQ(m->state(), v1::Machine::Up) << "at " << t << " s after the kill";
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(down_after) << "not Down within lapse + 1 s (+ slack)";
  std::printf("[ timing ] Down observed %.3f s after kill -9 (lapse %.1f s)\n",
              *down_after, std::chrono::duration<double>(lapse).count());
  auto lapse_s = std::chrono::duration<double>(lapse).count();
  auto interval_s = std::chrono::duration<double>(report_interval).count();
  // The last report came at most one interval before the kill.
  EXPECT_GE(*down_after, lapse_s - interval_s - 0.15)
    << "Down before the heartbeat could have lapsed";
  // No later than lapse + 1 s after the last report (+ one poll).
  EXPECT_LE(*down_after, lapse_s + 1.0 + 0.1)
    << "Down too late after the kill";
  EXPECT_FALSE(down_view->connected());
  EXPECT_FALSE(down_view->schedulable());

  // The same data folder: the same identity, Up again.
  agent_ = start_agent("gpu-01", agent_dir.string());
  auto up = wait_state("gpu-01", v1::Machine::Up, 5s);
  ASSERT_TRUE(up);
  EXPECT_EQ(up->machine_id(), id);
  EXPECT_TRUE(up->connected());
  EXPECT_EQ(list_machines(port_)->size(), 1u);
}

// -- 3. controller restart -----------------------------------------------------------

TEST_F(Cluster, ControllerRestartKeepsCordonAndMaintenanceAndAgentReconnects) {
  ASSERT_TRUE(start_cluster("gpu-01"));
  auto agent_pid = agent_->pid();
  auto res = astra({"cordon", "gpu-01"});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_EQ(res.out, "machine gpu-01 cordoned\n");
  res = astra({"maintenance", "gpu-01", "on"});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_EQ(res.out, "machine gpu-01 is Maintenance\n");

  // kill -9: what the user was told must already be on disk.
  ctl_->kill_now();
  auto restarted_ms = unix_ms_now();
  ctl_ = start_controller();
  ASSERT_TRUE(wait_ready(ctl_));

  res = astra({"machine", "gpu-01", "-o", "json"});
  ASSERT_EQ(res.rc, 0) << res.err;
  json doc;
  ASSERT_NO_THROW(doc = json::parse(res.out)) << res.out;
  EXPECT_EQ(doc.value("cordoned", false), true) << res.out;
  EXPECT_EQ(doc.value("state", ""), "Maintenance") << res.out;
  EXPECT_EQ(doc.value("schedulable", true), false) << res.out;

  // The agent finds the new controller by itself.
  std::optional<v1::MachineView> m;
  EXPECT_TRUE(wait_until(
    [&] {
      m = get_machine(port_, "gpu-01");
      return m && m->connected() && m->last_report_unix_ms() >= restarted_ms;
    },
    5s))
    << "the agent did not reconnect to the restarted controller";
  EXPECT_TRUE(agent_->running());
  EXPECT_EQ(agent_->pid(), agent_pid);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->state(), v1::Machine::Maintenance) << "reports must not end it";

  res = astra({"maintenance", "gpu-01", "off"});
  ASSERT_EQ(res.rc, 0) << res.err;
  ASSERT_TRUE(wait_state("gpu-01", v1::Machine::Up, 3s));
  res = astra({"uncordon", "gpu-01"});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_EQ(res.out, "machine gpu-01 uncordoned\n");
  m = get_machine(port_, "gpu-01");
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->cordoned());

  // SIGTERM: a clean stop, and the uncordon and maintenance off are kept.
  ctl_->signal(SIGTERM);
  auto rc = ctl_->wait_exit(5s);
  ASSERT_TRUE(rc) << "the controller did not stop within 5 s of SIGTERM";
  EXPECT_EQ(*rc, 0);
  ctl_ = start_controller();
  ASSERT_TRUE(wait_ready(ctl_));
  m = get_machine(port_, "gpu-01");
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->cordoned());
  EXPECT_NE(m->state(), v1::Machine::Maintenance);
  auto up = wait_state("gpu-01", v1::Machine::Up, 5s);
  ASSERT_TRUE(up);
  EXPECT_TRUE(up->connected());
  EXPECT_EQ(agent_->pid(), agent_pid);
}

// -- 4. maintenance -----------------------------------------------------------------

TEST_F(Cluster, MaintenanceIgnoresReports) {
  ASSERT_TRUE(start_cluster("gpu-01"));
  v1::Request req;
  req.mutable_set_maintenance()->set_name("gpu-01");
  req.mutable_set_maintenance()->set_maintenance(true);
  auto resp = gate_call(port_, req);
  ASSERT_TRUE(resp);
  ASSERT_FALSE(resp->has_error()) << resp->error().message();
  EXPECT_EQ(resp->machine().state(), v1::Machine::Maintenance);
  auto first = get_machine(port_, "gpu-01");
  ASSERT_TRUE(first);

  // Several report intervals: every look says Maintenance.
  auto start = steady::now();
  int looks = 0;
  std::optional<v1::MachineView> m;
  while (steady::now() - start < 1500ms) {
    m = get_machine(port_, "gpu-01");
    ASSERT_TRUE(m);
    ASSERT_EQ(m->state(), v1::Machine::Maintenance) << "after " << looks << " looks";
    EXPECT_FALSE(m->schedulable());
    ++looks;
    std::this_thread::sleep_for(50ms);
  }
  // ... while the reports did arrive.
  EXPECT_GE(m->last_report_unix_ms(), first->last_report_unix_ms() + 800)
    << "the agent's reports did not arrive";
  EXPECT_TRUE(m->connected());
  auto res = astra({"machines"});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_TRUE(contains(table_line(res.out, "gpu-01"), " Maintenance ")) << res.out;

  res = astra({"maintenance", "gpu-01", "off"});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_TRUE(wait_state("gpu-01", v1::Machine::Up, 2s));
}

// -- 5. bad input at the gate ----------------------------------------------------------

TEST_F(Cluster, GateClosesGarbageAndKeepsServing) {
  ASSERT_TRUE(start_cluster("gpu-01"));
  {
    // Text that is no frame at all ("GET " as a length is over the cap).
    raw_socket s{port_};
    ASSERT_TRUE(s.connected());
    ASSERT_TRUE(s.send_bytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto t0 = steady::now();
    EXPECT_TRUE(s.wait_closed(hello_timeout + 500ms));
    EXPECT_LT(seconds_since(t0), 1.5);
  }
  {
    // A plausible length, then bytes that do not parse as a frame.
    raw_socket s{port_};
    ASSERT_TRUE(s.connected());
    ASSERT_TRUE(s.send_bytes(length_prefix(16) + std::string(16, '\xff')));
    auto t0 = steady::now();
    EXPECT_TRUE(s.wait_closed(hello_timeout + 500ms));
    EXPECT_LT(seconds_since(t0), 1.5);
  }
  {
    // A zero length: a frame without a body.
    raw_socket s{port_};
    ASSERT_TRUE(s.connected());
    ASSERT_TRUE(s.send_bytes(length_prefix(0)));
    EXPECT_TRUE(s.wait_closed(hello_timeout + 500ms));
  }
  {
    // A header promising 200 bytes, 3 of them, then the peer hangs up.
    raw_socket s{port_};
    ASSERT_TRUE(s.connected());
    ASSERT_TRUE(s.send_bytes(length_prefix(200) + "abc"));
  }
  EXPECT_TRUE(wait_until([&] { return contains(ctl_->err(), "truncated frame"); }, 5000ms))
    << ctl_->err();
  EXPECT_TRUE(contains(ctl_->err(), "gate: closing 127.0.0.1:")) << ctl_->err();
  expect_still_serving("gpu-01");
}

TEST_F(Cluster, GateClosesOversizedLengthAtOnce) {
  ASSERT_TRUE(start_cluster("gpu-01"));
  raw_socket s{port_};
  ASSERT_TRUE(s.connected());
  ASSERT_TRUE(s.send_bytes(length_prefix(0xFFFFFFF0u)));
  auto t0 = steady::now();
  EXPECT_TRUE(s.wait_closed(hello_timeout + 500ms));
  EXPECT_LT(seconds_since(t0), 0.5) << "not closed at once";
  expect_still_serving("gpu-01");
}

TEST_F(Cluster, GateClosesSilentPeerAfterHelloTimeout) {
  ASSERT_TRUE(start_cluster("gpu-01"));
  auto t0 = steady::now();
  raw_socket silent{port_};
  raw_socket half{port_}; // half a hello: a header, no body
  ASSERT_TRUE(silent.connected());
  ASSERT_TRUE(half.connected());
  ASSERT_TRUE(half.send_bytes(length_prefix(100)));
  EXPECT_TRUE(silent.wait_closed(hello_timeout + 1500ms));
  auto silent_s = seconds_since(t0);
  EXPECT_TRUE(half.wait_closed(hello_timeout + 1500ms));
  auto half_s = seconds_since(t0);
  auto timeout_s = std::chrono::duration<double>(hello_timeout).count();
  EXPECT_GE(silent_s, timeout_s - 0.1) << "closed before the hello timeout";
  EXPECT_LE(silent_s, timeout_s + 1.0);
  EXPECT_GE(half_s, timeout_s - 0.1);
  EXPECT_LE(half_s, timeout_s + 1.0);
  auto frames = silent.frames();
  if (!frames.empty() && frames.front().has_refusal()) {
    EXPECT_TRUE(contains(frames.front().refusal().reason(), "hello"))
      << frames.front().refusal().reason();
  }
  expect_still_serving("gpu-01");
}

TEST_F(Cluster, GateRefusesWrongProtocolVersion) {
  ASSERT_TRUE(start_cluster("gpu-01"));
  {
    raw_socket s{port_};
    ASSERT_TRUE(s.connected());
    v1::Frame f;
    f.mutable_hello()->set_protocol_version(99);
    f.mutable_hello()->set_role(v1::CLI);
    ASSERT_TRUE(s.send_frame(f));
    EXPECT_TRUE(s.wait_closed(hello_timeout + 500ms));
    auto frames = s.frames();
    ASSERT_EQ(frames.size(), 1u) << "expected exactly one Refusal frame";
    ASSERT_TRUE(frames[0].has_refusal());
    EXPECT_EQ(frames[0].refusal().code(), "incompatible_protocol");
    EXPECT_TRUE(contains(frames[0].refusal().reason(), "version 99"))
      << frames[0].refusal().reason();
  }
  {
    // The client library reports the refusal too.
    v1::Hello hello;
    hello.set_protocol_version(99);
    hello.set_role(v1::AGENT);
    hello.set_machine_name("gpu-99");
    hello.set_machine_id(std::string(32, 'a'));
    auto c = gate_client::connect(loopback(port_), hello, 2s);
    ASSERT_FALSE(c);
    EXPECT_TRUE(contains(render_error(c.error()), "version"))
      << render_error(c.error());
  }
  EXPECT_FALSE(get_machine(port_, "gpu-99")) << "a refused agent got registered";
  expect_still_serving("gpu-01");
}

TEST_F(Cluster, GateClosesReportBeforeHello) {
  ASSERT_TRUE(start_cluster("gpu-01"));
  raw_socket s{port_};
  ASSERT_TRUE(s.connected());
  v1::Frame f;
  f.mutable_report()->set_machine("gpu-01");
  f.mutable_report()->set_sequence(1);
  ASSERT_TRUE(s.send_frame(f));
  auto t0 = steady::now();
  EXPECT_TRUE(s.wait_closed(hello_timeout + 500ms));
  EXPECT_LT(seconds_since(t0), 0.5) << "not closed at once";
  auto frames = s.frames();
  for (const auto& fr : frames)
    EXPECT_FALSE(fr.has_welcome());
  expect_still_serving("gpu-01");
}

TEST_F(Cluster, GateRefusesReportForAnotherMachine) {
  ASSERT_TRUE(start_cluster("gpu-01"));
  // A machine enrolled as "a" (its own key, a join token).
  auto enrol_as = [&](const std::string& name) -> caf::expected<gate_client> {
    v1::Hello hello;
    hello.set_protocol_version(protocol_version);
    hello.set_role(v1::AGENT);
    hello.set_machine_name(name);
    hello.set_machine_id(name == "a" ? "0123456789abcdef0123456789abcdef"
                                     : "fedcba9876543210fedcba9876543210");
    hello.set_join_token(mint_join_token(port_));
    gate_credentials creds;
    creds.pinned = owner_credentials(port_).pinned;
    return gate_client::connect(loopback(port_), hello, 3s, creds);
  };
  auto a = enrol_as("a");
  ASSERT_TRUE(a) << render_error(a.error());
  // A report for itself is taken ...
  v1::Frame own;
  own.mutable_report()->set_machine("a");
  own.mutable_report()->set_sequence(1);
  own.mutable_report()->mutable_facts()->set_hostname("a");
  ASSERT_FALSE(a->send(own));
  EXPECT_TRUE(wait_state("a", v1::Machine::Up, 3s));
  // ... one for another machine ends the session, with a refusal.
  v1::Frame other;
  other.mutable_report()->set_machine("b");
  other.mutable_report()->set_sequence(2);
  ASSERT_FALSE(a->send(other));
  auto refusal = next_refusal(*a);
  ASSERT_TRUE(refusal) << render_error(refusal.error());
  EXPECT_TRUE(contains(refusal->reason(), "'b'")) << refusal->reason();
  EXPECT_TRUE(session_ended(*a)) << "the session was not closed";
  EXPECT_FALSE(get_machine(port_, "b")) << "machine b appeared";
  // Nor may it touch the real machine.
  auto c = enrol_as("c");
  ASSERT_TRUE(c) << render_error(c.error());
  v1::Frame spoof;
  spoof.mutable_report()->set_machine("gpu-01");
  spoof.mutable_report()->mutable_facts()->set_hostname("spoofed");
  ASSERT_FALSE(c->send(spoof));
  EXPECT_TRUE(next_refusal(*c));
  auto real = get_machine(port_, "gpu-01");
  ASSERT_TRUE(real);
  EXPECT_NE(real->facts().hostname(), "spoofed");
  EXPECT_TRUE(wait_until(
    [&] { return contains(ctl_->err(), "sent a report for machine 'gpu-01'"); }, 5s))
    << "the refusal is logged";
  expect_still_serving("gpu-01");
}

// -- 6. astra's errors --------------------------------------------------------------

TEST_F(Cluster, AstraReportsUnknownMachine) {
  ctl_ = start_controller();
  ASSERT_TRUE(wait_ready(ctl_));
  auto res = astra({"machine", "no-such-host"});
  EXPECT_NE(res.rc, 0);
  EXPECT_TRUE(contains(res.err, "no machine named no-such-host")) << res.err;
  EXPECT_TRUE(res.out.empty()) << res.out;
}

TEST_F(Cluster, AstraReportsUnreachableController) {
  auto res = run_command({program("astra"), "--addr", "127.0.0.1:1", "machines"},
                         dir_.path());
  EXPECT_FALSE(res.timed_out);
  EXPECT_NE(res.rc, 0);
  EXPECT_TRUE(contains(res.err, "cannot reach the controller")) << res.err;
  EXPECT_TRUE(contains(res.err, "127.0.0.1:1")) << res.err;
}

TEST_F(Cluster, VersionsNameTheProtocolTheHelloCarries) {
  for (const auto* prog : {"astraeus", "astra"}) {
    auto res = run_command({program(prog), "version"}, dir_.path());
    EXPECT_EQ(res.rc, 0) << res.err;
    EXPECT_TRUE(contains(res.out, "(protocol " + std::to_string(protocol_version) + ")"))
      << prog << ": " << res.out;
  }
}

TEST_F(Cluster, DevModeReadsTheControllersConfigFileAndNamesABadKey) {
  auto file = dir_ / "controller.yaml";
  write_text(file, "heartbeat:\n  lapsee: 5s\n");
  auto res = run_command({program("astraeus"), "dev", "--data-dir", (dir_ / "dev").string(),
                          "--port", "0", "--controller-config", file.string()},
                         dir_.path());
  EXPECT_FALSE(res.timed_out);
  EXPECT_EQ(res.rc, 2) << res.err;
  EXPECT_TRUE(contains(res.err, "heartbeat.lapsee")) << res.err;
}

// Fifth new-user trial: `--report-interval 2s --heartbeat-lapse 10s` was
// refused against the controller's default 10 s interval, not the 2 s given.
TEST_F(Cluster, DevModeChecksItsLapseAgainstTheReportIntervalGiven) {
  auto res = run_command({program("astraeus"), "dev", "--data-dir", (dir_ / "dev5").string(),
                          "--port", "0", "--api-listen", "127.0.0.1:0", "--report-interval",
                          "5s", "--heartbeat-lapse", "10s"},
                         dir_.path());
  EXPECT_FALSE(res.timed_out);
  EXPECT_EQ(res.rc, 2) << res.err;
  EXPECT_TRUE(contains(res.err, "heartbeat.report_interval 5s")) << res.err;
}

TEST_F(Cluster, AstraRefusesASpecFileThatNeverEnds) {
  auto res = run_command({program("astra"), "--addr", "127.0.0.1:1", "run", "-f", "/dev/zero"},
                         dir_.path());
  EXPECT_FALSE(res.timed_out);
  EXPECT_EQ(res.rc, 2);
  EXPECT_TRUE(contains(res.err, "/dev/zero: the spec is larger than 1 MiB")) << res.err;
}

// -- 7. start-up failures ---------------------------------------------------------

TEST_F(Cluster, ControllerRejectsUnknownConfigKey) {
  auto file = dir_ / "controller.yaml";
  write_text(file, "heartbeat:\n  lapsee: 5s\n");
  auto res = run_command({program("astraeus-controller"), "--config", file.string(),
                          "--port", std::to_string(port_), "--data-dir",
                          controller_dir()},
                         dir_.path(), 10s);
  EXPECT_FALSE(res.timed_out) << "the controller started anyway";
  EXPECT_NE(res.rc, 0);
  EXPECT_TRUE(contains(res.err, "heartbeat.lapsee")) << res.err;
}

TEST_F(Cluster, SecondControllerOnSameStoreFails) {
  ctl_ = start_controller();
  ASSERT_TRUE(wait_ready(ctl_));
  auto other_port = free_port();
  auto res = run_command({program("astraeus-controller"), "--port",
                          std::to_string(other_port), "--data-dir",
                          controller_dir()},
                         dir_.path(), 10s);
  EXPECT_FALSE(res.timed_out) << "the second controller started";
  EXPECT_NE(res.rc, 0);
  EXPECT_TRUE(contains(res.err, controller_dir())) << res.err;
  EXPECT_TRUE(contains(res.err, "in use")) << res.err;
  // The first one is untouched.
  EXPECT_TRUE(ctl_->running());
  EXPECT_TRUE(list_machines(port_).has_value());
}

// -- 8. astraeus dev ------------------------------------------------------------------

TEST_F(Cluster, DevModeRunsAOneMachineCluster) {
  ASSERT_TRUE(fs::exists(program("astraeus")))
    << program("astraeus") << " is not built (ninja astraeus)";
  auto data = dir_ / "dev";
  auto dev = spawn("dev", {program("astraeus"), "dev", "--data-dir", data.string(),
                           "--port", std::to_string(port_), "--api-listen", "127.0.0.1:0"});
  ctl_ = dev;
  auto store = (data / "controller").string();
  ctl_store_ = store; // its keys: <data>/controller-keys
  EXPECT_TRUE(wait_until(
    [&] {
      auto out = dev->out();
      return (contains(out, store) && contains(out, addr())) || !dev->running();
    },
    5s));
  ASSERT_TRUE(dev->running()) << dev->err();
  EXPECT_TRUE(contains(dev->out(), store)) << dev->out();
  EXPECT_TRUE(contains(dev->out(), addr())) << dev->out();

  auto name = hostname();
  ASSERT_FALSE(name.empty());
  command_result res;
  EXPECT_TRUE(wait_until(
    [&] {
      res = astra({"machines"});
      return res.rc == 0 && contains(table_line(res.out, name), " Up ");
    },
    5s, 100ms))
    << "rc " << res.rc << "\n" << res.out << res.err;

  dev->signal(SIGTERM);
  auto rc = dev->wait_exit(5s);
  ASSERT_TRUE(rc) << "astraeus dev did not stop within 5 s of SIGTERM";
  EXPECT_EQ(*rc, 0);
}

// -- 9. identity -------------------------------------------------------------------

TEST_F(Cluster, SecondAgentWithSameNameIsRefused) {
  ASSERT_TRUE(start_cluster("gpu-01"));
  auto first = get_machine(port_, "gpu-01");
  ASSERT_TRUE(first);
  auto impostor = start_agent("gpu-01", (dir_ / "agent-impostor").string());
  EXPECT_TRUE(wait_until(
    [&] {
      return contains(ctl_->err(), "registered to another machine identity")
             || contains(impostor->err(), "registered to another machine identity");
    },
    5s))
    << "no log line says the name is registered to another identity";
  // The controller's line can come before the impostor has written its own.
  EXPECT_TRUE(wait_until([&] { return contains(impostor->err(), "refused"); }, 5s))
    << impostor->err();
  // The first machine is untouched, and keeps reporting.
  auto m = get_machine(port_, "gpu-01");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->machine_id(), first->machine_id());
  EXPECT_TRUE(m->connected());
  expect_still_serving("gpu-01");
  EXPECT_EQ(get_machine(port_, "gpu-01")->machine_id(), first->machine_id());
  EXPECT_EQ(list_machines(port_)->size(), 1u);
}

// -- 10. enrolment and the secure channel (issue 7) ---------------------------------

TEST_F(Cluster, AnEnrolledAgentComesBackWithItsIdentityAloneAndKeepsItsKeyPrivate) {
  ASSERT_TRUE(start_cluster("gpu-01"));
  auto agent_dir = dir_ / "agent-gpu-01";
  for (auto file : {"identity.key", "controller.pub", "machine-id"}) {
    struct stat st{};
    ASSERT_EQ(::stat((agent_dir / file).c_str(), &st), 0) << file;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << file;
  }
  EXPECT_EQ(read_text(agent_dir / "controller.pub").substr(0, 64),
            read_text(keys_dir_of(ctl_store_) / "gate.pub").substr(0, 64))
    << "the agent keeps the controller's key it pinned";
  auto id = get_machine(port_, "gpu-01")->machine_id();
  agent_->kill_now();
  // The token files are gone; the same data folder is the same machine.
  for (auto& e : fs::directory_iterator(dir_.path()))
    if (e.path().filename().string().rfind("join-token-", 0) == 0)
      fs::remove(e.path());
  agent_ = start_agent("gpu-01", agent_dir.string(), {}, false);
  ASSERT_TRUE(wait_until(
    [&] {
      auto m = get_machine(port_, "gpu-01");
      return m && m->connected() && m->state() == v1::Machine::Up;
    },
    5s))
    << agent_->err();
  EXPECT_EQ(get_machine(port_, "gpu-01")->machine_id(), id);
  EXPECT_FALSE(contains(agent_->err(), "refused")) << agent_->err();
  // A new agent with no token is not let in.
  auto stranger = start_agent("gpu-02", (dir_ / "agent-gpu-02").string(), {}, false);
  EXPECT_TRUE(wait_until([&] { return contains(stranger->err(), "not enrolled"); }, 5s))
    << stranger->err();
  EXPECT_FALSE(get_machine(port_, "gpu-02"));
}

TEST_F(Cluster, AnAgentRefusesAControllerThatIsNotThePinnedOne) {
  ctl_ = start_controller();
  ASSERT_TRUE(wait_ready(ctl_));
  auto other = identity_keypair::generate();
  auto token = dir_ / "token";
  write_text(token, mint_join_token(port_) + "\n");
  auto agent = start_agent("gpu-01", (dir_ / "agent").string(),
                           {"--token-file", token.string(), "--controller-key",
                            other.public_hex()},
                           false);
  EXPECT_TRUE(wait_until(
    [&] { return contains(agent->err(), "is not the one this agent trusts"); }, 5s))
    << agent->err();
  EXPECT_TRUE(contains(agent->err(), "not the pinned key")) << agent->err();
  EXPECT_FALSE(get_machine(port_, "gpu-01")) << "it enrolled anyway";
  EXPECT_TRUE(agent->running()) << "it keeps trying, slowly";
}

TEST_F(Cluster, AstraLogsInAndTokensCreatePrintsTheInstallCommand) {
  ctl_ = start_controller();
  ASSERT_TRUE(wait_ready(ctl_));
  auto config_home = dir_ / "config";
  auto owner_file = (keys_dir_of(ctl_store_) / "owner-token").string();
  // An empty --token-file, or a folder, is a usage error: nothing is sent
  // (README: exit 2 for an unreadable --token-file).
  write_text(dir_ / "empty", "");
  auto none = run_command({program("astra"), "--addr", addr(), "--token-file",
                           (dir_ / "empty").string(), "machines"},
                          dir_.path());
  EXPECT_EQ(none.rc, 2) << none.err;
  EXPECT_TRUE(contains(none.err, "is empty; nothing was sent")) << none.err;
  auto folder = run_command({program("astra"), "--addr", addr(), "--token-file",
                             dir_.path().string(), "machines"},
                            dir_.path());
  EXPECT_EQ(folder.rc, 2) << folder.err;
  EXPECT_TRUE(contains(folder.err, "is a folder")) << folder.err;
  // astra login keeps it, mode 0600, with the address and the key.
  auto login = run_command({"/usr/bin/env", "HOME=" + dir_.path().string(),
                            "XDG_CONFIG_HOME=" + config_home.string(),
                            program("astra"), "--addr", addr(), "login",
                            "--token-file", owner_file},
                           dir_.path());
  ASSERT_EQ(login.rc, 0) << login.err;
  EXPECT_TRUE(contains(login.out, "as owner (owner)")) << login.out;
  auto creds = config_home / "astraeus" / "credentials";
  struct stat st{};
  ASSERT_EQ(::stat(creds.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Later commands need neither --addr nor a token.
  auto who = run_command({"/usr/bin/env", "HOME=" + dir_.path().string(),
                          "XDG_CONFIG_HOME=" + config_home.string(),
                          program("astra"), "whoami"},
                         dir_.path());
  ASSERT_EQ(who.rc, 0) << who.err;
  EXPECT_TRUE(contains(who.out, "owner (owner")) << who.out;
  // A second login without --addr goes to the controller the first kept
  // (a new-user trial's went to 127.0.0.1:7450).
  auto again = run_command({"/usr/bin/env", "HOME=" + dir_.path().string(),
                            "XDG_CONFIG_HOME=" + config_home.string(), program("astra"),
                            "login", "--token-file", owner_file},
                           dir_.path());
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_TRUE(contains(again.out, "Logged in to " + addr())) << again.out;
  // tokens create: the token, the install command pinning the gate's key.
  auto made = astra({"tokens", "create", "--pool", "h100", "--ttl", "1h",
                     "--label", "rack=r12"});
  ASSERT_EQ(made.rc, 0) << made.err;
  auto key = read_text(keys_dir_of(ctl_store_) / "gate.pub").substr(0, 64);
  EXPECT_TRUE(contains(made.out, "labels   pool=h100, rack=r12")) << made.out;
  // The seed's command (issue 20): install.sh from the controller's API,
  // the gate and the org id (the gate key's first 32 hex digits) for it to
  // check; loopback addresses get the warning.
  EXPECT_TRUE(contains(made.out, "/api/v1/install.sh | sudo sh -s -- --apiserver " + addr()))
    << made.out;
  EXPECT_TRUE(contains(made.out, "--org-id " + key.substr(0, 32))) << made.out;
  EXPECT_TRUE(contains(made.out, "--pinnedpubkey sha256//")) << made.out;
  EXPECT_TRUE(contains(made.out, "warning: 127.0.0.1 is this machine's own")) << made.out;
  EXPECT_TRUE(contains(made.out, "--token-file ./astraeus-token")) << made.out;
  auto json_made = astra({"tokens", "create", "--pool", "h100", "-o", "json"});
  ASSERT_EQ(json_made.rc, 0) << json_made.err;
  auto doc = json::parse(json_made.out);
  auto token = doc.value("token", "");
  EXPECT_EQ(token.rfind("astj_", 0), 0u) << json_made.out;
  EXPECT_TRUE(contains(doc.value("install", ""), token)) << json_made.out;
  // The machine that uses it gets its labels.
  auto file = dir_ / "t";
  write_text(file, token + "\n");
  agent_ = start_agent("gpu-07", (dir_ / "agent-gpu-07").string(),
                       {"--token-file", file.string(), "--controller-key", key}, false);
  auto up = wait_state("gpu-07", v1::Machine::Up, 5s);
  ASSERT_TRUE(up);
  EXPECT_EQ(up->labels().at("pool"), "h100");
  // A second machine with the same token: ENROLLMENT_USED.
  auto second = start_agent("gpu-08", (dir_ / "agent-gpu-08").string(),
                            {"--token-file", file.string(), "--controller-key", key},
                            false);
  EXPECT_TRUE(wait_until([&] { return contains(second->err(), "ENROLLMENT_USED"); }, 5s))
    << second->err();
  EXPECT_FALSE(get_machine(port_, "gpu-08"));
}

} // namespace
