// The quick check on fixture machines through the real readers and the
// NVML stand-in.
#include <gtest/gtest.h>

#include "runtime/validation/quick_check.hpp"
#include "unit/validation/check_fixtures.hpp"

namespace astraeus::validation {
namespace {

using astraeus::test::temp_dir;

const finding* finding_for(const check_result& r, const std::string& gpu, verdict v) {
  for (const auto& f : r.findings)
    if (f.gpu == gpu && f.severity == v)
      return &f;
  return nullptr;
}

check_options fixture_options(const std::string& root) {
  check_options o;
  o.host_root = root;
  o.nvml_lib = ASTRAEUS_NVML_STAND_IN;
  astraeus::test::use_fixtures(root + "/nvml.json", "");
  return o;
}

TEST(QuickCheckLinks, ANarrowLinkFailsWithAFixNamingHowItTrained) {
  check_result r;
  pci_link k;
  k.current_width = 8, k.max_width = 16, k.current_gts = 16, k.max_gts = 32;
  judge_links({{"GPU-7", "0000:2a:00.0", k}}, thresholds{}, r);
  EXPECT_EQ(r.result, verdict::fail);
  auto* f = finding_for(r, "GPU-7", verdict::fail);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->what, "GPU-7 (0000:2a:00.0) PCIe link trained at Gen4 x8, its maximum is Gen5 x16: "
                     "host copies run at a fraction of their speed");
  EXPECT_EQ(f->fix, "reseat GPU GPU-7 (0000:2a:00.0) or check its riser and slot; its link "
                    "trained at Gen4 x8");
}

TEST(QuickCheckLinks, ASlowerSpeedAtFullWidthOnlyWarnsAndAFullLinkPasses) {
  check_result r;
  pci_link idle;
  idle.current_width = 16, idle.max_width = 16, idle.current_gts = 2.5, idle.max_gts = 32;
  judge_links({{"GPU-1", "0000:18:00.0", idle}}, thresholds{}, r);
  EXPECT_EQ(r.result, verdict::warn);
  ASSERT_NE(finding_for(r, "GPU-1", verdict::warn), nullptr);
  check_result ok;
  pci_link full = idle;
  full.current_gts = 32;
  judge_links({{"GPU-1", "0000:18:00.0", full}}, thresholds{}, ok);
  EXPECT_EQ(ok.result, verdict::pass);
  EXPECT_TRUE(ok.findings.empty());
  EXPECT_EQ(ok.measurements.size(), 2u);
}

TEST(QuickCheck, TheGen4x8FixtureFailsOnThatGpuOnly) {
  temp_dir dir;
  auto root = astraeus::test::copy_host(dir, astraeus::test::gen4x8_fixture());
  auto r = run_quick(fixture_options(root));
  EXPECT_EQ(r.result, verdict::fail) << to_json_line(r);
  ASSERT_EQ(r.findings.size(), 1u) << to_json_line(r);
  EXPECT_EQ(r.findings[0].gpu, "GPU-11111111-2222-3333-4444-00000000002a");
  EXPECT_NE(r.findings[0].fix.find("its link trained at Gen4 x8"), std::string::npos);
}

TEST(QuickCheck, AHealthyMachinePassesEveryRule) {
  temp_dir dir;
  auto root = astraeus::test::copy_host(dir, astraeus::test::gen4x8_fixture());
  auto dev = root + "/sys/bus/pci/devices/0000:2a:00.0/";
  astraeus::test::write_text(dev + "current_link_width", "16\n");
  astraeus::test::write_text(dev + "current_link_speed", "32.0 GT/s PCIe\n");
  auto r = run_quick(fixture_options(root));
  EXPECT_EQ(r.result, verdict::pass) << to_json_line(r);
  EXPECT_NE(r.summary.find("2 GPU(s) seen"), std::string::npos) << r.summary;
}

TEST(QuickCheck, AGpuOnTheBusThatNvmlDoesNotListFails) {
  temp_dir dir;
  auto root = astraeus::test::copy_host(dir, astraeus::test::gen4x8_fixture());
  astraeus::test::write_text(root + "/nvml.json", R"({"driver_version": "550.54.15", "gpus": [
    {"uuid": "GPU-11111111-2222-3333-4444-000000000018",
     "pci": {"bus_id": "00000000:18:00.0"}}]})");
  auto r = run_quick(fixture_options(root));
  EXPECT_EQ(r.result, verdict::fail);
  bool named = false;
  for (const auto& f : r.findings)
    named = named || (f.what.find("0000:2a:00.0: bound to the nvidia driver, missing from NVML")
                      != std::string::npos);
  EXPECT_TRUE(named) << to_json_line(r);
}

