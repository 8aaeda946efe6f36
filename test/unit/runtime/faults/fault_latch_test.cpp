// Fault latches on the machine: durable, folded, cleared only by an admin or
// a replaced GPU (shared/seeds/gpus.md, "What fences a GPU").

#include <gtest/gtest.h>

#include "actor_fixture.hpp"
#include "runtime/faults/fault_latch.hpp"
#include "runtime/faults/xid_policy.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

v1::GpuSection two_gpus(const std::string& second_id = "GPU-B") {
  v1::GpuSection s;
  s.set_read_as("driver: healthy");
  auto* a = s.add_gpus();
  a->set_id("GPU-A");
  a->set_pci_address("0000:3b:00.0");
  a->set_status("ok");
  auto* b = s.add_gpus();
  b->set_id(second_id);
  b->set_pci_address("0002:c1:00.0");
  b->set_status("ok");
  return s;
}

gpu_event xid(uint32_t n, const std::string& pci, uint64_t seq = 0) {
  gpu_event ev;
  ev.kind = gpu_event_kind::xid;
  ev.xid = n;
  ev.pci_address = pci;
  ev.text = "NVRM: Xid (PCI:" + pci.substr(0, 7) + "): " + std::to_string(n) + ", ...";
  ev.sequence = seq;
  return ev;
}

class FaultLatches : public ::testing::Test {
protected:
  fault_latches open(const std::string& boot = "boot-1") {
    db.reset();
    auto s = Store::open(dir.path() + "/agent-store");
    EXPECT_TRUE(s);
    db = std::shared_ptr<Store>{std::move(*s)};
    auto l = fault_latches::load(db, boot);
    EXPECT_TRUE(l);
    return std::move(*l);
  }

  test::temp_dir dir;
  std::shared_ptr<Store> db;
};

} // namespace

TEST_F(FaultLatches, AFatalXidLatchesWithTheSeedsWording) {
  auto l = open();
  auto fresh = l.on_event(xid(79, "0000:3b:00.0"), two_gpus(), 1000);
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(*fresh) << "a new latch is reported at once";
  ASSERT_EQ(l.latches().at("GPU-A").size(), 1u);
  const auto& f = l.latches().at("GPU-A")[0];
  EXPECT_EQ(f.reason(), "Xid 79 fault");
  EXPECT_EQ(f.source(), "kernel-log");
  EXPECT_EQ(f.count(), 1u);
}

TEST_F(FaultLatches, TheDomainIsKeptWhenMapping) {
  auto l = open();
  // 0000:c1:00.0 is not 0002:c1:00.0: it maps to no GPU.
  ASSERT_TRUE(l.on_event(xid(79, "0000:c1:00.0"), two_gpus(), 1000));
  EXPECT_TRUE(l.latches().empty());
  v1::GpuSection out = two_gpus();
  l.annotate(out);
  ASSERT_EQ(out.unmapped_incidents_size(), 1);
  EXPECT_EQ(out.unmapped_incidents(0).pci_address(), "0000:c1:00.0");
  ASSERT_TRUE(l.on_event(xid(79, "0002:c1:00.0"), two_gpus(), 1000));
  EXPECT_EQ(l.latches().count("GPU-B"), 1u);
}

TEST_F(FaultLatches, RepeatsFoldIntoOneLatch) {
  auto l = open();
  EXPECT_TRUE(*l.on_event(xid(79, "0000:3b:00.0"), two_gpus(), 1000));
  EXPECT_FALSE(*l.on_event(xid(79, "0000:3b:00.0"), two_gpus(), 2000));
  EXPECT_FALSE(*l.on_event(xid(79, "0000:3b:00.0"), two_gpus(), 3000));
  const auto& f = l.latches().at("GPU-A").at(0);
  EXPECT_EQ(f.count(), 3u);
  EXPECT_EQ(f.first_seen_unix_ms(), 1000);
  EXPECT_EQ(f.last_seen_unix_ms(), 3000);
}

TEST_F(FaultLatches, NonFatalXidsAreHistoryOnly) {
  auto l = open();
  EXPECT_FALSE(*l.on_event(xid(13, "0000:3b:00.0"), two_gpus(), 1000));
  EXPECT_TRUE(l.latches().empty());
  v1::GpuSection out = two_gpus();
  l.annotate(out);
  ASSERT_EQ(out.gpus(0).incidents_size(), 1);
  EXPECT_EQ(out.gpus(0).incidents(0).action(), "record");
  EXPECT_EQ(out.gpus(0).latches_size(), 0);
}

