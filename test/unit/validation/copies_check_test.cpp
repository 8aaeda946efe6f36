// The copies check: its verdict rules, and a run through the CUDA stand-in
// (virtual time: the measured figures are the fixture's).
#include <gtest/gtest.h>

#include "runtime/validation/copies_check.hpp"
#include "unit/validation/check_fixtures.hpp"

namespace astraeus::validation {
namespace {

using astraeus::test::temp_dir;

pci_link link(int width, double gts, int max_width = 16, double max_gts = 32) {
  pci_link k;
  k.current_width = width, k.max_width = max_width, k.current_gts = gts, k.max_gts = max_gts;
  return k;
}

copy_figures gpu(const std::string& id, double h2d, pci_link k = link(16, 32)) {
  copy_figures f;
  f.gpu = id;
  f.pci_address = "0000:" + id.substr(id.size() - 2) + ":00.0";
  f.h2d = h2d;
  f.d2h = h2d;
  f.link = k;
  return f;
}

const finding* first(const check_result& r, const std::string& gpu) {
  for (const auto& f : r.findings)
    if (f.gpu == gpu)
      return &f;
  return nullptr;
}

TEST(CopiesRules, TheFloorOfAGen5x16LinkIsAzures48) {
  auto floor = host_copy_floor(link(16, 32), thresholds{});
  ASSERT_TRUE(floor);
  EXPECT_NEAR(*floor, 48.0, 0.1);
  EXPECT_NEAR(*host_copy_floor(link(16, 16, 16, 16), thresholds{}), 24.0, 0.1);
  pci_link unknown;
  EXPECT_FALSE(host_copy_floor(unknown, thresholds{}));
}

TEST(CopiesRules, BelowTheFloorFailsWithTheLinkAsItTrained) {
  check_result r;
  judge_copies({gpu("GPU-18", 52), gpu("GPU-2a", 12.4, link(8, 16))}, thresholds{}, r);
  EXPECT_EQ(r.result, verdict::fail);
  auto* f = first(r, "GPU-2a");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, verdict::fail);
  EXPECT_EQ(f->what, "GPU-2a host-to-device copies run at 12.4 GB/s, below the 48.0 GB/s a Gen5 "
                     "x16 link gives; 24 % of the best GPU's 52.0 GB/s (GPU-18)");
  EXPECT_EQ(f->fix, "reseat GPU GPU-2a (0000:2a:00.0) or check its riser; its link trained at "
                    "Gen4 x8 (its maximum is Gen5 x16)");
  EXPECT_EQ(first(r, "GPU-18"), nullptr);
}

TEST(CopiesRules, JustAboveTheFloorWarnsAndSlowerThanPeersWarns) {
  check_result margin;
  judge_copies({gpu("GPU-01", 49.0)}, thresholds{}, margin);
  EXPECT_EQ(margin.result, verdict::warn);
  check_result peers;
  judge_copies({gpu("GPU-01", 60), gpu("GPU-02", 52)}, thresholds{}, peers);
  EXPECT_EQ(peers.result, verdict::warn);
  auto* f = first(peers, "GPU-02");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->what.find("87 % of the best GPU's 60.0 GB/s"), std::string::npos) << f->what;
  EXPECT_NE(f->fix.find("NUMA placement"), std::string::npos) << f->fix;
}

TEST(CopiesRules, PeerCopiesOverNvSwitchAreHeldTo335) {
  auto a = gpu("GPU-01", 55), b = gpu("GPU-02", 55);
  a.peer = 300, a.peer_gpu = "GPU-02", a.nvswitch = true;
  b.peer = 360, b.peer_gpu = "GPU-01", b.nvswitch = true;
  check_result r;
  judge_copies({a, b}, thresholds{}, r);
  auto* f = first(r, "GPU-01");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, verdict::fail);
  EXPECT_NE(f->what.find("peer copies to GPU-02 run at 300.0 GB/s, below the 335.0 GB/s NVSwitch "
                         "gives"),
            std::string::npos)
    << f->what;
  // Without NVSwitch a peer copy is judged against the peers only.
  a.nvswitch = b.nvswitch = false;
  a.peer = 50, b.peer = 52;
  check_result pcie;
  judge_copies({a, b}, thresholds{}, pcie);
  EXPECT_EQ(pcie.result, verdict::pass);
}

