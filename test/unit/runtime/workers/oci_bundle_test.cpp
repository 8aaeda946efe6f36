// The runc runtime's pure parts (runtime/workers/oci_bundle.cpp): the seed's
// /dev/shm rule and command rules, users, config.json with limits, ulimits
// and seccomp. Source: shared/seeds/inside-a-worker.md.

#include <set>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/workers/oci_bundle.hpp"
#include "worker_test_files.hpp"

using namespace astraeus;
using namespace astraeus::test;

TEST(SharedMemory, FollowsTheSeedsRule) {
  EXPECT_EQ(shm_size_bytes(0, 0), 64 * MiB);
  EXPECT_EQ(shm_size_bytes(0, 256 * MiB), 64 * MiB);
  EXPECT_EQ(shm_size_bytes(1, 256 * MiB), 1 * GiB) << "at least 1 GiB";
  EXPECT_EQ(shm_size_bytes(8, 64 * GiB), 32 * GiB) << "half the memory limit";
  EXPECT_EQ(shm_size_bytes(8, 1024 * GiB), 64 * GiB) << "at most 64 GiB";
  EXPECT_EQ(shm_size_bytes(8, 0), 8 * GiB) << "no memory limit";
}

TEST(WorkerCommand, CommandReplacesEntrypointAndCmd) {
  oci_image img;
  img.entrypoint = {"/entry"};
  img.cmd = {"--serve"};
  EXPECT_EQ(worker_command({"sh", "-c", "id"}, img),
            (std::vector<std::string>{"sh", "-c", "id"}));
  EXPECT_EQ(worker_command({}, img), (std::vector<std::string>{"/entry", "--serve"}));
  img.entrypoint.clear();
  EXPECT_EQ(worker_command({}, img), (std::vector<std::string>{"--serve"}));
}

TEST(WorkerUser, ResolvesNamesAgainstTheImage) {
  test::temp_dir dir;
  write(fs::path{dir.path()} / "etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:100:Alice:/home/alice:/bin/sh\n");
  write(fs::path{dir.path()} / "etc/group",
        "root:x:0:\nwheel:x:10:root\nusers:x:100:\nvideo:x:44:alice\n");
  auto root = resolve_user("", dir.path());
  ASSERT_TRUE(root);
  EXPECT_EQ(root->uid, 0u);
  EXPECT_EQ(root->groups, std::vector<uint32_t>{10}) << "wheel lists root";
  auto alice = resolve_user("alice", dir.path());
  ASSERT_TRUE(alice);
  EXPECT_EQ(alice->uid, 1000u);
  EXPECT_EQ(alice->gid, 100u);
  EXPECT_EQ(alice->groups, std::vector<uint32_t>{44});
  // By uid, as the seed allows (name, uid or uid:gid): the same groups as
  // by name (a helper's audit: --user 1000 lost alice's video group).
  auto by_uid = resolve_user("1000", dir.path());
  ASSERT_TRUE(by_uid);
  EXPECT_EQ(by_uid->uid, 1000u);
  EXPECT_EQ(by_uid->gid, 100u);
  EXPECT_EQ(by_uid->groups, std::vector<uint32_t>{44});
  auto root_uid = resolve_user("0", dir.path());
  ASSERT_TRUE(root_uid);
  EXPECT_EQ(root_uid->groups, std::vector<uint32_t>{10});
  auto numeric = resolve_user("1234:44", dir.path());
  ASSERT_TRUE(numeric);
  EXPECT_EQ(numeric->uid, 1234u);
  EXPECT_EQ(numeric->gid, 44u);
  auto bad = resolve_user("bob", dir.path());
  ASSERT_FALSE(bad);
  EXPECT_NE(render_error(bad.error()).find("'bob'"), std::string::npos);
}

