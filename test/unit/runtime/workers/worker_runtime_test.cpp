// The runc runtime's pure parts and CDI: the seed's /dev/shm rule and
// command rules, users, config.json, and CDI specs (the conflict rule, the
// dynamic folder winning, stale specs, nvidia-ctk's fingerprint rule, the
// AMD spec from sysfs). Sources: shared/seeds/inside-a-worker.md,
// shared/seeds/gpus.md ("How a worker gets its GPUs").

#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actor_fixture.hpp"
#include "runtime/workers/cdi.hpp"
#include "runtime/workers/oci_bundle.hpp"
#include "runtime/workers/worker_process.hpp"
#include "runtime/workers/worker_supervisor.hpp"

using namespace astraeus;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream{p} << text;
}

std::string read(const fs::path& p) {
  std::ifstream in{p};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string spec_of(const std::string& kind, const std::vector<std::string>& names,
                    const std::string& node = "/dev/null") {
  std::string out = "cdiVersion: 0.5.0\nkind: " + kind + "\ndevices:\n";
  for (const auto& n : names)
    out += "- name: " + n + "\n  containerEdits:\n    deviceNodes:\n    - path: /dev/x-"
           + n + "\n      hostPath: " + node + "\n";
  return out;
}

const std::string stand_in_ctk = ASTRAEUS_SOURCE_DIR "/test/fixtures/nvidia-ctk/nvidia-ctk.sh";

} // namespace

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
  auto numeric = resolve_user("1234:44", dir.path());
  ASSERT_TRUE(numeric);
  EXPECT_EQ(numeric->uid, 1234u);
  EXPECT_EQ(numeric->gid, 44u);
  auto bad = resolve_user("bob", dir.path());
  ASSERT_FALSE(bad);
  EXPECT_NE(render_error(bad.error()).find("'bob'"), std::string::npos);
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

TEST(Cdi, TwoFilesInOneFolderDefiningADeviceIsAConflict) {
  test::temp_dir dir;
  cdi_options o;
  o.static_dir = dir.path() + "/etc";
  o.dynamic_dir = dir.path() + "/run";
  write(fs::path{o.dynamic_dir} / "a.yaml", spec_of("nvidia.com/gpu", {"GPU-1", "GPU-2"}));
  write(fs::path{o.dynamic_dir} / "b.yaml", spec_of("nvidia.com/gpu", {"GPU-2"}));
  auto reg = load_cdi(o);
  EXPECT_TRUE(cdi_edits_for(reg, {"nvidia.com/gpu=GPU-1"}));
  auto refused = cdi_edits_for(reg, {"nvidia.com/gpu=GPU-2"});
  ASSERT_FALSE(refused);
  auto why = render_error(refused.error());
  EXPECT_NE(why.find("a.yaml"), std::string::npos) << why;
  EXPECT_NE(why.find("b.yaml"), std::string::npos) << why;
}

TEST(Cdi, TheDynamicFolderWins) {
  test::temp_dir dir;
  cdi_options o;
  o.static_dir = dir.path() + "/etc";
  o.dynamic_dir = dir.path() + "/run";
  write(fs::path{o.static_dir} / "old.yaml", spec_of("nvidia.com/gpu", {"GPU-1"}, "/dev/zero"));
  write(fs::path{o.dynamic_dir} / "new.yaml", spec_of("nvidia.com/gpu", {"GPU-1"}, "/dev/null"));
  auto edits = cdi_edits_for(load_cdi(o), {"nvidia.com/gpu=GPU-1"});
  ASSERT_TRUE(edits);
  ASSERT_EQ(edits->devices.size(), 1u);
  EXPECT_EQ(edits->devices[0].host_path, "/dev/null");
}

TEST(Cdi, ADeviceWhoseNodeIsGoneIsStaleAndNotHandedOver) {
  test::temp_dir dir;
  cdi_options o;
  o.static_dir = dir.path() + "/etc";
  o.dynamic_dir = dir.path() + "/run";
  write(fs::path{o.dynamic_dir} / "nvidia.yaml",
        spec_of("nvidia.com/gpu", {"GPU-1"}, "/dev/no-such-gpu-node"));
  auto reg = load_cdi(o);
  EXPECT_FALSE(cdi_edits_for(reg, {"nvidia.com/gpu=GPU-1"}));
  ASSERT_EQ(reg.warnings.size(), 1u);
  EXPECT_NE(reg.warnings[0].find("stale"), std::string::npos) << reg.warnings[0];
}

