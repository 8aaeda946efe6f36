// CDI specs (runtime/workers/cdi.cpp): the conflict rule, the dynamic folder
// winning, stale specs, nvidia-ctk's fingerprint rule, the AMD spec from
// sysfs, and the check before each hand-over. Source: shared/seeds/gpus.md
// ("How a worker gets its GPUs"), issue 6.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "runtime/workers/cdi.hpp"
#include "runtime/workers/cdi_host.hpp"
#include "runtime/workers/worker_supervisor.hpp"
#include "worker_test_files.hpp"

using namespace astraeus;
using namespace astraeus::test;

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

// Recorded on an H200 machine without the container toolkit: the agent
// said only "sh: 1: nvidia-ctk: not found".
TEST(Cdi, AMissingNvidiaCtkIsNamedWithWhatItCostsAndTheFix) {
  test::temp_dir dir;
  cdi_options o;
  o.dynamic_dir = dir.path() + "/run";
  o.nvidia_ctk = dir.path() + "/no-such/nvidia-ctk";
  auto r = sync_nvidia_spec(o, "580.159.04", {"GPU-1"});
  ASSERT_FALSE(r);
  auto text = render_error(r.error());
  EXPECT_NE(text.find(o.nvidia_ctk + " is not installed, so GPU containers cannot be handed"),
            std::string::npos) << text;
  EXPECT_NE(text.find("install nvidia-container-toolkit"), std::string::npos) << text;
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
  // The host's nodes (only those that exist are listed).
  for (const char* node : {"/dev/dri/card0", "/dev/dri/card1", "/dev/dri/renderD128",
                           "/dev/dri/renderD129", "/dev/kfd"})
    write(sys + node, "");
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

// --- Issue 18, rule 3: the spec against the host's device nodes ---------------

namespace {

/// A host root for `f` whose /dev has the stand-in's nodes (/dev/null and
/// /dev/zero, as links to the real ones) and `extra` links.
std::string fixture_host(ctk_fixture& f,
                         const std::vector<std::pair<std::string, std::string>>& extra = {}) {
  auto root = f.dir.path() + "/host";
  fs::create_directories(root + "/dev");
  fs::create_symlink("/dev/null", root + "/dev/null");
  fs::create_symlink("/dev/zero", root + "/dev/zero");
  for (const auto& [path, real] : extra)
    fs::create_symlink(real, root + path);
  f.o.host_root = root;
  return root;
}

} // namespace

TEST(CdiHandOver, AWrongMajorMakesTheSpecStaleAndItIsWrittenAgain) {
  ctk_fixture f;
  fixture_host(f);
  ::setenv("FAKE_CTK_GPUS", "GPU-1 GPU-2", 1);
  // nvidia-uvm moved to another major after a driver reload.
  auto text = spec_of("nvidia.com/gpu", {"GPU-1", "GPU-2"}, "/dev/null");
  text += "containerEdits:\n  deviceNodes:\n  - path: /dev/nvidia-uvm\n    hostPath: /dev/zero\n"
          "    type: c\n    major: 511\n    minor: 0\n";
  f.ours(text, "550.54.15", {"GPU-1", "GPU-2"});
  auto edits = checked_cdi_edits(f.o, {"nvidia.com/gpu=GPU-1"}, "550.54.15", two_gpus);
  ASSERT_TRUE(edits) << render_error(edits.error());
  EXPECT_EQ(f.generated(), 1) << "the stale spec was written again";
}

TEST(CdiHandOver, AMissingRequiredNodeFailsNamingItAndAMissingOptionalOneIsDropped) {
  ctk_fixture f;
  fixture_host(f);
  ::setenv("FAKE_CTK_GPUS", "GPU-1 GPU-2", 1);
  ::setenv("FAKE_CTK_NODE", "/dev/nvidia3", 1);
  auto edits = checked_cdi_edits(f.o, {"nvidia.com/gpu=GPU-2"}, "550.54.15", two_gpus);
  ASSERT_FALSE(edits);
  auto why = render_error(edits.error());
  EXPECT_NE(why.find("hand-over failing: /dev/nvidia3 missing"), std::string::npos) << why;
  auto fenced = hand_over_failures_of(why, {"GPU-2"});
  ASSERT_EQ(fenced.size(), 1u);
  EXPECT_EQ(fenced[0].gpu_id, "GPU-2");
  EXPECT_EQ(fenced[0].reason, "hand-over failing: /dev/nvidia3 missing");
  EXPECT_TRUE(hand_over_failures_of("cannot start: image 'x' not found", {"GPU-2"}).empty());
  // A node that is there but no device: its own words, without the context.
  auto not_char = hand_over_failures_of(
    "cannot start: hand-over failing: /dev/nvidia3 is not a character device (a required "
    "device node is there but is no device node)",
    {"GPU-2"});
  ASSERT_EQ(not_char.size(), 1u);
  EXPECT_EQ(not_char[0].reason, "hand-over failing: /dev/nvidia3 is not a character device");
  // A GPU's own node fences the worker's GPUs; a node all of them share
  // fences every GPU of the machine, not two more with each run.
  const std::vector<std::string> machine{"GPU-1", "GPU-2", "GPU-3"};
  EXPECT_EQ(hand_over_failures_of(why, {"GPU-2"}, machine).size(), 1u);
  auto shared = hand_over_failures_of(
    "cannot start: hand-over failing: /dev/nvidiactl missing (a required device node is not "
    "on the host)",
    {"GPU-2"}, machine);
  ASSERT_EQ(shared.size(), 3u);
  EXPECT_EQ(shared[2].gpu_id, "GPU-3");
  EXPECT_EQ(shared[2].reason, "hand-over failing: /dev/nvidiactl missing");
  EXPECT_EQ(hand_over_failures_of("hand-over failing: /dev/dri/renderD129 missing (x)",
                                  {"GPU-2"}, machine)
              .size(),
            1u);
  // An optional node (nvidia-uvm-tools) missing: handed over without it.
  ::unsetenv("FAKE_CTK_NODE");
  auto text = spec_of("nvidia.com/gpu", {"GPU-1", "GPU-2"}, "/dev/null");
  text += "containerEdits:\n  deviceNodes:\n  - path: /dev/nvidia-uvm-tools\n";
  f.ours(text, "550.54.15", {"GPU-1", "GPU-2"});
  edits = checked_cdi_edits(f.o, {"nvidia.com/gpu=GPU-1"}, "550.54.15", two_gpus);
  ASSERT_TRUE(edits) << render_error(edits.error());
  ASSERT_EQ(edits->devices.size(), 1u);
  EXPECT_EQ(edits->devices[0].path, "/dev/x-GPU-1");
}

TEST(CdiHandOver, ASpecWithOnlyAllIsWrittenAgainWithUuidNames) {
  ctk_fixture f;
  ::setenv("FAKE_CTK_GPUS", "GPU-1 GPU-2", 1);
  f.ours(spec_of("nvidia.com/gpu", {"all"}), "550.54.15", {"GPU-1", "GPU-2"});
  auto edits = checked_cdi_edits(f.o, {"nvidia.com/gpu=GPU-2"}, "550.54.15", two_gpus);
  ASSERT_TRUE(edits) << render_error(edits.error());
  EXPECT_EQ(f.generated(), 1);
  EXPECT_TRUE(load_cdi(f.o).devices.count("nvidia.com/gpu=GPU-2"));
}

TEST(CdiHandOver, IndexNamedDevicesAreResolvedThroughMinorsNotIndexes) {
  ctk_fixture f;
  // Index 0 is minor 1 and index 1 minor 0 (the driver numbered them so).
  std::string text = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
                     "- name: \"0\"\n  containerEdits:\n    deviceNodes:\n"
                     "    - path: /dev/nvidia1\n      hostPath: /dev/null\n"
                     "- name: \"1\"\n  containerEdits:\n    deviceNodes:\n"
                     "    - path: /dev/nvidia0\n      hostPath: /dev/zero\n";
  f.ours(text, "550.54.15", {"GPU-1", "GPU-2"});
  auto gpus = two_gpus;
  gpus[0].minor = 0;  // GPU-1: index 0, /dev/nvidia0
  gpus[1].minor = 1;
  auto names = resolve_index_names(load_cdi(f.o), {"nvidia.com/gpu=GPU-1"}, gpus);
  EXPECT_EQ(names, std::vector<std::string>{"nvidia.com/gpu=1"});
  auto edits = checked_cdi_edits(f.o, {"nvidia.com/gpu=GPU-1"}, "550.54.15", gpus);
  ASSERT_TRUE(edits) << render_error(edits.error());
  ASSERT_EQ(edits->devices.size(), 1u);
  EXPECT_EQ(edits->devices[0].path, "/dev/nvidia0");
  EXPECT_EQ(edits->devices[0].host_path, "/dev/zero");
  EXPECT_EQ(f.generated(), 0);
}

TEST(CdiHandOver, ASpecBreakingItsCdiVersionIsRefusedNamingTheRule) {
  test::temp_dir dir;
  cdi_options o;
  o.static_dir = dir.path() + "/etc";
  o.dynamic_dir = dir.path() + "/run";
  auto text = spec_of("nvidia.com/gpu", {"0"});
  text.replace(text.find("0.5.0"), 5, "0.4.0");
  // hostPath needs 0.5.0 too; the name is reported first.
  write(fs::path{o.dynamic_dir} / "old.yaml", text);
  auto reg = load_cdi(o);
  EXPECT_TRUE(reg.devices.empty());
  ASSERT_EQ(reg.refused.size(), 1u);
  EXPECT_NE(reg.refused.begin()->second.find("device name '0' starts with a digit"),
            std::string::npos)
    << reg.refused.begin()->second;
}

TEST(CdiHandOver, TheFingerprintHoldsTheNodesNumbers) {
  auto a = nvidia_fingerprint("550.54.15", {"GPU-1"}, "/dev/nvidia-uvm 511:0\n");
  auto b = nvidia_fingerprint("550.54.15", {"GPU-1"}, "/dev/nvidia-uvm 235:0\n");
  EXPECT_NE(a, b);
  EXPECT_NE(a.find("/dev/nvidia-uvm 511:0"), std::string::npos);
}

// Issue 18, rule 4: a partitioned AMD GPU handed out whole gets every
// partition's render node.
TEST(Cdi, APartitionedAmdGpuBringsItsPartitionsRenderNodes) {
  test::temp_dir dir;
  auto sys = dir.path() + "/host";
  fs::create_directories(sys + "/sys/bus/pci/devices/0000:05:00.0/drm/card0");
  fs::create_directories(sys + "/sys/bus/pci/devices/0000:05:00.0/drm/renderD128");
  for (const char* node : {"/dev/dri/card0", "/dev/dri/renderD128", "/dev/dri/renderD130"})
    write(sys + node, "");
  cdi_options o;
  o.dynamic_dir = dir.path() + "/run";
  amd_cdi_gpu g{"AMD-1", "0000:05:00.0", {"/dev/dri/renderD128", "/dev/dri/renderD130"}};
  ASSERT_TRUE(write_amd_spec(o, sys, sys, {g}));
  auto spec = nlohmann::json::parse(read(fs::path{o.dynamic_dir} / "amd-astraeus.json"));
  std::vector<std::string> paths;
  for (const auto& n : spec["devices"][0]["containerEdits"]["deviceNodes"])
    paths.push_back(n["path"]);
  EXPECT_EQ(paths, (std::vector<std::string>{"/dev/dri/card0", "/dev/dri/renderD128",
                                             "/dev/dri/renderD130"}));
  EXPECT_EQ(spec["cdiVersion"], "0.7.0");
}

// Issue 18, rule 3: the AMD spec lists only nodes that exist on the host.
TEST(Cdi, TheAmdSpecListsOnlyNodesThatExist) {
  test::temp_dir dir;
  auto sys = dir.path() + "/host";
  fs::create_directories(sys + "/sys/bus/pci/devices/0000:03:00.0/drm/card1");
  fs::create_directories(sys + "/sys/bus/pci/devices/0000:03:00.0/drm/renderD128");
  write(sys + "/dev/dri/renderD128", "");  // no card1 node, no /dev/kfd
  cdi_options o;
  o.dynamic_dir = dir.path() + "/run";
  ASSERT_TRUE(write_amd_spec(o, sys, sys, {{"amd-a", "0000:03:00.0"}}));
  auto spec = nlohmann::json::parse(read(fs::path{o.dynamic_dir} / "amd-astraeus.json"));
  ASSERT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"].size(), 1u);
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"],
            "/dev/dri/renderD128");
  EXPECT_TRUE(spec["containerEdits"]["deviceNodes"].empty());
}

