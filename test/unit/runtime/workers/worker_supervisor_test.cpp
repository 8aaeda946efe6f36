// The worker supervisor (runtime/workers/worker_supervisor.cpp): keeping the
// CDI specs in step with discovery passes; the stop grace on the boot clock,
// records left `Starting` adopted, and workers' cgroups (issue 23 items 4, 3,
// 8). Sources: shared/seeds/gpus.md, shared/seeds/inside-a-worker.md.

#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "messages/error.hpp"
#include "messages/worker_state.hpp"
#include "runtime/process/boot_clock.hpp"
#include "runtime/process/wall_clock.hpp"
#include "runtime/workers/worker_cgroup.hpp"
#include "runtime/workers/worker_ledger.hpp"
#include "runtime/workers/worker_start.hpp"
#include "runtime/workers/worker_supervisor.hpp"
#include "store/store.hpp"
#include "worker_test_files.hpp"

using namespace astraeus;
using namespace astraeus::test;

TEST(CdiHandOver, TheAgentsSpecIsRemovedWhenTheDriverGoesAway) {
  ctk_fixture f;
  ::setenv("FAKE_CTK_GPUS", "GPU-1", 1);
  supervisor_options opts;
  opts.data_dir = f.dir.path() + "/agent";
  opts.cdi = f.o;
  worker_supervisor sup{opts};
  v1::GpuSection healthy;
  healthy.set_read_as("driver: healthy");
  auto* g = healthy.add_gpus();
  g->set_id("GPU-1");
  g->set_vendor("nvidia");
  g->set_driver_version("550.54.15");
  sup.sync_cdi(healthy, "/");
  auto spec = fs::path{f.o.dynamic_dir} / "nvidia.yaml";
  ASSERT_TRUE(fs::exists(spec));
  // The driver does not answer (NVML init failed): the spec is kept.
  auto hung = healthy;
  hung.set_read_as("unavailable");
  hung.set_detail("nvmlInit_v2: NVML_ERROR_UNKNOWN; the last known GPUs are kept");
  sup.sync_cdi(hung, "/");
  EXPECT_TRUE(fs::exists(spec));
  // The kernel driver was unloaded: the GPUs are gone for CDI.
  auto gone = healthy;
  gone.set_read_as("unavailable");
  gone.set_detail("nvmlInit_v2: NVML_ERROR_DRIVER_NOT_LOADED; the last known GPUs are kept");
  sup.sync_cdi(gone, "/");
  EXPECT_FALSE(fs::exists(spec));
  EXPECT_FALSE(fs::exists(fs::path{f.o.dynamic_dir} / ".nvidia.yaml.astraeus-fingerprint"));
}

// Issue 23 item 4: the stop grace runs on the boot clock from the stored
// moment of the stop signal. A fixture /proc holds the worker's process; the
// signals the supervisor sends are recorded, not sent.
namespace {

/// One signal the supervisor sent.
struct sent_signal {
  pid_t pid;
  int sig;
  bool group;
  bool operator==(const sent_signal& o) const {
    return pid == o.pid && sig == o.sig && group == o.group;
  }
};

class StopGrace : public ::testing::Test {
protected:
  void SetUp() override {
    write(fs::path{proc_} / "proc/4242/stat",
          "4242 (sleep) S 4241 4242 4241 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 1 1\n");
    v1::WorkerProcess rec;
    rec.set_worker("train-0");
    rec.set_run("train");
    rec.set_runtime("process");
    rec.set_dir(dir_.path() + "/agent/workers/train-0");
    rec.set_pid(4242);
    rec.set_shim_pid(4241);
    rec.set_start_ticks(777);
    rec.set_stop_signal(SIGTERM);
    set_state(rec, worker_state::running);
    store_ = std::shared_ptr<Store>{std::move(*Store::open(dir_.path() + "/store"))};
    ASSERT_FALSE(ledger().put_process(rec));
  }

  /// The ledger (loaded again after `restart_agent`).
  worker_ledger& ledger() {
    if (!ledger_)
      ledger_.emplace(std::move(*worker_ledger::load(store_)));
    return *ledger_;
  }

  /// A supervisor as the agent makes one, its signals recorded.
  worker_supervisor& supervisor() {
    if (!sup_) {
      supervisor_options o;
      o.data_dir = dir_.path() + "/agent";
      o.proc_root = proc_;
      o.stop_grace = std::chrono::seconds{20};
      o.send_signal = [this](pid_t pid, int sig, bool group) {
        sent_.push_back({pid, sig, group});
      };
      sup_ = std::make_unique<worker_supervisor>(o);
    }
    return *sup_;
  }

  bool check() {
    return supervisor().reconcile(ledger(), wall_.now_unix_ms(), boot_.now_boot_ms());
  }

