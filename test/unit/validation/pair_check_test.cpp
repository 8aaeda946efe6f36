// The pair check (issue 12): ib_write_bw's recorded outputs, the rails the
// controller gives, and each rail judged against its trained rate.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "messages/error.hpp"
#include "runtime/validation/pair_check.hpp"

namespace astraeus::validation {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string{ASTRAEUS_FIXTURES} + "/checks/perftest/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(IbWriteBw, ReadsTheAverageInGbPerSecond) {
  auto bw = parse_ib_write_bw(fixture("client_ndr_400.txt"));
  ASSERT_TRUE(bw) << render_error(bw.error());
  EXPECT_DOUBLE_EQ(*bw, 391.23);
  bw = parse_ib_write_bw(fixture("client_hdr_200.txt"));
  ASSERT_TRUE(bw);
  EXPECT_DOUBLE_EQ(*bw, 195.27);
}

TEST(IbWriteBw, ConvertsPerftestsMibPerSecond) {
  auto bw = parse_ib_write_bw(fixture("server_mib.txt"));
  ASSERT_TRUE(bw) << render_error(bw.error());
  EXPECT_NEAR(*bw, 391.2, 0.1);  // 46637.42 MiB/s
}

TEST(IbWriteBw, NoResultIsAnErrorNamingWhatWasMissing) {
  for (const auto* name : {"client_refused.txt", "client_no_device.txt"}) {
    auto bw = parse_ib_write_bw(fixture(name));
    ASSERT_FALSE(bw) << name;
    EXPECT_NE(render_error(bw.error()).find("no \"BW average\" result"), std::string::npos);
  }
  auto bw = parse_ib_write_bw(
    " #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]\n-----\n");
  ASSERT_FALSE(bw);
  EXPECT_NE(render_error(bw.error()).find("no figure under \"BW average[Gb/sec]\""),
            std::string::npos);
}

TEST(PairRails, ParsesAndFormatsTheControllersList) {
  auto rails = parse_pair_rails("mlx5_0:1:400,mlx5_5:1:200");
  ASSERT_TRUE(rails) << render_error(rails.error());
  ASSERT_EQ(rails->size(), 2u);
  EXPECT_EQ((*rails)[1].device, "mlx5_5");
  EXPECT_EQ((*rails)[1].port, 1u);
  EXPECT_EQ((*rails)[1].rate_gbps, 200);
  EXPECT_EQ(format_pair_rails(*rails), "mlx5_0:1:400,mlx5_5:1:200");
}

TEST(PairRails, NamesTheMalformedEntry) {
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
         {"", "--rails is empty"},
         {"mlx5_0:1", "'mlx5_0:1' is not device:port:rate"},
         {"mlx5_0:0:400", "'mlx5_0:0:400' has no port number"},
         {"mlx5_0:1:fast", "'mlx5_0:1:fast' has no positive rate"}}) {
    auto rails = parse_pair_rails(text);
    ASSERT_FALSE(rails) << text;
    EXPECT_NE(render_error(rails.error()).find(why), std::string::npos)
      << render_error(rails.error());
  }
}

TEST(PairJudge, ARailIsJudgedAgainstItsTrainedRate) {
  thresholds t;
  check_result r;
  r.check = "pair";
  judge_rail(r, {"mlx5_0", 1, 400}, 391.23, t);
  judge_rail(r, {"mlx5_5", 1, 200}, 195.27, t);  // the slower end trained at 200: at its pace
  EXPECT_EQ(r.result, verdict::pass);
  ASSERT_EQ(r.measurements.size(), 4u);
  EXPECT_EQ(r.measurements[0].name, "write_bw");
  EXPECT_EQ(r.measurements[0].expected, ">= 360 (0.9 x 400 Gb/s trained)");
  EXPECT_EQ(r.measurements[3].name, "rate");
  EXPECT_EQ(r.measurements[3].value, 200);

  check_result slow;
  judge_rail(slow, {"mlx5_3", 1, 400}, 340.0, t);
  EXPECT_EQ(slow.result, verdict::warn);
  ASSERT_EQ(slow.findings.size(), 1u);
  EXPECT_EQ(slow.findings[0].what,
            "mlx5_3 RDMA write 340.0 Gb/s, expected >= 360.0 (0.9 x its 400 Gb/s trained rate)");
  check_result broken;
  judge_rail(broken, {"mlx5_3", 1, 400}, 150.0, t);
  EXPECT_EQ(broken.result, verdict::fail);
}

// Without perftest nothing is measured and no link is to blame: skipped, as
// DCGM's check is without dcgmi, saying how to install it (a ninth trial saw
// both machines' PAIRS fail for a missing program).
TEST(PairCheck, WithoutIbWriteBwItIsSkippedWithTheInstallHint) {
  check_options o;
  o.pair_role = "client";
  o.pair_peer = "10.0.0.1";
  o.pair_rails = "mlx5_0:1:400";
  o.ib_write_bw = "/nonexistent/ib_write_bw";
  auto r = run_pair(o);
  EXPECT_EQ(r.check, "pair");
  EXPECT_EQ(r.result, verdict::skipped);
  EXPECT_TRUE(r.findings.empty());
  EXPECT_NE(r.summary.find("apt install perftest"), std::string::npos) << r.summary;
  EXPECT_EQ(exit_status(r.result), 0);
}

}  // namespace
}  // namespace astraeus::validation
