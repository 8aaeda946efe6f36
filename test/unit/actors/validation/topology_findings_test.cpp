// Issue 12: the cluster's fabrics and what looks miswired or degraded, from
// what 8 machines x 8 InfiniBand ports report (bring-up-a-gpu-cluster.md,
// steps 4 and 5), and how `astra astraeus topology` and the report show it.

#include "actors/validation/topology_findings.hpp"

#include <gtest/gtest.h>

#include "actors/validation/cluster_report.hpp"
#include "bin/validation_format.hpp"

using namespace astraeus;
using namespace astraeus::validation;
using astraeus::cli::format_topology;

namespace {

const char* rails[] = {"mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5",
                       "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"};

std::string machine_name(int i) {
  return "gpu-0" + std::to_string(i);
}

/// gpu-01..gpu-08, each with 8 Active 400 Gb/s ports, rail r of every
/// machine cabled to leaf-r, all on one subnet; `tweak` breaks what a test
/// needs broken.
template <class Tweak>
v1::MachineList cluster(Tweak tweak, bool with_switches = true) {
  v1::MachineList list;
  for (int i = 1; i <= 8; ++i) {
    auto* m = list.add_machines();
    m->set_name(machine_name(i));
    (*m->mutable_labels())["pool"] = "h100";
    m->set_state(v1::Machine::Up);
    auto* facts = m->mutable_facts();
    facts->set_fabric_discovery(with_switches ? "iblinkinfo" : "infiniband-diags not installed");
    for (int r = 0; r < 8; ++r) {
      auto* p = facts->add_rdma_ports();
      p->set_device(rails[r]);
      p->set_port(1);
      p->set_state("ACTIVE");
      p->set_phys_state("LinkUp");
      p->set_rate("400 Gb/sec (4X NDR)");
      p->set_rate_gbps(400);
      p->set_link_layer("InfiniBand");
      p->set_subnet_prefix("fe80:0000:0000:0000");
      p->set_lid(static_cast<uint32_t>(i * 10 + r));
      p->set_pcie_link_width(16);
      p->set_pcie_max_link_width(16);
      p->set_pcie_link_speed("32.0 GT/s PCIe");
      p->set_pcie_max_link_speed("32.0 GT/s PCIe");
      if (with_switches) {
        p->set_switch_guid("0x0c42a10300aabb0" + std::to_string(r));
        p->set_switch_name("leaf-0" + std::to_string(r));
        p->set_switch_port(static_cast<uint32_t>(i));
      }
    }
    tweak(*m);
  }
  return list;
}

v1::RdmaPort& port(v1::MachineView& m, const std::string& device) {
  for (auto& p : *m.mutable_facts()->mutable_rdma_ports())
    if (p.device() == device)
      return p;
  throw std::runtime_error{"no port " + device};
}

const char* rate_what =
  "gpu-06 mlx5_5 trained at 200 Gb/s, its peers at 400 Gb/s: every collective over rail 5 "
  "runs at that pace";
const char* rate_fix =
  "Reseat or replace the cable and transceiver of gpu-06 mlx5_5 (`mlxlink -d mlx5_5 -m` shows "
  "the link's speed and errors); until then NCCL_IB_HCA can leave the port out.";

} // namespace

TEST(TopologyFindings, AHealthyRackIsOneFabricWithItsLeavesAndNoFindings) {
  auto t = analyse_topology(cluster([](v1::MachineView&) {}), "", 1);
  ASSERT_EQ(t.fabrics_size(), 1);
  EXPECT_EQ(t.fabrics(0).name(), "fe80:0000:0000:0000");
  EXPECT_EQ(t.fabrics(0).machines_size(), 8);
  EXPECT_EQ(t.fabrics(0).leaves_size(), 8);
  EXPECT_EQ(t.findings_size(), 0);
  ASSERT_EQ(t.not_checked_size(), 1);
  EXPECT_NE(t.not_checked(0).find("spine switches"), std::string::npos);
}

TEST(TopologyFindings, APortTrainedBelowItsPeersIsNamedInTheSeedsWords) {
  auto t = analyse_topology(cluster([](v1::MachineView& m) {
                              if (m.name() == "gpu-06") {
                                port(m, "mlx5_5").set_rate_gbps(200);
                                port(m, "mlx5_5").set_rate("200 Gb/sec (4X HDR)");
                              }
                            }),
                            "h100", 1);
  ASSERT_EQ(t.findings_size(), 1);
  EXPECT_EQ(t.findings(0).what(), rate_what);
  EXPECT_EQ(t.findings(0).fix(), rate_fix);
  EXPECT_EQ(t.findings(0).machine(), "gpu-06");
  EXPECT_EQ(t.findings(0).severity(), "warn");
  EXPECT_EQ(t.findings(0).check(), "topology");
  // The seed's `astra astraeus topology`, line for line at the top.
  auto text = format_topology(t);
  EXPECT_EQ(text.substr(0, text.find("\n\nFabrics")),
            std::string{"Findings (1)\n! "} + rate_what + "\nfix: " + rate_fix);
}

