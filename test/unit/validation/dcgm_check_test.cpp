// The dcgm check: dcgmi's JSON per test and GPU, and no DCGM at all.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "runtime/validation/dcgm_check.hpp"

namespace astraeus::validation {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string{ASTRAEUS_FIXTURES} + "/checks/dcgmi/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(DcgmParse, AFailedAndAWarnedTestBecomeFindingsPerGpu) {
  auto r = parse_dcgm_diag(fixture("diag-r2-memory-fail.json"), 2);
  ASSERT_TRUE(r) << to_string(r.error());
  EXPECT_EQ(r->result, verdict::fail);
  ASSERT_EQ(r->findings.size(), 2u);
  EXPECT_EQ(r->findings[0].gpu, "GPU 1");
  EXPECT_EQ(r->findings[0].severity, verdict::fail);
  EXPECT_EQ(r->findings[0].what,
            "DCGM memory on GPU 1: failed: A memory mismatch was detected on GPU 1, but no error "
            "was reported by CUDA or NVML. (DCGM error 29)");
  EXPECT_EQ(r->findings[1].severity, verdict::warn);
  // Skipped tests are not measurements: 2 software + 2 memory + 2 pcie.
  EXPECT_EQ(r->measurements.size(), 6u);
}

TEST(DcgmParse, ReadsDcgm3sShapeToo) {
  auto r = parse_dcgm_diag("Running...\n" + fixture("diag-r1-v3-pass.json"), 1);
  ASSERT_TRUE(r) << to_string(r.error());
  EXPECT_EQ(r->result, verdict::pass);
  EXPECT_EQ(r->summary, "DCGM diag level 1: 4 tests pass on every GPU");
}

TEST(DcgmParse, TextThatIsNotDiagJsonIsAnError) {
  EXPECT_FALSE(parse_dcgm_diag("Error: unable to connect to host engine", 2));
  EXPECT_FALSE(parse_dcgm_diag("{\"other\": 1}", 2));
}

TEST(DcgmRun, WithoutDcgmiItIsSkippedAndSaysHowToInstall) {
  check_options o;
  o.dcgmi = "/nonexistent/dcgmi";
  auto r = run_dcgm(o);
  EXPECT_EQ(r.result, verdict::skipped);
  EXPECT_NE(r.summary.find("DCGM is not installed"), std::string::npos);
  EXPECT_NE(r.summary.find("not in Debian"), std::string::npos);
  EXPECT_NE(r.summary.find("datacenter-gpu-manager"), std::string::npos);
}

TEST(DcgmRun, RunsDcgmiAndParsesWhatItPrints) {
  ::setenv("ASTRAEUS_DCGMI_OUTPUT",
           (std::string{ASTRAEUS_FIXTURES} + "/checks/dcgmi/diag-r2-memory-fail.json").c_str(), 1);
  ::setenv("ASTRAEUS_DCGMI_EXIT", "226", 1);
  check_options o;
  o.dcgmi = std::string{ASTRAEUS_FIXTURES} + "/checks/dcgmi/dcgmi.sh";
  auto r = run_dcgm(o);
  EXPECT_EQ(r.result, verdict::fail) << to_json_line(r);
  EXPECT_EQ(r.findings.size(), 2u);
  EXPECT_NE(r.findings[0].fix.find("dcgmi diag -r 2"), std::string::npos);
}

}  // namespace
}  // namespace astraeus::validation
