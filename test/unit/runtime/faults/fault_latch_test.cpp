// Fault latches on the machine: durable, folded, cleared only by an admin or
// a replaced GPU (shared/seeds/gpus.md, "What fences a GPU").

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "actor_fixture.hpp"
#include "messages/gpu_read.hpp"
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
  // The PCI scan saw both: an address it does not list holds no GPU.
  for (const auto& g : s.gpus())
    s.add_bus()->set_pci_address(g.pci_address());
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
  // 0000:c1:00.0 is not 0002:c1:00.0: after a complete read with nothing on
  // the bus there, it maps to no GPU.
  ASSERT_TRUE(l.on_event(xid(79, "0000:c1:00.0"), two_gpus(), 1000));
  EXPECT_TRUE(l.latches().empty());
  v1::GpuSection out = two_gpus();
  l.annotate(out);
  ASSERT_EQ(out.unmapped_incidents_size(), 1);
  EXPECT_EQ(out.unmapped_incidents(0).pci_address(), "0000:c1:00.0");
  ASSERT_TRUE(l.on_event(xid(79, "0002:c1:00.0"), two_gpus(), 1000));
  EXPECT_EQ(l.latches().count("GPU-B"), 1u);
}

TEST_F(FaultLatches, AFaultAtAnAddressTheBusShowsButTheDriverDroppedIsHeldThere) {
  auto l = open();
  auto s = two_gpus();
  s.add_bus()->set_pci_address("0000:c1:00.0");  // on the bus, not listed by NVML
  EXPECT_TRUE(*l.on_event(xid(79, "0000:c1:00.0"), s, 1000));
  EXPECT_EQ(l.latches().count("0000:c1:00.0"), 1u);
  v1::GpuSection out = s;
  l.annotate(out);
  ASSERT_EQ(out.gpus_size(), 3);
  EXPECT_EQ(out.gpus(2).id(), "0000:c1:00.0");
  EXPECT_EQ(out.gpus(2).status(), "lost");
  EXPECT_EQ(out.gpus(1).latches_size(), 0) << "0002:c1:00.0 is another GPU";
}

