// Run specs as shared/seeds/inside-a-worker.md writes them (issue 16), from
// the spec file to the worker, on a real controller + agent + astra on
// loopback with runc: task_template.user (id, HOME), cpu_cores and
// memory_bytes (SLURM_*, OOMKilled), volumes (EmptyDir, Bind read-only and
// ReadWrite), configs (a read-only file), ipc_mode: host (the machine's
// /dev/shm), `astra run --code` (/workspace), and bad specs refused before
// anything is stored. The runc tests skip where runc or busybox-static is
// missing.

#include <sys/stat.h>

#include <csignal>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "integration/cluster_harness.hpp"
#include "runtime/workers/builtin_image.hpp"
#include "runtime/workers/worker_process.hpp"

using namespace astraeus;
using namespace astraeus::itest;

namespace {

/// A controller and one agent (gpu-09, runc) in a temporary folder.
class RunSpecs : public ::testing::Test {
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

  /// Starts the controller, then the agent once the controller answers;
  /// true once gpu-09 is Up.
  bool start_cluster() {
    auto* ctl = spawn("controller", {program("astraeus-controller"), "--port",
                                     std::to_string(port_), "--data-dir",
                                     (dir_ / "controller").string()});
    auto keys = keys_dir_of((dir_ / "controller").string());
    auto ready = [&] {
      return use_owner_credentials(port_, keys)
             && static_cast<bool>(
               gate_client::connect_cli(loopback(port_), 300ms, owner_credentials(port_)));
    };
    if (!wait_until(ready, 10s)) {
      ADD_FAILURE() << "controller not ready: " << ctl->err();
      return false;
    }
    std::vector<std::string> argv{
      program("astraeus-agent"), "--controller", "127.0.0.1:" + std::to_string(port_),
      "--data-dir", agent_dir().string(), "--name", "gpu-09", "--report-interval", "200ms",
      "--set", std::string{"gpu.nvml_library="} + ASTRAEUS_NVML_STAND_IN, "--set", "kmsg.path=",
      "--set", "workers.runtime=runc", "--set", "workers.poll_interval=50ms", "--set",
      "stop.grace=2s"};
    auto join = enrol_flags(port_, dir_.path(), "gpu-09");
    argv.insert(argv.end(), join.begin(), join.end());
    spawn("agent", std::move(argv),
          {"ASTRAEUS_NVML_FIXTURE=" ASTRAEUS_SOURCE_DIR "/test/fixtures/nvml/h100x8.json"});
    return wait_until([&] { return machine_in_state(port_, "gpu-09", v1::Machine::Up); }, 10s);
  }