// A root filesystem folder is copied as it is (eighth trial: /tmp came out
// 1755 under the agent's umask and a user's home root's, so a run with
// --user could write neither).
TEST(UnpackImage, ARootFilesystemFolderKeepsItsModesAndOwners) {
  test::temp_dir dir;
  auto image_dir = fs::path{dir.path()} / "rfs";
  write(image_dir / "etc/passwd", "root:x:0:0::/root:/bin/sh\nbob:x:1234:1234::/home/bob:/bin/sh\n");
  fs::create_directories(image_dir / "tmp");
  fs::create_directories(image_dir / "home/bob");
  ASSERT_EQ(::chmod((image_dir / "tmp").c_str(), 01777), 0);
  ASSERT_EQ(::chmod((image_dir / "home/bob").c_str(), 0700), 0);
  const bool root = ::geteuid() == 0;
  if (root)
    ASSERT_EQ(::chown((image_dir / "home/bob").c_str(), 1234, 1234), 0);
  fs::create_symlink("/etc/passwd", image_dir / "passwd-link");
  oci_image img;
  img.kind = "rootfs";
  img.path = image_dir.string();
  auto bundle = fs::path{dir.path()} / "bundle";
  ASSERT_FALSE(unpack_image(img, bundle.string(), "umoci", "skopeo"));
  struct stat st {};
  ASSERT_EQ(::stat((bundle / "rootfs/tmp").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  ASSERT_EQ(::stat((bundle / "rootfs/home/bob").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  if (root)
    EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(fs::read_symlink(bundle / "rootfs/passwd-link"), "/etc/passwd");
  EXPECT_EQ(read(bundle / "rootfs/etc/passwd").substr(0, 4), "root");
  // An unreadable folder is an error naming it.
  img.path = (fs::path{dir.path()} / "no-such").string();
  auto err = unpack_image(img, (fs::path{dir.path()} / "b2").string(), "umoci", "skopeo");
  EXPECT_NE(render_error(err).find("cannot copy the root filesystem"), std::string::npos);
}

TEST(OciConfig, CarriesLimitsShmAndDevices) {
  oci_worker w;
  w.args = {"sh", "-c", "id"};
  w.env = {"RANK=0"};
  w.memory_bytes = 256 * MiB;
  w.cpus = 2;
  w.shm_bytes = 1 * GiB;
  w.rlimits = {{"nofile", 1048576, 1048576}, {"memlock", -1, -1}};
  w.devices = {{"/dev/nvidia0", "/dev/nvidia0", 'c', 195, 0, 0666}};
  auto c = oci_config(w, "rootfs");
  EXPECT_EQ(c["process"]["args"], nlohmann::json({"sh", "-c", "id"}));
  EXPECT_EQ(c["linux"]["resources"]["memory"]["limit"], 256 * MiB);
  EXPECT_EQ(c["linux"]["resources"]["cpu"]["quota"], 200000);
  EXPECT_EQ(c["linux"]["resources"]["cpu"]["period"], 100000);
  EXPECT_EQ(c["process"]["rlimits"][1]["type"], "RLIMIT_MEMLOCK");
  EXPECT_EQ(c["process"]["rlimits"][1]["hard"], UINT64_MAX);
  bool shm = false;
  for (const auto& m : c["mounts"])
    if (m["destination"] == "/dev/shm")
      for (const auto& o : m["options"])
        shm = shm || o == "size=" + std::to_string(GiB);
  EXPECT_TRUE(shm) << c["mounts"].dump();
  EXPECT_EQ(c["linux"]["devices"][0]["path"], "/dev/nvidia0");
  w.cpu_burst = true;
  auto burst = oci_config(w, "rootfs");
  EXPECT_FALSE(burst["linux"]["resources"]["cpu"].contains("quota"))
    << "cpu_burst: the weight only";
}

TEST(OciConfig, CpuBurstKeepsTheWeightOfItsCores) {
  oci_worker w;
  w.cpus = 2;
  w.cpu_burst = true;
  auto cpu = oci_config(w, "rootfs")["linux"]["resources"]["cpu"];
  EXPECT_EQ(cpu, nlohmann::json({{"shares", 2048}}))
    << "seed, Limits: with cpu_burst the cores are the weight only";
}

TEST(Ulimits, TheRunsValuesReplaceTheDefaultsAndAddOthers) {
  v1::RunSpec spec;
  auto add = [&](const char* name, int64_t soft, int64_t hard) {
    auto* u = spec.add_ulimits();
    u->set_name(name);
    u->set_soft(soft);
    u->set_hard(hard);
  };
  add("nofile", 4096, 8192);
  add("stack", 67108864, -1);
  std::vector<oci_rlimit> oci{{"nofile", 1048576, 1048576}, {"memlock", -1, -1}};
  apply_ulimits(oci, spec);
  auto rl = [&] {
    oci_worker w;
    w.rlimits = oci;
    return oci_config(w, "rootfs")["process"]["rlimits"];
  }();
  EXPECT_EQ(rl, nlohmann::json::parse(R"([
    {"type": "RLIMIT_NOFILE", "soft": 4096, "hard": 8192},
    {"type": "RLIMIT_MEMLOCK", "soft": 18446744073709551615, "hard": 18446744073709551615},
    {"type": "RLIMIT_STACK", "soft": 67108864, "hard": 18446744073709551615}])"));
  // A host process gets the same limits, as setrlimit takes them.
  std::vector<std::pair<int, rlimit>> host{{RLIMIT_NOFILE, rlimit{1048576, 1048576}}};
  apply_ulimits(host, spec);
  ASSERT_EQ(host.size(), 2u);
  EXPECT_EQ(host[0].first, RLIMIT_NOFILE);
  EXPECT_EQ(host[0].second.rlim_cur, 4096u);
  EXPECT_EQ(host[0].second.rlim_max, 8192u);
  EXPECT_EQ(host[1].first, RLIMIT_STACK);
  EXPECT_EQ(host[1].second.rlim_max, RLIM_INFINITY);
}

TEST(Seccomp, DangerousCallsAreDeniedAndNumaMemoryPolicyIsAllowed) {
  auto c = oci_config(oci_worker{}, "rootfs");
  const auto& sc = c["linux"]["seccomp"];
  EXPECT_EQ(sc["defaultAction"], "SCMP_ACT_ALLOW");
  ASSERT_EQ(sc["syscalls"].size(), 1u);
  const auto& deny = sc["syscalls"][0];
  EXPECT_EQ(deny["action"], "SCMP_ACT_ERRNO");
  EXPECT_EQ(deny["errnoRet"], 1) << "EPERM, as Docker answers";
  std::set<std::string> denied = deny["names"];
  for (const char* call : {"kexec_load", "mount", "umount2", "reboot", "init_module",
                           "finit_module", "keyctl", "bpf", "unshare", "setns", "pivot_root"})
    EXPECT_EQ(denied.count(call), 1u) << call;
  // AMD's ROCm needs the NUMA memory-policy calls (issue 6).
  for (const auto& call : numa_memory_policy_syscalls)
    EXPECT_EQ(denied.count(call), 0u) << call;
  EXPECT_EQ(numa_memory_policy_syscalls.size(), 5u);
  EXPECT_EQ(denied.count("ptrace"), 0u) << "debuggers and profilers work";
  EXPECT_FALSE(sc["architectures"].empty()) << "32-bit calls are filtered too";
}
