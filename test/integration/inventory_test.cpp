// Inventory on a fleet of identical machines, end to end (issue 18, rules 1
// and 2): a real controller and two agents on loopback, each reading the same
// AMD sysfs fixture (an RX 7900 XTX without `unique_id`, so its GPU id is its
// PCI address, the same on both). Both machines are schedulable, a run lands
// on each, and a run in a workspace granted a label set with `astra label`
// places on such a machine at once.

#include <csignal>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "integration/cluster_harness.hpp"

using namespace astraeus;
using namespace astraeus::itest;

namespace {

const std::string amd_root = ASTRAEUS_SOURCE_DIR "/test/fixtures/amd/rx7900xtx";
const std::string dgx_root = ASTRAEUS_SOURCE_DIR "/test/fixtures/hosts/dgx-h100";
const std::string h100x8 = ASTRAEUS_SOURCE_DIR "/test/fixtures/nvml/h100x8.json";

class Inventory : public ::testing::Test {
protected:
  void SetUp() override {
    port_ = free_port();
    ASSERT_NE(port_, 0);
    ::signal(SIGPIPE, SIG_IGN);
  }

  void TearDown() override {
    const bool failed = HasFailure();
    for (auto& p : procs_) {
      if (failed)
        std::fprintf(stderr, "---- %s\n---- stderr:\n%s\n", p->command_line().c_str(),
                     p->err().substr(p->err().size() > 5000 ? p->err().size() - 5000 : 0)
                       .c_str());
      p->kill_now();
    }
  }

  process* spawn(const std::string& label, std::vector<std::string> argv,
                 std::vector<std::string> env = {}) {
    auto n = std::to_string(procs_.size());
    procs_.push_back(std::make_unique<process>(std::move(argv), dir_ / (label + n + ".out"),
                                               dir_ / (label + n + ".err"), std::move(env)));
    return procs_.back().get();
  }

  /// An agent named `name` on the NVML stand-in's 8 x H100 (real UUIDs: two
  /// such machines report the same ones).
  process* start_nvidia_agent(const std::string& name) {
    std::vector<std::string> argv{
      program("astraeus-agent"), "--controller", addr(), "--data-dir",
      (dir_ / name).string(), "--name", name, "--report-interval", "200ms",
      "--host-root", dgx_root, "--set",
      std::string{"gpu.nvml_library="} + ASTRAEUS_NVML_STAND_IN, "--set", "kmsg.path=",
      "--set", "reconnect.min_backoff=100ms", "--set", "reconnect.max_backoff=300ms"};
    auto flags = enrol_flags(port_, dir_.path(), name);
    EXPECT_FALSE(flags.empty()) << "no join token";
    argv.insert(argv.end(), flags.begin(), flags.end());
    return spawn("agent-" + name, std::move(argv), {"ASTRAEUS_NVML_FIXTURE=" + h100x8});
  }

  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }

  /// An agent named `name` on the AMD fixture, host processes as workers.
  void start_agent(const std::string& name) {
    std::vector<std::string> argv{
      program("astraeus-agent"), "--controller", addr(), "--data-dir",
      (dir_ / name).string(), "--name", name, "--report-interval", "200ms",
      "--host-root", amd_root, "--set", "gpu.nvml_library=/nonexistent/libnvidia-ml.so.1",
      "--set", "gpu.nvidia_smi=/nonexistent/nvidia-smi", "--set", "kmsg.path=",
      "--set", "reconnect.min_backoff=100ms", "--set", "reconnect.max_backoff=300ms",
      "--set", "workers.runtime=process", "--set", "workers.poll_interval=50ms",
      "--set", "cdi.static_dir=" + (dir_ / name / "etc-cdi").string(),
      "--set", "cdi.dynamic_dir=" + (dir_ / name / "run-cdi").string()};
    auto flags = enrol_flags(port_, dir_.path(), name);
    ASSERT_FALSE(flags.empty()) << "no join token";
    argv.insert(argv.end(), flags.begin(), flags.end());
    spawn("agent-" + name, std::move(argv));
  }

  /// A controller and the two identical machines, both Up with one GPU.
  bool start_fleet() {
    auto* ctl = spawn("controller", {program("astraeus-controller"), "--port",
                                     std::to_string(port_), "--data-dir",
                                     (dir_ / "controller").string(), "--heartbeat-lapse", "3s",
                                     "--set", "heartbeat.report_interval=1s"});
    if (!controller_answers_owner(port_, (dir_ / "controller").string())) {
      ADD_FAILURE() << "controller not ready: " << ctl->err();
      return false;
    }
    for (const char* name : {"fleet-a", "fleet-b"})
      start_agent(name);
    for (const char* name : {"fleet-a", "fleet-b"}) {
      bool up = wait_until(
        [&] {
          auto m = get_machine(port_, name);
          return m && m->state() == v1::Machine::Up && m->schedulable()
                 && m->facts().gpus().gpus_size() == 1;
        },
        10s);
      if (!up) {
        ADD_FAILURE() << name << " not Up with its GPU: " << astra({"machine", name}).out;
        return false;
      }
    }
    return true;
  }

  command_result astra(const std::vector<std::string>& args) {
    return astra_as_owner(port_, (dir_ / "controller").string(), dir_.path(), args);
  }

  nlohmann::json run_json(const std::string& name) {
    auto res = astra({"run", "show", name, "-o", "json"});
    auto j = nlohmann::json::parse(res.out, nullptr, false);
    return j.is_discarded() ? nlohmann::json{} : j;
  }

