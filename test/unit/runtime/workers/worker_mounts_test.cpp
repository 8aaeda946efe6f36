// What a run's spec adds to a worker's filesystem (runtime/workers/
// worker_mounts.cpp) and the config.json parts it changes: EmptyDir and Bind
// volumes, config files, the packed code, the user, ipc_mode: host and args
// without a command. Source: shared/seeds/inside-a-worker.md ("Filesystem",
// "User", "Shared memory", "Command and working directory").

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "messages/error.hpp"
#include "runtime/workers/oci_bundle.hpp"
#include "runtime/workers/worker_mounts.hpp"
#include "worker_test_files.hpp"

using namespace astraeus;
using namespace astraeus::test;

namespace {

const oci_mount* mount_at(const std::vector<oci_mount>& mounts, const std::string& path) {
  for (const auto& m : mounts)
    if (m.container_path == path)
      return &m;
  return nullptr;
}

bool has(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

} // namespace

TEST(WorkerMounts, VolumesAndConfigsBecomeBindMountsWithTheirModes) {
  test::temp_dir dir;
  auto host = dir.path() + "/host-data";
  fs::create_directories(host);
  v1::RunSpec spec;
  auto* scratch = spec.add_volumes();
  scratch->set_name("scratch");
  scratch->set_type("EmptyDir");
  scratch->set_mount_path("/scratch");
  auto* ro = spec.add_volumes();
  ro->set_name("data");
  ro->set_type("Bind");
  ro->set_host_path(host);
  ro->set_mount_path("/data");
  auto* rw = spec.add_volumes();
  rw->set_name("out");
  rw->set_type("Bind");
  rw->set_host_path(host);
  rw->set_mount_path("/out");
  rw->set_read_write(true);
  auto* file = spec.add_configs()->add_mounts();
  file->set_mount_path("/etc/app.yaml");
  file->set_content("lr: 0.1\n");
  auto worker = dir.path() + "/w";
  // Something left from an earlier start of the worker is not kept.
  write(fs::path{worker} / "volumes/scratch/old", "x");
  auto mounts = prepare_worker_mounts(spec, worker, ::getuid(), ::getgid());
  ASSERT_TRUE(mounts) << render_error(mounts.error());
  ASSERT_EQ(mounts->size(), 4u);
  auto* s = mount_at(*mounts, "/scratch");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(fs::is_directory(s->host_path));
  EXPECT_TRUE(fs::is_empty(s->host_path)) << "an EmptyDir starts empty";
  EXPECT_TRUE(has(s->options, "rw"));
  EXPECT_TRUE(has(mount_at(*mounts, "/data")->options, "ro")) << "Bind is read-only";
  EXPECT_TRUE(has(mount_at(*mounts, "/out")->options, "rw")) << "mode: ReadWrite";
  auto* c = mount_at(*mounts, "/etc/app.yaml");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(has(c->options, "ro"));
  EXPECT_EQ(read(c->host_path), "lr: 0.1\n");
  // They go with the worker's container.
  remove_worker_mounts(worker);
  EXPECT_FALSE(fs::exists(s->host_path));
  EXPECT_FALSE(fs::exists(c->host_path));
  EXPECT_TRUE(fs::exists(host)) << "a Bind path of the machine stays";
}

TEST(WorkerMounts, ABindPathTheMachineLacksFailsTheStart) {
  test::temp_dir dir;
  v1::RunSpec spec;
  auto* v = spec.add_volumes();
  v->set_name("data");
  v->set_type("Bind");
  v->set_host_path(dir.path() + "/missing");
  v->set_mount_path("/data");
  auto mounts = prepare_worker_mounts(spec, dir.path() + "/w", ::getuid(), ::getgid());
  ASSERT_FALSE(mounts);
  EXPECT_EQ(render_error(mounts.error()),
            "volume data: " + dir.path() + "/missing is not on this machine");
}

// Fifth new-user trial: a workspace's run made a link inside its granted
// folder (data/hostetc -> /etc), and a later run bound data/hostetc and read
// the host's /etc/shadow: the grant was checked as spelled, the mount followed
// the link. A named workspace's Bind path through a link is refused; the
// default workspace (the cluster's own) binds as before.
TEST(WorkerMounts, AWorkspacesBindPathThroughASymlinkIsRefused) {
  test::temp_dir dir;
  fs::create_directories(dir.path() + "/data");
  fs::create_directory_symlink("/etc", dir.path() + "/data/hostetc");
  v1::RunSpec spec;
  spec.set_namespace_("ws-943821");
  auto* v = spec.add_volumes();
  v->set_name("d");
  v->set_type("Bind");
  v->set_host_path(dir.path() + "/data/hostetc");
  v->set_mount_path("/data");
  auto mounts = prepare_worker_mounts(spec, dir.path() + "/w", ::getuid(), ::getgid());
  ASSERT_FALSE(mounts);
  EXPECT_EQ(render_error(mounts.error()),
            "volume d: " + dir.path() + "/data/hostetc goes through a symbolic link ("
              + dir.path() + "/data/hostetc -> /etc): a workspace's Bind path must not, as a "
              "link can lead past its grants; grant and bind the real path");
  // Under the link too.
  v->set_host_path(dir.path() + "/data/hostetc/ssl");
  EXPECT_FALSE(prepare_worker_mounts(spec, dir.path() + "/w2", ::getuid(), ::getgid()));
  // The real folder is bound.
  v->set_host_path(dir.path() + "/data");
  EXPECT_TRUE(prepare_worker_mounts(spec, dir.path() + "/w3", ::getuid(), ::getgid()));
  // The default workspace may bind any path, links included.
  spec.clear_namespace_();
  v->set_host_path(dir.path() + "/data/hostetc");
  EXPECT_TRUE(prepare_worker_mounts(spec, dir.path() + "/w4", ::getuid(), ::getgid()));
}

TEST(WorkerMounts, CodeIsUnpackedAtWorkspaceAndKeptPacked) {
  test::temp_dir dir;
  write(fs::path{dir.path()} / "src/train.py", "print('hi')\n");
  auto tgz = dir.path() + "/code.tgz";
  ASSERT_EQ(run_tool({"tar", "-czf", tgz, "-C", dir.path() + "/src", "."}).first, 0);
  v1::RunSpec spec;
  spec.set_code_tgz(read(tgz));
  auto worker = dir.path() + "/w";
  auto mounts = prepare_worker_mounts(spec, worker, ::getuid(), ::getgid());
  ASSERT_TRUE(mounts) << render_error(mounts.error());
  auto* code = mount_at(*mounts, "/workspace");
  ASSERT_NE(code, nullptr);
  EXPECT_EQ(read(fs::path{code->host_path} / "train.py"), "print('hi')\n");
  auto* packed = mount_at(*mounts, "/astra/code.tgz.b64");
  ASSERT_NE(packed, nullptr);
  EXPECT_TRUE(has(packed->options, "ro"));
  EXPECT_FALSE(read(packed->host_path).empty());
  auto host = prepare_host_code(spec, worker);
  ASSERT_TRUE(host);
  EXPECT_EQ(*host, worker + "/code");
}

TEST(WorkerMounts, CodeLeavingItsFolderIsRefused) {
  test::temp_dir dir;
  write(fs::path{dir.path()} / "a/evil", "x");
  fs::create_directories(dir.path() + "/a/b");
  auto tgz = dir.path() + "/code.tgz";
  // A member named b/../../evil (tar keeps the name as given).
  ASSERT_EQ(run_tool({"tar", "-czf", tgz, "-C", dir.path() + "/a/b", "--absolute-names",
                      "../evil"})
              .first,
            0);
  v1::RunSpec spec;
  spec.set_code_tgz(read(tgz));
  auto mounts = prepare_worker_mounts(spec, dir.path() + "/w", ::getuid(), ::getgid());
  ASSERT_FALSE(mounts);
  EXPECT_NE(render_error(mounts.error()).find("outside its folder"), std::string::npos)
    << render_error(mounts.error());
  spec.set_code_tgz("not a tar");
  auto bad = prepare_worker_mounts(spec, dir.path() + "/w", ::getuid(), ::getgid());
  ASSERT_FALSE(bad);
  EXPECT_NE(render_error(bad.error()).find("not a gzip'd tar"), std::string::npos);
}

TEST(WorkerMounts, TheSpecsUserWinsOverTheImagesAndHomeComesFromPasswd) {
  test::temp_dir dir;
  write(fs::path{dir.path()} / "etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:100:Alice:/home/alice:/bin/sh\n");
  oci_image image;
  image.user = "root";
  v1::RunSpec spec;
  EXPECT_EQ(worker_user(spec, image), "root");
  spec.set_user("alice");
  EXPECT_EQ(worker_user(spec, image), "alice");
  EXPECT_EQ(passwd_home(dir.path(), 1000), "/home/alice");
  EXPECT_EQ(passwd_home(dir.path(), 4321), "/root") << "a uid the image lacks";
}

TEST(WorkerMounts, IpcModeHostSharesTheMachinesShm) {
  oci_worker w;
  auto own = oci_config(w, "rootfs");
  bool ipc_ns = false;
  for (const auto& ns : own["linux"]["namespaces"])
    ipc_ns = ipc_ns || ns["type"] == "ipc";
  EXPECT_TRUE(ipc_ns);
  w.host_ipc = true;
  auto host = oci_config(w, "rootfs");
  for (const auto& ns : host["linux"]["namespaces"])
    EXPECT_NE(ns["type"], "ipc");
  bool bound = false;
  for (const auto& m : host["mounts"])
    if (m["destination"] == "/dev/shm") {
      EXPECT_EQ(m["type"], "bind");
      EXPECT_EQ(m["source"], "/dev/shm");
      bound = true;
    }
  EXPECT_TRUE(bound);
}

TEST(WorkerCommand, ArgsWithoutCommandGoToTheEntrypoint) {
  oci_image img;
  img.entrypoint = {"/entry"};
  img.cmd = {"--serve"};
  EXPECT_EQ(worker_command({}, img, {"--port", "80"}),
            (std::vector<std::string>{"/entry", "--port", "80"}));
  EXPECT_EQ(worker_command({}, img, {}), (std::vector<std::string>{"/entry", "--serve"}));
  EXPECT_EQ(worker_command({"sh"}, img, {"--port"}), (std::vector<std::string>{"sh"}))
    << "with a command, args are already part of it";
}
