#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "runtime/host/host_facts.hpp"

using namespace astraeus;

namespace {

std::string fixture(const std::string& name) {
  return std::string{ASTRAEUS_FIXTURES} + "/hosts/" + name;
}

// A statfs that answers for every mount point under `root` with the same
// usage and records what it was asked.
struct FakeStatfs {
  std::string root;
  std::map<std::string, FilesystemUsage> usage;  // by mount point
  std::vector<std::string> asked;

  std::function<std::optional<FilesystemUsage>(const std::string&)> fn() {
    return [this](const std::string& path) -> std::optional<FilesystemUsage> {
      asked.push_back(path);
      auto point = path.substr(root.size());
      auto found = usage.find(point.empty() ? "/" : point);
      if (found == usage.end())
        return std::nullopt;
      return found->second;
    };
  }
};

template <class Repeated, class Pred>
auto find_item(const Repeated& items, Pred pred) -> decltype(&*items.begin()) {
  auto it = std::find_if(items.begin(), items.end(), pred);
  return it == items.end() ? nullptr : &*it;
}

const v1::Disk* disk(const v1::HostFacts& facts, const std::string& name) {
  return find_item(facts.disks(), [&](const v1::Disk& d) { return d.name() == name; });
}

const v1::Filesystem* filesystem(const v1::HostFacts& facts, const std::string& mount_point) {
  return find_item(facts.filesystems(),
                 [&](const v1::Filesystem& f) { return f.mount_point() == mount_point; });
}

const v1::NetworkInterface* interface(const v1::HostFacts& facts, const std::string& name) {
  return find_item(facts.interfaces(),
                 [&](const v1::NetworkInterface& i) { return i.name() == name; });
}

const v1::RdmaPort* rdma_port(const v1::HostFacts& facts, const std::string& device) {
  return find_item(facts.rdma_ports(), [&](const v1::RdmaPort& p) { return p.device() == device; });
}

std::string all_warnings(const v1::HostFacts& facts) {
  std::string text;
  for (const auto& warning : facts.warnings())
    text += warning + "\n";
  return text;
}

bool has_warning(const v1::HostFacts& facts, const std::string& prefix) {
  return std::any_of(facts.warnings().begin(), facts.warnings().end(),
                     [&](const std::string& w) { return w.rfind(prefix, 0) == 0; });
}

HostReaderOptions dgx_options(FakeStatfs& statfs) {
  statfs.root = fixture("dgx-h100");
  statfs.usage = {
    {"/", {1'888'000'000'000, 1'500'000'000'000}},
    {"/boot/efi", {536'000'000, 530'000'000}},
    {"/raid", {30'000'000'000'000, 29'000'000'000'000}},
    {"/home", {100'000'000'000'000, 40'000'000'000'000}},
    {"/lustre/scratch", {2'000'000'000'000'000, 1'000'000'000'000'000}},
    {"/mnt/boot copy", {536'000'000, 530'000'000}},
  };
  HostReaderOptions opts;
  opts.root = statfs.root;
  opts.statfs = statfs.fn();
  opts.architecture = "x86_64";
  return opts;
}

} // namespace

// --- The DGX H100 tree: what a user sees on the machine's page ------------

TEST(HostFacts, DgxH100ReadsWithoutWarnings) {
  FakeStatfs statfs;
  auto facts = read_host_facts(dgx_options(statfs));
  EXPECT_EQ(facts.warnings_size(), 0) << all_warnings(facts);
  EXPECT_EQ(facts.hostname(), "dgx-h100-01");
  EXPECT_EQ(facts.kernel(), "5.15.0-1042-nvidia");
  EXPECT_EQ(facts.os(), "Ubuntu 22.04.4 LTS");
  EXPECT_EQ(facts.uptime_seconds(), 1234567u);
  // Not "no-gpu": GPUs are GPU discovery's, and this is no read of them.
  EXPECT_EQ(facts.gpus().read_as(), "pending");
  EXPECT_EQ(facts.gpus().detail(), "GPUs are read by GPU discovery, not with the host facts");
}

TEST(HostFacts, DgxH100Cpu) {
  FakeStatfs statfs;
  auto cpu = read_host_facts(dgx_options(statfs)).cpu();
  EXPECT_EQ(cpu.model(), "Intel(R) Xeon(R) Platinum 8480C");
  EXPECT_EQ(cpu.logical_cpus(), 224u);
  EXPECT_EQ(cpu.physical_cores(), 112u);
  EXPECT_EQ(cpu.sockets(), 2u);
  EXPECT_EQ(cpu.numa_nodes(), 2u);
  EXPECT_EQ(cpu.architecture(), "x86_64");
}

TEST(HostFacts, DgxH100MemoryAndPressure) {
  FakeStatfs statfs;
  auto facts = read_host_facts(dgx_options(statfs));
  EXPECT_EQ(facts.memory().total_bytes(), 2113389708ull * 1024);
  EXPECT_EQ(facts.memory().available_bytes(), 1998765432ull * 1024);
  EXPECT_EQ(facts.memory().swap_total_bytes(), 0u);
  EXPECT_TRUE(facts.memory().pressure().present());
  EXPECT_DOUBLE_EQ(facts.memory().pressure().some_avg60(), 0.01);
  EXPECT_TRUE(facts.io_pressure().present());
  EXPECT_DOUBLE_EQ(facts.io_pressure().some_avg10(), 3.25);
  EXPECT_DOUBLE_EQ(facts.io_pressure().full_avg300(), 0.75);
  EXPECT_TRUE(facts.cpu_pressure().present());
  EXPECT_DOUBLE_EQ(facts.cpu_pressure().some_avg300(), 0.40);
}