TEST(Cdi, NvidiaSpecFollowsTheFingerprintRule) {
  test::temp_dir dir;
  cdi_options o;
  o.dynamic_dir = dir.path() + "/run";
  o.nvidia_ctk = stand_in_ctk;
  auto calls = dir.path() + "/calls";
  ::setenv("FAKE_CTK_CALLS", calls.c_str(), 1);
  ::setenv("FAKE_CTK_GPUS", "GPU-1 GPU-2", 1);
  auto count = [&] {
    auto text = read(calls);
    return std::count(text.begin(), text.end(), '\n');
  };
  auto spec = fs::path{o.dynamic_dir} / "nvidia.yaml";
  // A spec it did not write is replaced the first time.
  write(spec, "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n");
  EXPECT_EQ(sync_nvidia_spec(o, "550.54.15", {"GPU-2", "GPU-1"}), true);
  EXPECT_EQ(count(), 1);
  EXPECT_TRUE(cdi_edits_for(load_cdi(o), {"nvidia.com/gpu=GPU-1"}));
  // Same driver and GPUs: nothing to do.
  EXPECT_EQ(sync_nvidia_spec(o, "550.54.15", {"GPU-1", "GPU-2"}), false);
  EXPECT_EQ(count(), 1);
  // A new driver, or a new GPU set: written again.
  EXPECT_EQ(sync_nvidia_spec(o, "555.42.02", {"GPU-1", "GPU-2"}), true);
  EXPECT_EQ(sync_nvidia_spec(o, "555.42.02", {"GPU-1"}), true);
  EXPECT_EQ(count(), 3);
  // A stale spec is written again on request.
  EXPECT_EQ(sync_nvidia_spec(o, "555.42.02", {"GPU-1"}, true), true);
  EXPECT_EQ(count(), 4);
  // The GPUs went away: its spec is removed.
  EXPECT_EQ(sync_nvidia_spec(o, "", {}), true);
  EXPECT_FALSE(fs::exists(spec));
  ::unsetenv("FAKE_CTK_CALLS");
  ::unsetenv("FAKE_CTK_GPUS");
}

TEST(Cdi, NvidiaCtkFailureSaysWhy) {
  test::temp_dir dir;
  cdi_options o;
  o.dynamic_dir = dir.path() + "/run";
  o.nvidia_ctk = "/bin/false";
  auto r = sync_nvidia_spec(o, "550.54.15", {"GPU-1"});
  ASSERT_FALSE(r);
  EXPECT_NE(render_error(r.error()).find("cdi generate failed"), std::string::npos);
}

TEST(Cdi, AmdSpecComesFromSysfsMatchedByPciAddress) {
  test::temp_dir dir;
  auto sys = dir.path() + "/host";
  // Card numbers do not follow the PCI order: the spec must not care.
  fs::create_directories(sys + "/sys/bus/pci/devices/0000:c1:00.0/drm/card0");
  fs::create_directories(sys + "/sys/bus/pci/devices/0000:c1:00.0/drm/renderD129");
  fs::create_directories(sys + "/sys/bus/pci/devices/0000:03:00.0/drm/card1");
  fs::create_directories(sys + "/sys/bus/pci/devices/0000:03:00.0/drm/renderD128");
  write(sys + "/etc/group", "video:x:44:\nrender:x:105:\n");
  cdi_options o;
  o.static_dir = dir.path() + "/etc-cdi";
  o.dynamic_dir = dir.path() + "/run";
  auto wrote = write_amd_spec(o, sys, sys,
                              {{"amd-a", "0000:03:00.0"}, {"amd-b", "0000:c1:00.0"}});
  ASSERT_TRUE(wrote);
  EXPECT_TRUE(*wrote);
  auto spec = nlohmann::json::parse(read(fs::path{o.dynamic_dir} / "amd-astraeus.json"));
  EXPECT_EQ(spec["kind"], "amd.com/gpu");
  EXPECT_EQ(spec["devices"][0]["name"], "amd-a");
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"], "/dev/dri/card1");
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"][1]["path"],
            "/dev/dri/renderD128");
  EXPECT_EQ(spec["devices"][1]["containerEdits"]["deviceNodes"][1]["path"],
            "/dev/dri/renderD129");
  EXPECT_EQ(spec["containerEdits"]["deviceNodes"][0]["path"], "/dev/kfd");
  EXPECT_EQ(spec["containerEdits"]["additionalGids"], nlohmann::json({105, 44}));
  EXPECT_EQ(*write_amd_spec(o, sys, sys, {{"amd-a", "0000:03:00.0"}, {"amd-b", "0000:c1:00.0"}}),
            false) << "unchanged";
  EXPECT_EQ(*write_amd_spec(o, sys, sys, {}), true);
  EXPECT_FALSE(fs::exists(fs::path{o.dynamic_dir} / "amd-astraeus.json"));
}