TEST_F(FaultLatches, LatchesSurviveARestart) {
  {
    auto l = open();
    ASSERT_TRUE(l.on_event(xid(48, "0000:3b:00.0", 10), two_gpus(), 1000));
  }
  auto l = open();
  ASSERT_EQ(l.latches().count("GPU-A"), 1u);
  EXPECT_EQ(l.latches().at("GPU-A")[0].reason(), "Xid 48 fault");
  // The same kernel record read again after the restart is not new.
  EXPECT_FALSE(*l.on_event(xid(48, "0000:3b:00.0", 10), two_gpus(), 5000));
  EXPECT_EQ(l.latches().at("GPU-A")[0].count(), 1u);
}

TEST_F(FaultLatches, ANewBootReadsTheKernelLogAfresh) {
  {
    auto l = open("boot-1");
    ASSERT_TRUE(l.on_event(xid(48, "0000:3b:00.0", 10), two_gpus(), 1000));
    ASSERT_TRUE(*l.clear("GPU-A"));
  }
  auto l = open("boot-2");
  // Sequence numbers restart with a boot: record 10 of boot 2 is new.
  EXPECT_TRUE(*l.on_event(xid(48, "0000:3b:00.0", 10), two_gpus(), 2000));
}

TEST_F(FaultLatches, ClearingRemovesTheLatchDurably) {
  {
    auto l = open();
    ASSERT_TRUE(l.on_event(xid(79, "0000:3b:00.0"), two_gpus(), 1000));
    auto cleared = l.clear("GPU-A");
    ASSERT_TRUE(cleared);
    EXPECT_TRUE(*cleared);
    EXPECT_FALSE(*l.clear("GPU-A")) << "nothing latched any more";
  }
  auto l = open();
  EXPECT_TRUE(l.latches().empty());
}

TEST_F(FaultLatches, AReplacedGpuDropsTheLatch) {
  auto l = open();
  ASSERT_TRUE(l.on_event(xid(79, "0002:c1:00.0"), two_gpus(), 1000));
  // Same GPU, still there: the latch stays.
  EXPECT_FALSE(*l.on_readings(two_gpus(), 2000));
  EXPECT_EQ(l.latches().count("GPU-B"), 1u);
  // Another UUID at that PCI address: the board was replaced.
  EXPECT_TRUE(*l.on_readings(two_gpus("GPU-NEW"), 3000));
  EXPECT_EQ(l.latches().count("GPU-B"), 0u);
}

TEST_F(FaultLatches, ALatchedGpuTheDriverNoLongerSeesIsStillListed) {
  auto l = open();
  ASSERT_TRUE(l.on_event(xid(79, "0000:3b:00.0"), two_gpus(), 1000));
  v1::GpuSection now;
  *now.add_gpus() = two_gpus().gpus(1);  // GPU-A fell off the bus
  l.annotate(now);
  ASSERT_EQ(now.gpus_size(), 2);
  EXPECT_EQ(now.gpus(1).id(), "GPU-A");
  EXPECT_EQ(now.gpus(1).status(), "lost");
  EXPECT_EQ(now.gpus(1).latches(0).reason(), "Xid 79 fault");
}

TEST_F(FaultLatches, ReadingsLatchTheSeedsFaults) {
  auto l = open();
  auto s = two_gpus();
  auto* a = s.mutable_gpus(0);
  a->mutable_row_remapping()->set_failed(true);
  a->mutable_ecc()->set_volatile_uncorrectable(2);
  auto* b = s.mutable_gpus(1);
  for (int i = 0; i < 18; ++i)
    b->add_nvlinks()->set_active(false);
  ASSERT_TRUE(*l.on_readings(s, 1000));
  std::vector<std::string> reasons;
  for (const auto& f : l.latches().at("GPU-A"))
    reasons.push_back(f.reason());
  EXPECT_EQ(reasons, (std::vector<std::string>{"row-remap failure — GPU needs RMA",
                                               "2 active uncorrectable ECC error(s)"}));
  EXPECT_EQ(l.latches().at("GPU-B").at(0).reason(), "all 18 NVLink link(s) inactive");
  // The same readings again fold, they do not add.
  EXPECT_FALSE(*l.on_readings(s, 2000));
  // A fault that comes back after a clear fences again.
  ASSERT_TRUE(*l.clear("GPU-B"));
  EXPECT_TRUE(*l.on_readings(s, 3000));
  EXPECT_EQ(l.latches().count("GPU-B"), 1u);
}