TEST(HostFacts, DgxH100DisksAndRaid) {
  FakeStatfs statfs;
  auto facts = read_host_facts(dgx_options(statfs));
  // 8 NVMe + sda, sdb + md0, md1; loop0 is skipped.
  EXPECT_EQ(facts.disks_size(), 12);
  EXPECT_EQ(disk(facts, "loop0"), nullptr);
  int nvme = 0;
  for (const auto& d : facts.disks())
    if (d.kind() == "nvme") {
      ++nvme;
      EXPECT_EQ(d.size_bytes(), 7501476528ull * 512);
      EXPECT_EQ(d.model(), "SAMSUNG MZWLJ3T8HBLS-00007");  // trailing blanks trimmed
      EXPECT_FALSE(d.rotational());
    }
  EXPECT_EQ(nvme, 8);
  // Natural order: nvme2n1 before nvme10n1 would hold; here simply first.
  EXPECT_EQ(facts.disks(0).name(), "md0");
  auto md0 = disk(facts, "md0");
  ASSERT_NE(md0, nullptr);
  EXPECT_EQ(md0->kind(), "raid");
  EXPECT_EQ(md0->raid_level(), "raid0");
  EXPECT_EQ(md0->raid_state(), "clean");
  auto md1 = disk(facts, "md1");
  ASSERT_NE(md1, nullptr);
  EXPECT_EQ(md1->raid_level(), "raid1");
  EXPECT_EQ(md1->raid_state(), "degraded");  // md/degraded = 1 although array_state says clean
  auto sda = disk(facts, "sda");
  ASSERT_NE(sda, nullptr);
  EXPECT_EQ(sda->kind(), "ssd");
  EXPECT_EQ(sda->model(), "SAMSUNG MZ7L31T9HBLT-00A07");
}

TEST(HostFacts, DgxH100Filesystems) {
  FakeStatfs statfs;
  auto facts = read_host_facts(dgx_options(statfs));
  std::vector<std::string> points;
  for (const auto& f : facts.filesystems())
    points.push_back(f.mount_point());
  // Pseudo filesystems, squashfs snaps, overlay and gvfs are not storage.
  EXPECT_EQ(points, (std::vector<std::string>{"/", "/boot/efi", "/raid", "/home", "/lustre/scratch",
                                              "/mnt/boot copy"}));
  auto root = filesystem(facts, "/");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->type(), "ext4");
  EXPECT_EQ(root->device(), "/dev/md1");
  EXPECT_FALSE(root->shared());
  EXPECT_EQ(root->size_bytes(), 1'888'000'000'000u);
  EXPECT_EQ(root->free_bytes(), 1'500'000'000'000u);
  auto home = filesystem(facts, "/home");
  ASSERT_NE(home, nullptr);
  EXPECT_EQ(home->type(), "nfs4");
  EXPECT_EQ(home->device(), "nas01:/export/home");
  EXPECT_TRUE(home->shared());
  EXPECT_TRUE(filesystem(facts, "/lustre/scratch")->shared());
  // /raid was covered by a tmpfs and then mounted again: the last one shows.
  auto raid = filesystem(facts, "/raid");
  ASSERT_NE(raid, nullptr);
  EXPECT_EQ(raid->type(), "ext4");
  EXPECT_EQ(raid->device(), "/dev/md0");
  EXPECT_EQ(raid->size_bytes(), 30'000'000'000'000u);
  auto copy = filesystem(facts, "/mnt/boot copy");
  ASSERT_NE(copy, nullptr);
  EXPECT_TRUE(copy->read_only());
  EXPECT_FALSE(root->read_only());
  // statfs is asked with the root prefix, the escape decoded.
  EXPECT_NE(std::find(statfs.asked.begin(), statfs.asked.end(), statfs.root + "/mnt/boot copy"),
            statfs.asked.end());
}

TEST(HostFacts, DgxH100Network) {
  FakeStatfs statfs;
  auto facts = read_host_facts(dgx_options(statfs));
  EXPECT_EQ(facts.interfaces_size(), 14);
  auto lo = interface(facts, "lo");
  ASSERT_NE(lo, nullptr);
  EXPECT_EQ(lo->kind(), "loopback");
  EXPECT_TRUE(lo->virtual_());
  EXPECT_EQ(lo->speed_mbps(), -1);
  EXPECT_EQ(lo->mtu(), 65536u);
  auto eno3 = interface(facts, "eno3");
  ASSERT_NE(eno3, nullptr);
  EXPECT_EQ(eno3->kind(), "ether");
  EXPECT_FALSE(eno3->virtual_());
  EXPECT_EQ(eno3->speed_mbps(), 10000);
  EXPECT_EQ(eno3->operstate(), "up");
  EXPECT_EQ(eno3->mac_address(), "7c:c2:55:a1:b2:c3");
  EXPECT_EQ(interface(facts, "eno4")->speed_mbps(), -1);  // link down: the file says -1
  EXPECT_TRUE(interface(facts, "docker0")->virtual_());
  auto ib = interface(facts, "ibp154s0");
  ASSERT_NE(ib, nullptr);
  EXPECT_EQ(ib->kind(), "infiniband");
  EXPECT_EQ(ib->speed_mbps(), 400000);
  EXPECT_EQ(ib->mtu(), 4092u);
}

TEST(HostFacts, DgxH100InfiniBandAndRoce) {
  FakeStatfs statfs;
  auto facts = read_host_facts(dgx_options(statfs));
  ASSERT_EQ(facts.rdma_ports_size(), 10);
  int active_ib = 0;
  for (const auto& port : facts.rdma_ports())
    if (port.link_layer() == "InfiniBand" && port.state() == "ACTIVE"
        && port.phys_state() == "LinkUp" && port.rate_gbps() == 400.0)
      ++active_ib;
  EXPECT_EQ(active_ib, 8);
  // Natural order: mlx5_10 after mlx5_7.
  EXPECT_EQ(facts.rdma_ports(7).device(), "mlx5_7");
  EXPECT_EQ(facts.rdma_ports(8).device(), "mlx5_10");
  auto first = rdma_port(facts, "mlx5_0");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->port(), 1u);
  EXPECT_EQ(first->rate(), "400 Gb/sec (4X NDR)");
  EXPECT_EQ(first->netdev(), "ibp24s0");
  auto roce_up = rdma_port(facts, "mlx5_10");
  ASSERT_NE(roce_up, nullptr);
  EXPECT_EQ(roce_up->link_layer(), "Ethernet");
  EXPECT_EQ(roce_up->state(), "ACTIVE");
  EXPECT_EQ(roce_up->rate_gbps(), 200.0);
  auto roce_down = rdma_port(facts, "mlx5_11");
  ASSERT_NE(roce_down, nullptr);
  EXPECT_EQ(roce_down->link_layer(), "Ethernet");
  EXPECT_EQ(roce_down->state(), "DOWN");
  EXPECT_EQ(roce_down->phys_state(), "Disabled");
  EXPECT_EQ(roce_down->netdev(), "enp41s0f1np1");
}