// gpus.md: "a worker placed in a domain gets IMEX channel 0". With runc and
// CDI no NVIDIA runtime hook reads NVIDIA_IMEX_CHANNELS: the agent hands the
// host's channel0 over itself, with its own major and minor, or says what is
// missing and how to create it.
TEST(CdiHandOver, ImexChannelZeroIsTheHostsNodeOrANamedProblem) {
  test::temp_dir dir;
  namespace fs = std::filesystem;
  const auto root = dir.path() + "/host";
  std::string problem;
  EXPECT_FALSE(imex_channel_device(root, problem));
  EXPECT_EQ(problem.rfind("/dev/nvidia-caps-imex-channels/channel0 is missing on the machine", 0),
            0u)
    << problem;
  EXPECT_NE(problem.find("mknod /dev/nvidia-caps-imex-channels/channel0 c "), std::string::npos)
    << problem;
  fs::create_directories(root + "/dev/nvidia-caps-imex-channels");
  { std::ofstream{root + "/dev/nvidia-caps-imex-channels/channel0"} << "x"; }
  problem.clear();
  EXPECT_FALSE(imex_channel_device(root, problem));
  EXPECT_NE(problem.find("is not a character device"), std::string::npos) << problem;
  // A character device (the fixture's stands for one: /dev/null, 1:3).
  fs::remove(root + "/dev/nvidia-caps-imex-channels/channel0");
  fs::create_symlink("/dev/null", root + "/dev/nvidia-caps-imex-channels/channel0");
  problem.clear();
  auto d = imex_channel_device(root, problem);
  ASSERT_TRUE(d) << problem;
  EXPECT_EQ(d->path, "/dev/nvidia-caps-imex-channels/channel0");
  EXPECT_EQ(d->type, 'c');
  EXPECT_EQ(d->major, 1);
  EXPECT_EQ(d->minor, 3);
  EXPECT_EQ(d->file_mode, 0666u);
}
