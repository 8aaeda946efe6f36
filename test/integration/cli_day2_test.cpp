// astra's day-two commands and Slurm compatibility as a user types them
// (issue 13, items 5, 6 and 8), on a real controller + agent (runc) + astra
// on loopback: `astra slurm sbatch` of a batch script as Slurm users write
// it (its directives, the script read-only at /astra/job.sbatch, a
// directive that does not map refused by name), `astra drain` stopping the
// workers at the deadline, the waiting reason naming the draining machine,
// `astra machine remove` (refused while Up, then its agent refused), and
// the token and workspace lists. Skips where runc or busybox-static is
// missing.

#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "integration/cluster_harness.hpp"
#include "runtime/workers/worker_process.hpp"

using namespace astraeus;
using namespace astraeus::itest;

namespace {

/// A controller and one agent (gpu-09, runc) in a temporary folder.
class CliDay2 : public ::testing::Test {
protected:
  void SetUp() override {
    if (find_executable("runc", "/usr/sbin:/usr/bin:/sbin:/bin").empty()
        || !fs::exists("/bin/busybox"))
      GTEST_SKIP() << "runc or busybox-static is not installed (bin/setup installs both)";
    port_ = free_port();
    ASSERT_NE(port_, 0);
  }

  void TearDown() override {
    for (auto& p : procs_) {
      if (::testing::Test::HasFailure())
        std::fprintf(stderr, "---- %s stderr (end):\n%s\n", p->command_line().c_str(),
                     p->err().substr(p->err().size() > 4000 ? p->err().size() - 4000 : 0).c_str());
      p->kill_now();
    }
    delete_runc_containers(agent_dir() / "runc");
  }

  process* spawn(const std::string& label, std::vector<std::string> argv,
                 std::vector<std::string> env = {}) {
    auto n = label + std::to_string(procs_.size());
    procs_.push_back(std::make_unique<process>(std::move(argv), dir_ / (n + ".out"),
                                               dir_ / (n + ".err"), std::move(env)));
    return procs_.back().get();
  }

  fs::path agent_dir() const { return dir_ / "agent"; }

  fs::path owner_token() const {
    return keys_dir_of((dir_ / "controller").string()) / "owner-token";
  }

  /// Starts the controller (kept in `controller_`); true once it answers
  /// its owner token.
  bool start_controller() {
    controller_ = spawn("controller", {program("astraeus-controller"), "--port",
                                       std::to_string(port_), "--data-dir",
                                       (dir_ / "controller").string()});
    auto keys = keys_dir_of((dir_ / "controller").string());
    auto ready = [&] {
      return use_owner_credentials(port_, keys)
             && static_cast<bool>(
               gate_client::connect_cli(loopback(port_), 300ms, owner_credentials(port_)));
    };
    if (!wait_until(ready, 10s)) {
      ADD_FAILURE() << "controller not ready: " << controller_->err();
      return false;
    }
    return true;
  }

  /// Starts the agent gpu-09 (kept in `agent_`) with a fresh join token;
  /// true once gpu-09 is Up.
  bool start_agent() {
    std::vector<std::string> argv{
      program("astraeus-agent"), "--controller", "127.0.0.1:" + std::to_string(port_),
      "--data-dir", agent_dir().string(), "--name", "gpu-09", "--report-interval", "200ms",
      "--set", std::string{"gpu.nvml_library="} + ASTRAEUS_NVML_STAND_IN, "--set", "kmsg.path=",
      "--set", "workers.runtime=runc", "--set", "workers.poll_interval=50ms", "--set",
      "stop.grace=2s"};
    auto join = enrol_flags(port_, dir_.path(), "gpu-09");
    argv.insert(argv.end(), join.begin(), join.end());
    agent_ = spawn("agent", std::move(argv),
                   {"ASTRAEUS_NVML_FIXTURE=" ASTRAEUS_SOURCE_DIR "/test/fixtures/nvml/h100x8.json"});
    return wait_until([&] { return machine_in_state(port_, "gpu-09", v1::Machine::Up); }, 10s);
  }

  /// Starts the controller, then the agent once the controller answers;
  /// true once gpu-09 is Up.
  bool start_cluster() {
    return start_controller() && start_agent();
  }

  command_result astra(std::vector<std::string> args) {
    return astra_as(owner_token(), std::move(args));
  }