  /// Waits until run `name` is Stopped; answers the machine of its worker.
  std::string wait_stopped(const std::string& name) {
    nlohmann::json last;
    bool ok = wait_until(
      [&] {
        last = run_json(name);
        return last.value("state", "") == "Stopped";
      },
      15s);
    EXPECT_TRUE(ok) << "run " << name << " not Stopped: " << astra({"run", "show", name}).out;
    if (!ok || !last.contains("workers") || last["workers"].empty())
      return {};
    return last["workers"][0].value("machine", "");
  }

  temp_dir dir_{"astraeus-inventory"};
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<process>> procs_;
};

} // namespace

TEST_F(Inventory, TwoIdenticalMachinesWithPciAddressIdsBothTakeWork) {
  ASSERT_TRUE(start_fleet());
  // The same id on both machines, both counted.
  auto gpus = astra({"gpus", "-o", "json"});
  ASSERT_EQ(gpus.rc, 0) << gpus.err;
  EXPECT_EQ(nlohmann::json::parse(gpus.out)["gpus"].size(), 2u) << gpus.out;
  for (const char* name : {"fleet-a", "fleet-b"}) {
    auto m = get_machine(port_, name);
    ASSERT_TRUE(m);
    EXPECT_EQ(m->facts().gpus().gpus(0).id(), "0000:03:00.0");
    EXPECT_EQ(m->set_aside_gpus_size(), 0) << m->ShortDebugString();
  }
  // Two one-GPU runs that each take a whole machine's only GPU: one on each.
  for (const char* run : {"one", "two"}) {
    auto res = astra({"run", "--name", run, "--gpus", "1", "--", "sh", "-c",
                      "echo rocr=$ROCR_VISIBLE_DEVICES cuda=${CUDA_VISIBLE_DEVICES-unset}; "
                      "sleep 1"});
    ASSERT_EQ(res.rc, 0) << res.err;
  }
  auto a = wait_stopped("one");
  auto b = wait_stopped("two");
  EXPECT_NE(a, b) << "both runs on " << a;
  EXPECT_TRUE((a == "fleet-a" && b == "fleet-b") || (a == "fleet-b" && b == "fleet-a"))
    << a << " " << b;
  // A host process with an AMD GPU: the variable ROCm reads (rule 9).
  auto logs = astra({"logs", "one"});
  EXPECT_TRUE(contains(logs.out, "rocr=0 cuda=unset")) << logs.out << logs.err;
  // The machine page and the list agree: one GPU, nothing set aside.
  auto page = astra({"machine", "fleet-a"});
  EXPECT_TRUE(contains(page.out, "Flaps:")) << page.out;
  EXPECT_FALSE(contains(page.out, "set aside")) << page.out;
}

// Fourth new-user trial: two machines reporting the same UUIDs showed their
// GPUs as Healthy and free in `astra gpus` though none is ever placed; and
// once one went Down the other's stayed set aside until it was removed.
TEST_F(Inventory, SharedUuidsAreSaidSetAsideAndComeBackWhenOneMachineIsDown) {
  spawn("controller", {program("astraeus-controller"), "--port", std::to_string(port_),
                       "--data-dir", (dir_ / "controller").string(), "--heartbeat-lapse", "3s",
                       "--set", "heartbeat.report_interval=1s"});
  ASSERT_TRUE(controller_answers_owner(port_, (dir_ / "controller").string()));
  start_nvidia_agent("twin-a");
  auto* b = start_nvidia_agent("twin-b");
  auto set_aside = [&](const char* name) {
    auto m = get_machine(port_, name);
    return m ? m->set_aside_gpus_size() : -1;
  };
  ASSERT_TRUE(wait_until([&] { return set_aside("twin-a") == 8 && set_aside("twin-b") == 8; },
                         15s))
    << astra({"machine", "twin-a"}).out;
  auto list = astra({"gpus", "--machine", "twin-a"});
  ASSERT_EQ(list.rc, 0) << list.err;
  EXPECT_TRUE(contains(list.out, "Healthy: set aside by the scheduler: GPU ")) << list.out;
  EXPECT_TRUE(contains(list.out, "is also reported by machine twin-b")) << list.out;
  // twin-b stops reporting: Down, and twin-a's GPUs are its own again.
  b->kill_now();
  ASSERT_TRUE(wait_until([&] { return set_aside("twin-a") == 0; }, 15s))
    << astra({"machine", "twin-a"}).out;
  list = astra({"gpus", "--machine", "twin-a"});
  EXPECT_FALSE(contains(list.out, "set aside")) << list.out;
  auto run = astra({"run", "--name", "after", "--gpus", "1", "--runtime", "process", "--",
                    "true"});
  ASSERT_EQ(run.rc, 0) << run.err;
  EXPECT_TRUE(wait_until([&] { return run_json("after").value("state", "") != "Waiting"; },
                         10s))
    << astra({"run", "show", "after"}).out;
}

TEST_F(Inventory, ALabelSetWithAstraLabelPlacesAWorkspacesRunAtOnce) {
  ASSERT_TRUE(start_fleet());
  auto made = astra({"workspace", "create", "probe", "--grant", "probe=yes"});
  ASSERT_EQ(made.rc, 0) << made.err;
  // These machines run workers as host processes: a workspace's run is one
  // only with privileged work granted (an image would be refused at start).
  auto granted = astra({"workspace", "grant", "probe", "--privileged"});
  ASSERT_EQ(granted.rc, 0) << granted.err;
  auto waiting = astra({"run", "--name", "p1", "--workspace", "probe", "--gpus", "1",
                        "--runtime", "process", "--", "true"});
  ASSERT_EQ(waiting.rc, 0) << waiting.err;
  EXPECT_TRUE(contains(waiting.out, "Waiting")) << waiting.out;
  auto labelled = astra({"label", "fleet-b", "probe=yes"});
  ASSERT_EQ(labelled.rc, 0) << labelled.err;
  EXPECT_EQ(wait_stopped("p1"), "fleet-b");
}