  /// An agent killed and started again: new supervisor, ledger from the store.
  void restart_agent() {
    sup_.reset();
    ledger_.reset();
  }

  bool killed() const {
    return std::find(sent_.begin(), sent_.end(), sent_signal{4242, SIGKILL, true})
           != sent_.end();
  }

  temp_dir dir_;
  std::string proc_ = dir_.path() + "/root";
  std::shared_ptr<Store> store_;
  std::optional<worker_ledger> ledger_;
  std::unique_ptr<worker_supervisor> sup_;
  std::vector<sent_signal> sent_;
  test_wall_clock wall_;
  test_boot_clock boot_;
};

} // namespace

TEST_F(StopGrace, AWallClockSetBackAnHourNeitherDelaysTheSigkill) {
  // Not ordered any more: SIGTERM to the main process, the moment stored.
  EXPECT_TRUE(check());
  ASSERT_EQ(sent_, (std::vector<sent_signal>{{4242, SIGTERM, false}}));
  const auto& rec = ledger().processes().at("train-0");
  EXPECT_EQ(state_of(rec), worker_state::stopping);
  EXPECT_EQ(rec.stop_requested_boot_ms(), boot_.now_boot_ms());
  wall_.advance(-std::chrono::hours{1});
  boot_.advance(std::chrono::milliseconds{19999});
  check();
  EXPECT_FALSE(killed()) << "before the grace";
  boot_.advance(std::chrono::milliseconds{1});
  check();
  EXPECT_TRUE(killed()) << "at the 20 s grace, the wall clock an hour back";
}

TEST_F(StopGrace, AWallClockSetForwardAnHourDoesNotHastenIt) {
  check();
  wall_.advance(std::chrono::hours{1});
  boot_.advance(std::chrono::seconds{1});
  check();
  EXPECT_FALSE(killed()) << "1 s into the grace, the wall clock an hour ahead";
  boot_.advance(std::chrono::seconds{19});
  check();
  EXPECT_TRUE(killed());
}

TEST_F(StopGrace, AnAgentRestartKeepsTheGraceItWasGiven) {
  check();
  boot_.advance(std::chrono::seconds{15});
  restart_agent();
  wall_.advance(-std::chrono::hours{1});
  check();
  EXPECT_FALSE(killed());
  boot_.advance(std::chrono::seconds{5});
  restart_agent();
  check();
  EXPECT_TRUE(killed()) << "20 s after the stop signal, across two agent restarts";
}

TEST_F(StopGrace, ARecordWithoutABootClockReadingGetsTheWholeGraceFromNow) {
  auto rec = ledger().processes().at("train-0");
  set_state(rec, worker_state::stopping);
  rec.set_stop_requested_unix_ms(wall_.now_unix_ms() - 3'600'000);  // an older agent's
  ASSERT_FALSE(ledger().put_process(rec));
  check();
  EXPECT_FALSE(killed()) << "an hour by the wall clock is no grace on the boot clock";
  EXPECT_EQ(ledger().processes().at("train-0").stop_requested_boot_ms(), boot_.now_boot_ms());
  boot_.advance(std::chrono::seconds{20});
  check();
  EXPECT_TRUE(killed());
}

// Issue 23 item 3: a record a killed agent left `Starting` is adopted when
// the worker's marker is found on its main process, and never started twice.
TEST_F(StopGrace, ARecordLeftStartingIsAdoptedFromTheMarkerNotStartedAgain) {
  auto rec = ledger().processes().at("train-0");
  rec.clear_pid();
  rec.clear_shim_pid();
  rec.clear_start_ticks();
  rec.set_start_marker("train-0.0123456789abcdef");
  set_starting(rec);
  ASSERT_FALSE(ledger().put_process(rec));
  v1::WorkerOrders orders;
  orders.set_machine("gpu-01");
  orders.add_workers()->set_worker("train-0");
  ASSERT_TRUE(ledger().apply("gpu-01", orders));
  EXPECT_EQ(state_of(ledger().statuses("gpu-01").workers(0)), worker_state::assigned)
    << "Starting reads Assigned to the controller";
  restart_agent();
  write(fs::path{proc_} / "proc/4242/environ",
        std::string{"PATH=/bin"} + '\0' + worker_start_variable + "=" + rec.start_marker() + '\0');
  write(fs::path{proc_} / "proc/4242/stat",
        "4242 (sleep) S 4241 4242 4241 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 1 1\n");
  EXPECT_TRUE(check());
  const auto& adopted = ledger().processes().at("train-0");
  EXPECT_EQ(state_of(adopted), worker_state::running);
  EXPECT_EQ(adopted.pid(), 4242);
  EXPECT_EQ(adopted.shim_pid(), 4241);
  EXPECT_EQ(adopted.start_ticks(), 777u);
  EXPECT_FALSE(check()) << "nothing more to do: no second start";
  EXPECT_TRUE(sent_.empty());
}