TEST(TopologyFindings, ADownPortANarrowNicLinkAndACableOnTheWrongRailsLeaf) {
  auto t = analyse_topology(
    cluster([](v1::MachineView& m) {
      if (m.name() == "gpu-04") {
        port(m, "mlx5_11").set_state("DOWN");
        port(m, "mlx5_11").set_phys_state("Polling");
      }
      if (m.name() == "gpu-02") {
        port(m, "mlx5_3").set_pcie_link_width(8);
        port(m, "mlx5_3").set_pci_address("0000:2a:00.0");
      }
      if (m.name() == "gpu-07") {  // rail 0's cable in rail 3's leaf
        port(m, "mlx5_0").set_switch_guid("0x0c42a10300aabb01");
        port(m, "mlx5_0").set_switch_name("leaf-01");
        port(m, "mlx5_0").set_switch_port(40);
      }
    }),
    "", 1);
  ASSERT_EQ(t.findings_size(), 3) << format_topology(t);
  EXPECT_EQ(t.findings(0).what(),
            "gpu-02 mlx5_3's PCIe link runs at Gen5 x8, it can run at Gen5 x16: the port may "
            "not reach its 400 Gb/s");
  EXPECT_NE(t.findings(0).fix().find("(PCI 0000:2a:00.0)"), std::string::npos);
  EXPECT_EQ(t.findings(1).what(),
            "gpu-04 mlx5_11 is DOWN (Polling), its peers are Active: rail 11 has no link on "
            "gpu-04");
  EXPECT_EQ(t.findings(2).what(),
            "gpu-07 mlx5_0 is cabled to leaf-01 port 40, rail 3's leaf; rail 0's other ports "
            "go to leaf-00: a cable on the wrong rail's leaf");
  EXPECT_EQ(t.findings(2).fix(),
            "Move the cable of gpu-07 mlx5_0 to leaf-00 (compare `iblinkinfo` with the cabling "
            "plan); until then traffic on rail 0 crosses the spine.");
}

TEST(TopologyFindings, TheFabricLabelWinsAndWhatCouldNotBeCheckedIsSaid) {
  auto t = analyse_topology(cluster(
                              [](v1::MachineView& m) {
                                if (m.name() == "gpu-08")
                                  (*m.mutable_labels())[fabric_label] = "ib-b";
                              },
                              false),
                            "", 1);
  ASSERT_EQ(t.fabrics_size(), 2);
  EXPECT_EQ(t.fabrics(0).name(), "fe80:0000:0000:0000");
  EXPECT_EQ(t.fabrics(1).name(), "ib-b");
  EXPECT_EQ(t.fabrics(1).machines_size(), 1);
  EXPECT_EQ(t.findings_size(), 0) << "a machine alone on a fabric compares its own ports";
  ASSERT_EQ(t.not_checked_size(), 2);
  EXPECT_EQ(t.not_checked(0),
            "leaf switches (and so wrong-leaf cabling): infiniband-diags not installed on gpu-01, "
            "gpu-02, gpu-03, gpu-04, gpu-05, gpu-06, gpu-07, gpu-08");
}

TEST(TopologyFindings, TheReportCountsAMachineWithAFindingAsWarnWhileItsChecksPass) {
  auto machines = cluster([](v1::MachineView& m) {
    if (m.name() == "gpu-06")
      port(m, "mlx5_5").set_rate_gbps(200);
  });
  latest_map latest;
  for (const auto& m : machines.machines()) {
    v1::ValidationStep s;
    s.set_machine(m.name());
    s.set_check("quick");
    s.set_state("Done");
    s.set_verdict("pass");
    latest[{m.name(), "quick"}] = s;
  }
  auto r = build_report(machines, latest, "h100", 1);
  EXPECT_EQ(r.passing(), 7u);
  EXPECT_EQ(r.rows(5).machine(), "gpu-06");
  EXPECT_EQ(r.rows(5).verdict(), "warn");
  ASSERT_EQ(r.findings_size(), 1);
  EXPECT_EQ(r.summary(), std::string{"7/8 machines pass; "} + rate_what + ".");
}
