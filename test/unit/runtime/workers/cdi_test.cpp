// CDI specs (runtime/workers/cdi.cpp): the conflict rule, the dynamic folder
// winning, stale specs, nvidia-ctk's fingerprint rule, the AMD spec from
// sysfs, and the check before each hand-over. Source: shared/seeds/gpus.md
// ("How a worker gets its GPUs"), issue 6.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/workers/cdi.hpp"
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
