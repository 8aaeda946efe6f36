// What of a machine's snapshot reaches the placement index
// (actors/scheduler/scheduler_inventory.cpp; issue 18, rules 1 and 2):
// PCI-address ids never conflict, a real UUID two machines report is set
// aside on both, a repeated GPU is placed once, and a bad GPU never hides
// the machine.

#include "actors/scheduler/scheduler_inventory.hpp"

#include <gtest/gtest.h>

#include "snapshot_fixtures.hpp"

using namespace astraeus;
using astraeus::test::fixture_machine;

namespace {

std::vector<std::string> ids_of(const v1::SchedulerMachine& m) {
  std::vector<std::string> out;
  for (const auto& g : m.gpus())
    out.push_back(g.id());
  return out;
}

} // namespace

TEST(SchedulerInventory, PciAddressIdsAreRecognised) {
  EXPECT_TRUE(is_pci_address_id("0000:01:00.0"));
  EXPECT_TRUE(is_pci_address_id("0000:c1:00.7"));
  EXPECT_TRUE(is_pci_address_id("00010000:3b:00.0"));
  EXPECT_FALSE(is_pci_address_id("GPU-5f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"));
  EXPECT_FALSE(is_pci_address_id("AMD-0x1234abcd"));
  EXPECT_FALSE(is_pci_address_id("0000:01:00.8"));
  EXPECT_FALSE(is_pci_address_id("01:00.0"));
  EXPECT_FALSE(is_pci_address_id(""));
}

TEST(SchedulerInventory, IdenticalMachinesWithPciAddressIdsDoNotConflict) {
  gpu_claims claims;
  auto a = fixture_machine("gpu-a", {"0000:01:00.0", "0000:02:00.0"});
  auto b = fixture_machine("gpu-b", {"0000:01:00.0", "0000:02:00.0"});
  EXPECT_TRUE(claims.update("gpu-a", ids_of(a)).empty());
  EXPECT_TRUE(claims.update("gpu-b", ids_of(b)).empty());
  for (const auto& m : {a, b}) {
    auto in = admit_snapshot(m, claims);
    EXPECT_EQ(in.spec.gpus.size(), 2u) << m.name();
    EXPECT_TRUE(in.set_aside.empty()) << m.name();
  }
  // And the index holds both machines' GPUs, keyed by (machine, id).
  placement_index idx;
  auto ia = idx.add_machine(admit_snapshot(a, claims).spec);
  auto ib = idx.add_machine(admit_snapshot(b, claims).spec);
  ASSERT_TRUE(ia);
  ASSERT_TRUE(ib);
  EXPECT_EQ(idx.totals().gpus, 4u);
  EXPECT_EQ(idx.totals().free_healthy, 4u);
  EXPECT_TRUE(idx.find_gpu(*ia, "0000:01:00.0"));
  EXPECT_TRUE(idx.find_gpu(*ib, "0000:01:00.0"));
  EXPECT_NE(idx.find_gpu(*ia, "0000:01:00.0")->machine, idx.find_gpu(*ib, "0000:01:00.0")->machine);
  EXPECT_EQ(idx.check_invariants(), "");
  // Restored by (machine, id): each machine's own GPU.
  auto held = idx.restore("run-b", std::vector<std::pair<std::string, std::string>>{
                                     {"gpu-b", "0000:02:00.0"}});
  ASSERT_TRUE(held);
  EXPECT_EQ(idx.holder(*idx.find_gpu(*ib, "0000:02:00.0")), *held);
  EXPECT_EQ(idx.holder(*idx.find_gpu(*ia, "0000:02:00.0")), 0u);
  EXPECT_EQ(idx.check_invariants(), "");
}

TEST(SchedulerInventory, ARealUuidOnTwoMachinesIsSetAsideOnBothOnly) {
  const std::string dup = "GPU-5f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b";
  gpu_claims claims;
  auto a = fixture_machine("gpu-a", {dup, "GPU-aaaa"});
  auto b = fixture_machine("gpu-b", {"GPU-bbbb", dup});
  EXPECT_TRUE(claims.update("gpu-a", ids_of(a)).empty());
  // gpu-b's report touches gpu-a, which must be indexed again.
  EXPECT_EQ(claims.update("gpu-b", ids_of(b)), (std::set<std::string>{"gpu-a"}));
  auto in_a = admit_snapshot(a, claims);
  auto in_b = admit_snapshot(b, claims);
  ASSERT_EQ(in_a.spec.gpus.size(), 1u);
  EXPECT_EQ(in_a.spec.gpus[0].id, "GPU-aaaa");
  ASSERT_EQ(in_a.set_aside.size(), 1u);
  EXPECT_EQ(in_a.set_aside[0].id(), dup);
  EXPECT_NE(in_a.set_aside[0].reason().find("also reported by machine gpu-b"), std::string::npos)
    << in_a.set_aside[0].reason();
  ASSERT_EQ(in_b.spec.gpus.size(), 1u);
  EXPECT_EQ(in_b.spec.gpus[0].id, "GPU-bbbb");
  ASSERT_EQ(in_b.set_aside.size(), 1u);
  EXPECT_NE(in_b.set_aside[0].reason().find("also reported by machine gpu-a"), std::string::npos);
  // Labels and state are kept whatever the GPUs say.
  EXPECT_TRUE(in_a.spec.schedulable);
  EXPECT_EQ(in_a.spec.labels.at("probe"), "yes");
  // gpu-b stops reporting it: gpu-a gets it back.
  EXPECT_EQ(claims.update("gpu-b", {"GPU-bbbb"}), (std::set<std::string>{"gpu-a"}));
  in_a = admit_snapshot(a, claims);
  EXPECT_EQ(in_a.spec.gpus.size(), 2u);
  EXPECT_TRUE(in_a.set_aside.empty());
}

