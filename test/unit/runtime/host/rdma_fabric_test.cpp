// Issue 12: what an RDMA port says of its fabric (GID 0, LID, the NIC's
// PCIe link) read from a sysfs tree, and the switch side from iblinkinfo's
// output, recorded in its two forms.

#include "runtime/host/rdma_fabric.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace fs = std::filesystem;
using namespace astraeus;

namespace {

/// A host root in a fresh temporary folder, removed at the end.
struct host_root {
  fs::path dir;
  host_root() {
    std::string pattern = (fs::temp_directory_path() / "astraeus-rdma-XXXXXX").string();
    dir = ::mkdtemp(pattern.data()) ? fs::path{pattern} : fs::path{};
  }
  ~host_root() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  void write(const std::string& rel, const std::string& text) const {
    fs::create_directories((dir / rel.substr(1)).parent_path());
    std::ofstream{dir / rel.substr(1)} << text;
  }
};

const char* dev = "/sys/class/infiniband/mlx5_5";
const char* port_dir = "/sys/class/infiniband/mlx5_5/ports/1";

} // namespace

TEST(RdmaFabric, AGidSplitsIntoSubnetPrefixAndPortGuid) {
  auto [subnet, guid] = split_gid("fe80:0000:0000:0000:0c42:A103:12:3456\n");
  EXPECT_EQ(subnet, "fe80:0000:0000:0000");
  EXPECT_EQ(guid, "0c42:a103:0012:3456");
  EXPECT_EQ(split_gid("fe80::1").first, "") << "not eight groups";
  EXPECT_EQ(split_gid("fe80:0000:0000:0000:0c42:a103:0012:zzzz").first, "");
}

TEST(RdmaFabric, APortsFabricAndItsNicsPcieLinkAreReadFromSysfs) {
  host_root root;
  root.write(std::string{port_dir} + "/gids/0", "fe80:0000:0000:0000:0c42:a103:0012:3456\n");
  root.write(std::string{port_dir} + "/lid", "0x1a\n");
  root.write(std::string{dev} + "/device/current_link_width", "8\n");
  root.write(std::string{dev} + "/device/max_link_width", "16\n");
  root.write(std::string{dev} + "/device/current_link_speed", "32.0 GT/s PCIe\n");
  root.write(std::string{dev} + "/device/max_link_speed", "32.0 GT/s PCIe\n");
  v1::RdmaPort port;
  std::vector<std::string> warnings;
  read_rdma_port_fabric(root.dir.string(), dev, port_dir, port, warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(port.subnet_prefix(), "fe80:0000:0000:0000");
  EXPECT_EQ(port.port_guid(), "0c42:a103:0012:3456");
  EXPECT_EQ(port.lid(), 26u);
  EXPECT_EQ(port.pcie_link_width(), 8u);
  EXPECT_EQ(port.pcie_max_link_width(), 16u);
  EXPECT_EQ(port.pcie_link_speed(), "32.0 GT/s PCIe");
}

TEST(RdmaFabric, GarbageAndAnUnassignedGidAreWarnedOrLeftOutNeverGuessed) {
  host_root root;
  root.write(std::string{port_dir} + "/gids/0", "0000:0000:0000:0000:0000:0000:0000:0000\n");
  root.write(std::string{port_dir} + "/lid", "lid?\n");
  root.write(std::string{dev} + "/device/current_link_width", "\xff\xfe");
  v1::RdmaPort port;
  std::vector<std::string> warnings;
  read_rdma_port_fabric(root.dir.string(), dev, port_dir, port, warnings);
  EXPECT_EQ(port.subnet_prefix(), "") << "a port the subnet manager has not given a GID yet";
  EXPECT_EQ(port.lid(), 0u);
  EXPECT_EQ(port.pcie_link_width(), 0u);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0], std::string{port_dir} + "/lid: not a LID: \"lid?\"");
  EXPECT_NE(warnings[1].find("current_link_width: not a lane count"), std::string::npos);
  // Nothing there at all: nothing read, nothing warned.
  v1::RdmaPort none;
  warnings.clear();
  read_rdma_port_fabric(root.dir.string(), "/sys/class/infiniband/mlx5_9",
                        "/sys/class/infiniband/mlx5_9/ports/1", none, warnings);
  EXPECT_TRUE(warnings.empty());
}

// Recorded in the shape infiniband-diags prints (`iblinkinfo --switches-only`).
const char* iblinkinfo_default =
  "Switch: 0x0c42a10300aabb01 QM9700 leaf-05:\n"
  "           5    1[  ] ==( 4X      106.25 Gbps Active/  LinkUp)==>      26    1[  ] \"gpu-06 HCA-6\" ( )\n"
  "           5    2[  ] ==(                Down/ Polling)==>             [  ] \"\" ( )\n"
  "           5   33[  ] ==( 4X      106.25 Gbps Active/  LinkUp)==>       2   12[  ] \"QM9700 spine-01\" ( )\n"
  "Switch: 0x0c42a10300aabb02 QM9700 leaf-06:\n"
  "           6    3[  ] ==( 4X      106.25 Gbps Active/  LinkUp)==>      27    1[  ] \"gpu-06 HCA-7\" ( )\n"
  "garbage \x01\x02 ==( )==>\n";

const char* iblinkinfo_line =
  "0x0c42a10300aabb01 \"                QM9700 leaf-05\"      5    1[  ] ==( 4X      106.25 Gbps "
  "Active/  LinkUp)==> 0x0c42a1030012ab34     26    1[  ] \"gpu-06 HCA-6\" ( )\n";

TEST(RdmaFabric, IblinkinfoSaysWhichSwitchPortEachHcaPortIsCabledTo) {
  auto links = parse_iblinkinfo(iblinkinfo_default);
  ASSERT_EQ(links.count(26), 1u);
  EXPECT_EQ(links[26].switch_guid, "0x0c42a10300aabb01");
  EXPECT_EQ(links[26].switch_name, "QM9700 leaf-05");
  EXPECT_EQ(links[26].switch_port, 1u);
  EXPECT_EQ(links[27].switch_name, "QM9700 leaf-06");
  EXPECT_EQ(links[27].switch_port, 3u);
  EXPECT_EQ(links.count(2), 1u) << "a switch's peer is kept too; only HCA LIDs are looked up";
  EXPECT_EQ(links.size(), 3u) << "the down port has no peer";
  auto line = parse_iblinkinfo(iblinkinfo_line);
  ASSERT_EQ(line.count(26), 1u);
  EXPECT_EQ(line[26].switch_name, "QM9700 leaf-05");
  EXPECT_EQ(line[26].switch_port, 1u);
  EXPECT_TRUE(parse_iblinkinfo("\x01\x02\n==(\n)==> 5\n").empty());
}

TEST(RdmaFabric, SwitchLinksAreAppliedByLidAndTheWayTheyWereFoundIsSaid) {
  v1::HostFacts facts;
  auto* ib = facts.add_rdma_ports();
  ib->set_device("mlx5_5");
  ib->set_link_layer("InfiniBand");
  ib->set_lid(26);
  apply_switch_links(facts, parse_iblinkinfo(iblinkinfo_default), "iblinkinfo");
  EXPECT_EQ(facts.rdma_ports(0).switch_name(), "QM9700 leaf-05");
  EXPECT_EQ(facts.fabric_discovery(), "iblinkinfo");
  v1::HostFacts roce;
  roce.add_rdma_ports()->set_link_layer("Ethernet");
  apply_switch_links(roce, {}, "infiniband-diags not installed");
  EXPECT_EQ(roce.fabric_discovery(), "") << "no InfiniBand port: nothing to say";
}