TEST_F(FaultLatches, AReadingStillShowingItsFaultIsNotARepeat) {
  auto l = open();
  auto s = two_gpus();
  s.mutable_gpus(0)->mutable_row_remapping()->set_failed(true);
  ASSERT_TRUE(*l.on_readings(s, 1000));
  // Discovery passes every 10 s keep seeing it: one fault, seen once.
  for (int64_t t = 2000; t <= 6000; t += 1000)
    EXPECT_FALSE(*l.on_readings(s, t));
  const auto& f = l.latches().at("GPU-A").at(0);
  EXPECT_EQ(f.count(), 1u);
  EXPECT_EQ(f.last_seen_unix_ms(), 1000);
  // A count that grows is new information: the reason follows it.
  s.mutable_gpus(0)->mutable_ecc()->set_volatile_uncorrectable(2);
  EXPECT_TRUE(*l.on_readings(s, 7000));
  s.mutable_gpus(0)->mutable_ecc()->set_volatile_uncorrectable(3);
  EXPECT_FALSE(*l.on_readings(s, 8000));
  EXPECT_EQ(l.latches().at("GPU-A").at(1).reason(), "3 active uncorrectable ECC error(s)");
}

TEST_F(FaultLatches, FallenOffTheBusAndXid79AreOneEvent) {
  gpu_event notice;
  notice.kind = gpu_event_kind::fallen_off_bus;
  notice.pci_address = "0000:3b:00.0";
  notice.text = "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.";
  {
    // The Xid line first, then the notice: one latch, "Xid 79 fault", 2x.
    auto l = open();
    EXPECT_TRUE(*l.on_event(xid(79, "0000:3b:00.0"), two_gpus(), 1000));
    EXPECT_FALSE(*l.on_event(notice, two_gpus(), 1001));
    ASSERT_EQ(l.latches().at("GPU-A").size(), 1u);
    EXPECT_EQ(l.latches().at("GPU-A")[0].reason(), "Xid 79 fault");
    EXPECT_EQ(l.latches().at("GPU-A")[0].count(), 2u);
  }
  {
    // The notice first, then the Xid line: the latch becomes the Xid's,
    // keeps its first sighting, and survives a restart as one latch.
    auto l = open("boot-2");
    ASSERT_TRUE(l.clear("GPU-A"));
    EXPECT_TRUE(*l.on_event(notice, two_gpus(), 5000));
    EXPECT_EQ(l.latches().at("GPU-A")[0].reason(),
              "driver fault: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.");
    EXPECT_FALSE(*l.on_event(xid(79, "0000:3b:00.0"), two_gpus(), 5001));
    ASSERT_EQ(l.latches().at("GPU-A").size(), 1u);
    EXPECT_EQ(l.latches().at("GPU-A")[0].reason(), "Xid 79 fault");
    EXPECT_EQ(l.latches().at("GPU-A")[0].count(), 2u);
    EXPECT_EQ(l.latches().at("GPU-A")[0].first_seen_unix_ms(), 5000);
    v1::GpuSection out = two_gpus();
    l.annotate(out);
    EXPECT_EQ(out.unmapped_incidents_size(), 0) << "nothing dropped as unmapped";
  }
  auto again = open("boot-2");
  ASSERT_EQ(again.latches().at("GPU-A").size(), 1u);
  EXPECT_EQ(again.latches().at("GPU-A")[0].reason(), "Xid 79 fault");
}

TEST_F(FaultLatches, AnXidTheDriverConfirmedFences) {
  auto l = open();
  // Xids 13 and 31 are not on the fatal list: history only...
  EXPECT_FALSE(*l.on_event(xid(13, "0000:3b:00.0"), two_gpus(), 900));
  EXPECT_FALSE(*l.on_event(xid(31, "0000:3b:00.0"), two_gpus(), 1000));
  EXPECT_TRUE(l.latches().empty());
  // ...until NVML says the GPU needs a reset: the driver confirmed the
  // latest, Xid 31.
  auto s = two_gpus();
  s.mutable_gpus(0)->set_recovery_action(1);
  s.mutable_gpus(1)->set_recovery_action(0);
  ASSERT_TRUE(*l.on_readings(s, 2000));
  ASSERT_EQ(l.latches().count("GPU-B"), 0u);
  const auto& f = l.latches().at("GPU-A").at(0);
  EXPECT_EQ(f.reason(), "Xid 31 fault");
  EXPECT_EQ(f.xid(), 31u);
  EXPECT_NE(f.evidence().find("recovery action GPU reset"), std::string::npos) << f.evidence();
  // A recovery action with no Xid in the kernel log is a driver fault.
  s.mutable_gpus(1)->set_recovery_action(2);
  ASSERT_TRUE(*l.on_readings(s, 3000));
  EXPECT_EQ(l.latches().at("GPU-B").at(0).reason(), "driver fault: recovery action node reboot");
}