namespace {

/// A worker's end, as the supervisor finds it (ordered, so never stopped).
class WorkerEnd : public StopGrace {};

} // namespace

// The shim renames the exit file into place and then ends. A supervisor
// that looked between the two (no exit file yet, then no shim) reads the
// exit file again and reports how the worker ended, not "left no exit
// status": under load, an all-reduce rank that exited 0 was failed so
// (Validation.AnAllReduceBelowItsExpectedFigureFailsNamingIt, 2026-12-06).
TEST_F(WorkerEnd, AnExitFileWrittenAsTheShimEndsIsReadNotFailed) {
  v1::WorkerOrders orders;
  orders.set_machine("gpu-01");
  orders.add_workers()->set_worker("train-0");
  ASSERT_TRUE(ledger().apply("gpu-01", orders));
  fs::remove(fs::path{proc_} / "proc/4242/stat");  // the worker's process ended
  auto shim_stat = fs::path{proc_} / "proc/4241/stat";
  fs::create_directories(shim_stat.parent_path());
  ASSERT_EQ(::mkfifo(shim_stat.c_str(), 0600), 0);
  auto worker_dir = fs::path{ledger().processes().at("train-0").dir()};
  // The shim: the moment the supervisor opens its stat (the liveness check
  // after the first look for the exit file), it writes the exit file, then
  // ends (its stat reads empty).
  std::thread shim([&] {
    int fd = ::open(shim_stat.c_str(), O_WRONLY);
    write(worker_dir / "exit.tmp", "exit 0\n");
    fs::rename(worker_dir / "exit.tmp", worker_dir / "exit");
    if (fd >= 0)
      ::close(fd);
  });
  EXPECT_TRUE(check());
  // A supervisor that never opened the shim's stat would leave the shim
  // waiting for a reader: this one lets it go.
  int reader = ::open(shim_stat.c_str(), O_RDONLY | O_NONBLOCK);
  shim.join();
  if (reader >= 0)
    ::close(reader);
  const auto& rec = ledger().processes().at("train-0");
  EXPECT_EQ(state_of(rec), worker_state::exited) << rec.detail();
  EXPECT_EQ(rec.exit_code(), 0);
}

// Issue 23 item 8: where the host has cgroup v2, workers' cgroups live under
// the agent's own; a worker's end writes cgroup.kill.
TEST(WorkerCgroups, FoundUnderTheAgentsOwnCgroupAndKilledWhole) {
  temp_dir dir;
  auto root = dir.path();
  write(fs::path{root} / "proc/self/mountinfo",
        "22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n"
        "30 22 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw\n"
        "31 22 0:27 / /sys/fs/cgroup/memory rw shared:10 - cgroup cgroup rw,memory\n");
  write(fs::path{root} / "proc/self/cgroup",
        "4:memory:/x\n0::/system.slice/astraeus-agent.service\n");
  EXPECT_EQ(cgroup2_mount(root), "/sys/fs/cgroup/unified");
  EXPECT_EQ(own_cgroup2(root), "/system.slice/astraeus-agent.service");
  auto parent = fs::path{root} / "sys/fs/cgroup/unified/system.slice/astraeus-agent.service";
  EXPECT_FALSE(prepare_worker_cgroups(root, root)) << "not a cgroup folder: no cgroups";
  write(parent / "astraeus-workers/cgroup.procs", "");
  auto place = prepare_worker_cgroups(root, root);
  ASSERT_TRUE(place) << render_error(place.error());
  EXPECT_EQ(place->parent, "/system.slice/astraeus-agent.service/astraeus-workers");
  auto cg = create_worker_cgroup(*place, "train-0.0123", root);
  ASSERT_TRUE(cg);
  EXPECT_EQ(*cg, "/system.slice/astraeus-agent.service/astraeus-workers/train-0.0123");
  auto host = cgroup_dir(*place, *cg, root);
  EXPECT_EQ(host, parent.string() + "/astraeus-workers/train-0.0123");
  write(fs::path{host} / "cgroup.kill", "");
  kill_cgroup(host);
  EXPECT_EQ(read(fs::path{host} / "cgroup.kill"), "1");
  EXPECT_TRUE(cgroup_pids(host).empty());
  write(fs::path{root} / "proc/self/mountinfo", "22 1 0:21 / /sys rw - sysfs sysfs rw\n");
  EXPECT_FALSE(prepare_worker_cgroups(root, root)) << "no cgroup v2 hierarchy";
}

