#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "runtime/host/host_facts.hpp"
#include "runtime/host/numa_facts.hpp"

using namespace astraeus;

namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return std::string{ASTRAEUS_FIXTURES} + "/hosts/" + name;
}

std::string all_warnings(const v1::HostFacts& facts) {
  std::string text;
  for (const auto& w : facts.warnings())
    text += w + "\n";
  return text;
}

bool has_warning(const v1::HostFacts& facts, const std::string& prefix) {
  return std::any_of(facts.warnings().begin(), facts.warnings().end(),
                     [&](const std::string& w) { return w.rfind(prefix, 0) == 0; });
}

const v1::RdmaPort* port_of(const v1::HostFacts& facts, const std::string& device) {
  for (const auto& p : facts.rdma_ports())
    if (p.device() == device)
      return &p;
  return nullptr;
}

/// A scratch host root, removed at the end of the test.
struct ScratchRoot {
  fs::path dir;
  ScratchRoot() {
    dir = fs::temp_directory_path() / ("numa-facts-" + std::to_string(::getpid()) + "-"
                                       + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~ScratchRoot() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  void write(const std::string& rel, const std::string& text) const {
    fs::create_directories((dir / rel.substr(1)).parent_path());
    std::ofstream{dir / rel.substr(1)} << text;
  }
  std::string root() const { return dir.string(); }
};

} // namespace

TEST(NumaFacts, DgxH100NodesHaveCoresAndMemory) {
  HostReaderOptions opts;
  opts.root = fixture("dgx-h100");
  opts.statfs = [](const std::string&) { return std::optional<FilesystemUsage>{}; };
  auto facts = read_host_facts(opts);
  const auto& nodes = facts.cpu().nodes();
  ASSERT_EQ(nodes.size(), 2);
  EXPECT_EQ(nodes[0].id(), 0u);
  EXPECT_EQ(nodes[0].cpulist(), "0-55,112-167");
  EXPECT_EQ(nodes[0].cpus(), 112u);
  EXPECT_EQ(nodes[0].memory_total_bytes(), 1056694854ull * 1024);
  EXPECT_EQ(nodes[0].memory_free_bytes(), 938271605ull * 1024);
  EXPECT_EQ(nodes[1].id(), 1u);
  EXPECT_EQ(nodes[1].cpulist(), "56-111,168-223");
  EXPECT_EQ(nodes[1].cpus(), 112u);
  // Use needs two readings: the first report has none.
  EXPECT_FALSE(facts.cpu().has_use_percent());
}

TEST(NumaFacts, DgxH100RdmaPortsHaveVerbsNodeAndAddress) {
  HostReaderOptions opts;
  opts.root = fixture("dgx-h100");
  opts.statfs = [](const std::string&) { return std::optional<FilesystemUsage>{}; };
  auto facts = read_host_facts(opts);
  auto* p0 = port_of(facts, "mlx5_0");
  ASSERT_NE(p0, nullptr);
  EXPECT_EQ(p0->uverbs(), "uverbs0");
  EXPECT_EQ(p0->numa_node(), 0);
  EXPECT_EQ(p0->pci_address(), "0000:18:00.0");
  auto* p5 = port_of(facts, "mlx5_5");
  ASSERT_NE(p5, nullptr);
  EXPECT_EQ(p5->uverbs(), "uverbs5");
  EXPECT_EQ(p5->numa_node(), 1);
  auto* p10 = port_of(facts, "mlx5_10");
  ASSERT_NE(p10, nullptr);
  EXPECT_EQ(p10->uverbs(), "uverbs10");
  const auto& nodes = facts.rdma_device_nodes();
  EXPECT_NE(std::find(nodes.begin(), nodes.end(), "/dev/infiniband/uverbs0"), nodes.end());
  EXPECT_NE(std::find(nodes.begin(), nodes.end(), "/dev/infiniband/uverbs11"), nodes.end());
  EXPECT_NE(std::find(nodes.begin(), nodes.end(), "/dev/infiniband/rdma_cm"), nodes.end());
  EXPECT_NE(std::find(nodes.begin(), nodes.end(), "/dev/infiniband/umad3"), nodes.end());
  // Natural order: uverbs2 before uverbs10.
  auto at = [&](const std::string& n) { return std::find(nodes.begin(), nodes.end(), n) - nodes.begin(); };
  EXPECT_LT(at("/dev/infiniband/uverbs2"), at("/dev/infiniband/uverbs10"));
}

TEST(NumaFacts, MachineWithoutNumaOrRdmaHasNoneAndNoWarning) {
  ScratchRoot host;
  host.write("/proc/stat", "cpu  1 2 3 4\n");
  v1::HostFacts facts;
  read_numa_nodes(host.root(), facts);
  read_rdma_device_nodes(host.root(), facts);
  EXPECT_EQ(facts.cpu().nodes_size(), 0);
  EXPECT_EQ(facts.rdma_device_nodes_size(), 0);
  EXPECT_EQ(facts.warnings_size(), 0) << all_warnings(facts);
}

TEST(NumaFacts, TruncatedOrGarbageFilesWarnNamingTheFile) {
  ScratchRoot host;
  host.write("/sys/devices/system/node/node0/cpulist", "0-1\x01\x02garbage");
  host.write("/sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:       1234");
  host.write("/sys/devices/system/node/node1/cpulist", "2-3\n");
  host.write("/sys/class/infiniband/mlx5_0/device/numa_node", "zero\n");
  host.write("/sys/class/infiniband/mlx5_0/device/uevent", "PCI_SLOT_NAME=bogus\n");
  host.write("/proc/stat", "cpu  12 3");
  v1::HostFacts facts;
  ASSERT_NO_THROW(read_numa_nodes(host.root(), facts));
  v1::RdmaPort port;
  ASSERT_NO_THROW(read_rdma_port_device(host.root(), "mlx5_0", port, facts));
  cpu_use_meter meter;
  ASSERT_NO_THROW(meter.sample(host.root(), facts));
  auto text = all_warnings(facts);
  EXPECT_TRUE(has_warning(facts, "/sys/devices/system/node/node0/cpulist: not a CPU list")) << text;
  EXPECT_TRUE(has_warning(facts, "/sys/devices/system/node/node0/meminfo: no MemTotal")) << text;
  EXPECT_TRUE(has_warning(facts, "/sys/devices/system/node/node1/meminfo: missing")) << text;
  EXPECT_TRUE(has_warning(facts, "/sys/class/infiniband/mlx5_0/device/numa_node: not a NUMA node")) << text;
  EXPECT_TRUE(has_warning(facts, "/sys/class/infiniband/mlx5_0/device/uevent: PCI_SLOT_NAME")) << text;
  EXPECT_TRUE(has_warning(facts, "/proc/stat: no \"cpu \" line")) << text;
  EXPECT_EQ(facts.warnings_size(), 6) << text;
  // The bad fields stay unknown; the good ones are kept.
  ASSERT_EQ(facts.cpu().nodes_size(), 2);
  EXPECT_EQ(facts.cpu().nodes(0).cpus(), 0u);
  EXPECT_EQ(facts.cpu().nodes(0).memory_total_bytes(), 0u);
  EXPECT_EQ(facts.cpu().nodes(1).cpulist(), "2-3");
  EXPECT_EQ(facts.cpu().nodes(1).cpus(), 2u);
  EXPECT_EQ(port.numa_node(), -1);
  EXPECT_EQ(port.pci_address(), "");
  EXPECT_EQ(port.uverbs(), "");
}

TEST(NumaFacts, CpuUseIsTheBusyShareBetweenTwoReadings) {
  ScratchRoot host;
  // user nice system idle iowait irq softirq steal
  host.write("/proc/stat", "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n");
  cpu_use_meter meter;
  v1::HostFacts first;
  meter.sample(host.root(), first);
  EXPECT_FALSE(first.cpu().has_use_percent());
  host.write("/proc/stat", "cpu  400 0 200 1000 100 0 0 0 0 0\n");
  v1::HostFacts second;
  meter.sample(host.root(), second);
  ASSERT_TRUE(second.cpu().has_use_percent());
  // 400 busy ticks of 700 that passed.
  EXPECT_NEAR(second.cpu().use_percent(), 400.0 * 100 / 700, 1e-9);
  EXPECT_EQ(second.warnings_size(), 0) << all_warnings(second);
}

TEST(NumaFacts, CpuUseOfCountersThatWentBackIsUnknown) {
  EXPECT_FALSE(cpu_use_percent({100, 1000}, {50, 500}).has_value());
  EXPECT_FALSE(cpu_use_percent({100, 1000}, {100, 1000}).has_value());
  EXPECT_DOUBLE_EQ(*cpu_use_percent({0, 0}, {10, 10}), 100.0);
}

TEST(NumaFacts, ParsersRejectGarbage) {
  EXPECT_FALSE(parse_proc_stat("").has_value());
  EXPECT_FALSE(parse_proc_stat("cpu  1 2 x 4\n").has_value());
  EXPECT_FALSE(parse_node_meminfo("Node 0 MemTotal: 12 kB\n").has_value());
  EXPECT_FALSE(parse_node_meminfo("Node 0 MemTotal: 99999999999999999999 kB\nNode 0 MemFree: 1 kB\n")
                 .has_value());
  auto mem = parse_node_meminfo("Node 0 MemTotal: 2 kB\nNode 0 MemFree: 1 kB\n");
  ASSERT_TRUE(mem.has_value());
  EXPECT_EQ(mem->total_bytes, 2048u);
  EXPECT_EQ(mem->free_bytes, 1024u);
}

TEST(NumaFacts, CpuListsRoundTrip) {
  auto cpus = cpu_list_members("0-3,8,10-11\n");
  ASSERT_TRUE(cpus.has_value());
  EXPECT_EQ(*cpus, (std::vector<uint32_t>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(format_cpu_list(*cpus), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({5, 1, 2, 2}), "1-2,5");
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_FALSE(cpu_list_members("3-1").has_value());
}

// Recorded on an H200 VM: one NUMA node, the GPU's sysfs numa_node -1 and
// NVML's node id not supported, while `nvidia-smi topo -m` says "NUMA
// Affinity 0". With one node everything is local to it; with two the GPU
// stays unknown (a guess there would bind workers to the wrong cores).
TEST(NumaFacts, AGpuWithoutANodeOnAOneNodeMachineIsOnThatNode) {
  v1::HostFacts one;
  auto* node = one.mutable_cpu()->add_nodes();
  node->set_id(0);
  node->set_cpulist("0-15");
  auto* known = one.mutable_gpus()->add_gpus();
  known->set_id("GPU-a");
  known->set_numa_node(0);
  one.mutable_gpus()->add_gpus()->set_id("GPU-f07d9499");
  place_gpus_on_the_only_numa_node(one);
  ASSERT_TRUE(one.gpus().gpus(1).has_numa_node());
  EXPECT_EQ(one.gpus().gpus(1).numa_node(), 0);
  EXPECT_EQ(one.gpus().gpus(0).numa_node(), 0);

  v1::HostFacts two = one;
  two.mutable_cpu()->add_nodes()->set_id(1);
  two.mutable_gpus()->mutable_gpus(1)->clear_numa_node();
  place_gpus_on_the_only_numa_node(two);
  EXPECT_FALSE(two.gpus().gpus(1).has_numa_node());

  v1::HostFacts none;  // a kernel without NUMA: no node listed
  none.mutable_gpus()->add_gpus()->set_id("GPU-b");
  place_gpus_on_the_only_numa_node(none);
  EXPECT_FALSE(none.gpus().gpus(0).has_numa_node());
}
