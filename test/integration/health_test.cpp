// Real-process integration tests of GPU health (shared/seeds/gpus.md,
// "Health" and "Clear a GPU fault"): a controller, an agent that loads the
// NVML stand-in (test/stand_in) with an 8 x H100 fixture and reads its
// kernel log from a FIFO in the test's folder, and the `astra` CLI, all on
// loopback. Kernel-log lines are written to the FIFO in /dev/kmsg format.
// Every process a test starts is killed in TearDown, failing or not.

#include <algorithm>
#include <chrono>
#include <ctime>
#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "integration/cluster_harness.hpp"
#include "messages/error.hpp"

using namespace astraeus;
using namespace astraeus::itest;
using json = nlohmann::json;

namespace {

const std::string machine_name = "gpu-01";

/// The fixtures: the 8 x H100 node, and the same node after the GPU at
/// 0000:3a:00.0 was replaced (another UUID and serial).
std::string nvml_fixture(const std::string& name) {
  return std::string{ASTRAEUS_SOURCE_DIR} + "/test/fixtures/nvml/" + name;
}
const std::string h100x8 = nvml_fixture("h100x8.json");
const std::string h100x8_replaced = nvml_fixture("h100x8_3a_replaced.json");
/// h100x8.json with 500 PCIe replays on the GPU at 0000:3a:00.0 (0 there).
const std::string h100x8_replays = nvml_fixture("h100x8_3a_replays.json");
const std::string dgx_root = std::string{ASTRAEUS_SOURCE_DIR}
                             + "/test/fixtures/hosts/dgx-h100";

/// GPUs of h100x8.json. Index 2 (3a) and 6 (ba) are idle; the others have
/// more than 10 % of their memory in use (Foreign).
const std::string pci_3a = "0000:3a:00.0";
const std::string uuid_3a = "GPU-1b7e4c2a-93d5-4f6e-8a21-6c0d9e8f7b32";
const std::string uuid_3a_replaced = "GPU-0f0e0d0c-0b0a-4998-8776-655443322110";
const std::string pci_ba = "0000:ba:00.0";
const std::string uuid_ba = "GPU-7d6c5b4a-3f2e-41d0-9c8b-a7f6e5d4c376";
const std::vector<std::string> busy_pcis = {"0000:18:00.0", "0000:2a:00.0",
                                            "0000:5d:00.0", "0000:9a:00.0",
                                            "0000:ab:00.0", "0000:db:00.0"};
const std::vector<std::string> idle_pcis = {pci_3a, pci_ba};

std::string tail(const std::string& text, size_t n = 4000) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

/// One /dev/kmsg record of an NVIDIA Xid, e.g. for bus "0000:3a:00":
/// "4,500,123456,-;NVRM: Xid (PCI:0000:3a:00): 79, pid=1234, name=python3,
/// GPU has fallen off the bus."
std::string xid_line(uint64_t seq, const std::string& bus, uint32_t xid,
                     const std::string& what = "GPU has fallen off the bus.") {
  return "4," + std::to_string(seq) + "," + std::to_string(1000000 + seq * 1000)
         + ",-;NVRM: Xid (PCI:" + bus + "): " + std::to_string(xid)
         + ", pid=1234, name=python3, " + what + "\n";
}

/// A uint64 as protobuf's JSON prints it (a string), or a plain number.
uint64_t as_u64(const json& j) {
  if (j.is_string())
    return std::stoull(j.get<std::string>());
  if (j.is_number_unsigned() || j.is_number_integer())
    return j.get<uint64_t>();
  return 0;
}

/// The "GPUs healthy" condition of a machine's JSON; null when absent.
json gpus_healthy_condition(const json& machine) {
  if (!machine.contains("facts") || !machine["facts"].contains("gpus"))
    return nullptr;
  for (const auto& c : machine["facts"]["gpus"].value("conditions", json::array()))
    if (c.value("type", "") == "GPUs healthy")
      return c;
  return nullptr;
}

class Health : public ::testing::Test {
protected:
  void SetUp() override {
    port_ = free_port();
    ASSERT_NE(port_, 0) << "no free port on 127.0.0.1";
    fifo_ = dir_ / "kmsg";
    ASSERT_EQ(::mkfifo(fifo_.c_str(), 0600), 0) << std::strerror(errno);
    // A write to a FIFO whose reader just went away must fail, not kill us.
    ::signal(SIGPIPE, SIG_IGN);
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

  process* spawn(const std::string& label, std::vector<std::string> argv,
                 std::vector<std::string> env = {}) {
    auto n = std::to_string(procs_.size());
    procs_.push_back(std::make_unique<process>(
      std::move(argv), dir_ / (label + "-" + n + ".out"),
      dir_ / (label + "-" + n + ".err"), std::move(env)));
    return procs_.back().get();
  }

  std::string addr() const {
    return "127.0.0.1:" + std::to_string(port_);
  }

  std::vector<std::string> controller_argv(const std::vector<std::string>& extra,
                                           const std::string& lapse = "2s") {
    std::vector<std::string> argv{program("astraeus-controller"),
                                  "--port", std::to_string(port_),
                                  "--data-dir", (dir_ / "controller").string(),
                                  "--heartbeat-lapse", lapse, "--set",  // a third of it:
                                  "heartbeat.report_interval=" + std::to_string(std::stoi(lapse) * 333) + "ms",
                                  "--set", "gate.hello_timeout=1s"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  process* start_controller(std::vector<std::string> extra = {},
                            const std::string& lapse = "2s") {
    ctl_ = spawn("controller", controller_argv(extra, lapse));
    return ctl_;
  }

  bool wait_ready(process* ctl) {
    bool ok = wait_until(
      [&] {
        if (!ctl->running())
          return true;
        return use_owner_credentials(port_, keys_dir_of((dir_ / "controller").string()))
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

  /// The agent of gpu-01: NVML stand-in serving `fixture`, kernel log from
  /// the FIFO, host facts from the DGX H100 tree, data in <dir>/agent.
  process* start_agent(const std::string& fixture = h100x8,
                       const std::string& interval = "200ms",
                       const std::string& kmsg_path = {}) {
    std::vector<std::string> argv{program("astraeus-agent"),
                                  "--controller", addr(),
                                  "--data-dir", agent_dir().string(),
                                  "--name", machine_name,
                                  "--report-interval", interval,
                                  "--host-root", dgx_root,
                                  "--set", std::string{"gpu.nvml_library="}
                                             + ASTRAEUS_NVML_STAND_IN,
                                  "--set", "kmsg.path="
                                             + (kmsg_path.empty() ? fifo_.string()
                                                                  : kmsg_path),
                                  "--set", "reconnect.min_backoff=100ms",
                                  "--set", "reconnect.max_backoff=500ms"};
    // Enrols on its first start; later starts keep its identity.
    auto enrol = enrol_flags(port_, dir_.path(), machine_name);
    EXPECT_FALSE(enrol.empty()) << "no join token from the controller";
    argv.insert(argv.end(), enrol.begin(), enrol.end());
    agent_ = spawn("agent", std::move(argv),
                   {"ASTRAEUS_NVML_FIXTURE=" + fixture});
    return agent_;
  }

  fs::path agent_dir() const {
    return dir_ / "agent";
  }

  command_result astra(std::vector<std::string> args) {
    std::vector<std::string> argv{
      program("astra"), "--addr", addr(), "--token-file",
      (keys_dir_of((dir_ / "controller").string()) / "owner-token").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, dir_.path());
  }

  /// Every GPU the controller knows, through the gate (cheap, for polling).
  std::vector<v1::GpuView> list_gpus() {
    return list_gpu_views(port_);
  }

  static const v1::GpuView* at_pci(const std::vector<v1::GpuView>& gpus,
                                   const std::string& pci) {
    for (const auto& g : gpus)
      if (g.gpu().pci_address() == pci)
        return &g;
    return nullptr;
  }

  /// Polls until the GPU at `pci` satisfies `pred`; its last view.
  std::optional<v1::GpuView> wait_gpu(const std::string& pci,
                                      const std::function<bool(const v1::GpuView&)>& pred,
                                      milliseconds timeout = 5s) {
    std::optional<v1::GpuView> last;
    bool ok = wait_until(
      [&] {
        auto gpus = list_gpus();
        auto* g = at_pci(gpus, pci);
        if (g != nullptr)
          last = *g;
        return g != nullptr && pred(*g);
      },
      timeout, 20ms);
    if (!ok)
      return std::nullopt;
    return last;
  }

  std::optional<v1::GpuView> wait_health(const std::string& pci,
                                         const std::string& health,
                                         milliseconds timeout = 5s) {
    auto v = wait_gpu(
      pci, [&](const v1::GpuView& g) { return g.health() == health; }, timeout);
    if (!v) {
      auto gpus = list_gpus();
      auto* g = at_pci(gpus, pci);
      ADD_FAILURE() << "GPU at " << pci << " not " << health << " within "
                    << timeout.count() << " ms; last seen: "
                    << (g ? g->health() + " " + g->gpu().id() : "(not listed)");
    }
    return v;
  }

  /// `astra gpus -o json`, parsed; the GPU at `pci` from it.
  json astra_gpu(const std::string& pci) {
    auto res = astra({"gpus", "-o", "json"});
    EXPECT_EQ(res.rc, 0) << res.err;
    json doc;
    try {
      doc = json::parse(res.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "astra gpus -o json: not JSON: " << e.what() << "\n" << res.out;
      return nullptr;
    }
    for (const auto& g : doc.value("gpus", json::array()))
      if (g["gpu"].value("pci_address", "") == pci)
        return g;
    ADD_FAILURE() << "no GPU at " << pci << " in astra gpus -o json:\n" << res.out;
    return nullptr;
  }

  json astra_gpus() {
    auto res = astra({"gpus", "-o", "json"});
    EXPECT_EQ(res.rc, 0) << res.err;
    try {
      return json::parse(res.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "astra gpus -o json: not JSON: " << e.what() << "\n" << res.out;
      return nullptr;
    }
  }

  /// `astra machine gpu-01 -o json`, parsed.
  json astra_machine() {
    auto res = astra({"machine", machine_name, "-o", "json"});
    EXPECT_EQ(res.rc, 0) << res.err;
    try {
      return json::parse(res.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "astra machine -o json: not JSON: " << e.what() << "\n"
                    << res.out;
      return nullptr;
    }
  }

  /// The agent has connected and its discovery reached the controller: all
  /// 8 GPUs listed, read by the driver, machine Up.
  bool wait_gpus_discovered(milliseconds timeout = 10s) {
    bool ok = wait_until(
      [&] {
        auto gpus = list_gpus();
        if (gpus.size() != 8)
          return false;
        for (const auto& g : gpus)
          if (!g.machine_up() || g.gpu().status() != "ok")
            return false;
        return true;
      },
      timeout, 50ms);
    if (!ok)
      ADD_FAILURE() << "the 8 GPUs of " << machine_name
                    << " were not listed within " << timeout.count() << " ms ("
                    << list_gpus().size() << " listed)";
    return ok;
  }

  /// A controller (extra flags `ctl_extra`) and the agent, GPUs discovered.
  bool start_cluster(std::vector<std::string> ctl_extra = {},
                     const std::string& lapse = "2s",
                     const std::string& interval = "200ms") {
    start_controller(std::move(ctl_extra), lapse);
    if (!wait_ready(ctl_))
      return false;
    start_agent(h100x8, interval);
    return wait_gpus_discovered();
  }

  /// Writes `text` to the kernel-log FIFO as one writer session (open,
  /// write, close), waiting up to `timeout` for the agent's reader to have
  /// it open. A write that fails because the reader was between two opens
  /// is repeated (the agent skips records it already handled, by sequence).
  bool kmsg(const std::string& text, milliseconds timeout = 5s) {
    auto deadline = steady::now() + timeout;
    for (;;) {
      int fd = ::open(fifo_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) {
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        size_t off = 0;
        bool broken = false;
        while (off < text.size()) {
          auto n = ::write(fd, text.data() + off, text.size() - off);
          if (n < 0) {
            if (errno == EINTR)
              continue;
            broken = true;
            break;
          }
          off += static_cast<size_t>(n);
        }
        ::close(fd);
        if (!broken)
          return true;
      } else if (errno != ENXIO) {
        ADD_FAILURE() << "cannot open " << fifo_ << ": " << std::strerror(errno);
        return false;
      }
      if (steady::now() >= deadline) {
        ADD_FAILURE() << "no reader on " << fifo_ << " within " << timeout.count()
                      << " ms";
        return false;
      }
      std::this_thread::sleep_for(10ms);
    }
  }

  /// Kills the agent (-9) and waits until the controller saw its session end.
  void kill_agent() {
    agent_->kill_now();
    bool gone = wait_until(
      [&] {
        auto m = get_machine(port_, machine_name);
        return m && !m->connected();
      },
      5s);
    ASSERT_TRUE(gone) << "the controller still shows the killed agent connected";
  }

  /// Checks the GPU at 3a is fenced for Xid `xid` and nothing else: health
  /// Faulty with exactly one reason, one latch from the kernel log.
  void expect_fenced_3a(uint32_t xid, uint64_t count = 1) {
    auto g = astra_gpu(pci_3a);
    ASSERT_FALSE(g.is_null());
    auto reason = "Xid " + std::to_string(xid) + " fault";
    EXPECT_EQ(g.value("health", ""), "Faulty") << g.dump(2);
    EXPECT_EQ(g.value("health_reasons", json::array()), json::array({reason}))
      << g.dump(2);
    EXPECT_EQ(g["gpu"].value("id", ""), uuid_3a);
    auto latches = g["gpu"].value("latches", json::array());
    ASSERT_EQ(latches.size(), 1u) << g.dump(2);
    EXPECT_EQ(latches[0].value("reason", ""), reason);
    EXPECT_EQ(latches[0].value("xid", 0u), xid);
    EXPECT_EQ(latches[0].value("source", ""), "kernel-log");
    EXPECT_EQ(latches[0].value("gpu_id", ""), uuid_3a);
    EXPECT_EQ(latches[0].value("pci_address", ""), pci_3a);
    EXPECT_EQ(as_u64(latches[0]["count"]), count) << latches[0].dump(2);
    EXPECT_TRUE(contains(latches[0].value("evidence", ""),
                         "Xid (PCI:0000:3a:00): " + std::to_string(xid)))
      << latches[0].dump(2);
  }

  void expect_condition(bool healthy, const std::string& message_part = {}) {
    auto m = astra_machine();
    auto c = gpus_healthy_condition(m);
    ASSERT_FALSE(c.is_null()) << "no \"GPUs healthy\" condition in "
                              << m.dump(2).substr(0, 4000);
    EXPECT_EQ(c.value("status", !healthy), healthy) << c.dump();
    EXPECT_EQ(c.value("reason", ""), healthy ? "AllGPUsHealthy" : "GPUFault")
      << c.dump();
    if (!message_part.empty()) {
      EXPECT_TRUE(contains(c.value("message", ""), message_part)) << c.dump();
    }
  }

  /// `astra run` arguments for a host-process worker that runs until this
  /// test's folder is removed (so no worker outlives the test).
  std::vector<std::string> lasting(const std::string& name, const std::string& gpus) {
    return {"run", "--name", name, "--gpus", gpus, "--image", "img", "--runtime", "process",
            "--", "sh", "-c", "while [ -d '" + dir_.path().string() + "' ]; do sleep 0.2; done"};
  }

  temp_dir dir_{"astraeus-health"};
  fs::path fifo_;
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<process>> procs_;
  process* ctl_ = nullptr;
  process* agent_ = nullptr;
};

// -- 1. fencing from the kernel log ------------------------------------------------

// A fatal Xid fences its GPU at once (not with the next periodic report:
// the agent reports every 20 s here) and the machine says GPUFault.
TEST_F(Health, Xid79FencesTheGpuAndTheMachineSaysGPUFault) {
  ASSERT_TRUE(start_cluster({}, "60s", "20s"));
  EXPECT_EQ(astra_gpu(pci_3a).value("health", ""), "Healthy");
  expect_condition(true);

  auto t0 = steady::now();
  ASSERT_TRUE(kmsg(xid_line(500, "0000:3a:00", 79)));
  ASSERT_TRUE(wait_health(pci_3a, "Faulty", 3s));
  std::printf("[ timing ] Xid 79 written -> GPU Faulty on the controller: %.0f ms "
              "(polled)\n",
              seconds_since(t0) * 1000);
  expect_fenced_3a(79);
  expect_condition(false, uuid_3a + ": Xid 79 fault");
  // Only that GPU.
  EXPECT_EQ(astra_gpu(pci_ba).value("health", ""), "Healthy");
  EXPECT_TRUE(wait_until([&] { return contains(agent_->err(), "is Faulty: Xid 79 fault"); }, 5s))
    << agent_->err();
}

// A non-fatal Xid (13, graphics engine exception) is history, not a fence.
TEST_F(Health, NonFatalXid13OnlyRecordsAnIncident) {
  ASSERT_TRUE(start_cluster());
  ASSERT_TRUE(kmsg(xid_line(600, "0000:3a:00", 13, "Graphics Exception: ESR 0x404600=0x80000001")));
  auto v = wait_gpu(pci_3a, [](const v1::GpuView& g) {
    return g.gpu().incidents_size() > 0;
  });
  ASSERT_TRUE(v) << "the Xid 13 incident never reached the controller";
  // A few more reports: still Healthy.
  std::this_thread::sleep_for(600ms);
  auto g = astra_gpu(pci_3a);
  EXPECT_EQ(g.value("health", ""), "Healthy") << g.dump(2);
  EXPECT_EQ(g.value("health_reasons", json::array()), json::array());
  EXPECT_EQ(g["gpu"].value("latches", json::array()), json::array()) << g.dump(2);
  auto incidents = g["gpu"].value("incidents", json::array());
  ASSERT_EQ(incidents.size(), 1u) << g.dump(2);
  EXPECT_EQ(incidents[0].value("xid", 0u), 13u);
  EXPECT_EQ(incidents[0].value("action", ""), "record");
  EXPECT_EQ(incidents[0].value("gpu_id", ""), uuid_3a);
  EXPECT_EQ(as_u64(incidents[0]["count"]), 1u);
  expect_condition(true);
}

// An Xid for a PCI address where no GPU is: kept and shown, never dropped.
// The agent's host root has no PCI tree (the scan sees no GPU), so nothing
// says 0000:c7:00.0 holds no GPU: a fatal Xid there is held against the
// address (a lost GPU whose id is the address, Faulty), never dropped into
// "map to no GPU" (a user trial: the GPU that appeared there later showed
// Healthy). An admin may clear a latch held against an address no GPU was
// ever named at.
TEST_F(Health, AFatalXidAtAnUnlistedAddressWithNoPciScanIsHeldThere) {
  ASSERT_TRUE(start_cluster());
  ASSERT_TRUE(kmsg(xid_line(700, "0000:c7:00", 79)));
  auto v = wait_health("0000:c7:00.0", "Faulty", 5s);
  ASSERT_TRUE(v) << "the fault at 0000:c7:00.0 fenced nothing";
  EXPECT_EQ(v->gpu().id(), "0000:c7:00.0");
  auto m = astra_machine();
  EXPECT_EQ(m["facts"]["gpus"].value("unmapped_incidents", json::array()).size(), 0u)
    << m["facts"]["gpus"].dump(2).substr(0, 4000);
  expect_condition(false);
  auto res = astra({"gpu", "clear-fault", machine_name, "0000:c7:00.0", "-o", "json"});
  EXPECT_EQ(res.rc, 0) << res.err;
  EXPECT_TRUE(contains(res.out, "\"cleared\":true")) << res.out;
  ASSERT_TRUE(wait_until(
    [&] {
      auto gpus = list_gpus();
      return gpus.size() == 8 && at_pci(gpus, "0000:c7:00.0") == nullptr;
    },
    5s))
    << "the address's entry is still listed after its clear";
}

// The same Xid three times: one latch, count 3, one reason.
TEST_F(Health, RepeatsFoldIntoOneLatchWithACount) {
  ASSERT_TRUE(start_cluster());
  for (uint64_t seq : {800, 801, 802})
    ASSERT_TRUE(kmsg(xid_line(seq, "0000:3a:00", 79)));
  auto v = wait_gpu(pci_3a, [](const v1::GpuView& g) {
    return g.gpu().latches_size() == 1 && g.gpu().latches(0).count() == 3;
  });
  ASSERT_TRUE(v) << "no latch with count 3 within 5 s";
  expect_fenced_3a(79, 3);
  auto l = astra_gpu(pci_3a)["gpu"]["latches"][0];
  EXPECT_GT(as_u64(l["first_seen_unix_ms"]), 0u) << l.dump(2);
  EXPECT_LE(as_u64(l["first_seen_unix_ms"]), as_u64(l["last_seen_unix_ms"]))
    << l.dump(2);
}

// A fatal Xid that is already in the kernel log when the agent starts (the
// agent reads /dev/kmsg from its first retained record, so this is what an
// Xid logged while the agent was down or before it started looks like): it
// fences the GPU like one read later. The log is a regular file here, read
// once from its start, as the device is.
//
// Fails at the time of writing: the agent handles the record before its
// first GPU discovery finished, finds no GPU at 0000:3a:00.0, keeps it as an
// unmapped incident (action "fence") and moves its kernel-log position past
// it, so the GPU is never fenced (actors/agent/agent.cpp, on_kernel_event).
TEST_F(Health, FatalXidAlreadyInTheLogWhenTheAgentStartsFences) {
  start_controller();
  ASSERT_TRUE(wait_ready(ctl_));
  auto log = dir_ / "kmsg.log";
  write_text(log, "6,1,10,-;Linux version 6.1.0-18-amd64\n"
                    + xid_line(400, "0000:3a:00", 79));
  start_agent(h100x8, "200ms", log.string());
  ASSERT_TRUE(wait_gpus_discovered());
  auto v = wait_health(pci_3a, "Faulty", 3s);
  if (v)
    expect_fenced_3a(79);
  auto m = astra_machine();
  EXPECT_EQ(m["facts"]["gpus"].value("unmapped_incidents", json::array()),
            json::array())
    << "the Xid of a GPU that is there was kept as mapping to no GPU";
  expect_condition(false, "Xid 79 fault");
}

// kmsg.path at a syslog file (/var/log/kern.log), which keeps the lines of
// earlier boots and is read from its start: an Xid logged in 2020, on the
// idle GPU at ba, fenced it at the agent's first start. A line of an earlier
// boot fences nothing; this boot's Xid at 3a fences (the wall-clock time
// crosses from the kernel-log thread to the agent actor).
TEST_F(Health, AKernLogXidOfAnEarlierBootFencesNothing) {
  start_controller();
  ASSERT_TRUE(wait_ready(ctl_));
  auto log = dir_ / "kern.log";
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S+00:00", &utc);
  const std::string fell = ", pid=1234, name=python3, GPU has fallen off the bus.\n";
  write_text(log, "2020-01-02T03:04:05.000000+00:00 gpu-01 kernel: [  700.000001] NVRM: Xid "
                  "(PCI:0000:ba:00): 79"
                    + fell + stamp + " gpu-01 kernel: [ 9000.000001] NVRM: Xid (PCI:0000:3a:00): 79"
                    + fell);
  start_agent(h100x8, "200ms", log.string());
  ASSERT_TRUE(wait_gpus_discovered());
  auto v = wait_health(pci_3a, "Faulty", 3s);
  if (v)
    expect_fenced_3a(79);
  auto ba = astra_gpu(pci_ba);
  EXPECT_EQ(ba.value("health", ""), "Healthy") << ba.dump(2);
  EXPECT_EQ(ba["gpu"].value("latches", json::array()), json::array()) << ba.dump(2);
}

// -- 2. the latch is durable --------------------------------------------------------

// kill -9 and a restart on the same data folder: still Faulty, before any
// new kernel-log line (the FIFO is empty this time).
TEST_F(Health, LatchSurvivesKill9AndRestart) {
  ASSERT_TRUE(start_cluster());
  ASSERT_TRUE(kmsg(xid_line(900, "0000:3a:00", 79)));
  auto before = wait_health(pci_3a, "Faulty");
  ASSERT_TRUE(before);
  auto first_seen = before->gpu().latches(0).first_seen_unix_ms();
  // Kill the agent right after the fence showed.
  kill_agent();
  auto restarted_ms = unix_ms_now();
  start_agent();
  // The restarted agent reports (connected again, a report after the
  // restart, discovery done).
  bool reported = wait_until(
    [&] {
      auto m = get_machine(port_, machine_name);
      return m && m->connected() && m->last_report_unix_ms() > restarted_ms;
    },
    5s);
  ASSERT_TRUE(reported) << "the restarted agent did not report";
  ASSERT_TRUE(wait_gpus_discovered());
  // From then on, for several reports: Faulty all along.
  auto until = steady::now() + 1s;
  while (steady::now() < until) {
    auto gpus = list_gpus();
    auto* g = at_pci(gpus, pci_3a);
    ASSERT_NE(g, nullptr);
    ASSERT_EQ(g->health(), "Faulty") << "the latch was lost by the restart";
    std::this_thread::sleep_for(100ms);
  }
  expect_fenced_3a(79);
  auto l = astra_gpu(pci_3a)["gpu"]["latches"][0];
  EXPECT_EQ(as_u64(l["first_seen_unix_ms"]), static_cast<uint64_t>(first_seen))
    << "the latch is not the stored one";
  expect_condition(false, "Xid 79 fault");
}

// An agent restart is not a new set of GPUs: the controller keeps its GPU
// actors (and their 24 h counter history) across it. Here the GPU at 3a
// logged 500 PCIe replays while the agent was restarting (0 before, 500
// after): more than 100 in 24 h, so it is AtRisk.
//
// Before its first discovery pass the restarted agent reports its GPU
// section read as "pending" (actors/agent/agent.cpp, send_report), which is
// not a complete read (messages/gpu_read.hpp, is_complete_read): were it
// taken for one, the machine actor would drop every GPU actor ("GPU ... is
// gone") and make new ones a moment later, with no history.
TEST_F(Health, AgentRestartKeepsTheGpusAndTheirHistory) {
  ASSERT_TRUE(start_cluster());
  auto before = wait_gpu(pci_3a, [](const v1::GpuView& g) {
    return g.gpu().has_pcie_replays() && g.gpu().pcie_replays() == 0;
  });
  ASSERT_TRUE(before) << "no PCIe replay count for the GPU at " << pci_3a;
  EXPECT_EQ(before->health(), "Healthy");
  kill_agent();
  start_agent(h100x8_replays);
  auto after = wait_gpu(pci_3a, [](const v1::GpuView& g) {
    return g.gpu().pcie_replays() == 500 && g.machine_up();
  });
  ASSERT_TRUE(after) << "the restarted agent's readings did not arrive";
  ASSERT_TRUE(wait_gpus_discovered());
  std::this_thread::sleep_for(400ms);
  EXPECT_FALSE(contains(ctl_->err(), "is gone"))
    << "the controller dropped GPUs that are still there:\n"
    << tail(ctl_->err());
  auto g = astra_gpu(pci_3a);
  EXPECT_EQ(g.value("health", ""), "AtRisk") << g.dump(2).substr(0, 3000);
  EXPECT_EQ(g.value("health_reasons", json::array()),
            json::array({"500 PCIe replays in 24 h (> 100)"}));
}

// The controller keeps the last known fault while the machine is Down.
TEST_F(Health, ControllerKeepsShowingTheFaultWhileTheMachineIsDown) {
  ASSERT_TRUE(start_cluster({}, "1s"));
  ASSERT_TRUE(kmsg(xid_line(1000, "0000:3a:00", 79)));
  ASSERT_TRUE(wait_health(pci_3a, "Faulty"));
  agent_->kill_now();
  bool down = wait_until(
    [&] { return machine_in_state(port_, machine_name, v1::Machine::Down); }, 5s);
  ASSERT_TRUE(down) << "the machine did not go Down within 5 s (lapse 1 s)";
  auto g = astra_gpu(pci_3a);
  EXPECT_EQ(g.value("health", ""), "Faulty") << g.dump(2);
  EXPECT_EQ(g.value("health_reasons", json::array()), json::array({"Xid 79 fault"}));
  EXPECT_FALSE(g.value("machine_up", true)) << g.dump(2);
  auto m = astra_machine();
  EXPECT_EQ(m.value("state", ""), "Down");
  expect_condition(false, "Xid 79 fault");
}

// -- 3. clearing --------------------------------------------------------------------

TEST_F(Health, ClearFaultRoundTripWhileConnected) {
  ASSERT_TRUE(start_cluster());
  ASSERT_TRUE(kmsg(xid_line(1100, "0000:3a:00", 79)));
  ASSERT_TRUE(wait_health(pci_3a, "Faulty"));
  auto res = astra({"gpu", "clear-fault", machine_name, uuid_3a, "-o", "json"});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_EQ(res.out, "{\"uuid\":\"" + uuid_3a + "\",\"cleared\":true}\n");
  ASSERT_TRUE(wait_health(pci_3a, "Healthy"));
  auto g = astra_gpu(pci_3a);
  EXPECT_EQ(g["gpu"].value("latches", json::array()), json::array()) << g.dump(2);
  EXPECT_EQ(g.value("health_reasons", json::array()), json::array());
  expect_condition(true);
  // Nothing latched any more.
  res = astra({"gpu", "clear-fault", machine_name, uuid_3a, "-o", "json"});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_EQ(res.out, "{\"uuid\":\"" + uuid_3a + "\",\"cleared\":false}\n");
  // For people, a sentence.
  res = astra({"gpu", "clear-fault", machine_name, uuid_3a});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_EQ(res.out, "GPU " + uuid_3a + " on " + machine_name
                       + ": nothing was latched; nothing to clear.\n");
  // A GPU that never had a fault.
  res = astra({"gpu", "clear-fault", machine_name, uuid_ba, "-o", "json"});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_EQ(res.out, "{\"uuid\":\"" + uuid_ba + "\",\"cleared\":false}\n");
  // The clear is audited on the controller.
  EXPECT_TRUE(contains(ctl_->err(), "clear-fault " + machine_name + "/" + uuid_3a
                                      + ": cleared"))
    << ctl_->err();
  // By its index, as `astra gpu show` takes it (0000:3a:00.0 is GPU 2).
  ASSERT_TRUE(kmsg(xid_line(1150, "0000:3a:00", 79)));
  ASSERT_TRUE(wait_health(pci_3a, "Faulty"));
  res = astra({"gpu", "clear-fault", machine_name, "2", "-o", "json"});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_EQ(res.out, "{\"uuid\":\"" + uuid_3a + "\",\"cleared\":true}\n");
  res = astra({"gpu", "clear-fault", machine_name, "99"});
  EXPECT_EQ(res.rc, 1);
  EXPECT_TRUE(contains(res.err, "has no GPU 99")) << res.err;
  // Every latched GPU of the machine at once (after a fix that mended
  // them all: a shared node's hand-over failure fences every GPU).
  ASSERT_TRUE(kmsg(xid_line(1160, "0000:3a:00", 79)));
  ASSERT_TRUE(kmsg(xid_line(1161, "0000:ba:00", 79)));
  ASSERT_TRUE(wait_health(pci_3a, "Faulty"));
  ASSERT_TRUE(wait_health(pci_ba, "Faulty"));
  res = astra({"gpu", "clear-fault", machine_name, "--all"});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_TRUE(contains(res.out, "GPU " + uuid_3a + " on " + machine_name + ": fault cleared"))
    << res.out;
  EXPECT_TRUE(contains(res.out, "GPU " + uuid_ba + " on " + machine_name + ": fault cleared"))
    << res.out;
  ASSERT_TRUE(wait_health(pci_3a, "Healthy"));
  ASSERT_TRUE(wait_health(pci_ba, "Healthy"));
  res = astra({"gpu", "clear-fault", machine_name, "--all", "-o", "json"});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_EQ(res.out, "[]\n");
  res = astra({"gpu", "clear-fault", machine_name, "--all"});
  EXPECT_EQ(res.out, "No GPU of " + machine_name + " has a latched fault; nothing to clear.\n");
  // A GPU and --all, or neither: a usage error (exit 2).
  EXPECT_EQ(astra({"gpu", "clear-fault", machine_name, uuid_3a, "--all"}).rc, 2);
  res = astra({"gpu", "clear-fault", machine_name});
  EXPECT_EQ(res.rc, 2);
  EXPECT_TRUE(contains(res.err, "--all")) << res.err;
}

// A clear needs the machine: with its agent gone it fails and says so, and
// the latch stays (on the controller and in the agent's store).
TEST_F(Health, ClearFaultWhileNotConnectedFailsAndKeepsTheLatch) {
  ASSERT_TRUE(start_cluster());
  ASSERT_TRUE(kmsg(xid_line(1200, "0000:3a:00", 79)));
  ASSERT_TRUE(wait_health(pci_3a, "Faulty"));
  kill_agent();
  auto res = astra({"gpu", "clear-fault", machine_name, uuid_3a});
  EXPECT_FALSE(res.timed_out);
  EXPECT_NE(res.rc, 0) << res.out;
  EXPECT_TRUE(contains(res.err, "not connected")) << res.err;
  EXPECT_TRUE(contains(res.err, machine_name)) << res.err;
  EXPECT_EQ(astra_gpu(pci_3a).value("health", ""), "Faulty");
  // Every latched GPU at once, -o json: the refusal's error object alone,
  // its code as the API spells it (a ninth trial read it followed by "[]").
  res = astra({"gpu", "clear-fault", machine_name, "--all", "-o", "json"});
  EXPECT_EQ(res.rc, 1) << res.out << res.err;
  auto error = json::parse(res.out, nullptr, false);
  ASSERT_FALSE(error.is_discarded()) << res.out;
  EXPECT_EQ(error.value("code", ""), "NOT_CONNECTED") << res.out;
  // Back: still latched.
  auto restarted_ms = unix_ms_now();
  start_agent();
  ASSERT_TRUE(wait_until(
    [&] {
      auto m = get_machine(port_, machine_name);
      return m && m->connected() && m->last_report_unix_ms() > restarted_ms;
    },
    5s));
  ASSERT_TRUE(wait_gpus_discovered());
  std::this_thread::sleep_for(400ms);
  expect_fenced_3a(79);
}

// Cleared, then the same Xid again (a later record): fenced again. A record
// the agent already handled (same sequence number) does not come back.
TEST_F(Health, AFaultThatComesBackFencesAgain) {
  ASSERT_TRUE(start_cluster());
  ASSERT_TRUE(kmsg(xid_line(1300, "0000:3a:00", 79)));
  ASSERT_TRUE(wait_health(pci_3a, "Faulty"));
  auto res = astra({"gpu", "clear-fault", machine_name, uuid_3a, "-o", "json"});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_EQ(res.out, "{\"uuid\":\"" + uuid_3a + "\",\"cleared\":true}\n");
  ASSERT_TRUE(wait_health(pci_3a, "Healthy"));
  // The old record again (as /dev/kmsg replays on a re-read): not a new fault.
  ASSERT_TRUE(kmsg(xid_line(1300, "0000:3a:00", 79)));
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(astra_gpu(pci_3a).value("health", ""), "Healthy")
    << "an already handled record fenced the GPU again";
  // A new record: fenced again, a fresh latch.
  ASSERT_TRUE(kmsg(xid_line(1301, "0000:3a:00", 79)));
  ASSERT_TRUE(wait_health(pci_3a, "Faulty"));
  expect_fenced_3a(79, 1);
  expect_condition(false, "Xid 79 fault");
}

// -- 4. replacement -----------------------------------------------------------------

// Another UUID at the latched GPU's PCI address: the GPU was replaced, the
// latch is dropped (on the agent too: a clear of the old id finds nothing).
TEST_F(Health, AReplacedGpuDropsTheLatch) {
  ASSERT_TRUE(start_cluster());
  ASSERT_TRUE(kmsg(xid_line(1400, "0000:3a:00", 79)));
  ASSERT_TRUE(wait_health(pci_3a, "Faulty"));
  kill_agent();
  start_agent(h100x8_replaced);
  auto v = wait_gpu(
    pci_3a,
    [](const v1::GpuView& g) {
      return g.gpu().id() == uuid_3a_replaced && g.machine_up();
    },
    10s);
  ASSERT_TRUE(v) << "the new GPU at " << pci_3a << " was not listed";
  // Give the controller a few reports to settle, then check.
  ASSERT_TRUE(wait_until(
    [&] {
      auto gpus = list_gpus();
      return gpus.size() == 8
             && std::none_of(gpus.begin(), gpus.end(), [](const auto& g) {
                  return g.gpu().id() == uuid_3a;
                });
    },
    5s))
    << "the old GPU id is still listed";
  auto g = astra_gpu(pci_3a);
  EXPECT_EQ(g["gpu"].value("id", ""), uuid_3a_replaced);
  EXPECT_EQ(g.value("health", ""), "Healthy") << g.dump(2);
  EXPECT_EQ(g["gpu"].value("latches", json::array()), json::array()) << g.dump(2);
  for (const auto& x : astra_gpus().value("gpus", json::array())) {
    EXPECT_NE(x["gpu"].value("id", ""), uuid_3a) << x.dump(2);
    EXPECT_NE(x.value("health", ""), "Faulty") << x.dump(2);
  }
  expect_condition(true);
  EXPECT_TRUE(wait_until([&] { return contains(agent_->err(), "was replaced"); }, 5s))
    << agent_->err();
  // The old id names no GPU of the machine any more: said so, exit 1.
  auto res = astra({"gpu", "clear-fault", machine_name, uuid_3a});
  EXPECT_EQ(res.rc, 1) << res.out;
  EXPECT_TRUE(contains(res.err, "has no GPU " + uuid_3a)) << res.err;
}

// -- 5. Foreign -----------------------------------------------------------------------

// Busy GPUs (over 10 % of memory used, not assigned by Astraeus) are
// Foreign; the idle ones Healthy. Foreign is not a fence.
TEST_F(Health, BusyGpusAreForeignIdleOnesHealthy) {
  ASSERT_TRUE(start_cluster());
  ASSERT_TRUE(wait_health(busy_pcis.front(), "Foreign"));
  auto doc = astra_gpus();
  auto list = doc.value("gpus", json::array());
  ASSERT_EQ(list.size(), 8u) << doc.dump(2).substr(0, 3000);
  for (const auto& g : list) {
    auto pci = g["gpu"].value("pci_address", "");
    bool busy = std::find(busy_pcis.begin(), busy_pcis.end(), pci) != busy_pcis.end();
    bool idle = std::find(idle_pcis.begin(), idle_pcis.end(), pci) != idle_pcis.end();
    ASSERT_TRUE(busy || idle) << "unexpected GPU at " << pci;
    EXPECT_EQ(g.value("machine", ""), machine_name);
    if (busy) {
      EXPECT_EQ(g.value("health", ""), "Foreign") << g.dump(2);
      auto reasons = g.value("health_reasons", json::array());
      ASSERT_EQ(reasons.size(), 1u) << g.dump(2);
      EXPECT_TRUE(contains(reasons[0].get<std::string>(),
                           "of its memory in use outside Astraeus (> 10%)"))
        << reasons[0];
    } else {
      EXPECT_EQ(g.value("health", ""), "Healthy") << g.dump(2);
      EXPECT_EQ(g.value("health_reasons", json::array()), json::array());
    }
  }
  expect_condition(true);
  // A fault outranks Foreign.
  ASSERT_TRUE(kmsg(xid_line(1500, "0000:18:00", 48, "DBE (double bit error) ECC error")));
  auto v = wait_health(busy_pcis.front(), "Faulty");
  ASSERT_TRUE(v);
  EXPECT_EQ(std::vector<std::string>(v->health_reasons().begin(),
                                     v->health_reasons().end()),
            std::vector<std::string>{"Xid 48 fault"});
}

// -- 6. the Xid policy ------------------------------------------------------------------

TEST_F(Health, XidsListsTheBuiltInPolicy) {
  start_controller();
  ASSERT_TRUE(wait_ready(ctl_));
  auto res = astra({"xids", "-o", "json"});
  ASSERT_EQ(res.rc, 0) << res.err;
  json doc;
  ASSERT_NO_THROW(doc = json::parse(res.out)) << res.out;
  EXPECT_EQ(doc.value("default_action", ""), "record");
  std::map<uint32_t, json> by_xid;
  for (const auto& e : doc.value("entries", json::array()))
    by_xid[e.value("xid", 0u)] = e;
  ASSERT_TRUE(by_xid.count(79)) << res.out;
  ASSERT_TRUE(by_xid.count(13)) << res.out;
  EXPECT_EQ(by_xid[79].value("action", ""), "fence");
  EXPECT_FALSE(by_xid[79].value("overridden", true));
  EXPECT_EQ(by_xid[13].value("action", ""), "record");
  EXPECT_FALSE(by_xid[13].value("overridden", true));
  for (uint32_t x : {48u, 63u, 74u, 79u, 92u, 95u, 119u, 120u, 149u, 154u}) {
    ASSERT_TRUE(by_xid.count(x)) << "Xid " << x << " missing";
    EXPECT_EQ(by_xid[x].value("action", ""), "fence") << "Xid " << x;
  }
  // The table.
  res = astra({"xids"});
  ASSERT_EQ(res.rc, 0) << res.err;
  std::stringstream in{res.out};
  std::string line, line79, line13;
  while (std::getline(in, line)) {
    if (line.rfind("79 ", 0) == 0)
      line79 = line;
    if (line.rfind("13 ", 0) == 0)
      line13 = line;
  }
  EXPECT_TRUE(contains(line79, "fence") && contains(line79, "built-in")) << res.out;
  EXPECT_TRUE(contains(line13, "record") && contains(line13, "built-in")) << res.out;
}

// xid.fence=13 in the controller's config: astra xids says so, the agent
// gets the policy, and an Xid 13 fences.
TEST_F(Health, ConfiguredXid13Fences) {
  ASSERT_TRUE(start_cluster({"--set", "xid.fence=13"}));
  auto res = astra({"xids", "-o", "json"});
  ASSERT_EQ(res.rc, 0) << res.err;
  json doc;
  ASSERT_NO_THROW(doc = json::parse(res.out)) << res.out;
  bool found = false;
  for (const auto& e : doc.value("entries", json::array()))
    if (e.value("xid", 0u) == 13u) {
      found = true;
      EXPECT_EQ(e.value("action", ""), "fence") << e.dump();
      EXPECT_TRUE(e.value("overridden", false)) << e.dump();
    }
  EXPECT_TRUE(found) << res.out;
  res = astra({"xids"});
  ASSERT_EQ(res.rc, 0) << res.err;
  std::stringstream in{res.out};
  std::string line, line13;
  while (std::getline(in, line))
    if (line.rfind("13 ", 0) == 0)
      line13 = line;
  EXPECT_TRUE(contains(line13, "fence") && contains(line13, "config")) << res.out;

  ASSERT_TRUE(kmsg(xid_line(1600, "0000:3a:00", 13, "Graphics Exception")));
  ASSERT_TRUE(wait_health(pci_3a, "Faulty"));
  expect_fenced_3a(13);
  expect_condition(false, "Xid 13 fault");
}

TEST_F(Health, BrokenXidFenceConfigStopsTheController) {
  auto res = run_command(controller_argv({"--set", "xid.fence=13,x"}), dir_.path(),
                         10s);
  EXPECT_FALSE(res.timed_out) << "the controller started anyway";
  EXPECT_NE(res.rc, 0);
  EXPECT_TRUE(contains(res.err, "xid.fence")) << res.err;
  EXPECT_TRUE(contains(res.err, "'x' is not an Xid number")) << res.err;
}

} // namespace

// End to end through `astra run`: the scheduler never assigns a Foreign or a
// Faulty GPU. On the h100x8 stand-in only the GPUs at 3a and ba are idle
// (Healthy); the six busy ones are Foreign.
TEST_F(Health, AFencedGpuIsNeverOfferedForAssignment) {
  ASSERT_TRUE(start_cluster());
  ASSERT_TRUE(wait_health(pci_3a, "Healthy", 5s));
  // Fence 3a: only ba is left.
  ASSERT_TRUE(kmsg(xid_line(900, "0000:3a:00", 79)));
  ASSERT_TRUE(wait_health(pci_3a, "Faulty", 3s));
  auto two = astra(lasting("two", "2"));
  ASSERT_EQ(two.rc, 0) << two.err;
  EXPECT_TRUE(contains(two.out, "Waiting")) << two.out;
  auto one = astra(lasting("one", "1"));
  ASSERT_EQ(one.rc, 0) << one.err;
  auto show = astra({"run", "show", "one", "-o", "json"});
  ASSERT_EQ(show.rc, 0) << show.err;
  auto run = json::parse(show.out);
  ASSERT_NE(run.value("state", ""), "Waiting") << show.out;
  auto ids = run["workers"][0]["gpu_ids"];
  ASSERT_EQ(ids.size(), 1u) << show.out;
  EXPECT_EQ(ids[0].get<std::string>(), astra_gpu(pci_ba).value("gpu", json::object()).value("id", ""))
    << "the only GPU that is neither Faulty nor Foreign";
  // Clearing the fault lets the waiting run... still wait (one GPU left),
  // but a 1-GPU run now lands on 3a.
  auto cleared = astra({"gpu", "clear-fault", machine_name, uuid_3a});
  ASSERT_EQ(cleared.rc, 0) << cleared.err;
  ASSERT_TRUE(wait_health(pci_3a, "Healthy", 3s));
  auto three = astra(lasting("three", "1"));
  ASSERT_EQ(three.rc, 0) << three.err;
  auto runs = astra({"runs", "-o", "json"});
  auto doc = json::parse(runs.out);
  int placed = 0;
  for (const auto& r : doc.value("runs", json::array()))
    if (r.value("state", "") == "Placed" || r.value("state", "") == "Running")
      ++placed;
  EXPECT_EQ(placed, 2) << runs.out;
}

// --- Assignments reach the agent; workspaces ------------------------------

namespace {

json run_json(const command_result& r) {
  try {
    return json::parse(r.out);
  } catch (...) {
    return json::object();
  }
}

} // namespace

TEST_F(Health, AssignmentsReachTheAgentAreDownWithItAndBackAfterItsRestart) {
  ASSERT_TRUE(start_cluster());
  auto sub = astra(lasting("train", "2"));
  ASSERT_EQ(sub.rc, 0) << sub.err;
  auto worker_state = [&] {
    auto w = run_json(astra({"run", "show", "train", "-o", "json"}))["workers"];
    return w.is_array() && !w.empty() ? w[0].value("state", "") : std::string{};
  };
  // The agent holds it and runs it.
  ASSERT_TRUE(wait_until([&] { return worker_state() == "Running"; }, 5s))
    << astra({"run", "show", "train"}).out;
  auto run = run_json(astra({"run", "show", "train", "-o", "json"}));
  EXPECT_EQ(run.value("master_addr", ""), "127.0.0.1");
  EXPECT_EQ(run["workers"][0].value("name", ""), "train-0");
  EXPECT_TRUE(run["workers"][0].value("acknowledged", false));
  auto shown = astra({"run", "show", "train"});
  EXPECT_TRUE(contains(shown.out, "MASTER_ADDR: 127.0.0.1:29500")) << shown.out;
  // astra gpus names the worker holding each of its GPUs.
  int held = 0;
  for (const auto& g : astra_gpus().value("gpus", json::array()))
    if (g.value("holder", "") == "train-0")
      ++held;
  EXPECT_EQ(held, 2) << astra({"gpus"}).out;
  // The agent dies: once the machine is Down its worker is Down, GPUs kept.
  kill_agent();
  ASSERT_TRUE(wait_until([&] { return worker_state() == "Down"; }, 6s))
    << astra({"run", "show", "train"}).out;
  EXPECT_EQ(run_json(astra({"run", "show", "train", "-o", "json"}))["workers"][0]["gpu_ids"].size(),
            2u);
  // Back with the same data folder: it still holds the worker, and finds
  // it still running.
  start_agent();
  ASSERT_TRUE(wait_until([&] { return worker_state() == "Running"; }, 6s))
    << astra({"run", "show", "train"}).out;
  EXPECT_EQ(run_json(astra({"run", "show", "train", "-o", "json"})).value("state", ""), "Running");
}

TEST_F(Health, AWorkspaceRunsOnlyOnTheLabelsItWasGranted) {
  ASSERT_TRUE(start_cluster());
  auto made = astra({"workspace", "create", "research", "--grant", "pool=a100"});
  ASSERT_EQ(made.rc, 0) << made.err;
  EXPECT_TRUE(contains(made.out, "workspace research created (namespace ws-")) << made.out;
  auto list = astra({"workspaces"});
  EXPECT_TRUE(contains(list.out, "pool=a100")) << list.out;
  EXPECT_TRUE(contains(list.out, "(all machines)")) << list.out;
  // This machine carries no pool=a100: the run waits and says so.
  auto r1 = astra({"run", "--name", "r1", "--workspace", "research", "--gpus", "1",
                   "--image", "img", "--", "true"});
  ASSERT_EQ(r1.rc, 0) << r1.err;
  EXPECT_TRUE(contains(r1.out, "Waiting")) << r1.out;
  EXPECT_TRUE(contains(r1.out, "a100")) << r1.out;
  auto clash = astra({"run", "--name", "r2", "--workspace", "research", "--pool", "h100",
                      "--gpus", "1", "--image", "img", "--", "true"});
  EXPECT_NE(clash.rc, 0);
  EXPECT_TRUE(contains(clash.err, "workspace research is granted pool=a100; the run asks for pool=h100"))
    << clash.err;
  auto none = astra({"run", "--name", "r3", "--workspace", "nope", "--gpus", "1",
                     "--image", "img", "--", "true"});
  EXPECT_NE(none.rc, 0);
  EXPECT_TRUE(contains(none.err, "no workspace named nope")) << none.err;
  auto open = astra({"run", "--name", "r4", "--gpus", "1", "--image", "img", "--", "true"});
  ASSERT_EQ(open.rc, 0) << open.err;
  // Placed at once: the submission line says no more (the seed's line).
  EXPECT_EQ(open.out.rfind("r4 submitted to default: http", 0), 0u) << open.out;
  // Labelling the machine into pool a100 lets the workspace's run in.
  auto labelled = astra({"label", machine_name, "pool=a100"});
  ASSERT_EQ(labelled.rc, 0) << labelled.err;
  EXPECT_TRUE(contains(labelled.out, "pool=a100")) << labelled.out;
  // Placed (its worker then starts, and with no image 'img' here, fails).
  EXPECT_TRUE(wait_until(
    [&] {
      auto workers = run_json(astra({"run", "show", "r1", "-o", "json"}))["workers"];
      return workers.is_array() && !workers.empty();
    },
    3s))
    << astra({"run", "show", "r1"}).out;
  auto bad = astra({"label", machine_name, "pool=has space"});
  EXPECT_NE(bad.rc, 0);
  EXPECT_TRUE(contains(bad.err, "label pool='has space'")) << bad.err;
}
