// Issue 17, rules 4, 5, 6 and 9 on the machine (runtime/faults/
// device_events.cpp, fault_latch.cpp, xid_policy.cpp): events at an address
// with no GPU (an NVSwitch) fence or put at risk the GPUs whose NVLinks lead
// there and show in the machine's conditions; the NVLink Xid family fences
// only when the driver confirms; the application-Xid threshold and the AMD
// table are the policy's; pid= and name= are kept on the incident.

#include <gtest/gtest.h>

#include "actor_fixture.hpp"
#include "bin/cli_format.hpp"
#include "runtime/faults/device_events.hpp"
#include "runtime/faults/fault_latch.hpp"
#include "runtime/faults/kmsg.hpp"
#include "runtime/faults/xid_policy.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

const std::string nvswitch = "0000:05:00.0";

/// Two GPUs on an HGX board, each with two NVLinks to the NVSwitch at
/// 0000:05:00.0; a third GPU with no NVLink.
v1::GpuSection hgx() {
  v1::GpuSection s;
  s.set_read_as("driver: healthy");
  int i = 0;
  for (const char* pci : {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"}) {
    auto* g = s.add_gpus();
    g->set_id("GPU-" + std::to_string(i));
    g->set_pci_address(pci);
    g->set_status("ok");
    if (i++ < 2)
      for (uint32_t l = 0; l < 2; ++l) {
        auto* link = g->add_nvlinks();
        link->set_link(l);
        link->set_active(true);
        link->set_remote_pci_address(nvswitch);
        link->set_remote_kind("switch");
      }
  }
  // The PCI scan saw the three GPUs: an address it does not list (the
  // NVSwitch, a bridge) holds no GPU.
  for (const auto& g : s.gpus())
    s.add_bus()->set_pci_address(g.pci_address());
  return s;
}

/// The event a kernel-log line carries (parsed as the agent parses it).
gpu_event event_of(const std::string& line, uint64_t seq) {
  auto rec = parse_kmsg_line("4," + std::to_string(seq) + ",1000,-;" + line);
  EXPECT_TRUE(rec) << line;
  auto ev = parse_gpu_event(*rec);
  EXPECT_TRUE(ev) << line;
  return ev ? *ev : gpu_event{};
}

const v1::Condition* condition(const v1::GpuSection& s, const std::string& type) {
  for (const auto& c : s.conditions())
    if (c.type() == type)
      return &c;
  return nullptr;
}

class DeviceEvents : public ::testing::Test {
protected:
  fault_latches open() {
    auto s = Store::open(dir.path() + "/agent-store");
    EXPECT_TRUE(s);
    db = std::shared_ptr<Store>{std::move(*s)};
    auto l = fault_latches::load(db, "boot-1");
    EXPECT_TRUE(l);
    return std::move(*l);
  }

  test::temp_dir dir;
  std::shared_ptr<Store> db;
};

} // namespace

TEST(DeviceEventsParse, AnNvSwitchSxidLineIsAnEventAtTheSwitchAddress) {
  auto ev = event_of("nvidia-nvswitch2: SXid (PCI:0000:05:00.0): 24007, Fatal, Link 44 "
                     "sourcetrack timeout error (First)", 1);
  EXPECT_EQ(ev.kind, gpu_event_kind::nvswitch_sxid);
  EXPECT_EQ(ev.pci_address, nvswitch);
  ASSERT_TRUE(ev.xid);
  EXPECT_EQ(*ev.xid, 24007u);
  EXPECT_EQ(fatal_severity(ev.text), true);
  EXPECT_EQ(fatal_severity("SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 17"), false);
  EXPECT_EQ(fatal_severity("Xid (PCI:0000:18:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 10"),
            false);
  EXPECT_EQ(fatal_severity("Xid (PCI:0000:18:00): 79, GPU has fallen off the bus."),
            std::nullopt);
  EXPECT_EQ(fatal_severity("a fatalistic word"), std::nullopt);
}

TEST(DeviceEventsParse, PidAndNameOfAnXidLine) {
  auto [pid, name] = process_of("NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=train.py, "
                                "Graphics Exception");
  EXPECT_EQ(pid, 4242);
  EXPECT_EQ(name, "train.py");
  auto [p2, n2] = process_of("NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, x");
  EXPECT_EQ(p2, 0);
  EXPECT_EQ(n2, "");
}