// A user trial: an agent whose host shows no PCI tree (the scan saw no GPU)
// must not take "not on the bus" for "no GPU there": a fatal Xid at an
// address NVML does not list is held against the address and fences the
// GPU that appears there.
TEST_F(FaultLatches, WithNoPciScanAFaultAtAnUnlistedAddressFencesTheGpuFoundThere) {
  auto l = open();
  auto s = two_gpus();
  s.clear_bus();
  EXPECT_TRUE(*l.on_event(xid(79, "0000:c1:00.0"), s, 1000));
  EXPECT_EQ(l.latches().count("0000:c1:00.0"), 1u);
  v1::GpuSection out = s;
  l.annotate(out);
  ASSERT_EQ(out.gpus_size(), 3);
  EXPECT_EQ(out.gpus(2).status(), "lost");
  EXPECT_EQ(out.unmapped_incidents_size(), 0);
  // NVML lists a GPU there now: it carries the latch (Faulty).
  auto later = s;
  auto* g = later.add_gpus();
  g->set_id("GPU-C");
  g->set_pci_address("0000:c1:00.0");
  g->set_status("ok");
  ASSERT_TRUE(*l.on_readings(later, 2000));
  ASSERT_EQ(l.latches().count("GPU-C"), 1u);
  EXPECT_EQ(l.latches().at("GPU-C")[0].reason(), "Xid 79 fault");
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
    // The Xid line first, then the notice: one latch, "Xid 79 fault", 1x
    // (the notice is no second Xid), its evidence the Xid line's.
    auto l = open();
    EXPECT_TRUE(*l.on_event(xid(79, "0000:3b:00.0"), two_gpus(), 1000));
    EXPECT_FALSE(*l.on_event(notice, two_gpus(), 1001));
    ASSERT_EQ(l.latches().at("GPU-A").size(), 1u);
    EXPECT_EQ(l.latches().at("GPU-A")[0].reason(), "Xid 79 fault");
    EXPECT_EQ(l.latches().at("GPU-A")[0].count(), 1u);
    EXPECT_NE(l.latches().at("GPU-A")[0].evidence().find("Xid"), std::string::npos);
    // The driver logging the Xid again is a repeat.
    EXPECT_FALSE(*l.on_event(xid(79, "0000:3b:00.0"), two_gpus(), 1002));
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
    EXPECT_EQ(l.latches().at("GPU-A")[0].count(), 1u) << "one event, 1x";
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

// -- Rule 1: evidence before the GPU is known ----------------------------------

TEST_F(FaultLatches, AFaultBeforeDiscoveryIsLatchedAgainstItsAddressAndFencesTheGpuFoundThere) {
  v1::GpuSection none;  // the first pass has not finished
  set_read_as(none, gpu_read_as::pending);
  {
    auto l = open();
    auto fresh = l.on_event(xid(79, "0000:3b:00.0", 40), none, 1000);
    ASSERT_TRUE(fresh);
    EXPECT_TRUE(*fresh) << "reported at once, before any GPU is known";
    ASSERT_EQ(l.latches().count("0000:3b:00.0"), 1u);
    const auto& f = l.latches().at("0000:3b:00.0").at(0);
    EXPECT_EQ(f.gpu_id(), "");
    EXPECT_EQ(f.pci_address(), "0000:3b:00.0");
    EXPECT_EQ(f.reason(), "Xid 79 fault");
    // The report carries it: a GPU at that address, Faulty, not "unmapped".
    v1::GpuSection shown = none;
    l.annotate(shown);
    ASSERT_EQ(shown.gpus_size(), 1);
    EXPECT_EQ(shown.gpus(0).id(), "0000:3b:00.0");
    EXPECT_EQ(shown.gpus(0).latches(0).reason(), "Xid 79 fault");
    EXPECT_EQ(shown.unmapped_incidents_size(), 0);
  }
  // Durable: after a restart, the first pass finds GPU-A there: it takes
  // the latch (its UUID attached), and it is not taken for a replacement.
  {
    auto l = open();
    ASSERT_EQ(l.latches().count("0000:3b:00.0"), 1u);
    auto changed = l.on_readings(two_gpus(), 2000);
    ASSERT_TRUE(changed);
    EXPECT_TRUE(*changed);
    EXPECT_EQ(l.latches().count("0000:3b:00.0"), 0u);
    ASSERT_EQ(l.latches().count("GPU-A"), 1u);
    EXPECT_EQ(l.latches().at("GPU-A")[0].gpu_id(), "GPU-A");
    EXPECT_EQ(l.latches().at("GPU-A")[0].first_seen_unix_ms(), 1000);
    v1::GpuSection shown = two_gpus();
    l.annotate(shown);
    ASSERT_EQ(shown.gpus_size(), 2);
    EXPECT_EQ(shown.gpus(0).latches(0).reason(), "Xid 79 fault");
    EXPECT_EQ(shown.gpus(1).latches_size(), 0);
    // And it stays: the next pass changes nothing; a restart keeps it on GPU-A.
    EXPECT_FALSE(*l.on_readings(two_gpus(), 3000));
  }
  auto again = open();
  EXPECT_EQ(again.latches().count("GPU-A"), 1u);
  EXPECT_EQ(again.latches().count("0000:3b:00.0"), 0u);
}

TEST_F(FaultLatches, ANoticeAndItsXidBeforeDiscoveryAreOneLatch) {
  v1::GpuSection none;
  gpu_event notice;
  notice.kind = gpu_event_kind::fallen_off_bus;
  notice.pci_address = "0000:3b:00.0";
  notice.text = "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.";
  notice.sequence = 7;
  notice.part = 1;
  auto l = open();
  EXPECT_TRUE(*l.on_event(xid(79, "0000:3b:00.0", 7), none, 1000));
  EXPECT_FALSE(*l.on_event(notice, none, 1000));
  ASSERT_EQ(l.latches().at("0000:3b:00.0").size(), 1u);
  EXPECT_EQ(l.latches().at("0000:3b:00.0")[0].count(), 1u);
  ASSERT_TRUE(l.on_readings(two_gpus(), 2000));
  ASSERT_EQ(l.latches().at("GPU-A").size(), 1u);
  EXPECT_EQ(l.latches().at("GPU-A")[0].reason(), "Xid 79 fault");
}

TEST_F(FaultLatches, AGpuAtPciLineGivesALatchHeldAgainstTheAddressItsUuid) {
  v1::GpuSection none;
  auto l = open();
  EXPECT_TRUE(*l.on_event(xid(79, "0000:3b:00.0", 60), none, 1000));
  gpu_event who;
  who.kind = gpu_event_kind::gpu_identity;
  who.pci_address = "0000:3b:00.0";
  who.uuid = "GPU-A";
  who.text = "NVRM: GPU at PCI:0000:3b:00: GPU-A";
  who.sequence = 61;
  EXPECT_TRUE(*l.on_event(who, none, 1000)) << "the UUID is reported at once";
  ASSERT_EQ(l.latches().count("GPU-A"), 1u);
  EXPECT_EQ(l.latches().at("GPU-A")[0].gpu_id(), "GPU-A");
  // NVML does not list it: still shown, under its UUID.
  v1::GpuSection shown;
  l.annotate(shown);
  ASSERT_EQ(shown.gpus_size(), 1);
  EXPECT_EQ(shown.gpus(0).id(), "GPU-A");
  EXPECT_EQ(shown.gpus(0).pci_address(), "0000:3b:00.0");
  EXPECT_EQ(shown.unmapped_incidents_size(), 0) << "an identity line is no incident";
}

TEST_F(FaultLatches, HistoryLoggedBeforeDiscoveryGoesToTheGpuAtItsAddress) {
  v1::GpuSection none;
  auto l = open();
  EXPECT_FALSE(*l.on_event(xid(13, "0002:c1:00.0", 3), none, 1000));
  v1::GpuSection shown = two_gpus();
  l.annotate(shown);
  ASSERT_EQ(shown.gpus(1).incidents_size(), 1);
  EXPECT_EQ(shown.gpus(1).incidents(0).xid(), 13u);
  EXPECT_EQ(shown.unmapped_incidents_size(), 0);
}

// -- Rule 7: not answering is not Healthy -----------------------------------------

TEST_F(FaultLatches, ALostGpuIsLatchedOnce) {
  auto l = open();
  auto s = two_gpus();
  set_read_status(*s.mutable_gpus(1), gpu_read_status::lost);
  s.mutable_gpus(1)->set_status_detail("nvmlDeviceGetMemoryInfo returned GPU is lost (15)");
  EXPECT_TRUE(*l.on_readings(s, 1000));
  ASSERT_EQ(l.latches().at("GPU-B").size(), 1u);
  EXPECT_EQ(l.latches().at("GPU-B")[0].reason(),
            "lost: nvmlDeviceGetMemoryInfo returned GPU is lost (15)");
  EXPECT_FALSE(*l.on_readings(s, 2000)) << "still lost is the same fault";
  EXPECT_EQ(l.latches().at("GPU-B")[0].count(), 1u);
  // Answering again does not clear it: an admin does.
  EXPECT_FALSE(*l.on_readings(two_gpus(), 3000));
  EXPECT_EQ(l.latches().count("GPU-B"), 1u);
}

TEST_F(FaultLatches, AHangThatPersistsIsLatchedAShortOneIsNot) {
  auto l = open();
  auto hung = two_gpus();
  set_read_status(*hung.mutable_gpus(0), gpu_read_status::unresponsive);
  hung.mutable_gpus(0)->set_status_detail("nvmlDeviceGetMemoryInfo did not return within 2000 ms");
  // Two hung passes, then a good one: nothing latched, the count starts over.
  for (int i = 0; i + 1 < fault_latches::unresponsive_passes_to_latch; ++i)
    EXPECT_FALSE(*l.on_readings(hung, 1000 + i));
  EXPECT_FALSE(*l.on_readings(two_gpus(), 2000));
  for (int i = 0; i + 1 < fault_latches::unresponsive_passes_to_latch; ++i)
    EXPECT_FALSE(*l.on_readings(hung, 3000 + i));
  EXPECT_EQ(l.latches().count("GPU-A"), 0u);
  // The third pass in a row: latched.
  EXPECT_TRUE(*l.on_readings(hung, 4000));
  ASSERT_EQ(l.latches().at("GPU-A").size(), 1u);
  EXPECT_EQ(l.latches().at("GPU-A")[0].reason(),
            "unresponsive: NVML calls hung for 3 discovery passes in a row");
  EXPECT_EQ(l.latches().at("GPU-A")[0].evidence(),
            "nvmlDeviceGetMemoryInfo did not return within 2000 ms");
  EXPECT_FALSE(*l.on_readings(hung, 5000));
}

// -- Rule 10: the kernel-log position -------------------------------------------------

TEST_F(FaultLatches, RecordsOfOneMessageShareTheirNumberAndAreAllHandled) {
  auto a = xid(48, "0000:3b:00.0", 20);
  auto b = xid(79, "0002:c1:00.0", 20);
  b.part = 1;
  {
    auto l = open();
    EXPECT_TRUE(*l.on_event(a, two_gpus(), 1000));
    EXPECT_TRUE(*l.on_event(b, two_gpus(), 1000)) << "the second part of record 20 is new";
  }
  // Both parts again after a restart: skipped by the kept (sequence, part).
  auto again = open();
  ASSERT_TRUE(again.clear("GPU-A"));
  ASSERT_TRUE(again.clear("GPU-B"));
  EXPECT_FALSE(*again.on_event(a, two_gpus(), 2000));
  EXPECT_FALSE(*again.on_event(b, two_gpus(), 2000));
  EXPECT_TRUE(again.latches().empty());
}

TEST_F(FaultLatches, TheSameRecordNeverFencesAgainAfterAClear) {
  auto l = open();
  auto ev = xid(79, "0000:3b:00.0", 30);
  EXPECT_TRUE(*l.on_event(ev, two_gpus(), 1000));
  ASSERT_TRUE(*l.clear("GPU-A"));
  EXPECT_FALSE(*l.on_event(ev, two_gpus(), 2000)) << "a replay of the log";
  ev.after_jump = true;
  EXPECT_FALSE(*l.on_event(ev, two_gpus(), 3000)) << "even after a jump: the same record";
  EXPECT_TRUE(l.latches().empty());
  // A later record fences again.
  EXPECT_TRUE(*l.on_event(xid(79, "0000:3b:00.0", 31), two_gpus(), 4000));
}

TEST_F(FaultLatches, RecordsAfterABackwardJumpAreReadNotSkipped) {
  auto l = open();
  EXPECT_TRUE(*l.on_event(xid(79, "0000:3b:00.0", 500), two_gpus(), 1000));
  // Lower numbers within the same boot: skipped as a replay unless the
  // reader saw the numbers go back within its read.
  auto low = xid(48, "0002:c1:00.0", 100);
  EXPECT_FALSE(*l.on_event(low, two_gpus(), 2000));
  low.after_jump = true;
  EXPECT_TRUE(*l.on_event(low, two_gpus(), 3000));
  EXPECT_EQ(l.latches().count("GPU-B"), 1u);
}

// -- Rule 4: AMD fatal messages ----------------------------------------------------

namespace {

v1::GpuSection amd_gpus(int n) {
  v1::GpuSection s;
  s.set_read_as("driver: healthy");
  for (int i = 0; i < n; ++i) {
    auto* g = s.add_gpus();
    g->set_id("AMD-" + std::to_string(i));
    g->set_vendor("amd");
    g->set_pci_address("0000:c" + std::to_string(i + 1) + ":00.0");
    g->set_status("ok");
  }
  return s;
}

gpu_event amd(gpu_event_kind kind, const std::string& pci, const std::string& text,
              uint64_t seq) {
  gpu_event ev;
  ev.kind = kind;
  ev.pci_address = pci;
  ev.text = text;
  ev.sequence = seq;
  return ev;
}

} // namespace

TEST_F(FaultLatches, AmdVramLostAndRasFatalEventsFence) {
  auto l = open();
  EXPECT_TRUE(*l.on_event(amd(gpu_event_kind::amd_vram_lost, "0000:c1:00.0",
                              "amdgpu 0000:c1:00.0: amdgpu: VRAM is lost due to GPU reset!", 1),
                          amd_gpus(2), 1000));
  EXPECT_EQ(l.latches().at("AMD-0").at(0).reason(),
            "driver fault: amdgpu 0000:c1:00.0: amdgpu: VRAM is lost due to GPU reset!");
  EXPECT_TRUE(*l.on_event(amd(gpu_event_kind::amd_ras_fatal, "0000:c2:00.0",
                              "amdgpu 0000:c2:00.0: amdgpu: 1 uncorrectable hardware errors", 2),
                          amd_gpus(2), 1000));
  EXPECT_EQ(l.latches().count("AMD-1"), 1u);
}

TEST_F(FaultLatches, AnAmdLineNamingNoDeviceGoesToTheOnlyAmdGpuElseStaysUnmapped) {
  auto failed = amd(gpu_event_kind::amd_reset_failed, "",
                    "[drm:amdgpu_device_gpu_recover [amdgpu]] *ERROR* GPU reset(1) failed", 5);
  {
    auto l = open();
    EXPECT_TRUE(*l.on_event(failed, amd_gpus(1), 1000));
    ASSERT_EQ(l.latches().count("AMD-0"), 1u);
    EXPECT_EQ(l.latches().at("AMD-0")[0].pci_address(), "0000:c1:00.0");
  }
  auto l = open("boot-2");
  ASSERT_TRUE(*l.clear("AMD-0"));
  EXPECT_FALSE(*l.on_event(failed, amd_gpus(2), 1000)) << "which of two GPUs is not known";
  EXPECT_TRUE(l.latches().empty());
  v1::GpuSection out = amd_gpus(2);
  l.annotate(out);
  ASSERT_EQ(out.unmapped_incidents_size(), 1) << "kept, never dropped";
  EXPECT_EQ(out.unmapped_incidents(0).action(), "fence");
}

TEST_F(FaultLatches, AnAmdResetThatLogsNoSuccessWithinTheWindowIsADriverFault) {
  auto l = open();
  // The window is a duration: timed on the boot clock; the wall clock
  // (passed below) jumps an hour forward and does not matter.
  auto boot = std::make_shared<test_boot_clock>();
  l.set_boot_clock(boot);
  auto begin = [](const std::string& pci, uint64_t seq) {
    return amd(gpu_event_kind::amd_reset_begin, pci, "amdgpu " + pci + ": amdgpu: GPU reset begin!",
               seq);
  };
  EXPECT_FALSE(*l.on_event(begin("0000:c1:00.0", 1), amd_gpus(2), 1000));
  EXPECT_FALSE(*l.on_event(begin("0000:c2:00.0", 2), amd_gpus(2), 1000));
  boot->advance(std::chrono::seconds{4});
  EXPECT_FALSE(*l.on_event(amd(gpu_event_kind::amd_reset_succeeded, "0000:c2:00.0",
                               "amdgpu 0000:c2:00.0: amdgpu: GPU reset(1) succeeded!", 3),
                           amd_gpus(2), 5000));
  // Within the window: nothing yet, the wall clock an hour ahead.
  boot->advance(std::chrono::milliseconds{fault_latches::amd_reset_window_ms - 4000});
  EXPECT_FALSE(*l.on_readings(amd_gpus(2), 1000 + 3'600'000));
  EXPECT_TRUE(l.latches().empty());
  // Past it: the GPU whose reset never succeeded is fenced, the other not.
  boot->advance(std::chrono::milliseconds{1});
  EXPECT_TRUE(*l.on_readings(amd_gpus(2), 1001 + fault_latches::amd_reset_window_ms));
  ASSERT_EQ(l.latches().count("AMD-0"), 1u);
  EXPECT_EQ(l.latches().at("AMD-0")[0].reason(),
            "driver fault: a GPU reset began and logged no success within 60 s");
  EXPECT_EQ(l.latches().count("AMD-1"), 0u);
  EXPECT_FALSE(*l.on_readings(amd_gpus(2), 200000));
}

// -- Rule 5: application Xids -----------------------------------------------------

TEST_F(FaultLatches, ApplicationXidsFromThreeProcessesMarkAtRiskOneJobCrashingDoesNot) {
  auto l = open();
  auto app = [](uint32_t n, const std::string& pid, uint64_t seq) {
    auto ev = xid(n, "0000:3b:00.0", seq);
    ev.text = "NVRM: Xid (PCI:0000:3b:00): " + std::to_string(n) + ", pid=" + pid
              + ", name=python3, Graphics Exception";
    return ev;
  };
  auto action_of_13 = [&] {
    v1::GpuSection out = two_gpus();
    l.annotate(out);
    for (const auto& inc : out.gpus(0).incidents())
      if (inc.xid() == 13u)
        return inc.action();
    return std::string{"none"};
  };
  // One job crashing five times: history only.
  for (uint64_t i = 0; i < 5; ++i)
    EXPECT_FALSE(*l.on_event(app(13, "100", 10 + i), two_gpus(), 1000 + static_cast<int64_t>(i)));
  EXPECT_EQ(action_of_13(), "record");
  // A second process, then a third within 24 h: at risk, never fenced.
  EXPECT_FALSE(*l.on_event(app(13, "200", 20), two_gpus(), 2000));
  EXPECT_EQ(action_of_13(), "record");
  EXPECT_FALSE(*l.on_event(app(13, "300", 21), two_gpus(), 3000));
  EXPECT_EQ(action_of_13(), "at-risk");
  {
    // The reason names the processes, not only the last crash.
    v1::GpuSection out = two_gpus();
    l.annotate(out);
    std::string text;
    for (const auto& inc : out.gpus(0).incidents())
      if (inc.xid() == 13u)
        text = inc.text();
    EXPECT_EQ(text.rfind("application Xids from 3 processes in 24 h (pid 100, pid 200, pid 300; "
                         "at risk from 3); the last: NVRM: Xid (PCI:0000:3b:00): 13, pid=300",
                         0),
              0u)
      << text;
  }
  EXPECT_TRUE(l.latches().empty());
  // A day later the old processes no longer count.
  int64_t later = 3000 + 25LL * 3600 * 1000;
  EXPECT_FALSE(*l.on_event(app(13, "400", 22), two_gpus(), later));
  EXPECT_EQ(action_of_13(), "record");
  // Other GPUs count their own processes; a fatal Xid still fences.
  EXPECT_TRUE(*l.on_event(xid(79, "0002:c1:00.0", 23), two_gpus(), later));
}

TEST(XidPolicy, TheSeedsFatalListFencesByDefault) {
  xid_policy p;
  for (uint32_t x : {48u, 63u, 74u, 79u, 92u, 95u, 119u, 120u, 149u, 154u})
    EXPECT_EQ(p.action(x), xid_action::fence) << "Xid " << x;
  for (uint32_t x : {13u, 31u, 43u, 9999u})
    EXPECT_EQ(p.action(x), xid_action::record) << "Xid " << x;
  // 94: a contained uncorrectable ECC error; a row waits to be remapped,
  // the seed's at-risk sign (issue 17, rule 5). 95 stays fatal.
  EXPECT_EQ(p.action(94), xid_action::at_risk);
  for (uint32_t x : {13u, 31u, 43u, 45u, 69u})
    EXPECT_TRUE(p.application(x)) << "Xid " << x;
  EXPECT_FALSE(p.application(79));
  EXPECT_EQ(p.application_processes(), 3u);
  // An override decides alone.
  ASSERT_FALSE(p.override_with({13}, {}, {}));
  EXPECT_FALSE(p.application(13));
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

TEST_F(FaultLatches, ALatchTheStoreRefusesFencesInMemoryMarkedAndIsWrittenLater) {
  // Issue 23 item 1: a full disk must not hide a fault.
  {
    auto l = open();
    db->faults().fail_next_writes(10, store_faults::kind::disk_full);
    auto fresh = l.on_event(xid(79, "0000:3b:00.0"), two_gpus(), 1000);
    ASSERT_TRUE(fresh) << render_error(fresh.error());
    EXPECT_TRUE(*fresh) << "reported at once, store or not";
    EXPECT_EQ(l.not_durable_count(), 1u);
    v1::GpuSection shown = two_gpus();
    l.annotate(shown);
    ASSERT_EQ(shown.gpus(0).latches_size(), 1);
    EXPECT_TRUE(shown.gpus(0).latches(0).not_durable());
    // Still refused: it stays held and marked.
    EXPECT_FALSE(l.retry_not_durable());
    EXPECT_EQ(l.not_durable_count(), 1u);
    // The store takes writes again: written, no longer marked, kept.
    db->faults().fail_next_writes(0);
    auto written = l.retry_not_durable();
    ASSERT_TRUE(written);
    EXPECT_EQ(*written, 1u);
    EXPECT_EQ(l.not_durable_count(), 0u);
    EXPECT_FALSE(l.latches().at("GPU-A")[0].not_durable());
  } // the latches give the store back before it is opened again
  auto again = open();
  ASSERT_EQ(again.latches().count("GPU-A"), 1u);
  EXPECT_FALSE(again.latches().at("GPU-A")[0].not_durable());
  EXPECT_EQ(again.latches().at("GPU-A")[0].reason(), "Xid 79 fault");
}

TEST_F(FaultLatches, ADeferredSyncFencesAtOnceAndHoldsTheLatchWhenTheSyncFails) {
  // Issue 17 (latency): the agent reports a new latch before its sync; a
  // sync that then fails leaves it fencing, marked not durable, retried.
  {
    auto l = open();
    l.defer_sync(true);
    EXPECT_EQ(l.unsynced_generation(), 0u);
    auto fresh = l.on_event(xid(79, "0000:3b:00.0", 1), two_gpus(), 1000);
    ASSERT_TRUE(fresh);
    EXPECT_TRUE(*fresh) << "reported at once, before its sync";
    auto first = l.unsynced_generation();
    EXPECT_GT(first, 0u);
    // A second latch after the sync was asked for is not covered by it.
    ASSERT_TRUE(l.on_event(xid(48, "0002:c1:00.0", 2), two_gpus(), 1001));
    auto second = l.unsynced_generation();
    EXPECT_GT(second, first);
    EXPECT_EQ(l.synced(first, caf::make_error(ec::store_failure, "fsync: I/O error")), 1u);
    EXPECT_EQ(l.not_durable_count(), 1u);
    EXPECT_TRUE(l.latches().at("GPU-A")[0].not_durable());
    EXPECT_FALSE(l.latches().at("GPU-B")[0].not_durable());
    EXPECT_EQ(l.unsynced_generation(), second) << "GPU-B's write still waits for its sync";
    EXPECT_EQ(l.synced(second, caf::error{}), 0u);
    EXPECT_EQ(l.unsynced_generation(), 0u);
    auto written = l.retry_not_durable();
    ASSERT_TRUE(written);
    EXPECT_EQ(*written, 1u);
    EXPECT_EQ(l.not_durable_count(), 0u);
  }
  auto again = open();
  EXPECT_EQ(again.latches().count("GPU-A"), 1u);
  EXPECT_EQ(again.latches().count("GPU-B"), 1u);
}

// Found trying the dev cluster as a user would (kmsg.path a regular file of
// dmesg lines, config/agent.yaml): the file is read from its start at every
// agent start, and a plain line carries no sequence number, so a cleared Xid
// was latched again at each restart. A plain line's timestamp and text name
// it within the boot.
TEST_F(FaultLatches, AClearedPlainDmesgLineDoesNotFenceAgainAfterARestart) {
  auto plain = [](uint32_t n, uint64_t ts_us) {
    auto ev = xid(n, "0000:3b:00.0");
    ev.timestamp_us = ts_us;
    return ev;
  };
  {
    auto l = open();
    EXPECT_TRUE(*l.on_event(plain(79, 1234567890), two_gpus(), 1000));
    ASSERT_TRUE(*l.clear("GPU-A"));
  }
  {
    auto l = open();
    EXPECT_FALSE(*l.on_event(plain(79, 1234567890), two_gpus(), 2000))
      << "the file read again from its start";
    EXPECT_TRUE(l.latches().empty());
    // A line the file gained while the agent was down is new, and so is
    // the same words at another time.
    EXPECT_TRUE(*l.on_event(plain(79, 1300000000), two_gpus(), 3000));
    ASSERT_TRUE(*l.clear("GPU-A"));
  }
  {
    auto l = open();
    EXPECT_FALSE(*l.on_event(plain(79, 1234567890), two_gpus(), 4000));
    EXPECT_FALSE(*l.on_event(plain(79, 1300000000), two_gpus(), 4000));
    EXPECT_TRUE(l.latches().empty());
  }
  // Another boot reads the file afresh.
  auto l = open("boot-2");
  EXPECT_TRUE(*l.on_event(plain(79, 1234567890), two_gpus(), 5000));
}

// /var/log/kern.log (kmsg.path) keeps the lines of earlier boots, and is
// read from its start: an Xid logged before this boot began, on a GPU since
// reset or replaced, fenced it at the agent's first start. Such a line is
// history now; one of this boot fences, and so does a line with no time.
TEST_F(FaultLatches, AKernLogLineOfAnEarlierBootFencesNothing) {
  auto l = open();
  auto clock = std::make_shared<test_boot_clock>(2 * 3600 * 1000);  // up for 2 h
  l.set_boot_clock(clock);
  constexpr int64_t now = 1796594400000;  // 2026-12-06 22:00:00 UTC
  auto logged_at = [](const std::string& rfc3339) {
    auto r = parse_kmsg_line(rfc3339 + " gpu-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, "
                                       "name=x, GPU has fallen off the bus.");
    EXPECT_TRUE(r);
    auto e = parse_gpu_event(*r);
    EXPECT_TRUE(e);
    return *e;
  };
  // Three days ago, and half an hour before this boot began.
  EXPECT_FALSE(*l.on_event(logged_at("2026-12-03T10:00:00+00:00"), two_gpus(), now));
  EXPECT_FALSE(*l.on_event(logged_at("2026-12-06T19:30:00Z"), two_gpus(), now));
  EXPECT_TRUE(l.latches().empty()) << "an earlier boot's Xid fences nothing";
  // Within the slack of the boot's start (the clock set after the first
  // lines), and an hour into this boot: this boot's.
  EXPECT_TRUE(*l.on_event(logged_at("2026-12-06T19:55:00Z"), two_gpus(), now));
  EXPECT_EQ(l.latches().count("GPU-A"), 1u);
  ASSERT_TRUE(*l.clear("GPU-A"));
  EXPECT_TRUE(*l.on_event(logged_at("2026-12-06T21:00:00Z"), two_gpus(), now));
  EXPECT_EQ(l.latches().count("GPU-A"), 1u);
  ASSERT_TRUE(*l.clear("GPU-A"));
  // A plain dmesg line carries no wall time: read as before.
  EXPECT_TRUE(*l.on_event(xid(79, "0000:3b:00.0"), two_gpus(), now));
}

TEST_F(FaultLatches, APlainLineRepeatedWithinARunStillCountsAndOneWithoutTimeIsReadEachRun) {
  auto bare = xid(48, "0000:3b:00.0");
  {
    auto l = open();
    auto ev = xid(79, "0000:3b:00.0");
    ev.timestamp_us = 5000000;
    EXPECT_TRUE(*l.on_event(ev, two_gpus(), 1000));
    EXPECT_FALSE(*l.on_event(ev, two_gpus(), 2000));
    EXPECT_EQ(l.latches().at("GPU-A")[0].count(), 2u) << "within a run, a repeat";
    ASSERT_TRUE(*l.clear("GPU-A"));
    // "NVRM: Xid ..." with no timestamp names no record: nothing to remember.
    EXPECT_TRUE(*l.on_event(bare, two_gpus(), 3000));
    ASSERT_TRUE(*l.clear("GPU-A"));
  }
  auto again = open();
  EXPECT_TRUE(*again.on_event(bare, two_gpus(), 4000));
}

// A host root without proc/sys/kernel/random/boot_id (the README's fixture
// agent, /proc not mounted under the root): the agent's own boot id, so the
// lines a kernel-log file held are still remembered per boot (found by a
// helper: with "" nothing was remembered and a cleared Xid came back).
TEST(BootId, AHostRootWithoutOneGivesThisSystemsOwn) {
  test::temp_dir root;
  EXPECT_EQ(read_boot_id(root.path()), read_boot_id("/"));
  std::filesystem::create_directories(root.path() + "/proc/sys/kernel/random");
  std::ofstream{root.path() + "/proc/sys/kernel/random/boot_id"} << "fixture-boot\n";
  EXPECT_EQ(read_boot_id(root.path()), "fixture-boot");
}