TEST(QuickCheck, NoDriverFailsWithHowToLoadIt) {
  temp_dir dir;
  auto root = astraeus::test::copy_host(dir, astraeus::test::gen4x8_fixture());
  auto o = fixture_options(root);
  o.nvml_lib = root + "/no-such-libnvidia-ml.so";
  auto r = run_quick(o);
  EXPECT_EQ(r.result, verdict::fail);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_NE(r.findings[0].what.find("the NVIDIA driver is not loaded"), std::string::npos);
  EXPECT_NE(r.findings[0].fix.find("modprobe nvidia"), std::string::npos);
}

TEST(QuickCheck, AMissingOrStaleCdiSpecFails) {
  temp_dir dir;
  auto root = astraeus::test::copy_host(dir, astraeus::test::gen4x8_fixture());
  std::filesystem::remove(root + "/etc/cdi/nvidia.yaml");
  auto r = run_quick(fixture_options(root));
  bool cdi = false;
  for (const auto& f : r.findings)
    cdi = cdi || f.what == "there is no NVIDIA CDI spec in /etc/cdi or /var/run/cdi";
  EXPECT_TRUE(cdi) << to_json_line(r);
  astraeus::test::write_text(root + "/etc/cdi/nvidia.yaml", R"(cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
  - name: GPU-11111111-2222-3333-4444-000000000018
    containerEdits:
      deviceNodes:
        - path: /dev/nvidia0
)");
  auto stale = run_quick(fixture_options(root));
  bool named = false;
  for (const auto& f : stale.findings)
    named = named || f.what.rfind("the NVIDIA CDI spec is stale", 0) == 0;
  EXPECT_TRUE(named) << to_json_line(stale);
}

// The agent's own CDI folders (cdi.dynamic_dir elsewhere than
// /var/run/cdi): the check looks where the agent wrote its spec.
TEST(QuickCheck, TheAgentsCdiFoldersAreWhereTheSpecIsLookedFor) {
  temp_dir dir;
  auto root = astraeus::test::copy_host(dir, astraeus::test::gen4x8_fixture());
  auto o = fixture_options(root);
  o.cdi_static_dir = dir.path() + "/agent-static";
  o.cdi_dynamic_dir = dir.path() + "/agent-cdi";
  std::filesystem::create_directories(o.cdi_static_dir);
  std::filesystem::create_directories(o.cdi_dynamic_dir);
  // The spec under the host root's /etc/cdi is not where this agent keeps it.
  auto missing = run_quick(o);
  bool named = false;
  for (const auto& f : missing.findings)
    named = named || f.what == "there is no NVIDIA CDI spec in " + o.cdi_static_dir + " or "
                                 + o.cdi_dynamic_dir;
  EXPECT_TRUE(named) << to_json_line(missing);
  std::filesystem::rename(root + "/etc/cdi/nvidia.yaml", o.cdi_dynamic_dir + "/nvidia.yaml");
  auto r = run_quick(o);
  for (const auto& f : r.findings)
    EXPECT_EQ(f.what.find("CDI spec"), std::string::npos) << f.what;
}

}  // namespace
}  // namespace astraeus::validation