  /// astra with the API token in `token_file`.
  command_result astra_as(const fs::path& token_file, std::vector<std::string> args) {
    std::vector<std::string> argv{program("astra"), "--addr",
                                  "127.0.0.1:" + std::to_string(port_), "--token-file",
                                  token_file.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, dir_.path());
  }

  /// `astra run -f` of `yaml`, written to NAME.yaml.
  command_result run_file(const std::string& name, const std::string& yaml) {
    write_text(dir_ / (name + ".yaml"), yaml);
    return astra({"run", "-f", (dir_ / (name + ".yaml")).string()});
  }

  /// Waits until the run `name` is `state`; its `run show` on failure.
  bool ended(const std::string& name, const std::string& state) {
    std::string last;
    bool ok = wait_until(
      [&] {
        auto res = astra({"run", "show", name, "-o", "json"});
        auto j = nlohmann::json::parse(res.out, nullptr, false);
        last = j.is_discarded() ? res.err : j.value("state", "");
        return last == state;
      },
      20s, 100ms);
    EXPECT_TRUE(ok) << name << " is " << last << ", not " << state << ":\n"
                    << astra({"run", "show", name}).out;
    return ok;
  }

  /// A run's field `key` (`run show -o json`), or the error when it fails.
  std::string run_field(const std::string& name, const std::string& key) {
    auto res = astra({"run", "show", name, "-o", "json"});
    auto j = nlohmann::json::parse(res.out, nullptr, false);
    return j.is_discarded() ? res.err : j.value(key, "");
  }

