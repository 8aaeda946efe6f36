// CDI device nodes against the host's and the cdiVersion rules
// (runtime/workers/cdi_host.cpp; issue 18, rule 3), on fixture trees: the
// host's nodes are symbolic links to real character devices (/dev/null is
// 1:3, /dev/zero 1:5, /dev/full 1:7), so no test needs mknod.

#include "runtime/workers/cdi_host.hpp"

#include <filesystem>

#include <gtest/gtest.h>

#include "worker_test_files.hpp"

using namespace astraeus;
using namespace astraeus::test;

namespace {

/// A host root whose /dev has `nodes` (path -> real device it links to).
std::string host_with(const test::temp_dir& dir,
                      const std::vector<std::pair<std::string, std::string>>& nodes) {
  auto root = dir.path() + "/host";
  for (const auto& [path, real] : nodes) {
    fs::create_directories(fs::path{root + path}.parent_path());
    if (real.empty())
      write(root + path, "not a device\n");
    else
      fs::create_symlink(real, root + path);
  }
  return root;
}

oci_device node(const std::string& path, int64_t major, int64_t minor) {
  oci_device d;
  d.path = path;
  d.host_path = path;
  d.major = major;
  d.minor = minor;
  return d;
}

} // namespace

TEST(CdiHost, RequiredAndOptionalNodes) {
  for (const char* p : {"/dev/nvidia0", "/dev/nvidia7", "/dev/nvidiactl", "/dev/nvidia-uvm",
                        "/dev/kfd", "/dev/dri/renderD128"})
    EXPECT_EQ(node_need(p), cdi_node_need::required) << p;
  for (const char* p : {"/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
                        "/dev/nvidia-caps/nvidia-cap1", "/dev/dri/card0"})
    EXPECT_EQ(node_need(p), cdi_node_need::optional) << p;
}

TEST(CdiHost, NodesAreComparedWithTheHostsUnderItsRoot) {
  test::temp_dir dir;
  auto root = host_with(dir, {{"/dev/nvidia0", "/dev/null"},
                              {"/dev/nvidiactl", "/dev/zero"},
                              {"/dev/nvidia-uvm", "/dev/full"},
                              {"/dev/nvidia1", ""}});
  // All there and matching.
  auto ok = check_nodes_against_host(root, {node("/dev/nvidia0", 1, 3),
                                            node("/dev/nvidiactl", 1, 5)});
  EXPECT_EQ(ok.devices.size(), 2u);
  EXPECT_TRUE(ok.missing_required.empty());
  EXPECT_TRUE(ok.stale.empty());
  // A missing optional node is dropped with a warning.
  auto optional = check_nodes_against_host(root, {node("/dev/nvidia0", 1, 3),
                                                  node("/dev/nvidia-uvm-tools", 1, 9)});
  ASSERT_EQ(optional.devices.size(), 1u);
  ASSERT_EQ(optional.warnings.size(), 1u);
  EXPECT_NE(optional.warnings[0].find("/dev/nvidia-uvm-tools is missing"), std::string::npos);
  EXPECT_TRUE(optional.missing_required.empty());
  // A required node missing, or not a character device, is named.
  auto gone = check_nodes_against_host(root, {node("/dev/nvidia3", 195, 3)});
  EXPECT_EQ(gone.missing_required, "/dev/nvidia3");
  EXPECT_FALSE(gone.required_not_char) << "missing";
  auto file = check_nodes_against_host(root, {node("/dev/nvidia1", 195, 1)});
  EXPECT_EQ(file.missing_required, "/dev/nvidia1");
  EXPECT_TRUE(file.required_not_char) << "there, a regular file: not \"missing\"";
  // A stale nvidia-uvm major after a driver reload makes the spec stale.
  auto stale = check_nodes_against_host(root, {node("/dev/nvidia-uvm", 511, 0)});
  EXPECT_EQ(stale.stale, "/dev/nvidia-uvm is 511:0 in the spec, 1:7 on the host");
}

TEST(CdiHost, NodeNumbersAndMinorsAreReadUnderTheRoot) {
  test::temp_dir dir;
  auto root = host_with(dir, {{"/dev/nvidia0", "/dev/null"}, {"/dev/nvidia-uvm", "/dev/full"},
                              {"/dev/sda", "/dev/zero"}});
  EXPECT_EQ(nvidia_node_numbers(root), "/dev/nvidia-uvm 1:7\n/dev/nvidia0 1:3\n");
  fs::create_directories(root + "/proc/driver/nvidia/gpus/0000:3b:00.0");
  write(root + "/proc/driver/nvidia/gpus/0000:3b:00.0/information",
        "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 35\nDevice Minor: \t 2\n");
  EXPECT_EQ(nvidia_device_minor(root, "0000:3b:00.0"), 2);
  EXPECT_EQ(nvidia_device_minor(root, "0000:5e:00.0"), -1);
}

TEST(CdiHost, CdiVersionRulesAreEnforcedNamingTheRule) {
  cdi_spec_features f;
  f.version = "0.4.0";
  f.kind = "nvidia.com/gpu";
  f.device_names = {"0", "all"};
  auto why = cdi_version_problem(f);
  EXPECT_EQ(why, "cdiVersion 0.4.0: device name '0' starts with a digit, which needs "
                 "cdiVersion 0.5.0 or later")
    << why;
  f.version = "0.5.0";
  EXPECT_EQ(cdi_version_problem(f), "");
  f.additional_gids = true;
  EXPECT_NE(cdi_version_problem(f).find("additionalGids, which needs cdiVersion 0.7.0"),
            std::string::npos);
  f.version = "0.7.0";
  EXPECT_EQ(cdi_version_problem(f), "");
  f.version = "0.9.9";
  EXPECT_NE(cdi_version_problem(f).find("not a CDI version"), std::string::npos);
  f.version = "";
  EXPECT_NE(cdi_version_problem(f).find("no cdiVersion"), std::string::npos);
  f.version = "0.6.0";
  f.additional_gids = false;
  f.kind = "";
  EXPECT_NE(cdi_version_problem(f).find("no kind"), std::string::npos);
  f.kind = "amd.com/gpu";
  f.devices_listed = false;
  EXPECT_NE(cdi_version_problem(f).find("no devices"), std::string::npos);
}
