// Real-process integration tests of issue 17: every faulty GPU fenced,
// whatever order the evidence comes in (shared/seeds/gpus.md, "Health").
// A controller, an agent on the NVML stand-in (test/stand_in) whose fixture
// is a file in the test's folder that the test rewrites while the agent
// runs, and `astra`, all on loopback:
// - rule 1: a fault logged before discovery (NVML init hangs; the kernel
//   log already holds it when the agent starts) fences the GPU found later
//   at its address, and that GPU is never shown Healthy in between;
// - rule 2: a GPU that vanishes from NVML between passes stays listed,
//   Faulty, and the machine's conditions name the count mismatch;
//   (rule 7: "lost: ..." is Faulty, in the "GPUs healthy" condition too.)
// Every process a test starts is killed in TearDown.

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "integration/cluster_harness.hpp"

using namespace astraeus;
using namespace astraeus::itest;
using json = nlohmann::json;

namespace {

const std::string node = "gpu-07";
const std::string pci_3a = "0000:3a:00.0";
const std::string uuid_3a = "GPU-1b7e4c2a-93d5-4f6e-8a21-6c0d9e8f7b32";
const std::string pci_ba = "0000:ba:00.0";
const std::vector<std::string> all_pcis = {"0000:18:00.0", "0000:2a:00.0", pci_3a,
                                           "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0",
                                           pci_ba, "0000:db:00.0"};

json fixture_h100x8() {
  std::ifstream in(std::string{ASTRAEUS_SOURCE_DIR} + "/test/fixtures/nvml/h100x8.json");
  return json::parse(in);
}

/// An Xid record in /dev/kmsg form for bus "0000:3a:00".
std::string xid_record(uint64_t seq, const std::string& bus, uint32_t xid) {
  return "4," + std::to_string(seq) + "," + std::to_string(2000000 + seq) + ",-;NVRM: Xid (PCI:"
         + bus + "): " + std::to_string(xid) + ", pid=4242, name=train.py, GPU has fallen off "
         + "the bus.\n";
}

class HealthOrder : public ::testing::Test {
protected:
  void SetUp() override {
    port_ = free_port();
    ASSERT_NE(port_, 0);
    ::signal(SIGPIPE, SIG_IGN);
    nvml_ = dir_ / "nvml.json";
    set_nvml(fixture_h100x8());
  }

  void TearDown() override {
    // Whatever hangs in the stand-in is let go before the agent is killed.
    write_text(dir_ / "release", "");
    bool failed = HasFailure();
    for (auto& p : procs_) {
      if (failed)
        std::fprintf(stderr, "---- %s\n---- stderr:\n%s\n", p->command_line().c_str(),
                     p->err().substr(p->err().size() > 6000 ? p->err().size() - 6000 : 0).c_str());
      p->kill_now();
    }
  }

  /// The stand-in's fixture, replaced as a whole (it re-reads a changed file).
  void set_nvml(const json& doc) {
    write_text(dir_ / "nvml.json.new", doc.dump(2));
    fs::rename(dir_ / "nvml.json.new", nvml_);
  }