  temp_dir dir_{"astraeus-cli-day2"};
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<process>> procs_;
  process* controller_ = nullptr;  ///< the latest controller started
  process* agent_ = nullptr;       ///< the latest agent started
};

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_F(CliDay2, SbatchRunsTheScriptWithItsDirectivesMountedReadOnly) {
  ASSERT_TRUE(start_cluster());
  write_text(dir_ / "hello.sbatch",
             "#!/bin/sh\n"
             "#SBATCH --job-name=hello\n"
             "#SBATCH --cpus-per-task=1\n"
             "#SBATCH --mem 256M   # enough for a shell\n"
             "#SBATCH --time=10\n"
             "\n"
             "# what a Slurm script sees\n"
             "echo \"job $SLURM_JOB_NAME on $SLURM_JOB_NUM_NODES node(s)\"\n"
             "head -n 2 /astra/job.sbatch\n"
             "if { echo x >> /astra/job.sbatch; } 2>/dev/null; then echo writable; else echo "
             "read-only; fi\n"
             "#SBATCH --partition=ignored-after-the-first-command\n");
  auto res = astra({"slurm", "sbatch", "--image", "busybox", (dir_ / "hello.sbatch").string()});
  ASSERT_EQ(res.rc, 0) << res.err;
  EXPECT_EQ(res.out.rfind("hello submitted to default: http", 0), 0u) << res.out;
  ASSERT_TRUE(ended("hello", "Stopped"));
  EXPECT_EQ(run_field("hello", "state"), "Stopped");
  auto logs = astra({"logs", "hello"});
  EXPECT_EQ(logs.out, "job hello on 1 node(s)\n#!/bin/sh\n#SBATCH --job-name=hello\nread-only\n")
    << logs.err;
  EXPECT_TRUE(has(astra({"slurm", "squeue"}).out, "hello"));
  // --nodes=2 is two machines, one task each, as Slurm allocates them: on a
  // one-machine cluster it waits, saying so (it ran both on gpu-01).
  write_text(dir_ / "two.sbatch",
             "#!/bin/sh\n#SBATCH --job-name=two\n#SBATCH --nodes=2\n"
             "#SBATCH --cpus-per-task=1\nhostname\n");
  auto two = astra({"slurm", "sbatch", "--image", "busybox", (dir_ / "two.sbatch").string()});
  ASSERT_EQ(two.rc, 0) << two.err;
  std::string waits;
  EXPECT_TRUE(wait_until(
    [&] {
      waits = run_field("two", "waiting_reason");
      return has(waits, "one per machine");
    },
    10s, 200ms))
    << waits;
  EXPECT_EQ(run_field("two", "state"), "Waiting") << waits;
  ASSERT_EQ(astra({"delete", "two"}).rc, 0);
  // A directive without an equivalent is refused by name, before anything
  // is sent.
  write_text(dir_ / "bad.sbatch",
             "#!/bin/bash\n#SBATCH --job-name=bad\n#SBATCH --partition=gpu\nhostname\n");
  auto bad = astra({"slurm", "sbatch", "--image", "busybox", (dir_ / "bad.sbatch").string()});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_TRUE(has(bad.err, "line 3: #SBATCH --partition=gpu: has no Astraeus equivalent"))
    << bad.err;
  EXPECT_FALSE(has(astra({"slurm", "squeue"}).out, "bad"));
  auto cancel = astra({"slurm", "scancel", "hello"});
  EXPECT_EQ(cancel.rc, 0) << cancel.err;
  EXPECT_EQ(cancel.out, "run hello cancelled\n");
}

// A new user's trial: an array run's copies after the first had no way to
// their output ("run arr has no worker 1").
TEST_F(CliDay2, EachCopyOfAnArrayRunHasItsOwnLogs) {
  ASSERT_TRUE(start_cluster());
  auto run = astra({"run", "--name", "arr", "--array-size", "3", "--image", "busybox", "--cpus",
                    "1", "--mem", "64M", "--", "sh", "-c", "echo I am $ASTRAEUS_TASK_NAME"});
  ASSERT_EQ(run.rc, 0) << run.err;
  ASSERT_TRUE(ended("arr", "Stopped"));
  auto first = astra({"logs", "arr"});
  EXPECT_EQ(first.rc, 0) << first.err;
  EXPECT_TRUE(has(first.out, "arr[0]")) << first.out;
  auto third = astra({"logs", "arr[2]"});
  EXPECT_EQ(third.rc, 0) << third.err;
  EXPECT_TRUE(has(third.out, "arr[2]")) << third.out;
  auto second = astra({"logs", "arr", "--copy", "1"});
  EXPECT_EQ(second.rc, 0) << second.err;
  EXPECT_TRUE(has(second.out, "arr[1]")) << second.out;
  auto none = astra({"logs", "arr[7]"});
  EXPECT_EQ(none.rc, 1);
  EXPECT_TRUE(has(none.err, "run arr has no worker 0 in copy 7 (its copies placed: 0-2)"))
    << none.err;
  auto bad = astra({"logs", "arr[x]"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_TRUE(has(bad.err, "give an array run's copy as RUN[N]")) << bad.err;
}

TEST_F(CliDay2, DrainStopsTheWorkersThenRemoveForgetsTheMachineAndRefusesItsAgent) {
  ASSERT_TRUE(start_cluster());
  auto run = astra({"run", "--name", "long", "--image", "busybox", "--cpus", "1", "--mem",
                    "64M", "--", "sleep", "600"});
  ASSERT_EQ(run.rc, 0) << run.err;
  ASSERT_TRUE(ended("long", "Running"));
  // --workspace (issue 13 item 6): a run of another workspace is refused.
  EXPECT_TRUE(has(astra({"runs", "--workspace", "default"}).out, "long"));
  EXPECT_FALSE(has(astra({"runs", "--workspace", "vision"}).out, "long"));
  auto elsewhere = astra({"logs", "long", "--workspace", "vision"});
  EXPECT_EQ(elsewhere.rc, 1);
  EXPECT_TRUE(has(elsewhere.err, "no run named long in workspace vision (it is in workspace "
                                 "default)"))
    << elsewhere.err;
  EXPECT_EQ(astra({"run", "show", "long", "--workspace", "vision"}).rc, 1);
  EXPECT_EQ(astra({"delete", "long", "--workspace", "vision"}).rc, 1);
  EXPECT_EQ(astra({"run", "show", "long", "--workspace", "default"}).rc, 0);
  auto early = astra({"machine", "remove", "gpu-09"});
  EXPECT_EQ(early.rc, 1);
  EXPECT_TRUE(has(early.err, "machine gpu-09 is Up: only a Down machine or a drained one is "
                             "removed (astra drain gpu-09 first)"))
    << early.err;
  auto drain = astra({"drain", "gpu-09", "--deadline", "2s"});
  ASSERT_EQ(drain.rc, 0) << drain.err;
  EXPECT_TRUE(has(drain.out, "machine gpu-09 draining: cordoned; its workers stop at "))
    << drain.out;
  // A run that would fit says which machine and why it waits.
  auto waits = astra({"run", "--name", "waits", "--image", "busybox", "--gpus", "1", "--",
                      "true"});
  ASSERT_EQ(waits.rc, 0) << waits.err;
  auto why = run_field("waits", "waiting_reason");
  EXPECT_TRUE(has(why, "waiting: needs 1 GPU; gpu-09 has ") && has(why, " free but is drain"))
    << why;
  // At the deadline the running run is stopped (and kept, saying why) and
  // the drain is done.
  EXPECT_TRUE(wait_until([&] { return run_field("long", "state") == "Stopped"; }, 20s, 200ms))
    << astra({"run", "show", "long"}).out;
  EXPECT_EQ(run_field("long", "waiting_reason"), "machine gpu-09 was drained");
  EXPECT_TRUE(wait_until(
    [&] {
      auto j = nlohmann::json::parse(astra({"machine", "gpu-09", "-o", "json"}).out, nullptr,
                                     false);
      return !j.is_discarded() && j.value("drained", false);
    },
    10s, 100ms));
  auto removed = astra({"machine", "remove", "gpu-09"});
  ASSERT_EQ(removed.rc, 0) << removed.err;
  EXPECT_EQ(removed.out, "machine gpu-09 removed: its GPUs, records and identity are gone; its "
                         "agent is refused until it enrols again with a new join token\n");
  auto gone = astra({"machine", "gpu-09"});
  EXPECT_EQ(gone.rc, 1);
  EXPECT_TRUE(has(gone.err, "no machine named gpu-09")) << gone.err;
  EXPECT_TRUE(wait_until([&] { return has(agent_->err(), "removed from the cluster"); }, 10s))
    << agent_->err();
  // Its agent keeps trying and is refused: the machine stays gone.
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(astra({"machine", "gpu-09"}).rc, 1);
  EXPECT_EQ(run_field("waits", "waiting_reason"),
            "cannot fit anywhere now: the cluster has no machines");
  auto audit = astra({"audit"});
  EXPECT_TRUE(has(audit.out, "remove machine")) << audit.out;
  EXPECT_TRUE(has(audit.out, "drain")) << audit.out;
  // Trial: as the removal says, it enrols again with a new join token, with
  // the same data folder (its identity) and no wiping.
  agent_->kill_now();
  ASSERT_TRUE(start_agent()) << agent_->err();
  auto log = controller_->err();
  auto first = log.find("machine gpu-09 enrolled with join token");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_NE(log.find("machine gpu-09 enrolled with join token", first + 1), std::string::npos)
    << "enrolled a second time:\n" << log;
}

TEST_F(CliDay2, TokensAndWorkspacesAreListedRevokedAndDeleted) {
  ASSERT_TRUE(start_cluster());
  auto made = astra({"tokens", "create", "--pool", "h100", "-o", "json"});
  ASSERT_EQ(made.rc, 0) << made.err;
  auto id = nlohmann::json::parse(made.out).value("id", "");
  ASSERT_FALSE(id.empty());
  // A label the controller would refuse is a usage error (exit 2), refused
  // before anything is sent, as for `astra label` (a new-user trial saw 1).
  auto bad = astra({"tokens", "create", "--label", "bad key=1"});
  EXPECT_EQ(bad.rc, 2) << bad.err;
  EXPECT_TRUE(has(bad.err, "--label: ")) << bad.err;
  auto list = astra({"tokens", "list"});
  ASSERT_EQ(list.rc, 0) << list.err;
  EXPECT_TRUE(has(list.out, id)) << list.out;
  EXPECT_TRUE(has(list.out, "used by gpu-09")) << list.out;
  EXPECT_TRUE(has(list.out, "pool=h100")) << list.out;
  EXPECT_FALSE(has(list.out, "astj_")) << "a token itself is never shown again";
  auto revoked = astra({"tokens", "revoke", id});
  EXPECT_EQ(revoked.rc, 0) << revoked.err;
  EXPECT_EQ(revoked.out, "join token " + id + " revoked: no machine may enrol with it\n");
  EXPECT_TRUE(has(astra({"tokens", "list"}).out, "revoked"));
  EXPECT_EQ(astra({"tokens", "revoke", "nosuchid"}).rc, 1);
  auto api = astra({"api-tokens", "list"});
  ASSERT_EQ(api.rc, 0) << api.err;
  EXPECT_TRUE(has(api.out, "owner")) << api.out;
  EXPECT_FALSE(has(api.out, "asta_"));
  ASSERT_EQ(astra({"workspace", "create", "vision", "--grant", "pool=h100"}).rc, 0);
  auto del = astra({"workspace", "delete", "vision"});
  EXPECT_EQ(del.rc, 0) << del.err;
  EXPECT_EQ(del.out, "workspace vision deleted\n");
  EXPECT_FALSE(has(astra({"workspaces"}).out, "vision"));
  auto again = astra({"workspace", "delete", "default"});
  EXPECT_EQ(again.rc, 1);
  EXPECT_TRUE(has(again.err, "workspace default cannot be deleted")) << again.err;
  // gpu show: the GPU's current facts and its last hour as sparklines.
  auto gpus = astra({"gpus", "--machine", "gpu-09", "-o", "json"});
  auto first = nlohmann::json::parse(gpus.out)["gpus"][0]["gpu"].value("id", "");
  auto show = astra({"gpu", "show", "gpu-09", first});
  EXPECT_EQ(show.rc, 0) << show.err;
  EXPECT_TRUE(has(show.out, first)) << show.out;
  EXPECT_TRUE(has(show.out, "History: the last hour, one column a minute")) << show.out;
  EXPECT_TRUE(has(show.out, "█  97 %")) << show.out;
  auto none = astra({"gpu", "show", "gpu-09", "GPU-nope"});
  EXPECT_EQ(none.rc, 1);
  EXPECT_TRUE(has(none.err, "machine gpu-09 has no GPU GPU-nope")) << none.err;
}

// Issue 13: two workspaces each have a run `t`; `--workspace` names which.
// Issue 23 item 6: a deleted run's worker shows Stopping until its agent
// reports, then how it ended (this one ignores SIGTERM: killed at the 2 s
// grace).
TEST_F(CliDay2, RunNamesArePerWorkspaceAndADeletedRunsWorkerShowsStoppingThenHowItEnded) {
  ASSERT_TRUE(start_cluster());
  for (const char* ws : {"wa", "wb"})
    ASSERT_EQ(astra({"workspace", "create", ws}).rc, 0);
  auto submit = [&](const char* ws) {
    return astra({"run", "--workspace", ws, "--name", "t", "--image", "busybox", "--cpus", "1",
                  "--mem", "64M", "--", "sh", "-c", "trap '' TERM; while :; do sleep 1; done"});
  };
  for (const char* ws : {"wa", "wb"}) {
    auto r = submit(ws);
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  auto twice = submit("wb");
  EXPECT_EQ(twice.rc, 1);
  EXPECT_TRUE(has(twice.err, "a run named t in workspace wb already exists")) << twice.err;
  auto show = [&](const char* ws) {
    auto res = astra({"run", "show", "t", "--workspace", ws, "-o", "json"});
    return nlohmann::json::parse(res.out, nullptr, false);
  };
  auto worker = [&](const char* ws, const char* key) -> std::string {
    auto j = show(ws);
    if (j.is_discarded() || !j.contains("workers") || j["workers"].empty())
      return "";
    return j["workers"][0].value(key, "");
  };
  for (const char* ws : {"wa", "wb"})
    EXPECT_TRUE(wait_until([&] { return worker(ws, "state") == "Running"; }, 20s, 100ms))
      << astra({"run", "show", "t", "--workspace", ws}).out;
  auto ambiguous = astra({"run", "show", "t"});
  EXPECT_EQ(ambiguous.rc, 1);
  EXPECT_TRUE(has(ambiguous.err, "runs named t are in workspaces wa, wb")) << ambiguous.err;
  // Deleted: Stopping until the agent reports (the 2 s grace), then how.
  auto del = astra({"delete", "t", "--workspace", "wa"});
  ASSERT_EQ(del.rc, 0) << del.err;
  EXPECT_EQ(del.out, "run t deleted; its workers are stopping (astra run show t --workspace wa)\n");
  EXPECT_EQ(worker("wa", "state"), "Stopping");
  // README: `astra run show|delete|logs t --workspace W`, as `astra delete`.
  auto again = astra({"run", "delete", "t", "--workspace", "wa"});
  EXPECT_EQ(again.rc, 1);
  EXPECT_TRUE(has(again.err, "run t in workspace wa is already stopping")) << again.err;
  EXPECT_TRUE(wait_until([&] { return worker("wa", "state") == "Cancelled"; }, 10s, 100ms))
    << astra({"run", "show", "t", "--workspace", "wa"}).out;
  EXPECT_EQ(worker("wa", "detail"), "stopped: killed after the stop grace");
  EXPECT_TRUE(has(astra({"run", "show", "t", "--workspace", "wa"}).out, "How they ended"));
  // The other workspace's t runs on.
  EXPECT_EQ(worker("wb", "state"), "Running");
  EXPECT_EQ(astra({"run", "logs", "t", "--workspace", "wb"}).rc, 0);
  EXPECT_EQ(astra({"run", "delete", "t", "--workspace", "wb"}).rc, 0);
  // A deleted workspace's ended runs go with it: made again, it starts
  // empty (a new-user trial saw the new one inherit them).
  auto gone = astra({"workspace", "delete", "wa"});
  ASSERT_EQ(gone.rc, 0) << gone.err;
  ASSERT_EQ(astra({"workspace", "create", "wa"}).rc, 0);
  auto shown = astra({"run", "show", "t", "--workspace", "wa"});
  EXPECT_EQ(shown.rc, 1) << shown.out;
  EXPECT_TRUE(has(shown.err, "no run named t in workspace wa")) << shown.err;
  // -o json: the API's error object, code NOT_FOUND as the API answers 404
  // (a re-check read INVALID_REQUEST).
  auto as_json = astra({"run", "show", "t", "--workspace", "wa", "-o", "json"});
  EXPECT_EQ(as_json.rc, 1);
  EXPECT_EQ(nlohmann::json::parse(as_json.out, nullptr, false).value("code", ""), "NOT_FOUND")
    << as_json.out;
  EXPECT_FALSE(has(astra({"runs", "--workspace", "wa"}).out, "Cancelled"));
}

// Trial: revoking the only owner token locked the cluster for good, and a
// restart did not help (the owner-token file kept the revoked token).
TEST_F(CliDay2, TheLastOwnerTokenIsKeptAndALockedOutOperatorGetsBackIn) {
  ASSERT_TRUE(start_controller());
  auto me = astra({"whoami", "-o", "json"});
  ASSERT_EQ(me.rc, 0) << me.err;
  auto first = nlohmann::json::parse(me.out).value("token_id", "");
  ASSERT_FALSE(first.empty()) << me.out;
  auto refused = astra({"api-tokens", "revoke", first});
  EXPECT_EQ(refused.rc, 1);
  EXPECT_EQ(refused.err, "astra: refused: " + first
                           + " is the cluster's last owner token; create another owner token "
                             "first (astra api-tokens create --role owner)\n");
  EXPECT_EQ(astra({"whoami"}).rc, 0) << "still works";
  // With a second owner the first may go: the owner-token file now holds
  // a revoked token, as after the trial's revoke.
  auto made = astra({"api-tokens", "create", "--name", "ops", "--role", "owner", "-o", "json"});
  ASSERT_EQ(made.rc, 0) << made.err;
  auto ops = dir_ / "ops-token";
  write_text(ops, nlohmann::json::parse(made.out).value("token", "") + "\n");
  auto revoked = astra_as(ops, {"api-tokens", "revoke", first});
  ASSERT_EQ(revoked.rc, 0) << revoked.err;
  auto locked = astra({"whoami"});
  EXPECT_EQ(locked.rc, 1);
  EXPECT_TRUE(has(locked.err, "was revoked")) << locked.err;
  // The operator on the controller's host restarts it: it writes a fresh
  // owner token into the same file and says so.
  controller_->kill_now();
  ASSERT_TRUE(start_controller());
  auto back = astra({"whoami", "-o", "json"});
  ASSERT_EQ(back.rc, 0) << back.err;
  auto fresh = nlohmann::json::parse(back.out).value("token_id", "");
  EXPECT_NE(fresh, first);
  EXPECT_TRUE(has(controller_->err(), "wrote a fresh owner API token (id " + fresh + ")"))
    << controller_->err();
  // A file whose token works is left alone on the next start.
  controller_->kill_now();
  ASSERT_TRUE(start_controller());
  EXPECT_EQ(nlohmann::json::parse(astra({"whoami", "-o", "json"}).out).value("token_id", ""),
            fresh);
}