TEST_F(DeviceEvents, AFatalSxidFencesTheGpusUsingTheSwitchAndMakesTheFabricUnhealthy) {
  auto l = open();
  auto known = hgx();
  auto fresh = l.on_event(event_of("nvidia-nvswitch2: SXid (PCI:0000:05:00.0): 24007, Fatal, "
                                   "Link 44 sourcetrack timeout error (First)", 10),
                          known, 1000);
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(*fresh) << "a new latch: reported at once";
  for (const char* id : {"GPU-0", "GPU-1"}) {
    ASSERT_EQ(l.latches().count(id), 1u) << id;
    EXPECT_EQ(l.latches().at(id)[0].reason(), "NVLink fabric fault at NVSwitch 0000:05:00.0");
  }
  EXPECT_EQ(l.latches().count("GPU-2"), 0u) << "no NVLink to the switch";
  // Kept and shown at the switch's address, and in the conditions.
  auto out = hgx();
  l.annotate(out);
  add_device_conditions(out, 2000);
  ASSERT_EQ(out.unmapped_incidents_size(), 1);
  EXPECT_EQ(out.unmapped_incidents(0).pci_address(), nvswitch);
  EXPECT_EQ(out.unmapped_incidents(0).kind(), "nvswitch-sxid");
  EXPECT_EQ(out.unmapped_incidents(0).action(), "fence");
  const auto* c = condition(out, "NVLink fabric healthy");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->status());
  EXPECT_EQ(c->reason(), "FabricFault");
  EXPECT_NE(c->message().find("0000:05:00.0 (NVSwitch)"), std::string::npos) << c->message();
  EXPECT_NE(c->message().find("GPUs using it fenced: GPU-0, GPU-1"), std::string::npos)
    << c->message();
  // `astra machine` does not say "New work: yes" untouched.
  v1::MachineView m;
  m.set_name("gpu-01");
  m.set_schedulable(true);
  *m.mutable_facts()->mutable_gpus() = out;
  auto text = cli::format_machine(m, 2000);
  EXPECT_NE(text.find("yes (NVLink fabric unhealthy: "), std::string::npos) << text;
}

TEST_F(DeviceEvents, ANonFatalSxidMakesTheGpusAtRiskAndAnEventAtABridgeIsShown) {
  auto l = open();
  ASSERT_TRUE(l.on_event(event_of("nvidia-nvswitch2: SXid (PCI:0000:05:00.0): 12028, "
                                  "Non-fatal, Link 17 egress non-posted PRIV error", 11),
                         hgx(), 1000));
  EXPECT_TRUE(l.latches().empty());
  // A fencing Xid at a bridge (no GPU, no NVLink there): shown, no GPU touched.
  ASSERT_TRUE(l.on_event(event_of("NVRM: Xid (PCI:0000:c0:01): 79, GPU has fallen off the bus.",
                                  12),
                         hgx(), 1000));
  EXPECT_TRUE(l.latches().empty());
  auto out = hgx();
  l.annotate(out);
  add_device_conditions(out, 2000);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(out.gpus(i).incidents_size(), 1) << i;
    EXPECT_EQ(out.gpus(i).incidents(0).action(), "at-risk");
    EXPECT_EQ(out.gpus(i).incidents(0).kind(), "fabric");
  }
  EXPECT_EQ(out.gpus(2).incidents_size(), 0);
  const auto* fabric = condition(out, "NVLink fabric healthy");
  ASSERT_NE(fabric, nullptr);
  EXPECT_FALSE(fabric->status());
  EXPECT_NE(fabric->message().find("GPUs using it at risk: GPU-0, GPU-1"), std::string::npos)
    << fabric->message();
  const auto* other = condition(out, "Devices without a GPU");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->reason(), "DeviceEvent");
  EXPECT_NE(other->message().find("0000:c0:01.0 (no GPU there)"), std::string::npos)
    << other->message();
  // A day later the conditions are healthy again (the history stays).
  auto later = hgx();
  l.annotate(later);
  add_device_conditions(later, 2000 + 25LL * 3600 * 1000);
  ASSERT_NE(condition(later, "NVLink fabric healthy"), nullptr);
  EXPECT_TRUE(condition(later, "NVLink fabric healthy")->status());
  EXPECT_EQ(condition(later, "Devices without a GPU"), nullptr);
}