// --- The broken tree: every bad file is named, nothing throws -------------

TEST(HostFacts, BrokenTreeNamesEachBadFile) {
  HostReaderOptions opts;
  opts.root = fixture("broken");
  opts.architecture = "x86_64";
  opts.statfs = [](const std::string& path) -> std::optional<FilesystemUsage> {
    if (path.size() >= 5 && path.substr(path.size() - 5) == "/data")
      return std::nullopt;
    return FilesystemUsage{1000, 500};
  };
  v1::HostFacts facts;
  ASSERT_NO_THROW(facts = read_host_facts(opts));
  auto warnings = all_warnings(facts);
  for (const char* bad : {
         "/proc/sys/kernel/hostname: empty",
         "/etc/os-release: no PRETTY_NAME",
         "/proc/uptime: ",
         "/proc/cpuinfo: malformed",
         "/sys/devices/system/cpu/online: ",
         "/proc/meminfo: malformed or truncated",
         "/proc/pressure/memory: malformed",
         "/proc/pressure/io: malformed",
         "/proc/pressure/cpu: empty",
         "/sys/block/sda/size: ",
         "/sys/block/sda/queue/rotational: ",
         "/sys/block/md127/md/level: missing",
         "/proc/self/mounts: 1 malformed line(s) skipped",
         "/data: statfs failed",
         "/sys/class/net/eth0/mtu: ",
         "/sys/class/net/eth0/speed: ",
         "/sys/class/net/eth1/mtu: ",
         "/sys/class/net/eth1/type: ",
         "/sys/class/infiniband/mlx5_0/ports/1/rate: ",
         "/sys/class/infiniband/mlx5_0/ports/1/state: ",
       })
    EXPECT_TRUE(has_warning(facts, bad)) << "no warning \"" << bad << "\" in:\n" << warnings;
  // eth1 has no speed file, sr0 is skipped, the good files are not named.
  EXPECT_FALSE(has_warning(facts, "/sys/class/net/eth1/speed")) << warnings;
  EXPECT_FALSE(has_warning(facts, "/sys/block/sdb")) << warnings;
  EXPECT_FALSE(has_warning(facts, "/proc/sys/kernel/osrelease")) << warnings;
  EXPECT_FALSE(has_warning(facts, "/srv")) << warnings;
  EXPECT_EQ(facts.warnings_size(), 20) << warnings;
}

TEST(HostFacts, BrokenTreeLeavesBadFieldsUnknown) {
  HostReaderOptions opts;
  opts.root = fixture("broken");
  opts.statfs = [](const std::string&) { return std::optional<FilesystemUsage>{}; };
  auto facts = read_host_facts(opts);
  EXPECT_EQ(facts.hostname(), "");
  EXPECT_EQ(facts.kernel(), "6.1.0-18-amd64");
  EXPECT_EQ(facts.os(), "");
  EXPECT_EQ(facts.uptime_seconds(), 0u);
  EXPECT_EQ(facts.cpu().logical_cpus(), 0u);  // neither online nor cpuinfo usable
  EXPECT_EQ(facts.cpu().model(), "");
  EXPECT_EQ(facts.memory().total_bytes(), 0u);  // truncated: no half-read values
  EXPECT_FALSE(facts.memory().pressure().present());
  EXPECT_FALSE(facts.io_pressure().present());
  EXPECT_FALSE(facts.cpu_pressure().present());
  EXPECT_EQ(disk(facts, "sr0"), nullptr);
  ASSERT_NE(disk(facts, "sda"), nullptr);
  EXPECT_EQ(disk(facts, "sda")->size_bytes(), 0u);
  auto sdb = disk(facts, "sdb");
  ASSERT_NE(sdb, nullptr);
  EXPECT_EQ(sdb->kind(), "hdd");
  EXPECT_TRUE(sdb->rotational());
  EXPECT_EQ(sdb->model(), "ST8000NM000A-2KE101");
  EXPECT_EQ(disk(facts, "md127")->raid_state(), "inactive");
  auto srv = filesystem(facts, "/srv");
  ASSERT_NE(srv, nullptr);
  EXPECT_TRUE(srv->read_only());
  EXPECT_EQ(filesystem(facts, "/data")->size_bytes(), 0u);
  EXPECT_EQ(facts.filesystems_size(), 3);
  auto eth0 = interface(facts, "eth0");
  ASSERT_NE(eth0, nullptr);
  EXPECT_EQ(eth0->mtu(), 0u);
  EXPECT_EQ(eth0->speed_mbps(), -1);
  EXPECT_EQ(eth0->kind(), "ether");
  EXPECT_EQ(interface(facts, "eth1")->kind(), "");
  auto port = rdma_port(facts, "mlx5_0");
  ASSERT_NE(port, nullptr);
  EXPECT_EQ(port->rate(), "fast");
  EXPECT_EQ(port->rate_gbps(), 0.0);
  EXPECT_EQ(port->state(), "");
  EXPECT_EQ(port->phys_state(), "LinkUp");
  EXPECT_EQ(port->netdev(), "");
}