TEST(CopiesRun, TheStandInsFiguresComeBackAndTheSlowGpuIsNamed) {
  temp_dir dir;
  auto root = astraeus::test::copy_host(dir, astraeus::test::gen4x8_fixture());
  astraeus::test::use_fixtures(root + "/nvml.json", root + "/cuda.json");
  check_options o;
  o.host_root = root;
  o.cuda_lib = ASTRAEUS_CUDA_STAND_IN;
  o.nvml_lib = ASTRAEUS_NVML_STAND_IN;
  ASSERT_FALSE(o.policy.set("copies.size_mib", 8));
  auto r = run_copies(o);
  EXPECT_EQ(r.result, verdict::fail) << to_json_line(r);
  bool h2d = false;
  for (const auto& m : r.measurements)
    if (m.name == "h2d" && m.gpu == "GPU-11111111-2222-3333-4444-000000000018") {
      EXPECT_NEAR(m.value, 52.0, 0.05);
      h2d = true;
    }
  EXPECT_TRUE(h2d) << to_json_line(r);
  auto* f = first(r, "GPU-11111111-2222-3333-4444-00000000002a");
  ASSERT_NE(f, nullptr) << to_json_line(r);
  EXPECT_NE(f->fix.find("its link trained at Gen4 x8"), std::string::npos) << f->fix;
  EXPECT_EQ(first(r, "GPU-11111111-2222-3333-4444-000000000018"), nullptr) << to_json_line(r);
}

TEST(CopiesRun, ACudaErrorFailsNamingTheCall) {
  temp_dir dir;
  auto root = astraeus::test::copy_host(dir, astraeus::test::gen4x8_fixture());
  astraeus::test::write_text(root + "/cuda.json", R"({"gpus": [
    {"uuid": "GPU-11111111-2222-3333-4444-000000000018", "pci_bus_id": "0000:18:00.0",
     "h2d_gbs": 52, "errors": {"cuMemcpyDtoHAsync_v2": 214}}]})");
  astraeus::test::use_fixtures(root + "/nvml.json", root + "/cuda.json");
  check_options o;
  o.host_root = root;
  o.cuda_lib = ASTRAEUS_CUDA_STAND_IN;
  o.nvml_lib = ASTRAEUS_NVML_STAND_IN;
  ASSERT_FALSE(o.policy.set("copies.size_mib", 1));
  auto r = run_copies(o);
  EXPECT_EQ(r.result, verdict::fail);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].what, "CUDA error on GPU-11111111-2222-3333-4444-000000000018: "
                                "cuMemcpyDtoHAsync_v2 returned CUDA_ERROR_ECC_UNCORRECTABLE (214)");
}

TEST(CopiesRun, NoCudaDriverFailsWithHowToGetOne) {
  temp_dir dir;
  check_options o;
  o.host_root = astraeus::test::copy_host(dir, astraeus::test::gen4x8_fixture());
  o.cuda_lib = "/nonexistent/libcuda.so.1";
  auto r = run_copies(o);
  EXPECT_EQ(r.result, verdict::fail);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_NE(r.findings[0].what.find("dlopen /nonexistent/libcuda.so.1"), std::string::npos);
  EXPECT_EQ(r.findings[0].fix, "install the NVIDIA driver on this machine, with its CUDA library "
                               "(libcuda.so.1; Debian: libcuda1), then run the check again");
}

// A machine with no NVIDIA GPU on its bus (a CPU machine in an acceptance
// pool) has nothing to copy: skipped, never failed for a missing driver.
TEST(CopiesRun, AMachineWithoutAnNvidiaGpuIsSkipped) {
  temp_dir dir;
  check_options o;
  o.host_root = dir.path();
  o.cuda_lib = "/nonexistent/libcuda.so.1";
  auto r = run_copies(o);
  EXPECT_EQ(r.result, verdict::skipped);
  EXPECT_EQ(r.summary, "no NVIDIA GPU on the PCI bus: nothing to copy");
  EXPECT_TRUE(r.findings.empty());
}

}  // namespace
}  // namespace astraeus::validation