TEST(SchedulerInventory, ARepeatedGpuIsPlacedOnceAndNvlinkPeersAreRenumbered) {
  gpu_claims claims;
  auto m = fixture_machine("gpu-a", {"GPU-0", "GPU-0", "GPU-2"});
  m.mutable_gpus(0)->add_nvlink_peers(2);
  m.mutable_gpus(2)->add_nvlink_peers(0);
  m.mutable_gpus(2)->add_nvlink_peers(1); // the repeated one: dropped
  m.mutable_gpus(2)->add_nvlink_peers(9); // out of range: dropped, not fatal
  claims.update("gpu-a", ids_of(m));
  auto in = admit_snapshot(m, claims);
  ASSERT_EQ(in.spec.gpus.size(), 2u);
  EXPECT_EQ(in.spec.gpus[0].nvlink_peers, gpu_mask{0b10});
  EXPECT_EQ(in.spec.gpus[1].nvlink_peers, gpu_mask{0b01});
  ASSERT_EQ(in.set_aside.size(), 1u);
  EXPECT_EQ(in.set_aside[0].id(), "GPU-0");
  EXPECT_NE(in.set_aside[0].reason().find("listed twice"), std::string::npos);
}

TEST(SchedulerInventory, UnknownHealthSetsAsideThatGpuOnly) {
  gpu_claims claims;
  auto m = fixture_machine("gpu-a", {"GPU-0", "GPU-1"});
  m.mutable_gpus(1)->set_health("Sparkly");
  auto in = admit_snapshot(m, claims);
  ASSERT_EQ(in.spec.gpus.size(), 1u);
  ASSERT_EQ(in.set_aside.size(), 1u);
  EXPECT_NE(in.set_aside[0].reason().find("unknown health 'Sparkly'"), std::string::npos);
}

// Issue 14's compact claims keep issue 18's answers: a UUID listed twice by
// one machine is no conflict with itself; a UUID three machines share names
// the other two, sorted; a machine that stops reporting it tells the others,
// and the last holder is then free of it; a fleet of machines with distinct
// UUIDs has no conflict at all.
TEST(SchedulerInventory, ClaimsStayExactAcrossManyMachinesAndChanges) {
  gpu_claims claims;
  EXPECT_TRUE(claims.update("gpu-a", {"GPU-1111", "GPU-1111", "0000:01:00.0"}).empty());
  EXPECT_TRUE(claims.others("gpu-a", "GPU-1111").empty());
  EXPECT_EQ(claims.update("gpu-c", {"GPU-1111"}), (std::set<std::string>{"gpu-a"}));
  EXPECT_EQ(claims.update("gpu-b", {"GPU-1111", "GPU-2222"}),
            (std::set<std::string>{"gpu-a", "gpu-c"}));
  EXPECT_EQ(claims.others("gpu-a", "GPU-1111"), (std::vector<std::string>{"gpu-b", "gpu-c"}));
  EXPECT_TRUE(claims.others("gpu-b", "GPU-2222").empty());
  // gpu-b stops reporting it: the two others hear, and still share it.
  EXPECT_EQ(claims.update("gpu-b", {"GPU-2222"}), (std::set<std::string>{"gpu-a", "gpu-c"}));
  EXPECT_EQ(claims.others("gpu-c", "GPU-1111"), (std::vector<std::string>{"gpu-a"}));
  // gpu-a leaves (no GPUs): gpu-c holds it alone.
  EXPECT_EQ(claims.update("gpu-a", {}), (std::set<std::string>{"gpu-c"}));
  EXPECT_TRUE(claims.others("gpu-c", "GPU-1111").empty());
  // A thousand machines of eight distinct UUIDs each: nobody conflicts.
  for (int m = 0; m < 1000; ++m) {
    std::vector<std::string> ids;
    for (int g = 0; g < 8; ++g)
      ids.push_back("GPU-" + std::to_string(m) + "-" + std::to_string(g));
    EXPECT_TRUE(claims.update("node-" + std::to_string(m), ids).empty());
  }
  EXPECT_TRUE(claims.others("node-7", "GPU-7-3").empty());
  EXPECT_EQ(claims.update("node-8", {"GPU-7-3"}), (std::set<std::string>{"node-7"}));
  EXPECT_EQ(claims.others("node-7", "GPU-7-3"), (std::vector<std::string>{"node-8"}));
}
