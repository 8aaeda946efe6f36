// nvidia-smi fallback parity (issue 18, rule 6; runtime/gpu/
// nvidia_smi_query.cpp): the recovery action read from `nvidia-smi -q`, so a
// GPU that needs a reset is fenced as on the NVML path; a value nvidia-smi
// cannot read is an unknown field that, kept up, makes the GPU at risk.

#include <gtest/gtest.h>

#include "actor_fixture.hpp"
#include "actors/controller/gpu_read_errors.hpp"
#include "runtime/faults/fault_latch.hpp"
#include "runtime/gpu/nvidia_smi_query.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

/// `nvidia-smi -q` of two GPUs (r550 layout, shortened): the first needs a
/// reset, the second cannot read its recovery action.
const char* query_text = R"(
==============NVSMI LOG==============

Timestamp                                 : Tue Dec  1 10:12:44 2026
Driver Version                            : 550.54.15
CUDA Version                              : 12.4

Attached GPUs                             : 2
GPU 00000000:3B:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    GPU Reset Status
        Reset Required                    : Yes
        Drain and Reset Recommended       : No
    GPU Recovery Action                   : Reset
    ECC Errors
        Volatile
            SRAM Correctable              : 0

GPU 00000000:C1:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    GPU Recovery Action                   : [Unknown Error]
)";

std::vector<v1::Gpu> two() {
  std::vector<v1::Gpu> out(2);
  out[0].set_id("GPU-A");
  out[0].set_pci_address("0000:3b:00.0");
  out[0].set_status("ok");
  out[1].set_id("GPU-B");
  out[1].set_pci_address("0000:c1:00.0");
  out[1].set_status("ok");
  return out;
}

} // namespace

TEST(NvidiaSmiQuery, RecoveryActionWords) {
  EXPECT_EQ(recovery_action_from_word("None"), 0u);
  EXPECT_EQ(recovery_action_from_word(" Reset "), 1u);
  EXPECT_EQ(recovery_action_from_word("Node Reboot"), 2u);
  EXPECT_EQ(recovery_action_from_word("Drain P2P"), 3u);
  EXPECT_EQ(recovery_action_from_word("Drain and Reset"), 4u);
  EXPECT_EQ(recovery_action_from_word("N/A"), std::nullopt);
  EXPECT_EQ(recovery_action_from_word("[Unknown Error]"), std::nullopt);
}

TEST(NvidiaSmiQuery, ReadsEachGpusRecoveryActionByPciAddress) {
  auto gpus = two();
  EXPECT_EQ(apply_nvidia_smi_query(query_text, gpus), 1u);
  ASSERT_TRUE(gpus[0].has_recovery_action());
  EXPECT_EQ(gpus[0].recovery_action(), 1u);
  EXPECT_FALSE(gpus[1].has_recovery_action());
  ASSERT_EQ(gpus[1].unknown_fields_size(), 1);
  EXPECT_EQ(gpus[1].unknown_fields(0), "recovery_action: Unknown Error");
  // A driver before r550 prints no such line: nothing set, nothing said.
  auto old = two();
  EXPECT_EQ(apply_nvidia_smi_query("GPU 00000000:3B:00.0\n    Product Name : X\n", old), 0u);
  EXPECT_FALSE(old[0].has_recovery_action());
  EXPECT_EQ(old[0].unknown_fields_size(), 0);
}

TEST(NvidiaSmiQuery, AGpuThatNeedsAResetIsFencedAsOnTheNvmlPath) {
  test::temp_dir dir;
  auto s = Store::open(dir.path() + "/agent-store");
  ASSERT_TRUE(s);
  auto l = fault_latches::load(std::shared_ptr<Store>{std::move(*s)}, "boot-1");
  ASSERT_TRUE(l);
  v1::GpuSection section;
  section.set_read_as("nvidia-smi");
  auto gpus = two();
  apply_nvidia_smi_query(query_text, gpus);
  for (auto& g : gpus)
    *section.add_gpus() = g;
  auto changed = l->on_readings(section, 1000);
  ASSERT_TRUE(changed);
  EXPECT_TRUE(*changed);
  ASSERT_EQ(l->latches().count("GPU-A"), 1u);
  EXPECT_EQ(l->latches().count("GPU-B"), 0u);
  // The unreadable field, three reports in a row: at risk.
  gpu_read_errors errs;
  std::vector<std::string> said;
  for (int i = 0; i < 3; ++i)
    said = errs.take(gpus[1]);
  ASSERT_EQ(said.size(), 1u);
  EXPECT_EQ(said[0], "nvidia-smi cannot read recovery_action");
}