TEST(HostFacts, MissingRootWarnsButDoesNotThrow) {
  HostReaderOptions opts;
  opts.root = fixture("no-such-host");
  v1::HostFacts facts;
  ASSERT_NO_THROW(facts = read_host_facts(opts));
  EXPECT_TRUE(has_warning(facts, "/proc/meminfo: missing")) << all_warnings(facts);
  EXPECT_TRUE(has_warning(facts, "/proc/mounts: missing")) << all_warnings(facts);
  // Features a kernel may lack are not warnings.
  EXPECT_FALSE(has_warning(facts, "/proc/pressure")) << all_warnings(facts);
  EXPECT_FALSE(has_warning(facts, "/sys/class/infiniband")) << all_warnings(facts);
  EXPECT_EQ(facts.disks_size(), 0);
  EXPECT_EQ(facts.gpus().read_as(), "pending");
}

TEST(HostFacts, ThrowingStatfsCostsOnlyItsSize) {
  FakeStatfs statfs;
  auto opts = dgx_options(statfs);
  opts.statfs = [](const std::string&) -> std::optional<FilesystemUsage> {
    throw std::runtime_error("boom");
  };
  v1::HostFacts facts;
  ASSERT_NO_THROW(facts = read_host_facts(opts));
  EXPECT_EQ(facts.filesystems_size(), 6);
  EXPECT_TRUE(has_warning(facts, "/home: statfs failed")) << all_warnings(facts);
}

TEST(HostFacts, BytesThatAreNotUtf8StillMakeAParseableReport) {
  HostReaderOptions opts;
  opts.root = fixture("broken");
  opts.statfs = [](const std::string&) { return std::optional<FilesystemUsage>{}; };
  auto facts = read_host_facts(opts);
  // A Latin-1 mount point and a model with stray bytes: shown with U+FFFD.
  EXPECT_NE(filesystem(facts, "/mnt/caf\xEF\xBF\xBD"), nullptr);
  ASSERT_NE(disk(facts, "sdc"), nullptr);
  EXPECT_EQ(disk(facts, "sdc")->model(), "KINGSTON \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD SA400");
  std::string wire;
  ASSERT_TRUE(facts.SerializeToString(&wire));
  v1::HostFacts copy;
  ASSERT_TRUE(copy.ParseFromString(wire));  // proto3 refuses strings that are not UTF-8
  EXPECT_EQ(copy.filesystems_size(), facts.filesystems_size());
}