  command_result astra(std::vector<std::string> args) {
    std::vector<std::string> argv{program("astra"), "--addr",
                                  "127.0.0.1:" + std::to_string(port_), "--token-file",
                                  owner_token().string()};
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

  /// The agent's busybox image with a user alice (uid 1000, group users
  /// 100, also in video 44), put in its images folder as `bbuser`.
  void add_user_image() {
    auto images = agent_dir() / "images";
    ASSERT_FALSE(ensure_busybox_image(images.string()));
    fs::copy(images / "busybox", images / "bbuser",
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    write_text(images / "bbuser" / "etc" / "passwd",
               "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:100:Alice:/home/alice:/bin/sh\n");
    write_text(images / "bbuser" / "etc" / "group",
               "root:x:0:\nwheel:x:10:root\nusers:x:100:\nvideo:x:44:alice\n");
  }

  temp_dir dir_{"astraeus-run-specs"};
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<process>> procs_;
};

} // namespace

TEST_F(RunSpecs, TheSeedsFieldsReachTheContainer) {
  ASSERT_TRUE(start_cluster());
  add_user_image();
  auto ro = dir_ / "ro", rw = dir_ / "rw";
  fs::create_directories(ro);
  fs::create_directories(rw);
  ::chmod(rw.c_str(), 0777);
  write_text(ro / "data.txt", "machine data\n");
  auto shm_name = "astraeus-run-specs-" + std::to_string(port_);
  auto res = run_file(
    "seed",
    "name: seed\nimage: bbuser\n"
    "task_template: {user: alice}\ncpu_cores: 1\nmemory_bytes: 268435456\n"
    "volumes:\n"
    "  - {name: scratch, type: EmptyDir, mount_path: /scratch}\n"
    "  - {name: ro, type: Bind, host_path: " + ro.string() + ", mount_path: /ro}\n"
    "  - {name: rw, type: Bind, host_path: " + rw.string() + ", mount_path: /rw, mode: ReadWrite}\n"
    "configs:\n"
    "  - name: app\n"
    "    mounts: [{mount_path: /etc/app.conf, content: \"hello config\\n\"}]\n"
    "security_context: {ipc_mode: host}\n"
    "command: [sh, -c, 'id; echo HOME=$HOME; echo cpus=$SLURM_CPUS_PER_TASK "
    "mem=$SLURM_MEM_PER_NODE; cat /etc/app.conf /ro/data.txt; "
    "touch /scratch/x && echo scratch writable; "
    "touch /ro/x 2>/dev/null && echo ro writable || echo ro read-only; "
    "echo hi > /rw/out && echo rw writable; "
    "(echo x > /etc/app.conf) 2>/dev/null && echo config writable || echo config read-only; "
    "echo shm > /dev/shm/" + shm_name + "']\n");
  ASSERT_EQ(res.rc, 0) << res.err;
  ASSERT_TRUE(ended("seed", "Stopped"));
  auto logs = astra({"logs", "seed"}).out;
  EXPECT_TRUE(contains(logs, "uid=1000(alice) gid=100(users) groups=")) << logs;
  EXPECT_TRUE(contains(logs, "44(video)") && contains(logs, "100(users)"))
    << "its groups as the image's /etc/group lists them: " << logs;
  EXPECT_TRUE(contains(logs, "HOME=/home/alice\n")) << logs;
  EXPECT_TRUE(contains(logs, "cpus=1 mem=256\n")) << logs;
  EXPECT_TRUE(contains(logs, "hello config\nmachine data\n")) << logs;
  EXPECT_TRUE(contains(logs, "scratch writable\n")) << logs;
  EXPECT_TRUE(contains(logs, "ro read-only\n")) << logs;
  EXPECT_TRUE(contains(logs, "rw writable\n")) << logs;
  EXPECT_TRUE(contains(logs, "config read-only\n")) << logs;
  EXPECT_EQ(read_text(rw / "out"), "hi\n") << "a ReadWrite Bind writes the machine's folder";
  struct stat st {};
  ASSERT_EQ(::stat((rw / "out").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u) << "files the worker writes belong to its uid";
  EXPECT_EQ(read_text(fs::path{"/dev/shm"} / shm_name), "shm\n") << "ipc_mode: host";
  fs::remove(fs::path{"/dev/shm"} / shm_name);
  EXPECT_FALSE(fs::exists(agent_dir() / "workers" / "seed-0" / "volumes" / "scratch"))
    << "an EmptyDir is removed with the worker's container";
}

TEST_F(RunSpecs, MemoryBytesIsAHardLimitAndAMissingUserFailsTheStart) {
  ASSERT_TRUE(start_cluster());
  // tail keeps the last 100 MB it read: far above the 16 MiB limit.
  ASSERT_EQ(run_file("hog", "name: hog\nimage: busybox\ncpu_cores: 1\nmemory_bytes: 16777216\n"
                            "command: [sh, -c, 'exec tail -c 100000000 /dev/zero']\n")
              .rc,
            0);
  ASSERT_EQ(run_file("nouser", "name: nouser\nimage: busybox\ntask_template: {user: bob}\n"
                               "command: [id]\n")
              .rc,
            0);
  ASSERT_TRUE(ended("hog", "Failed"));
  EXPECT_TRUE(contains(astra({"run", "show", "hog"}).out,
                       "OOMKilled: the container exceeded its memory limit"));
  ASSERT_TRUE(ended("nouser", "Failed"));
  auto show = astra({"run", "show", "nouser"}).out;
  EXPECT_TRUE(contains(show, "task_template.user: user 'bob' is not in the image's /etc/passwd"))
    << show;
}

TEST_F(RunSpecs, BadSpecsAreRefusedBeforeAnythingIsStored) {
  ASSERT_TRUE(start_cluster());
  struct bad {
    std::string yaml, error;
  };
  const std::vector<bad> cases = {
    {"volumes: [{name: d, type: Bind, host_path: /srv, mount_path: /d}]\nworkspace: vision\n",
     "volumes[0]: workspace vision is not granted the machine path /srv (it is granted none; "
     "an admin grants it with: astra workspace grant vision --path PATH)"},
    {"security_context: {ipc_mode: host}\nworkspace: vision\n",
     "security_context.ipc_mode: host: workspace vision is not allowed privileged work"},
    {"memory_bytes: -1\n", "memory_bytes: a memory size cannot be negative"},
    {"cpu_cores: many\n", "cpu_cores: expected a number, got \"many\""},
    {"datavolume_refs: [{name: d}]\n", "not supported yet: datavolume_refs"},
    {"task_template: {user: \"a b\"}\n", "task_template.user: \"a b\" is not a user"},
  };
  ASSERT_EQ(astra({"workspace", "create", "vision"}).rc, 0);
  for (const auto& c : cases) {
    auto res = run_file("bad", "name: bad\nimage: busybox\ncommand: [id]\n" + c.yaml);
    EXPECT_NE(res.rc, 0) << c.yaml;
    EXPECT_TRUE(contains(res.err, c.error)) << c.yaml << " -> " << res.err;
  }
  EXPECT_FALSE(contains(astra({"runs"}).out, "bad")) << "nothing was stored";
  // Issue 16: an admin grants the workspace a machine path; then the Bind
  // volume is admitted (and the grant is audited and listed).
  auto bad = astra({"workspace", "grant", "vision", "--path", "data"});
  EXPECT_EQ(bad.rc, 2) << "a usage error, refused before anything is sent";
  EXPECT_TRUE(contains(bad.err, "--path 'data': give an absolute machine path")) << bad.err;
  auto granted = astra({"workspace", "grant", "vision", "--path", "/srv/", "--privileged"});
  ASSERT_EQ(granted.rc, 0) << granted.err;
  EXPECT_EQ(granted.out, "workspace vision: machine paths /srv; privileged work: yes\n");
  auto listed = astra({"workspaces"}).out;
  EXPECT_TRUE(contains(listed, "/srv")) << listed;
  // The JSON says what the table says: the default workspace may do
  // privileged work (a new-user trial saw false there and yes in the table).
  auto as_json = astra({"-o", "json", "workspaces"}).out;
  auto doc = nlohmann::json::parse(as_json, nullptr, false);
  bool default_privileged = false;
  if (doc.is_object() && doc.contains("workspaces"))
    for (const auto& w : doc["workspaces"])
      if (w.value("name", "") == "default")
        default_privileged = w.value("allow_privileged", false);
  EXPECT_TRUE(default_privileged) << as_json;
  EXPECT_TRUE(contains(astra({"audit"}).out, "grant workspace")) << "audited";
  auto ok = run_file("granted", "name: granted\nimage: busybox\ncommand: [ls, /d]\n"
                                "workspace: vision\n"
                                "volumes: [{name: d, type: Bind, host_path: /srv, mount_path: /d}]\n");
  EXPECT_EQ(ok.rc, 0) << ok.err;
}

TEST_F(RunSpecs, CodeIsUnpackedAtWorkspaceTheWorkingDirectory) {
  ASSERT_TRUE(start_cluster());
  auto code = dir_ / "code";
  fs::create_directories(code);
  write_text(code / "train.sh", "echo training in $(pwd)\n");
  write_text(code / ".gitignore", "big.bin\n");
  write_text(code / "big.bin", std::string(1000, 'x'));
  auto res = astra({"run", "--name", "code", "--image", "busybox", "--code", code.string(), "--",
                    "sh", "-c", "sh train.sh; ls -A; test -s /astra/code.tgz.b64 && echo packed"});
  ASSERT_EQ(res.rc, 0) << res.err;
  ASSERT_TRUE(ended("code", "Stopped"));
  auto logs = astra({"logs", "code"}).out;
  EXPECT_TRUE(contains(logs, "training in /workspace\n")) << logs;
  EXPECT_TRUE(contains(logs, "train.sh\n")) << logs;
  EXPECT_FALSE(contains(logs, "big.bin")) << ".gitignore'd files stay behind: " << logs;
  EXPECT_TRUE(contains(logs, "packed\n")) << logs;
  // A host process runs in the unpacked folder.
  res = astra({"run", "--name", "hostcode", "--runtime", "process", "--code", code.string(), "--",
               "sh", "-c", "sh train.sh"});
  ASSERT_EQ(res.rc, 0) << res.err;
  ASSERT_TRUE(ended("hostcode", "Stopped"));
  logs = astra({"logs", "hostcode"}).out;
  EXPECT_TRUE(contains(logs, "training in " + (agent_dir() / "workers" / "hostcode-0" / "code").string()))
    << logs;
  // Too big to carry: refused before it is sent.
  std::string noise(2000000, '\0');  // does not compress
  uint64_t x = 88172645463325252ull;
  for (auto& c : noise) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>(x);
  }
  write_text(code / "blob", noise);
  res = astra({"run", "--name", "big", "--image", "busybox", "--code", code.string(), "--", "true"});
  EXPECT_NE(res.rc, 0);
  EXPECT_TRUE(contains(res.err, "packs to more than 512 KiB")) << res.err;
}