  /// A host root: the DGX H100 tree, plus the eight GPUs on its PCI bus,
  /// bound to the nvidia driver.
  std::string host_with_bus() {
    auto root = dir_ / "host";
    fs::copy(std::string{ASTRAEUS_SOURCE_DIR} + "/test/fixtures/hosts/dgx-h100", root,
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    for (const auto& pci : all_pcis) {
      auto dev = root / "sys/bus/pci/devices" / pci;
      fs::create_directories(dev);
      write_text(dev / "class", "0x030200\n");
      write_text(dev / "vendor", "0x10de\n");
      write_text(dev / "device", "0x2330\n");
      write_text(dev / "numa_node", "0\n");
      write_text(dev / "uevent", "DRIVER=nvidia\nPCI_SLOT_NAME=" + pci + "\n");
    }
    return root.string();
  }

  process* spawn(const std::string& label, std::vector<std::string> argv,
                 std::vector<std::string> env = {}) {
    return spawn_kept(procs_, dir_.path(), label, std::move(argv), std::move(env));
  }

  bool start_controller() {
    auto* ctl = spawn("controller", {program("astraeus-controller"), "--port",
                                     std::to_string(port_), "--data-dir",
                                     (dir_ / "controller").string(), "--heartbeat-lapse", "3s",
                                     // at most a third of the lapse (issue 18, rule 10)
                                     "--set", "heartbeat.report_interval=1s"});
    bool up = wait_until(
      [&] {
        return !ctl->running()
               || (use_owner_credentials(port_, keys_dir_of((dir_ / "controller").string()))
                   && static_cast<bool>(gate_client::connect_cli(loopback(port_), 500ms,
                                                                 owner_credentials(port_))));
      },
      10s);
    EXPECT_TRUE(up && ctl->running()) << ctl->err();
    return up && ctl->running();
  }

  /// The agent, reading its kernel log from `kmsg` (a FIFO or a file).
  process* start_agent(const std::string& kmsg, const std::string& host_root) {
    std::vector<std::string> argv{program("astraeus-agent"),
                                  "--controller", "127.0.0.1:" + std::to_string(port_),
                                  "--data-dir", (dir_ / "agent").string(),
                                  "--name", node,
                                  "--report-interval", "200ms",
                                  "--host-root", host_root,
                                  "--set", std::string{"gpu.nvml_library="} + ASTRAEUS_NVML_STAND_IN,
                                  "--set", "gpu.call_deadline=300ms",
                                  "--set", "kmsg.path=" + kmsg,
                                  "--set", "reconnect.min_backoff=100ms",
                                  "--set", "reconnect.max_backoff=500ms"};
    auto enrol = enrol_flags(port_, dir_.path(), node);
    EXPECT_FALSE(enrol.empty());
    argv.insert(argv.end(), enrol.begin(), enrol.end());
    return spawn("agent", std::move(argv),
                 {"ASTRAEUS_NVML_FIXTURE=" + nvml_.string(),
                  "ASTRAEUS_NVML_HANG_RELEASE=" + (dir_ / "release").string()});
  }

  std::vector<v1::GpuView> gpus() {
    return list_gpu_views(port_);
  }

  static std::optional<v1::GpuView> at(const std::vector<v1::GpuView>& list,
                                       const std::string& pci) {
    for (const auto& g : list)
      if (g.gpu().pci_address() == pci)
        return g;
    return std::nullopt;
  }

  /// Waits until the GPU at `pci` holds `pred`; its last view (or none).
  std::optional<v1::GpuView> await_gpu(const std::string& pci,
                                       const std::function<bool(const v1::GpuView&)>& pred,
                                       milliseconds timeout = 10s) {
    std::optional<v1::GpuView> last;
    bool ok = wait_until(
      [&] {
        last = at(gpus(), pci);
        return last && pred(*last);
      },
      timeout, 20ms);
    return ok ? last : std::nullopt;
  }

  json astra_json(std::vector<std::string> args) {
    std::vector<std::string> argv{
      program("astra"), "--addr", "127.0.0.1:" + std::to_string(port_), "--token-file",
      (keys_dir_of((dir_ / "controller").string()) / "owner-token").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"-o", "json"});
    auto res = run_command(argv, dir_.path());
    EXPECT_EQ(res.rc, 0) << res.err;
    try {
      return json::parse(res.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON: " << e.what() << "\n" << res.out;
      return nullptr;
    }
  }

  json condition(const std::string& type) {
    auto m = astra_json({"machine", node});
    for (const auto& c : m["facts"]["gpus"].value("conditions", json::array()))
      if (c.value("type", "") == type)
        return c;
    return nullptr;
  }

  temp_dir dir_{"astraeus-health-order"};
  uint16_t port_ = 0;
  fs::path nvml_;
  std::vector<std::unique_ptr<process>> procs_;
};

} // namespace

// Rule 1, the agent just started: the kernel log (a regular file here, as a
// boot's ring buffer would be) already holds an Xid 79 for 3a. The first
// report carries the fence: the GPU at 3a is Faulty the first time it is
// listed, never Healthy. The file is then followed as it grows (rule 10).
TEST_F(HealthOrder, AFaultAlreadyInTheLogFencesTheGpuInTheFirstReport) {
  ASSERT_TRUE(start_controller());
  auto log = dir_ / "kmsg.log";
  write_text(log, "6,1,1000,-;Linux version 6.8.0\n" + xid_record(40, "0000:3a:00", 79));
  start_agent(log.string(), std::string{ASTRAEUS_SOURCE_DIR} + "/test/fixtures/hosts/dgx-h100");
  std::vector<std::string> seen_3a;
  bool listed = wait_until(
    [&] {
      auto list = gpus();
      if (auto g = at(list, pci_3a))
        seen_3a.push_back(g->health() + " " + g->gpu().id());
      return list.size() == 8 && at(list, pci_3a) && at(list, pci_3a)->gpu().id() == uuid_3a;
    },
    10s, 5ms);
  ASSERT_TRUE(listed) << "the 8 GPUs were not listed";
  for (const auto& s : seen_3a)
    EXPECT_EQ(s.rfind("Faulty", 0), 0u) << "the GPU at 3a was shown " << s;
  auto g = await_gpu(pci_3a, [](const v1::GpuView& v) { return v.health() == "Faulty"; });
  ASSERT_TRUE(g);
  ASSERT_EQ(g->gpu().latches_size(), 1);
  EXPECT_EQ(g->gpu().latches(0).reason(), "Xid 79 fault");
  EXPECT_EQ(g->gpu().latches(0).gpu_id(), uuid_3a);

  // A record appended later is read too (the file is followed).
  std::ofstream{log, std::ios::app} << xid_record(41, "0000:ba:00", 48);
  auto ba = await_gpu(pci_ba, [](const v1::GpuView& v) { return v.health() == "Faulty"; });
  ASSERT_TRUE(ba) << "an Xid appended to the kernel-log file did not fence 0000:ba:00.0";
  EXPECT_EQ(ba->health_reasons(0), "Xid 48 fault");
}

// Rule 1, NVML's first pass hangs: the Xid is handled at once all the same,
// latched against 0000:3a:00.0 and shown Faulty there; when NVML answers,
// the GPU found at that address (its UUID attached) is the fenced one, and
// no other GPU is.
TEST_F(HealthOrder, AFaultWhileNvmlHangsFencesTheGpuFoundThereLater) {
  auto doc = fixture_h100x8();
  doc["init_hang"] = true;
  set_nvml(doc);
  auto fifo = dir_ / "kmsg";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_TRUE(start_controller());
  start_agent(fifo.string(), std::string{ASTRAEUS_SOURCE_DIR} + "/test/fixtures/hosts/dgx-h100");
  // The agent's reader opens the FIFO; write one record as one session.
  int fd = -1;
  ASSERT_TRUE(wait_until(
    [&] {
      fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      return fd >= 0;
    },
    10s, 10ms));
  auto rec = xid_record(77, "0000:3a:00", 79);
  ASSERT_EQ(::write(fd, rec.data(), rec.size()), static_cast<ssize_t>(rec.size()));
  ::close(fd);
  auto early = await_gpu(pci_3a, [](const v1::GpuView& v) { return v.health() == "Faulty"; });
  ASSERT_TRUE(early) << "a fault logged while NVML hangs was not shown";
  EXPECT_EQ(early->gpu().id(), pci_3a) << "no UUID is known yet";
  EXPECT_EQ(early->health_reasons(0), "Xid 79 fault");
  EXPECT_EQ(gpus().size(), 1u) << "NVML has listed nothing yet";

  // NVML answers: the GPU at 3a carries the latch, under its UUID.
  write_text(dir_ / "release", "");
  auto later = await_gpu(pci_3a, [](const v1::GpuView& v) { return v.gpu().id() == uuid_3a; });
  ASSERT_TRUE(later) << "NVML's GPUs were not listed after the hang ended";
  EXPECT_EQ(later->health(), "Faulty");
  ASSERT_EQ(later->gpu().latches_size(), 1);
  EXPECT_EQ(later->gpu().latches(0).gpu_id(), uuid_3a);
  EXPECT_EQ(later->gpu().latches(0).reason(), "Xid 79 fault");
  ASSERT_TRUE(wait_until([&] { return gpus().size() == 8; }, 5s))
      << "the stand-in for the address was not replaced by the GPU found there";
  for (const auto& g : gpus())
    if (g.gpu().pci_address() != pci_3a)
      EXPECT_EQ(g.gpu().latches_size(), 0) << g.gpu().id();
  auto healthy = condition("GPUs healthy");
  EXPECT_EQ(healthy.value("reason", ""), "GPUFault") << healthy.dump();
}

// Rule 2: NVML stops listing the GPU at 3a while the agent runs. It stays
// listed, Faulty ("lost: missing from NVML: on PCI at 0000:3a:00.0"), and
// the machine's conditions say the PCI, driver and NVML counts disagree.
TEST_F(HealthOrder, AGpuThatVanishesBetweenPassesStaysListedAndFaulty) {
  auto fifo = dir_ / "kmsg";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_TRUE(start_controller());
  start_agent(fifo.string(), host_with_bus());
  ASSERT_TRUE(wait_until([&] { return gpus().size() == 8; }, 10s));
  EXPECT_TRUE(condition("GPU counts agree").is_null());

  auto doc = fixture_h100x8();
  doc["gpus"].erase(2);  // 0000:3a:00.0
  set_nvml(doc);
  auto g = await_gpu(pci_3a, [](const v1::GpuView& v) { return v.health() == "Faulty"; });
  ASSERT_TRUE(g) << "the vanished GPU was not shown Faulty";
  EXPECT_EQ(g->gpu().id(), uuid_3a);
  EXPECT_EQ(g->health_reasons(0), "lost: missing from NVML: on PCI at 0000:3a:00.0");

  // Several passes later it is still listed and fenced.
  std::this_thread::sleep_for(800ms);
  auto list = gpus();
  EXPECT_EQ(list.size(), 8u);
  auto still = at(list, pci_3a);
  ASSERT_TRUE(still);
  EXPECT_EQ(still->health(), "Faulty");
  auto counts = condition("GPU counts agree");
  ASSERT_FALSE(counts.is_null());
  EXPECT_EQ(counts.value("reason", ""), "GPUCountMismatch");
  EXPECT_NE(counts.value("message", "").find("0000:3a:00.0: bound to the nvidia driver, "
                                             "missing from NVML"),
            std::string::npos)
      << counts.dump();
  auto healthy = condition("GPUs healthy");
  EXPECT_EQ(healthy.value("reason", ""), "GPUFault");
  EXPECT_NE(healthy.value("message", "").find("lost: missing from NVML"), std::string::npos)
      << healthy.dump();
  // `astra gpus -o json` says the same.
  bool found = false;
  for (const auto& v : astra_json({"gpus"}).value("gpus", json::array()))
    if (v["gpu"].value("pci_address", "") == pci_3a) {
      found = true;
      EXPECT_EQ(v.value("health", ""), "Faulty");
    }
  EXPECT_TRUE(found);
  // Its fault is not cleared while it is gone (a user trial: the clear said
  // "new work may land on it again" and the GPU vanished from the list).
  auto clear = run_command(
    {program("astra"), "--addr", "127.0.0.1:" + std::to_string(port_), "--token-file",
     (keys_dir_of((dir_ / "controller").string()) / "owner-token").string(), "gpu",
     "clear-fault", node, uuid_3a},
    dir_.path());
  EXPECT_EQ(clear.rc, 1) << clear.out << clear.err;
  // It stays listed with what it was, lost, every pass after.
  EXPECT_NE(clear.err.find("is lost (missing from NVML: on PCI at " + pci_3a
                           + "): its fault stays latched until it answers again"),
            std::string::npos)
    << clear.err;
  auto after = at(gpus(), pci_3a);
  ASSERT_TRUE(after) << "the gone GPU left the list";
  EXPECT_EQ(after->health(), "Faulty");
}

namespace {

/// Writes one kernel-log record to the FIFO as one writer session (the
/// agent's reader has it open).
bool write_fifo(const fs::path& fifo, const std::string& rec) {
  int fd = -1;
  if (!wait_until(
        [&] {
          fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
          return fd >= 0;
        },
        10s, 10ms))
    return false;
  bool ok = ::write(fd, rec.data(), rec.size()) == static_cast<ssize_t>(rec.size());
  ::close(fd);
  return ok;
}

} // namespace

// Rule 8: a GPU held by a running worker becomes Faulty (an Xid 79 in the
// kernel log). The run that keeps the default (report) goes on running and
// shows which worker's GPU failed and why in `astra runs`, `astra run show`
// and `-o json`; the run that asked `--on-gpu-fault stop` is stopped, its
// worker Stopped and the run Failed with the same words, so it can be
// resubmitted. Only the GPUs at 3a and ba are idle on the stand-in.
TEST_F(HealthOrder, TheRunOnAFailingGpuIsToldAndStopsOnlyWhenItAskedTo) {
  auto fifo = dir_ / "kmsg";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_TRUE(start_controller());
  start_agent(fifo.string(), host_with_bus());
  ASSERT_TRUE(wait_until([&] { return gpus().size() == 8; }, 10s));
  auto astra_text = [&](std::vector<std::string> args) {
    std::vector<std::string> argv{
      program("astra"), "--addr", "127.0.0.1:" + std::to_string(port_), "--token-file",
      (keys_dir_of((dir_ / "controller").string()) / "owner-token").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, dir_.path());
  };
  auto lasting = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> a{"run", "--name", name, "--gpus", "1", "--image", "img",
                               "--runtime", "process"};
    a.insert(a.end(), extra.begin(), extra.end());
    a.insert(a.end(), {"--", "sh", "-c",
                       "while [ -d '" + dir_.path().string() + "' ]; do sleep 0.2; done"});
    return astra_text(a);
  };
  auto keep = lasting("keep", {});
  ASSERT_EQ(keep.rc, 0) << keep.err;
  auto halt = lasting("halt", {"--on-gpu-fault", "stop"});
  ASSERT_EQ(halt.rc, 0) << halt.err;
  auto state = [&](const std::string& name) { return astra_json({"run", "show", name}); };
  ASSERT_TRUE(wait_until(
    [&] {
      return state("keep").value("state", "") == "Running"
             && state("halt").value("state", "") == "Running";
    },
    10s))
    << astra_text({"runs"}).out;
  // Each run's GPU, and its PCI bus for the Xid line.
  std::map<std::string, std::string> bus_of;  // GPU id -> "0000:3a:00"
  for (const auto& g : gpus())
    bus_of[g.gpu().id()] = g.gpu().pci_address().substr(0, 10);
  auto gpu_of = [&](const std::string& run) {
    return state(run)["workers"][0]["gpu_ids"][0].get<std::string>();
  };
  const auto keep_gpu = gpu_of("keep"), halt_gpu = gpu_of("halt");
  ASSERT_NE(keep_gpu, halt_gpu);
  ASSERT_TRUE(write_fifo(fifo, xid_record(301, bus_of[keep_gpu], 79)));
  ASSERT_TRUE(write_fifo(fifo, xid_record(302, bus_of[halt_gpu], 79)));