TEST(Signals, ParsesNamesAndNumbers) {
  EXPECT_EQ(*parse_signal("SIGTERM"), 15);
  EXPECT_EQ(*parse_signal("int"), 2);
  EXPECT_EQ(*parse_signal("9"), 9);
  EXPECT_FALSE(parse_signal("SIGNOPE"));
  EXPECT_FALSE(parse_signal("0"));
}

// OOMKilled is read from the container's memory cgroup (issue 6, "Limits"):
// runc's state names the cgroup; the kernel's counter says whether it killed.
TEST(OomKills, ReadFromTheCgroupV2MemoryEventsRuncNamed) {
  test::temp_dir dir;
  auto runc_root = dir.path() + "/runc";
  auto host = dir.path() + "/host";
  write(fs::path{runc_root} / "astraeus-hog-0/state.json",
        R"({"id":"astraeus-hog-0","cgroup_paths":{"":"/sys/fs/cgroup/agent/astraeus-hog-0"}})");
  auto cg = runc_memory_cgroup(runc_root, "astraeus-hog-0");
  ASSERT_TRUE(cg);
  EXPECT_EQ(*cg, "/sys/fs/cgroup/agent/astraeus-hog-0");
  write(fs::path{host + *cg} / "memory.events",
        "low 0\nhigh 0\nmax 1742\noom 3\noom_kill 2\noom_group_kill 0\n");
  EXPECT_EQ(cgroup_oom_kills(*cg, host), 2u) << "the kernel killed twice";
  write(fs::path{host + *cg} / "memory.events", "low 0\nhigh 0\nmax 9\noom 0\noom_kill 0\n");
  EXPECT_EQ(cgroup_oom_kills(*cg, host), 0u) << "at its limit, never killed";
}

TEST(OomKills, CgroupV1AndHybridHostsReadMemoryOomControl) {
  test::temp_dir dir;
  auto runc_root = dir.path() + "/runc";
  auto host = dir.path() + "/host";
  // A hybrid host (as runc 1.1 records it): "" is the unified hierarchy,
  // which has no memory controller there.
  write(fs::path{runc_root} / "astraeus-w/state.json",
        R"({"cgroup_paths":{"":"/sys/fs/cgroup/unified/astraeus-w",)"
        R"("cpu":"/sys/fs/cgroup/cpu/a/astraeus-w",)"
        R"("memory":"/sys/fs/cgroup/memory/a/astraeus-w"}})");
  auto cg = runc_memory_cgroup(runc_root, "astraeus-w");
  ASSERT_TRUE(cg);
  EXPECT_EQ(*cg, "/sys/fs/cgroup/memory/a/astraeus-w");
  write(fs::path{host + *cg} / "memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n");
  EXPECT_EQ(cgroup_oom_kills(*cg, host), 1u);
}

TEST(OomKills, UnknownWhenRuncKeptNoRecordOrTheCgroupIsGone) {
  test::temp_dir dir;
  EXPECT_FALSE(runc_memory_cgroup(dir.path(), "astraeus-none"));
  write(fs::path{dir.path()} / "astraeus-bad/state.json", "not json");
  EXPECT_FALSE(runc_memory_cgroup(dir.path(), "astraeus-bad"));
  EXPECT_FALSE(cgroup_oom_kills("/sys/fs/cgroup/gone", dir.path()));
}