TEST(HostFacts, ToValidUtf8) {
  EXPECT_EQ(to_valid_utf8("plain /mnt/data"), "plain /mnt/data");
  EXPECT_EQ(to_valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x9A\x80"), "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x9A\x80");
  EXPECT_EQ(to_valid_utf8("caf\xE9"), "caf\xEF\xBF\xBD");                 // Latin-1
  EXPECT_EQ(to_valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");      // overlong '/'
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(to_valid_utf8("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");      // cut short
  EXPECT_EQ(to_valid_utf8(std::string_view{"a\0b", 3}), std::string("a\0b", 3));
  EXPECT_EQ(to_valid_utf8(""), "");
}

// --- arm64 (Grace Hopper): cpuinfo lacks topology, sysfs has it -----------

TEST(HostFacts, Gh200CpuFromCpuPartAndSysfsTopology) {
  HostReaderOptions opts;
  opts.root = fixture("gh200");
  opts.architecture = "aarch64";
  opts.statfs = [](const std::string&) { return std::optional<FilesystemUsage>{FilesystemUsage{10, 5}}; };
  auto facts = read_host_facts(opts);
  EXPECT_EQ(facts.warnings_size(), 0) << all_warnings(facts);
  EXPECT_EQ(facts.cpu().model(), "ARM Neoverse-V2");
  EXPECT_EQ(facts.cpu().logical_cpus(), 72u);
  EXPECT_EQ(facts.cpu().physical_cores(), 72u);
  EXPECT_EQ(facts.cpu().sockets(), 1u);
  EXPECT_EQ(facts.cpu().numa_nodes(), 2u);
  EXPECT_EQ(facts.os(), "Ubuntu 24.04 LTS");
  EXPECT_EQ(facts.memory().total_bytes(), 503316480ull * 1024);
  // No /proc/pressure on this kernel: not present, and not a warning.
  EXPECT_FALSE(facts.memory().pressure().present());
  EXPECT_FALSE(facts.cpu_pressure().present());
  EXPECT_EQ(facts.rdma_ports_size(), 0);
}

// --- Files copied from a real Debian 12 VM --------------------------------

TEST(HostFacts, DebianVmFixture) {
  FakeStatfs statfs;
  statfs.root = fixture("debian-vm");
  statfs.usage = {{"/", {270'000'000'000, 200'000'000'000}}};
  HostReaderOptions opts;
  opts.root = statfs.root;
  opts.statfs = statfs.fn();
  auto facts = read_host_facts(opts);
  EXPECT_EQ(facts.warnings_size(), 0) << all_warnings(facts);
  EXPECT_EQ(facts.hostname(), "vm");
  EXPECT_EQ(facts.os(), "Debian GNU/Linux 12 (bookworm)");
  EXPECT_EQ(facts.cpu().model(), "AMD EPYC");
  EXPECT_EQ(facts.cpu().logical_cpus(), 2u);
  EXPECT_EQ(facts.cpu().physical_cores(), 2u);
  EXPECT_EQ(facts.cpu().sockets(), 1u);
  EXPECT_EQ(facts.cpu().numa_nodes(), 1u);
  EXPECT_GT(facts.memory().total_bytes(), 0u);
  EXPECT_TRUE(facts.memory().pressure().present());
  EXPECT_TRUE(facts.cpu_pressure().present());
  // loop* and zram0 are skipped; the virtio disk is 256 GiB.
  ASSERT_EQ(facts.disks_size(), 1);
  EXPECT_EQ(facts.disks(0).name(), "vda");
  EXPECT_EQ(facts.disks(0).kind(), "virtual");
  EXPECT_EQ(facts.disks(0).size_bytes(), 256ull << 30);
  ASSERT_EQ(facts.filesystems_size(), 1);
  EXPECT_EQ(facts.filesystems(0).mount_point(), "/");
  EXPECT_EQ(facts.filesystems(0).type(), "ext4");
  EXPECT_EQ(facts.filesystems(0).free_bytes(), 200'000'000'000u);
  auto eth0 = interface(facts, "eth0");
  ASSERT_NE(eth0, nullptr);
  EXPECT_FALSE(eth0->virtual_());
  EXPECT_EQ(eth0->mtu(), 1400u);
  EXPECT_EQ(eth0->speed_mbps(), -1);  // virtio reports no speed
  auto ifb0 = interface(facts, "ifb0");
  ASSERT_NE(ifb0, nullptr);
  EXPECT_TRUE(ifb0->virtual_());
  EXPECT_EQ(ifb0->operstate(), "down");
  EXPECT_EQ(interface(facts, "lo")->kind(), "loopback");
  EXPECT_EQ(facts.rdma_ports_size(), 0);
}

// hosts/h200-vm is a real capture (capture-host.sh) of a Firecracker VM with
// one H200 passed through; the expected values are what the real agent
// reported for that VM (its `astra machine` JSON "facts").
TEST(HostFacts, TheRealH200VmReadsAsTheRealAgentSawIt) {
  FakeStatfs statfs;
  statfs.root = fixture("h200-vm");
  statfs.usage = {{"/", {270'553'174'016, 68'479'451'136}}};
  HostReaderOptions opts;
  opts.root = statfs.root;
  opts.statfs = statfs.fn();
  opts.architecture = "x86_64";
  auto facts = read_host_facts(opts);
  EXPECT_EQ(facts.warnings_size(), 0) << all_warnings(facts);
  EXPECT_EQ(facts.hostname(), "vm");
  EXPECT_EQ(facts.kernel(), "6.18.44-fc-v1252-gpu");
  EXPECT_EQ(facts.os(), "Ubuntu 24.04.3 LTS");

  EXPECT_EQ(facts.cpu().model(), "Intel(R) Xeon(R) Processor");
  EXPECT_EQ(facts.cpu().logical_cpus(), 16u);
  EXPECT_EQ(facts.cpu().physical_cores(), 16u);
  EXPECT_EQ(facts.cpu().sockets(), 1u);
  EXPECT_EQ(facts.cpu().numa_nodes(), 1u);
  ASSERT_EQ(facts.cpu().nodes_size(), 1);
  EXPECT_EQ(facts.cpu().nodes(0).id(), 0u);
  EXPECT_EQ(facts.cpu().nodes(0).cpulist(), "0-15");
  EXPECT_EQ(facts.cpu().nodes(0).cpus(), 16u);
  EXPECT_EQ(facts.cpu().nodes(0).memory_total_bytes(), 135'129'063'424u);

  EXPECT_EQ(facts.memory().total_bytes(), 135'129'063'424u);
  EXPECT_EQ(facts.memory().swap_total_bytes(), 0u);
  EXPECT_TRUE(facts.memory().pressure().present());
  EXPECT_TRUE(facts.io_pressure().present());
  EXPECT_TRUE(facts.cpu_pressure().present());

  // loop* and zram0 are skipped; both virtio disks are "virtual" (no class
  // floor), though virtio says they are rotational.
  ASSERT_EQ(facts.disks_size(), 2);
  auto vda = disk(facts, "vda");
  ASSERT_NE(vda, nullptr);
  EXPECT_EQ(vda->kind(), "virtual");
  EXPECT_EQ(vda->size_bytes(), 274'877'906'944u);
  auto vdb = disk(facts, "vdb");
  ASSERT_NE(vdb, nullptr);
  EXPECT_EQ(vdb->kind(), "virtual");
  EXPECT_EQ(vdb->size_bytes(), 331'612'160u);

  // The driver's squashfs and the tmpfs mounts are not listed.
  ASSERT_EQ(facts.filesystems_size(), 1);
  EXPECT_EQ(facts.filesystems(0).mount_point(), "/");
  EXPECT_EQ(facts.filesystems(0).device(), "/dev/vda");
  EXPECT_EQ(facts.filesystems(0).type(), "ext4");
  EXPECT_EQ(facts.filesystems(0).free_bytes(), 68'479'451'136u);

  auto eth0 = interface(facts, "eth0");
  ASSERT_NE(eth0, nullptr);
  EXPECT_EQ(eth0->operstate(), "up");
  EXPECT_EQ(eth0->mtu(), 1400u);
  EXPECT_EQ(eth0->mac_address(), "02:fc:00:00:00:01");
  EXPECT_EQ(eth0->speed_mbps(), -1);
  EXPECT_FALSE(eth0->virtual_());
  for (const char* name : {"ifb0", "ifb1", "lo"}) {
    auto i = interface(facts, name);
    ASSERT_NE(i, nullptr) << name;
    EXPECT_TRUE(i->virtual_()) << name;
  }
  EXPECT_EQ(facts.interfaces_size(), 4);
  EXPECT_EQ(facts.rdma_ports_size(), 0);
}

// --- sysfs symlinks, as on a real machine ---------------------------------

TEST(HostFacts, FollowsSysfsSymlinks) {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/astraeus-host-facts-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  fs::path root{tmpl};
  auto write = [&](const std::string& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream{root / rel} << text;
  };
  std::string pci = "sys/devices/pci0000:00/0000:17:00.0";
  write(pci + "/vendor", "0x15b3\n");
  write(pci + "/net/ibp23s0/address", "00:00:10:29:fe:80:00:00:00:00:00:00:a0:88:c2:03:00:4e:1f:00\n");
  write(pci + "/net/ibp23s0/operstate", "up\n");
  write(pci + "/net/ibp23s0/mtu", "4092\n");
  write(pci + "/net/ibp23s0/type", "32\n");
  write(pci + "/net/ibp23s0/speed", "400000\n");
  write(pci + "/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  write(pci + "/infiniband/mlx5_0/ports/1/phys_state", "5: LinkUp\n");
  write(pci + "/infiniband/mlx5_0/ports/1/rate", "400 Gb/sec (4X NDR)\n");
  write(pci + "/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
  std::string nvme = "sys/devices/pci0000:00/0000:5a:00.0/nvme/nvme0";
  write(nvme + "/model", "Dell Ent NVMe CM6 RI 3.84TB\n");
  write(nvme + "/nvme0n1/size", "7501476528\n");
  write(nvme + "/nvme0n1/queue/rotational", "0\n");
  write(nvme + "/nvme0n1/removable", "0\n");
  fs::create_directories(root / "sys/class/net");
  fs::create_directories(root / "sys/class/infiniband");
  fs::create_directories(root / "sys/block");
  fs::create_symlink("../../devices/pci0000:00/0000:17:00.0/net/ibp23s0",
                     root / "sys/class/net/ibp23s0");
  fs::create_directory_symlink("../../../0000:17:00.0", root / pci / "net/ibp23s0/device");
  fs::create_symlink("../../devices/pci0000:00/0000:17:00.0/infiniband/mlx5_0",
                     root / "sys/class/infiniband/mlx5_0");
  fs::create_directory_symlink("../../../0000:17:00.0", root / pci / "infiniband/mlx5_0/device");
  fs::create_symlink("../devices/pci0000:00/0000:5a:00.0/nvme/nvme0/nvme0n1",
                     root / "sys/block/nvme0n1");
  fs::create_directory_symlink("../../nvme0", root / nvme / "nvme0n1/device");

  HostReaderOptions opts;
  opts.root = root.string() + "/";  // a trailing slash must not matter
  auto facts = read_host_facts(opts);
  fs::remove_all(root);

  ASSERT_EQ(facts.interfaces_size(), 1);
  EXPECT_EQ(facts.interfaces(0).kind(), "infiniband");
  EXPECT_FALSE(facts.interfaces(0).virtual_());
  EXPECT_EQ(facts.interfaces(0).speed_mbps(), 400000);
  ASSERT_EQ(facts.rdma_ports_size(), 1);
  EXPECT_EQ(facts.rdma_ports(0).netdev(), "ibp23s0");
  EXPECT_EQ(facts.rdma_ports(0).rate_gbps(), 400.0);
  ASSERT_EQ(facts.disks_size(), 1);
  EXPECT_EQ(facts.disks(0).model(), "Dell Ent NVMe CM6 RI 3.84TB");
  EXPECT_EQ(facts.disks(0).size_bytes(), 7501476528ull * 512);
  EXPECT_FALSE(has_warning(facts, "/sys/")) << all_warnings(facts);
}

// --- This machine ---------------------------------------------------------

TEST(HostFacts, ReadsThisMachine) {
  HostReaderOptions opts;  // root "/", real statvfs, real uname
  auto facts = read_host_facts(opts);
  char hostname[256] = {};
  ASSERT_EQ(::gethostname(hostname, sizeof(hostname) - 1), 0);
  EXPECT_EQ(facts.hostname(), hostname);
  std::ifstream online_file{"/sys/devices/system/cpu/online"};
  std::string online;
  std::getline(online_file, online);
  auto expected = parse_cpu_list(online);
  ASSERT_TRUE(expected.has_value()) << online;
  EXPECT_EQ(facts.cpu().logical_cpus(), *expected);
  EXPECT_GT(facts.cpu().logical_cpus(), 0u);
  EXPECT_GT(facts.memory().total_bytes(), 0u);
  EXPECT_LE(facts.memory().available_bytes(), facts.memory().total_bytes());
  EXPECT_FALSE(facts.kernel().empty());
  EXPECT_FALSE(facts.cpu().architecture().empty());
  EXPECT_GT(facts.uptime_seconds(), 0u);
  for (const auto& f : facts.filesystems())
    EXPECT_GE(f.size_bytes(), f.free_bytes()) << f.mount_point();
}

// --- Parse helpers ----------------------------------------------------------

TEST(HostFacts, ParsePressure) {
  v1::Pressure p;
  ASSERT_TRUE(parse_pressure("some avg10=1.50 avg60=2.25 avg300=3.00 total=123\n"
                             "full avg10=0.50 avg60=0.25 avg300=0.10 total=45\n",
                             p));
  EXPECT_TRUE(p.present());
  EXPECT_DOUBLE_EQ(p.some_avg10(), 1.5);
  EXPECT_DOUBLE_EQ(p.some_avg300(), 3.0);
  EXPECT_DOUBLE_EQ(p.full_avg60(), 0.25);
  // cpu on kernels before 5.13 has no "full" line: still valid.
  v1::Pressure cpu;
  ASSERT_TRUE(parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=0", cpu));
  EXPECT_TRUE(cpu.present());
  EXPECT_EQ(cpu.full_avg10(), 0.0);
}

TEST(HostFacts, ParsePressureRejectsGarbageAndLeavesOutputAlone) {
  v1::Pressure p;
  p.set_some_avg10(42);
  for (const char* bad : {
         "",
         "\n",
         "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",  // no "some"
         "some avg10=banana avg60=0.00 avg300=0.00 total=0\n",
         "some avg10=0.00 avg60=0.00 total=0\n",                // avg300 missing
         "some avg10=1e400 avg60=0.00 avg300=0.00 total=0\n",   // overflows
         "some avg10=nan avg60=0.00 avg300=0.00 total=0\n",
         "some avg10=-1.00 avg60=0.00 avg300=0.00 total=0\n",
         "some avg10=100.01 avg60=0.00 avg300=0.00 total=0\n",  // over 100 %
         "some avg10=0.00 avg60=0.00 avg300=0.00 total=x\n",
         "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nmost avg10=0\n",
         "some avg10",
       }) {
    EXPECT_FALSE(parse_pressure(bad, p)) << bad;
    EXPECT_FALSE(p.present()) << bad;
    EXPECT_EQ(p.some_avg10(), 42) << bad;
  }
}

TEST(HostFacts, ParseMeminfo) {
  v1::Memory m;
  ASSERT_TRUE(parse_meminfo("MemTotal:       16384000 kB\nMemFree:  1000 kB\n"
                            "MemAvailable:   8192000 kB\nSwapTotal: 2048 kB\nSwapFree: 1024 kB\n"
                            "HugePages_Total:       0\n",
                            m));
  EXPECT_EQ(m.total_bytes(), 16384000ull * 1024);
  EXPECT_EQ(m.available_bytes(), 8192000ull * 1024);
  EXPECT_EQ(m.swap_total_bytes(), 2048u * 1024);
  EXPECT_EQ(m.swap_free_bytes(), 1024u * 1024);
}

TEST(HostFacts, ParseMeminfoRejectsGarbage) {
  v1::Memory m;
  m.set_total_bytes(7);
  for (const char* bad : {
         "",
         "MemTotal:       16384000 kB\nMemFree:        12",           // truncated
         "MemTotal:       16384000 kB\n",                             // no MemAvailable
         "MemTotal: lots kB\nMemAvailable: 1 kB\n",
         "MemTotal: 99999999999999999999 kB\nMemAvailable: 1 kB\n",  // over 64 bits
         "MemTotal: 18014398509481984 kB\nMemAvailable: 1 kB\n",     // bytes overflow
         "MemTotal: 1 MB\nMemAvailable: 1 kB\n",
         "MemTotal: -1 kB\nMemAvailable: 1 kB\n",
       }) {
    EXPECT_FALSE(parse_meminfo(bad, m)) << bad;
    EXPECT_EQ(m.total_bytes(), 7u) << bad;
  }
}

TEST(HostFacts, ParseCpuList) {
  EXPECT_EQ(parse_cpu_list("0-3,8-11"), 8u);
  EXPECT_EQ(parse_cpu_list("0-223\n"), 224u);
  EXPECT_EQ(parse_cpu_list("0"), 1u);
  EXPECT_EQ(parse_cpu_list("0,2,4-5"), 4u);
  EXPECT_EQ(parse_cpu_list("\n"), 0u);           // a memory-only NUMA node
  EXPECT_EQ(parse_cpu_list("8-11,0-3"), 8u);     // out of order
  EXPECT_EQ(parse_cpu_list("0-5,3-7"), 8u);      // overlapping: distinct CPUs
  EXPECT_EQ(parse_cpu_list("0-2147483647"), 2147483648u);  // the largest list accepted
  for (const char* bad : {"zero-three", "0-", "-3", "5-3", "0,,2", "0-3,", "0 - 3", "0-99999999999",
                          "0-2147483648", "1.5", "0x3", "+1"})
    EXPECT_EQ(parse_cpu_list(bad), std::nullopt) << bad;
}

TEST(HostFacts, ParseIbRate) {
  EXPECT_EQ(parse_ib_rate("400 Gb/sec (4X NDR)"), 400.0);
  EXPECT_EQ(parse_ib_rate("2.5 Gb/sec (1X SDR)\n"), 2.5);
  EXPECT_EQ(parse_ib_rate("56 Gb/sec (4X FDR)"), 56.0);
  EXPECT_EQ(parse_ib_rate("100 Gb/sec"), 100.0);
  for (const char* bad : {"fast", "", "400", "400 Mb/sec (4X)", "Gb/sec 400", "-1 Gb/sec (4X)",
                          "nan Gb/sec", "1e999 Gb/sec (4X)", "400Gb/sec"})
    EXPECT_EQ(parse_ib_rate(bad), std::nullopt) << bad;
}

TEST(HostFacts, ParseIbState) {
  EXPECT_EQ(parse_ib_state("4: ACTIVE\n"), "ACTIVE");
  EXPECT_EQ(parse_ib_state("1: DOWN"), "DOWN");
  EXPECT_EQ(parse_ib_state("5: LinkUp"), "LinkUp");
  for (const char* bad : {"ACTIVE", "", ": ACTIVE", "x: ACTIVE", "4:", "4: LINK UP"})
    EXPECT_EQ(parse_ib_state(bad), std::nullopt) << bad;
}

TEST(HostFacts, ParseOsReleaseAndUptime) {
  EXPECT_EQ(parse_os_release_pretty_name("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"),
            "Debian GNU/Linux 12 (bookworm)");
  EXPECT_EQ(parse_os_release_pretty_name("PRETTY_NAME='Rocky Linux 9.3'\n"), "Rocky Linux 9.3");
  EXPECT_EQ(parse_os_release_pretty_name("PRETTY_NAME=Arch\n"), "Arch");
  EXPECT_EQ(parse_os_release_pretty_name("PRETTY_NAME=\"say \\\"hi\\\"\"\n"), "say \"hi\"");
  EXPECT_EQ(parse_os_release_pretty_name("NAME=Debian\n"), std::nullopt);
  EXPECT_EQ(parse_os_release_pretty_name("PRETTY_NAME=\"\"\n"), std::nullopt);
  EXPECT_EQ(parse_uptime("306.80 561.67\n"), 306u);
  EXPECT_EQ(parse_uptime("0.00 0.00"), 0u);
  for (const char* bad : {"", "-5 xyz", "abc", "1e30 0", "inf 0"})
    EXPECT_EQ(parse_uptime(bad), std::nullopt) << bad;
}

TEST(HostFacts, ParseCpuinfo) {
  auto x86 = parse_cpuinfo(
    "processor\t: 0\nmodel name\t: AMD EPYC 9654\nphysical id\t: 0\ncore id\t\t: 0\n\n"
    "processor\t: 1\nmodel name\t: AMD EPYC 9654\nphysical id\t: 0\ncore id\t\t: 0\n\n"
    "processor\t: 2\nmodel name\t: AMD EPYC 9654\nphysical id\t: 1\ncore id\t\t: 0\n\n");
  ASSERT_TRUE(x86.has_value());
  EXPECT_EQ(x86->model, "AMD EPYC 9654");
  EXPECT_EQ(x86->processors, 3u);
  EXPECT_EQ(x86->physical_cores, 2u);  // core 0 exists in both packages
  EXPECT_EQ(x86->sockets, 2u);
  // A VM that hides topology: cores unknown rather than wrong.
  auto vm = parse_cpuinfo("processor : 0\nmodel name : QEMU Virtual CPU\n\nprocessor : 1\n");
  ASSERT_TRUE(vm.has_value());
  EXPECT_EQ(vm->processors, 2u);
  EXPECT_EQ(vm->physical_cores, 0u);
  EXPECT_EQ(vm->sockets, 0u);
  auto arm32 = parse_cpuinfo("processor : 0\nBogoMIPS : 38.40\n\nHardware : BCM2835\n");
  ASSERT_TRUE(arm32.has_value());
  EXPECT_EQ(arm32->model, "BCM2835");
  auto ampere_one = parse_cpuinfo("processor : 0\nCPU implementer : 0xc0\nCPU part : 0xac3\n");
  ASSERT_TRUE(ampere_one.has_value());
  EXPECT_EQ(ampere_one->model, "CPU part 0xac3");
  for (const char* bad : {"", "model name : x\n", "processor : 0\nmodel na",
                          "processor : zero\n", "processor : 0\nphysical id : -1\n"})
    EXPECT_EQ(parse_cpuinfo(bad), std::nullopt) << bad;
}

TEST(HostFacts, ParseMounts) {
  EXPECT_EQ(decode_mount_escapes("/mnt/my\\040disk"), "/mnt/my disk");
  EXPECT_EQ(decode_mount_escapes("/a\\011b\\134c"), "/a\tb\\c");
  EXPECT_EQ(decode_mount_escapes("/odd\\09x\\"), "/odd\\09x\\");  // not escapes: kept
  EXPECT_EQ(decode_mount_escapes("/end\\04"), "/end\\04");
  size_t malformed = 99;
  auto mounts = parse_mounts("/dev/sda1 / ext4 rw 0 0\n"
                             "/dev/sdb1 /data xfs rw 0 0\n"
                             "short line\n"
                             "tmpfs /data tmpfs rw 0 0\n"
                             "nas:/x /mnt/a\\040b nfs4 ro,vers=4.2 0 0\n",
                             &malformed);
  EXPECT_EQ(malformed, 1u);
  ASSERT_EQ(mounts.size(), 3u);
  EXPECT_EQ(mounts[0].mount_point, "/");
  EXPECT_EQ(mounts[1].mount_point, "/data");
  EXPECT_EQ(mounts[1].type, "tmpfs");  // the later mount hides the xfs one
  EXPECT_EQ(mounts[2].mount_point, "/mnt/a b");
  EXPECT_EQ(mounts[2].options, "ro,vers=4.2");
  EXPECT_TRUE(parse_mounts("").empty());
}

TEST(HostFacts, ParsersSurviveTruncationAndRandomBytes) {
  const std::vector<std::string> valid = {
    "some avg10=1.50 avg60=2.25 avg300=3.00 total=123\nfull avg10=0.50 avg60=0.25 avg300=0.10 total=45\n",
    "MemTotal:       16384000 kB\nMemAvailable:   8192000 kB\nSwapTotal: 2048 kB\nSwapFree: 1024 kB\n",
    "0-3,8-11\n",
    "400 Gb/sec (4X NDR)\n",
    "4: ACTIVE\n",
    "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n",
    "306.80 561.67\n",
    "processor\t: 0\nmodel name\t: X\nphysical id\t: 0\ncore id\t: 0\n",
    "/dev/sda1 /mnt/a\\040b ext4 rw 0 0\n",
  };
  auto run_all = [](const std::string& text) {
    v1::Pressure pressure;
    v1::Memory memory;
    parse_pressure(text, pressure);
    parse_meminfo(text, memory);
    parse_cpu_list(text);
    parse_ib_rate(text);
    parse_ib_state(text);
    parse_os_release_pretty_name(text);
    parse_uptime(text);
    parse_cpuinfo(text);
    parse_mounts(text);
    decode_mount_escapes(text);
    to_valid_utf8(text);
  };
  // Every prefix of a valid file: what a read cut short would give.
  for (const auto& text : valid)
    for (size_t n = 0; n <= text.size(); ++n)
      run_all(text.substr(0, n));
  // A truncated meminfo never yields a half-read total.
  const std::string meminfo = valid[1];
  for (size_t n = 0; n < meminfo.find("MemAvailable") + 20; ++n) {
    v1::Memory memory;
    EXPECT_FALSE(parse_meminfo(meminfo.substr(0, n), memory)) << n;
  }
  std::mt19937 random{20240601};
  std::uniform_int_distribution<int> byte{0, 255};
  std::uniform_int_distribution<size_t> length{0, 300};
  for (int round = 0; round < 3000; ++round) {
    std::string text(length(random), '\0');
    for (auto& c : text)
      c = static_cast<char>(byte(random));
    // Half the rounds: a valid file with a few bytes replaced.
    if (round % 2 == 0) {
      text = valid[static_cast<size_t>(round / 2) % valid.size()];
      for (int k = 0; k < 3; ++k)
        text[static_cast<size_t>(byte(random)) % text.size()] = static_cast<char>(byte(random));
    }
    run_all(text);
  }
}

TEST(HostFacts, ClassifyFilesystem) {
  for (const char* local : {"ext4", "xfs", "btrfs", "zfs", "vfat", "f2fs"})
    EXPECT_EQ(classify_filesystem(local), FilesystemClass::local) << local;
  for (const char* shared : {"nfs", "nfs4", "cifs", "lustre", "gpfs", "beegfs", "ceph", "wekafs",
                             "fuse.glusterfs", "fuse.juicefs"})
    EXPECT_EQ(classify_filesystem(shared), FilesystemClass::shared) << shared;
  for (const char* pseudo : {"proc", "sysfs", "tmpfs", "devtmpfs", "cgroup", "cgroup2", "overlay",
                             "squashfs", "autofs", "fuse.gvfsd-fuse", "fuse.lxcfs", "", "EXT4"})
    EXPECT_EQ(classify_filesystem(pseudo), FilesystemClass::pseudo) << pseudo;
}