TEST_F(FaultLatches, RepairedScarsDoNotLatch) {
  v1::Gpu g;
  g.set_id("GPU-A");
  g.mutable_ecc()->set_aggregate_uncorrectable(5);
  g.mutable_ecc()->set_volatile_uncorrectable(0);
  g.mutable_retired_pages()->set_double_bit(3);
  g.mutable_row_remapping()->set_pending(true);
  g.add_nvlinks()->set_active(true);
  g.add_nvlinks()->set_active(false);
  EXPECT_TRUE(faults_in_readings(g).empty());
}

TEST_F(FaultLatches, FabricFaultsReadAsTheSeedSays) {
  v1::Gpu g;
  g.set_id("GPU-A");
  g.mutable_fabric()->set_state("completed");
  g.mutable_fabric()->set_status(7);
  g.mutable_fabric()->set_health("route-unhealthy");
  auto faults = faults_in_readings(g);
  ASSERT_EQ(faults.size(), 2u);
  EXPECT_EQ(faults[0].second.reason(), "NVLink fabric route unhealthy");
  EXPECT_EQ(faults[1].second.reason(), "fabric registration failed (status 7)");
}

TEST_F(FaultLatches, TheXidPolicyDecidesAndIsKept) {
  {
    auto l = open();
    xid_policy p;
    ASSERT_FALSE(p.override_with({13}, {}, {79}));
    ASSERT_FALSE(l.set_policy(p));
  }
  auto l = open();
  EXPECT_TRUE(*l.on_event(xid(13, "0000:3b:00.0"), two_gpus(), 1000));
  EXPECT_FALSE(*l.on_event(xid(79, "0002:c1:00.0"), two_gpus(), 1000));
  EXPECT_EQ(l.latches().count("GPU-B"), 0u);
}

TEST_F(FaultLatches, AnAmdResetThatFailedIsADriverFault) {
  auto l = open();
  gpu_event ev;
  ev.kind = gpu_event_kind::amd_reset_failed;
  ev.pci_address = "0000:3b:00.0";
  ev.text = "amdgpu 0000:3b:00.0: amdgpu: GPU reset(2) failed";
  EXPECT_TRUE(*l.on_event(ev, two_gpus(), 1000));
  EXPECT_EQ(l.latches().at("GPU-A").at(0).reason(),
            "driver fault: amdgpu 0000:3b:00.0: amdgpu: GPU reset(2) failed");
}

TEST(XidPolicy, TheSeedsFatalListFencesByDefault) {
  xid_policy p;
  for (uint32_t x : {48u, 63u, 74u, 79u, 92u, 95u, 119u, 120u, 149u, 154u})
    EXPECT_EQ(p.action(x), xid_action::fence) << "Xid " << x;
  for (uint32_t x : {13u, 31u, 43u, 94u, 9999u})
    EXPECT_EQ(p.action(x), xid_action::record) << "Xid " << x;
}

TEST(XidPolicy, OverridesApplyAndConflictsAreNamed) {
  xid_policy p;
  ASSERT_FALSE(p.override_with({13}, {31}, {79}));
  EXPECT_EQ(p.action(13), xid_action::fence);
  EXPECT_EQ(p.action(31), xid_action::at_risk);
  EXPECT_EQ(p.action(79), xid_action::record);
  auto table = p.table();
  bool seen = false;
  for (const auto& e : table.entries())
    if (e.xid() == 13) {
      seen = true;
      EXPECT_TRUE(e.overridden());
      EXPECT_EQ(e.action(), "fence");
    }
  EXPECT_TRUE(seen);
  xid_policy q;
  auto err = q.override_with({13}, {13}, {});
  ASSERT_TRUE(err);
  EXPECT_NE(render_error(err).find("Xid 13 is in both xid.fence and xid.at_risk"),
            std::string::npos);
}

TEST(XidPolicy, ParsesListsAndNamesBadItems) {
  auto ok = parse_xid_list(" 48, 63 ,79,");
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, (std::vector<uint32_t>{48, 63, 79}));
  EXPECT_TRUE(parse_xid_list("")->empty());
  auto bad = parse_xid_list("13,x");
  ASSERT_FALSE(bad);
  EXPECT_NE(render_error(bad.error()).find("'x' is not an Xid number"),
            std::string::npos);
}