namespace {

/// A CDI test folder with the stand-in nvidia-ctk counting its calls.
struct ctk_fixture {
  test::temp_dir dir;
  cdi_options o;
  std::string calls = dir.path() + "/calls";
  ctk_fixture() {
    o.static_dir = dir.path() + "/etc";
    o.dynamic_dir = dir.path() + "/run";
    o.nvidia_ctk = stand_in_ctk;
    ::setenv("FAKE_CTK_CALLS", calls.c_str(), 1);
  }
  ~ctk_fixture() {
    ::unsetenv("FAKE_CTK_CALLS");
    ::unsetenv("FAKE_CTK_GPUS");
    ::unsetenv("FAKE_CTK_NODE");
  }
  long generated() const {
    auto text = read(calls);
    return std::count(text.begin(), text.end(), '\n');
  }
  /// A spec the agent wrote for `driver` and `gpus` (fingerprint kept).
  void ours(const std::string& text, const std::string& driver,
            const std::vector<std::string>& gpus) const {
    write(fs::path{o.dynamic_dir} / "nvidia.yaml", text);
    write(fs::path{o.dynamic_dir} / ".nvidia.yaml.astraeus-fingerprint",
          nvidia_fingerprint(driver, gpus));
  }
};

const std::vector<cdi_gpu> two_gpus = {{"GPU-1", "0000:3b:00.0", 0},
                                       {"GPU-2", "0000:5e:00.0", 1}};

} // namespace

// Issue 6: "Before each hand-over the agent checks that the spec's device
// nodes exist and match the discovered GPUs, and regenerates a stale spec".
TEST(CdiHandOver, AStaleSpecWhoseNodeIsGoneIsRegenerated) {
  ctk_fixture f;
  ::setenv("FAKE_CTK_GPUS", "GPU-1 GPU-2", 1);
  // The spec names /dev/nvidia-gone for GPU-1 (the driver was reinstalled).
  auto text = spec_of("nvidia.com/gpu", {"GPU-2"}, "/dev/null");
  text += "- name: GPU-1\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n"
          "      hostPath: /dev/nvidia-gone\n";
  f.ours(text, "550.54.15", {"GPU-1", "GPU-2"});
  EXPECT_NE(nvidia_spec_stale(load_cdi(f.o), {"nvidia.com/gpu=GPU-1"}, two_gpus)
              .find("/dev/nvidia-gone"),
            std::string::npos);
  auto edits = checked_cdi_edits(f.o, {"nvidia.com/gpu=GPU-1"}, "550.54.15", two_gpus);
  ASSERT_TRUE(edits) << render_error(edits.error());
  EXPECT_EQ(f.generated(), 1) << "written again once";
  ASSERT_EQ(edits->devices.size(), 2u) << "its node and the spec's /dev/nvidiactl";
  EXPECT_EQ(edits->devices[1].host_path, "/dev/null");
  // Fresh now: no more generation.
  EXPECT_TRUE(checked_cdi_edits(f.o, {"nvidia.com/gpu=GPU-2"}, "550.54.15", two_gpus));
  EXPECT_EQ(f.generated(), 1);
}

TEST(CdiHandOver, ASpecForOtherGpusIsRegenerated) {
  ctk_fixture f;
  ::setenv("FAKE_CTK_GPUS", "GPU-1 GPU-2", 1);
  // Written when the machine had GPU-1 and GPU-9; GPU-9 was replaced by GPU-2
  // and the fingerprint not yet updated (no discovery pass since).
  f.ours(spec_of("nvidia.com/gpu", {"GPU-1", "GPU-9"}), "550.54.15", {"GPU-1", "GPU-2"});
  auto why = nvidia_spec_stale(load_cdi(f.o), {"nvidia.com/gpu=GPU-1"}, two_gpus);
  EXPECT_NE(why.find("no device for GPU GPU-2"), std::string::npos) << why;
  auto edits = checked_cdi_edits(f.o, {"nvidia.com/gpu=GPU-1"}, "550.54.15", two_gpus);
  ASSERT_TRUE(edits) << render_error(edits.error());
  EXPECT_EQ(f.generated(), 1);
  auto reg = load_cdi(f.o);
  EXPECT_TRUE(reg.devices.count("nvidia.com/gpu=GPU-2"));
  EXPECT_FALSE(reg.devices.count("nvidia.com/gpu=GPU-9"));
}