TEST_F(DeviceEvents, NvlinkXidsFenceOnlyWhenTheLineSaysFatalElseCountAsNvlinkErrors) {
  auto l = open();
  ASSERT_TRUE(l.on_event(event_of("NVRM: Xid (PCI:0000:18:00): 145, pid=77, name=train.py, "
                                  "RLW_REMAP Nonfatal XC0 i0 Link 10 (0x4 0x0 0x0)", 20),
                         hgx(), 1000));
  EXPECT_TRUE(l.latches().empty()) << "145 non-fatal does not fence";
  auto out = hgx();
  l.annotate(out);
  ASSERT_EQ(out.gpus(0).incidents_size(), 1);
  const auto& inc = out.gpus(0).incidents(0);
  EXPECT_EQ(inc.action(), "nvlink-errors");
  EXPECT_EQ(inc.pid(), 77) << "kept, shown, never the cause";
  EXPECT_EQ(inc.process_name(), "train.py");
  auto fatal = l.on_event(event_of("NVRM: Xid (PCI:0000:2a:00): 145, RLW_REMAP Fatal XC0 i0 "
                                   "Link 10", 21),
                          hgx(), 1000);
  ASSERT_TRUE(fatal);
  EXPECT_TRUE(*fatal);
  EXPECT_EQ(l.latches().at("GPU-1")[0].reason(), "Xid 145 fault");
  ASSERT_TRUE(l.on_event(event_of("NVRM: Xid (PCI:0000:3a:00): 149, NETIR_LINK_EVT Nonfatal", 22),
                         hgx(), 1000));
  EXPECT_EQ(l.latches().count("GPU-2"), 1u) << "149 fences, as the seed lists it";
}

TEST_F(DeviceEvents, TheApplicationXidThresholdIsThePolicys) {
  auto l = open();
  xid_policy p;
  ASSERT_FALSE(p.set_application_processes(2));
  EXPECT_TRUE(p.set_application_processes(0));
  ASSERT_FALSE(l.set_policy(xid_policy::from_table(p.table())));
  EXPECT_EQ(l.policy().application_processes(), 2u);
  ASSERT_TRUE(l.on_event(event_of("NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=a, Graphics "
                                  "Exception", 30),
                         hgx(), 1000));
  ASSERT_TRUE(l.on_event(event_of("NVRM: Xid (PCI:0000:18:00): 13, pid=2, name=b, Graphics "
                                  "Exception", 31),
                         hgx(), 2000));
  auto out = hgx();
  l.annotate(out);
  ASSERT_EQ(out.gpus(0).incidents_size(), 1);
  EXPECT_EQ(out.gpus(0).incidents(0).action(), "at-risk") << "two processes: N = 2";
  EXPECT_EQ(out.gpus(0).incidents(0).pid(), 2);
  auto text = cli::format_xid_policy(p.table());
  EXPECT_NE(text.find("at risk once 2 different processes"), std::string::npos) << text;
  EXPECT_NE(text.find("fence if confirmed"), std::string::npos) << text;
}

TEST_F(DeviceEvents, TheAmdTableIsPrintedAndOverridable) {
  xid_policy p;
  EXPECT_EQ(p.amd_action("amd_ring_timeout"), xid_action::at_risk);
  EXPECT_EQ(p.amd_action("amd_vram_lost"), xid_action::fence);
  auto err = p.override_amd({"amd_ring_timeout"}, {}, {"amd_bogus"});
  ASSERT_TRUE(err);
  EXPECT_NE(render_error(err).find("amd.record: 'amd_bogus' is not an AMD event"),
            std::string::npos)
    << render_error(err);
  xid_policy q;
  ASSERT_FALSE(q.override_amd({"amd_ring_timeout"}, {}, {}));
  auto text = cli::format_xid_policy(q.table());
  EXPECT_NE(text.find("AMD (amdgpu kernel-log events)"), std::string::npos) << text;
  EXPECT_NE(text.find("amd_ring_timeout"), std::string::npos) << text;
  EXPECT_NE(text.find("amd.fence, amd.at_risk, amd.record"), std::string::npos) << text;
  // The agent takes the table: a ring timeout now fences.
  auto l = open();
  ASSERT_FALSE(l.set_policy(xid_policy::from_table(q.table())));
  v1::GpuSection amd;
  amd.set_read_as("driver: healthy");
  auto* g = amd.add_gpus();
  g->set_id("amd-1");
  g->set_vendor("amd");
  g->set_pci_address("0000:c1:00.0");
  g->set_status("ok");
  auto fresh = l.on_event(event_of("amdgpu 0000:c1:00.0: [drm:amdgpu_job_timedout [amdgpu]] "
                                   "*ERROR* ring gfx_0.0.0 timeout, signaled seq=1, emitted "
                                   "seq=2", 40),
                          amd, 1000);
  ASSERT_TRUE(fresh);
  ASSERT_EQ(l.latches().count("amd-1"), 1u);
  EXPECT_EQ(l.latches().at("amd-1")[0].reason().rfind("driver fault: ", 0), 0u);
}
