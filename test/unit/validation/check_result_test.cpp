// The JSON line astraeus-check prints, as the validation actor reads it.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "runtime/validation/check_result.hpp"

namespace astraeus::validation {
namespace {

check_result sample() {
  check_result r;
  r.check = "copies";
  r.add_measurement({"h2d", "GPU-1", "", 52.1, "GB/s", ">= 48.0", verdict::pass});
  r.add_measurement({"peer", "GPU-1", "GPU-2", 300, "GB/s", ">= 335.0", verdict::fail});
  r.add_finding(verdict::fail, "GPU-1", "GPU-1 peer copies run at 300.0 GB/s", "check NVLink");
  r.summary = "1 finding";
  r.duration_s = 12.34;
  return r;
}

TEST(CheckResult, PrintsTheContractsKeysInOrderOnOneLine) {
  auto line = to_json_line(sample());
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.rfind("{\"check\":\"copies\",\"verdict\":\"fail\",\"summary\":\"1 finding\","
                       "\"measurements\":[{\"name\":\"h2d\",\"gpu\":\"GPU-1\",\"value\":52.1,",
                       0),
            0u)
    << line;
  EXPECT_NE(line.find("\"peer\":\"GPU-2\""), std::string::npos);
  EXPECT_NE(line.find("\"findings\":[{\"severity\":\"fail\",\"gpu\":\"GPU-1\""), std::string::npos);
  EXPECT_NE(line.find("\"duration_s\":12.3}"), std::string::npos) << line;
}

TEST(CheckResult, ReadsBackWhatItPrints) {
  auto r = parse_check_result(to_json_line(sample()));
  ASSERT_TRUE(r) << to_string(r.error());
  EXPECT_EQ(r->check, "copies");
  EXPECT_EQ(r->result, verdict::fail);
  ASSERT_EQ(r->measurements.size(), 2u);
  EXPECT_DOUBLE_EQ(r->measurements[0].value, 52.1);
  EXPECT_EQ(r->measurements[1].peer, "GPU-2");
  ASSERT_EQ(r->findings.size(), 1u);
  EXPECT_EQ(r->findings[0].fix, "check NVLink");
}

TEST(CheckResult, RefusesWhatIsNotAResultNamingWhy) {
  auto r = parse_check_result("{\"check\":\"x\",\"verdict\":\"great\"}");
  ASSERT_FALSE(r);
  EXPECT_NE(to_string(r.error()).find("verdict"), std::string::npos);
  EXPECT_FALSE(parse_check_result("not json"));
  EXPECT_FALSE(parse_check_result("{\"verdict\":\"pass\"}"));
}

TEST(CheckResult, TheWorstVerdictWinsAndOnlyFailExitsOne) {
  EXPECT_EQ(worse(verdict::pass, verdict::warn), verdict::warn);
  EXPECT_EQ(worse(verdict::fail, verdict::warn), verdict::fail);
  EXPECT_EQ(worse(verdict::skipped, verdict::pass), verdict::pass);
  check_result r;
  r.add_finding(verdict::warn, "", "w", "f");
  EXPECT_EQ(r.result, verdict::warn);
  EXPECT_EQ(exit_status(verdict::warn), 0);
  EXPECT_EQ(exit_status(verdict::skipped), 0);
  EXPECT_EQ(exit_status(verdict::fail), 1);
}

TEST(CheckResult, ReadsTheResultLinesARealH200Printed) {
  // test/fixtures/checks/h200/: what quick, copies and burn printed on
  // stdout on a VM with one H200 (driver 580.159.04).
  struct recorded {
    const char* check;
    verdict result;
    const char* figure;  // one measurement, and its value
    double value;
    size_t findings;
  };
  for (const auto& want : {recorded{"quick", verdict::fail, "cdi_spec", 0.0, 1},
                           recorded{"copies", verdict::pass, "h2d", 55.351, 0},
                           recorded{"burn", verdict::pass, "fp32", 55.247, 0}}) {
    SCOPED_TRACE(want.check);
    std::ifstream in(std::string{ASTRAEUS_FIXTURES} + "/checks/h200/" + want.check + ".txt");
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    auto r = parse_check_result(line);
    ASSERT_TRUE(r) << to_string(r.error());
    EXPECT_EQ(r->check, want.check);
    EXPECT_EQ(r->result, want.result);
    EXPECT_EQ(r->findings.size(), want.findings);
    auto m = std::find_if(r->measurements.begin(), r->measurements.end(),
                          [&](const measurement& m) { return m.name == want.figure; });
    ASSERT_NE(m, r->measurements.end());
    EXPECT_DOUBLE_EQ(m->value, want.value);
  }
}

}  // namespace
}  // namespace astraeus::validation