TEST(CdiHandOver, DevicesNamedByIndexOrPciAddressAreMatchedThatWay) {
  test::temp_dir dir;
  cdi_options o;
  o.static_dir = dir.path() + "/etc";
  o.dynamic_dir = dir.path() + "/run";
  write(fs::path{o.dynamic_dir} / "by-index.yaml", spec_of("nvidia.com/gpu", {"0", "1", "all"}));
  EXPECT_EQ(nvidia_spec_stale(load_cdi(o), {"nvidia.com/gpu=0"}, two_gpus), "");
  auto three = two_gpus;
  three.push_back({"GPU-3", "0000:86:00.0", 2});
  EXPECT_NE(nvidia_spec_stale(load_cdi(o), {"nvidia.com/gpu=0"}, three).find("index 2"),
            std::string::npos);
  fs::remove(fs::path{o.dynamic_dir} / "by-index.yaml");
  write(fs::path{o.dynamic_dir} / "by-pci.yaml",
        spec_of("nvidia.com/gpu", {"0000:3b:00.0", "0000:5e:00.0", "0000:af:00.0"}));
  auto why = nvidia_spec_stale(load_cdi(o), {"nvidia.com/gpu=0000:3b:00.0"}, two_gpus);
  EXPECT_NE(why.find("0000:af:00.0, which this machine does not have"), std::string::npos)
    << why;
}

TEST(CdiHandOver, StillStaleAfterRegenerationFailsNamingTheDevice) {
  ctk_fixture f;
  ::setenv("FAKE_CTK_GPUS", "GPU-1 GPU-2", 1);
  ::setenv("FAKE_CTK_NODE", "/dev/astraeus-no-such-node", 1);
  auto edits = checked_cdi_edits(f.o, {"nvidia.com/gpu=GPU-2"}, "550.54.15", two_gpus);
  ASSERT_FALSE(edits);
  auto why = render_error(edits.error());
  EXPECT_NE(why.find("stale even after"), std::string::npos) << why;
  EXPECT_NE(why.find("nvidia.com/gpu=GPU-2"), std::string::npos) << why;
  EXPECT_NE(why.find("/dev/astraeus-no-such-node"), std::string::npos) << why;
  EXPECT_EQ(f.generated(), 1) << "written again once, not in a loop";
}

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

// Worker logs are capped and rotated (log, log.1); a reader's offset counts
// every byte the worker wrote, so following it reads each byte once.
TEST(WorkerLog, ReadsAcrossRotationByPositionInTheWholeOutput) {
  test::temp_dir dir;
  // 10 bytes were rotated away twice: log.1 holds bytes 6..9, log 10..13.
  write(fs::path{dir.path()} / "log.1", "ghij");
  write(fs::path{dir.path()} / "log", "klmn");
  write(fs::path{dir.path()} / "log.start", "10\n");
  auto at = [&](uint64_t offset, uint32_t max) {
    auto p = read_log_piece(dir.path(), offset, max);
    EXPECT_TRUE(p);
    return p ? std::make_pair(p->data, p->next_offset) : std::make_pair(std::string{}, uint64_t{0});
  };
  EXPECT_EQ(at(0, 100), std::make_pair(std::string{"ghij"}, uint64_t{10}))
    << "older output is gone: from the oldest byte kept";
  EXPECT_EQ(at(7, 2), std::make_pair(std::string{"hi"}, uint64_t{9}));
  EXPECT_EQ(at(9, 100), std::make_pair(std::string{"j"}, uint64_t{10}));
  EXPECT_EQ(at(10, 100), std::make_pair(std::string{"klmn"}, uint64_t{14}));
  EXPECT_EQ(at(14, 100), std::make_pair(std::string{}, uint64_t{14})) << "nothing new yet";
  EXPECT_EQ(at(99, 100), std::make_pair(std::string{}, uint64_t{14}))
    << "past the end (a log started again): its end";
  // Never rotated: log alone, from 0.
  test::temp_dir fresh;
  write(fs::path{fresh.path()} / "log", "abc");
  auto p = read_log_piece(fresh.path(), 0, 100);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->data, "abc");
  EXPECT_EQ(p->next_offset, 3u);
  EXPECT_FALSE(read_log_piece(fresh.path() + "/none", 0, 100));
}