  ASSERT_TRUE(wait_until([&] { return !state("keep").value("gpu_fault", "").empty(); }, 10s))
    << astra_text({"run", "show", "keep"}).out;
  auto k = state("keep");
  EXPECT_EQ(k.value("state", ""), "Running") << k.dump(2);
  EXPECT_EQ(k.value("gpu_fault", ""),
            "GPU " + keep_gpu + " of worker keep-0 on " + node
              + " failed: Xid 79 fault (kept running: on_gpu_fault: report)");
  auto f = k["workers"][0]["gpu_faults"];
  ASSERT_EQ(f.size(), 1u) << k.dump(2);
  EXPECT_EQ(f[0].value("gpu_id", ""), keep_gpu);
  EXPECT_EQ(f[0].value("reason", ""), "Xid 79 fault");
  EXPECT_EQ(f[0].value("action", ""), "reported");

  ASSERT_TRUE(wait_until([&] { return state("halt").value("state", "") == "Failed"; }, 10s))
    << astra_text({"run", "show", "halt"}).out;
  auto h = state("halt");
  EXPECT_EQ(h.value("waiting_reason", ""),
            "GPU " + halt_gpu + " of worker halt-0 on " + node
              + " failed: Xid 79 fault (on_gpu_fault: stop: its gang was stopped)");
  // Stopped by the scheduler, then how its agent says it ended (Cancelled,
  // 143) once that report comes: either, depending on which came first.
  const auto halted = h["workers"][0].value("state", "");
  EXPECT_TRUE(halted == "Stopped" || halted == "Cancelled") << h.dump(2);

  auto runs = astra_text({"runs"});
  EXPECT_NE(runs.out.find("of worker keep-0 on " + node + " failed: Xid 79 fault"),
            std::string::npos)
    << runs.out;
  auto show = astra_text({"run", "show", "keep"});
  EXPECT_NE(show.out.find("GPU fault:   GPU " + keep_gpu), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("GPU faults"), std::string::npos) << show.out;
  // The controller logged it.
  bool logged = false;
  for (auto& p : procs_)
    if (p->command_line().find("astraeus-controller") != std::string::npos)
      logged = p->err().find("scheduler: run keep: GPU " + keep_gpu) != std::string::npos;
  EXPECT_TRUE(logged);
}
