// The disk check: fio's JSON, the device class from sysfs, the verdicts.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "runtime/validation/disk_check.hpp"
#include "unit/validation/check_fixtures.hpp"

namespace astraeus::validation {
namespace {

namespace fs = std::filesystem;
using astraeus::test::temp_dir;
using astraeus::test::write_text;

std::string recorded_fio() {
  std::ifstream in(std::string{ASTRAEUS_FIXTURES} + "/checks/fio/vda-ext4.json");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(DiskFio, ReadsTheThreeJobsOfARecordedRun) {
  auto f = parse_fio_json(recorded_fio());
  ASSERT_TRUE(f) << to_string(f.error());
  EXPECT_EQ(f->tool, "fio-3.33");
  ASSERT_TRUE(f->seq_write_mbs && f->seq_read_mbs && f->rand_read_iops);
  EXPECT_NEAR(*f->seq_write_mbs, 260.1, 0.1);
  EXPECT_NEAR(*f->seq_read_mbs, 322.6, 0.1);
  EXPECT_NEAR(*f->rand_read_iops, 17363.8, 0.1);
}

TEST(DiskFio, AJobErrorOrOtherTextIsAnError) {
  auto text = recorded_fio();
  auto i = text.find("\"error\" : 0");
  ASSERT_NE(i, std::string::npos);
  text.replace(i, 11, "\"error\" : 28");
  auto f = parse_fio_json(text);
  ASSERT_FALSE(f);
  EXPECT_NE(to_string(f.error()).find("fio job seq_write failed with error 28"), std::string::npos);
  EXPECT_FALSE(parse_fio_json("fio: unrecognized option"));
}

TEST(DiskRules, TheClassSetsTheFloor) {
  auto f = *parse_fio_json(recorded_fio());
  check_result nvme;
  judge_disk(f, {"nvme0n1", disk_class::nvme}, {}, thresholds{}, nvme);
  EXPECT_EQ(nvme.result, verdict::fail);
  ASSERT_EQ(nvme.findings.size(), 3u);
  EXPECT_EQ(nvme.findings[0].what,
            "nvme0n1 sequential read 323 MB/s, below the 1500 MB/s of an NVMe drive");
  EXPECT_NE(nvme.findings[0].fix.find("nvme smart-log /dev/nvme0n1"), std::string::npos);
  check_result hdd;
  judge_disk(f, {"sda", disk_class::hdd}, {}, thresholds{}, hdd);
  EXPECT_EQ(hdd.result, verdict::pass) << to_json_line(hdd);
}

// A virtio disk reports queue/rotational 1 whatever backs it (recorded on an
// H200 VM: "HDD vda meets its class" at 1,361 MB/s): it has no class floor, so
// a slow one is not passed as a fine HDD; only its peers judge it.
TEST(DiskRules, AVirtualDiskHasNoClassFloorOnlyItsPeers) {
  auto f = *parse_fio_json(recorded_fio());
  check_result alone;
  judge_disk(f, {"vda", disk_class::virtual_disk}, {}, thresholds{}, alone);
  EXPECT_EQ(alone.result, verdict::pass) << to_json_line(alone);
  for (const auto& m : alone.measurements)
    EXPECT_EQ(m.expected, "") << m.name << " is held to a class floor: " << m.expected;
  check_result peer;
  peer.check = "disk";
  peer.add_measurement({"seq_read", "vda", "", 1000, "MB/s", "", verdict::pass});
  check_result slow;
  judge_disk(f, {"vda", disk_class::virtual_disk}, {peer}, thresholds{}, slow);
  EXPECT_EQ(slow.result, verdict::warn);
  ASSERT_EQ(slow.findings.size(), 1u);
  EXPECT_EQ(slow.findings[0].what, "vda sequential read 323 MB/s, 32 % of the best peer's 1000");
}

TEST(DiskRules, SlowerThanTheBestPeerWarns) {
  auto f = *parse_fio_json(recorded_fio());
  check_result peer;
  peer.check = "disk";
  peer.add_measurement({"seq_read", "sda", "", 400, "MB/s", "", verdict::pass});
  check_result r;
  judge_disk(f, {"sda", disk_class::hdd}, {peer}, thresholds{}, r);
  EXPECT_EQ(r.result, verdict::warn);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].what, "sda sequential read 323 MB/s, 81 % of the best peer's 400");
}

TEST(DiskClass, SysfsTellsNvmeSsdAndHddApartThroughPartitions) {
  temp_dir dir;
  auto root = dir.path();
  auto disk = [&](const std::string& name, const std::string& dev, const char* rot, bool part) {
    auto base = root + "/sys/devices/pci0000:00/" + name;
    fs::create_directories(base + "/queue");
    write_text(base + "/queue/rotational", rot);
    auto target = base;
    if (part) {
      target = base + "/" + name + "p1";
      fs::create_directories(target);
      write_text(target + "/partition", "1\n");
    }
    fs::create_directories(root + "/sys/dev/block");
    fs::create_symlink(target, root + "/sys/dev/block/" + dev);
  };
  disk("nvme0n1", "259:1", "0\n", true);
  disk("sda", "8:0", "1\n", false);
  disk("sdb", "8:16", "0\n", false);
  disk("vda", "254:0", "1\n", false);  // virtio says rotational, whatever backs it
  auto nvme = classify_block_device(root, 259, 1);
  EXPECT_EQ(nvme.name, "nvme0n1");
  EXPECT_EQ(nvme.kind, disk_class::nvme);
  EXPECT_EQ(classify_block_device(root, 8, 0).kind, disk_class::hdd);
  EXPECT_EQ(classify_block_device(root, 8, 16).kind, disk_class::ssd);
  EXPECT_EQ(classify_block_device(root, 254, 0).kind, disk_class::virtual_disk);
  EXPECT_EQ(classify_block_device(root, 9, 9).kind, disk_class::unknown);
}

TEST(DiskRun, UsesFioWhereInstalledAndCleansUp) {
  temp_dir dir;
  ::setenv("ASTRAEUS_FIO_OUTPUT",
           (std::string{ASTRAEUS_FIXTURES} + "/checks/fio/vda-ext4.json").c_str(), 1);
  check_options o;
  o.data_dir = dir.path();
  o.fio = std::string{ASTRAEUS_FIXTURES} + "/checks/fio/fio.sh";
  auto r = run_disk(o);
  ASSERT_EQ(r.measurements.size(), 3u) << to_json_line(r);
  EXPECT_NEAR(r.measurements[0].value, 322.6, 0.1);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(DiskRun, AMissingDataDirectoryFails) {
  check_options o;
  o.data_dir = "/nonexistent/astraeus";
  auto r = run_disk(o);
  EXPECT_EQ(r.result, verdict::fail);
  EXPECT_EQ(r.summary, "1 finding: the data directory /nonexistent/astraeus does not exist");
}

}  // namespace
}  // namespace astraeus::validation