// A new-user trial: on a machine with runc and `workers.runtime: auto`, a
// run without an image was placed and then failed at start ("the run names
// no image"). auto runs it as the host command it is; a run with an image
// gets runc where the program is found.
TEST(RuntimeChoice, AutoRunsARunWithoutAnImageAsAHostProcess) {
  temp_dir dir;
  auto runc = dir.path() + "/runc";
  { std::ofstream{runc} << "#!/bin/sh\n"; }
  fs::permissions(runc, fs::perms::owner_all);
  supervisor_options opts;
  opts.data_dir = dir.path() + "/agent";
  opts.runc = runc;
  worker_supervisor sup{opts};
  v1::RunSpec spec;
  spec.add_command("true");
  EXPECT_EQ(sup.runtime_for(spec), "process");
  spec.set_image("busybox");
  EXPECT_EQ(sup.runtime_for(spec), "runc");
  spec.set_runtime("process");
  EXPECT_EQ(sup.runtime_for(spec), "process") << "the run's own choice";
  opts.runtime = "runc";
  worker_supervisor pinned{opts};
  spec.clear_image();
  spec.clear_runtime();
  EXPECT_EQ(pinned.runtime_for(spec), "runc") << "the machine's explicit choice stands";
}

// Fifth new-user trial: on a machine whose workers run as host processes, a
// named workspace's run with an image (a container, as the controller let it
// through) ran as root on the host, past the workspace's Bind grants. It is
// refused at start, naming why; the default workspace's runs are unchanged.
TEST(RuntimeChoice, AWorkspacesContainerIsNotRunAsAHostProcess) {
  temp_dir dir;
  supervisor_options opts;
  opts.data_dir = dir.path() + "/agent";
  opts.runtime = "process";
  worker_supervisor sup{opts};
  v1::WorkerOrder order;
  order.set_worker("esc-0");
  order.set_run("esc");
  order.set_namespace_("ws-943821");
  order.mutable_spec()->set_name("esc");
  order.mutable_spec()->set_image("busybox");
  order.mutable_spec()->add_command("id");
  EXPECT_EQ(sup.host_process_refusal(order),
            "workspace run esc asks for a container (image busybox) and this machine runs "
            "workers as host processes (workers.runtime process): it is not run here as a host "
            "process");
  // A run that asked for a host process got past the controller's check
  // (privileged work granted): it runs as one.
  order.mutable_spec()->set_runtime("process");
  EXPECT_EQ(sup.host_process_refusal(order), "");
  // The default workspace: the machine's choice, as before.
  order.mutable_spec()->clear_runtime();
  order.clear_namespace_();
  EXPECT_EQ(sup.host_process_refusal(order), "");
  // A machine with runc runs the container.
  auto runc = dir.path() + "/runc";
  { std::ofstream{runc} << "#!/bin/sh\n"; }
  fs::permissions(runc, fs::perms::owner_all);
  opts.runtime = "auto";
  opts.runc = runc;
  worker_supervisor with_runc{opts};
  order.set_namespace_("ws-943821");
  EXPECT_EQ(with_runc.host_process_refusal(order), "");
}

// A new-user trial: in the README's "Try it without a GPU" the agent is given
// `--host-root test/fixtures/hosts/dgx-h100` and a stand-in NVML by relative
// paths; its validation's quick check ran in the worker's folder, found
// neither, and failed beside a GPU list of 8 healthy GPUs.
TEST(WorkerSupervisorCheckSettings, PathsAreAbsoluteAsTheCheckRunsInItsWorkersFolder) {
  supervisor_options opts;
  opts.nvml_library = "build/test/stand_in/libnvidia-ml.so";
  opts.cdi.host_root = "test/fixtures/hosts/dgx-h100";
  opts.cdi.static_dir = "/etc/cdi";
  opts.cdi.dynamic_dir = "./run/cdi";
  const auto here = std::filesystem::current_path().string();
  auto s = check_settings(opts);
  EXPECT_EQ(s["ASTRAEUS_CHECK_NVML_LIB"], here + "/build/test/stand_in/libnvidia-ml.so");
  EXPECT_EQ(s["ASTRAEUS_CHECK_HOST_ROOT"], here + "/test/fixtures/hosts/dgx-h100");
  EXPECT_EQ(s["ASTRAEUS_CHECK_CDI_STATIC_DIR"], "/etc/cdi");
  EXPECT_EQ(s["ASTRAEUS_CHECK_CDI_DYNAMIC_DIR"], here + "/run/cdi");
  opts.nvml_library = "libnvidia-ml.so.1";
  EXPECT_EQ(check_settings(opts)["ASTRAEUS_CHECK_NVML_LIB"], "libnvidia-ml.so.1")
    << "a bare name is for the loader to find";
}
