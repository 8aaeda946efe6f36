// Issue 12, the all-reduce (actors/validation/all_reduce_plan.hpp): the
// growing groups, the expected bus bandwidth from the rails and their trained
// rates, all_reduce_perf's output read from recorded runs (whole, cut short,
// with wrong values, with NCCL's own lines between the rows, an older
// table), the judgement over 2 machines and over 4 with a slow one, and the
// Cluster Report's ALL-REDUCE column, sentence and curve.

#include "actors/validation/all_reduce_plan.hpp"

#include <gtest/gtest.h>

#include "actors/validation/cluster_report.hpp"
#include "actors/validation/pair_matrix.hpp"
#include "actors/validation/validation_plan.hpp"
#include "bin/validation_format.hpp"
#include "messages/error.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "unit/actors/validation/fabric_fixtures.hpp"

using namespace astraeus;
using namespace astraeus::validation;

namespace {

std::string recorded(const std::string& name) {
  return read_small_file(ASTRAEUS_FIXTURES "/checks/nccl-tests/" + name).text;
}

/// A machine of pool h100 with 8 Active 400 Gb/s InfiniBand ports and a
/// RoCE port; `slow` names one trained at 200 Gb/s.
v1::MachineView machine(const std::string& name, const std::string& slow = {}) {
  auto m = test::ib_machine(name, slow);
  auto* roce = m.mutable_facts()->add_rdma_ports();
  roce->set_device("mlx5_bond_0");
  roce->set_port(1);
  roce->set_state("ACTIVE");
  roce->set_link_layer("Ethernet");
  roce->set_rate_gbps(200);
  return m;
}

/// An all-reduce step Done over `group` as the validation would keep it.
v1::ValidationStep step_of(const std::vector<std::string>& group, const v1::CheckResult& r) {
  v1::ValidationStep s;
  s.set_machine(group.front());
  s.set_check(all_reduce_check);
  for (const auto& m : group)
    s.add_group_machines(m);
  s.set_state(done);
  s.set_verdict(r.verdict());
  *s.mutable_result() = r;
  return s;
}

} // namespace

TEST(AllReducePlan, GroupsGrowByPowersOfTwoAndEndWithEveryMachine) {
  EXPECT_TRUE(all_reduce_group_sizes(1).empty());
  EXPECT_EQ(all_reduce_group_sizes(2), (std::vector<int>{2}));
  EXPECT_EQ(all_reduce_group_sizes(4), (std::vector<int>{2, 4}));
  EXPECT_EQ(all_reduce_group_sizes(6), (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(all_reduce_group_sizes(8), (std::vector<int>{2, 4, 8}));
  EXPECT_EQ(all_reduce_group_sizes(12), (std::vector<int>{2, 4, 8, 12}));
}

TEST(AllReducePlan, ExpectedIsTheSharedRailsAtTheirSlowestRate) {
  thresholds t;
  auto a = machine("gpu-01"), b = machine("gpu-02"), c = machine("gpu-03", "mlx5_5");
  // 8 x 400 Gb/s = 400 GB/s, at 0.9: NCCL's 45 GB/s a port. The RoCE port
  // is not one NCCL_IB_HCA takes beside InfiniBand.
  EXPECT_DOUBLE_EQ(expected_all_reduce_gbs({&a, &b}, t), 360);
  EXPECT_DOUBLE_EQ(expected_all_reduce_gbs({&a, &b, &c}, t), (7 * 400 + 200) / 8.0 * 0.9);
  auto d = machine("gpu-04");
  d.mutable_facts()->mutable_rdma_ports(7)->set_state("DOWN");
  EXPECT_DOUBLE_EQ(expected_all_reduce_gbs({&a, &d}, t), 7 * 400 / 8.0 * 0.9)
    << "a rail one machine lacks carries nothing for the group";
  EXPECT_DOUBLE_EQ(expected_all_reduce_gbs({}, t), 0);
}

TEST(AllReducePerf, ReadsTheWholeTableAndSkipsNcclsOwnLines) {
  auto out = parse_all_reduce_perf(recorded("all_reduce_2x8.txt"));
  ASSERT_TRUE(out) << render_error(out.error());
  ASSERT_EQ(out->rows.size(), 31u) << "8 B to 8 GiB by factors of 2";
  EXPECT_EQ(out->rows.front().bytes, 8u);
  EXPECT_EQ(out->rows.back().bytes, 8589934592u);
  EXPECT_DOUBLE_EQ(out->rows.back().busbw_gbs, 342.11);
  EXPECT_DOUBLE_EQ(out->rows.back().in_place_busbw_gbs, 342.80);
  EXPECT_DOUBLE_EQ(out->rows.back().algbw_gbs, 182.46);
  EXPECT_EQ(out->rows.back().wrong, 0);
  EXPECT_EQ(out->max_bytes, 8589934592u);
  ASSERT_TRUE(out->avg_busbw_gbs);
  EXPECT_DOUBLE_EQ(*out->avg_busbw_gbs, 82.3287);
  EXPECT_EQ(out->truncated, "");
}

TEST(AllReducePerf, AnOlderTableAGarbledLineAndNoTableAtAll) {
  // nccl-tests before 2.10: no "root", "error" where "#wrong" is now, and
  // validation off ("N/A").
  const char* old = R"(# nThread 1 nGpus 8 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 validation: 0
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144   float     sum    61.20   17.13   29.98    N/A    60.10   17.45   30.53    N/A
gpu-01:77:91 [3] NCCL WARN NET/IB : Got async event : port error
     2097152        524288   float     sum    93.4x   22.45   39.29    N/A
     2097152        524288   float     sum    93.40   22.45   39.29    N/A    92.80   22.60   39.55    N/A
     4194304       1048576   float     sum   160.11   26.20   45.84    N/A   159.20   26.35   46.11    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 38.52
)";
  auto out = parse_all_reduce_perf(old);
  ASSERT_TRUE(out) << render_error(out.error());
  ASSERT_EQ(out->rows.size(), 3u);
  EXPECT_DOUBLE_EQ(out->rows[1].busbw_gbs, 39.29);
  EXPECT_EQ(out->rows[1].wrong, -1) << "N/A: not checked";
  EXPECT_EQ(out->truncated, "");
  auto none = parse_all_reduce_perf("bash: all_reduce_perf: command not found\n");
  ASSERT_FALSE(none);
  EXPECT_NE(render_error(none.error()).find("no all_reduce_perf table in the output"),
            std::string::npos);
}

TEST(AllReducePerf, OutputCutShortOrAWrongValueFails) {
  thresholds t;
  auto cut = judge_all_reduce(recorded("all_reduce_truncated.txt"), {"gpu-01", "gpu-02"}, 360, t);
  EXPECT_EQ(cut.verdict(), "fail");
  EXPECT_EQ(cut.summary(), "all-reduce over 2 machines: all_reduce_perf's output is cut short: "
                           "stopped at 1 GiB of 8 GiB: the output ends there");
  auto wrong = judge_all_reduce(recorded("all_reduce_wrong.txt"), {"gpu-01", "gpu-02"}, 360, t);
  EXPECT_EQ(wrong.verdict(), "fail");
  ASSERT_EQ(wrong.findings_size(), 1);
  EXPECT_EQ(wrong.findings(0).what(),
            "all-reduce over 2 machines (gpu-01, gpu-02): all_reduce_perf counted 3 wrong "
            "value(s) at 64 MiB (out-of-place): data was corrupted");
  auto garbage = judge_all_reduce("Segmentation fault\n", {"gpu-01", "gpu-02"}, 360, t);
  EXPECT_EQ(garbage.verdict(), "fail");
  EXPECT_NE(garbage.findings(0).fix().find("validation.allreduce.image"), std::string::npos);
}

// Two machines, then four with gpu-03 slow (its mlx5_5 at 200 Gb/s): the
// group of two passes, the group of four warns and names the machines that
// joined, gpu-03 (its topology finding) first; the report shows the column,
// the sentence and the curve.
TEST(AllReducePlan, AGroupWithASlowMachineIsBelowItsExpectedFigureAndNamesIt) {
  thresholds t;
  std::vector<v1::MachineView> ms{machine("gpu-01"), machine("gpu-02"),
                                  machine("gpu-03", "mlx5_5"), machine("gpu-04")};
  double two = expected_all_reduce_gbs({&ms[0], &ms[1]}, t);
  auto pass = judge_all_reduce(recorded("all_reduce_2x8.txt"), {"gpu-01", "gpu-02"}, two, t);
  EXPECT_EQ(pass.verdict(), "pass");
  EXPECT_EQ(pass.summary(), "all-reduce over 2 machines at 95% of expected (343 of 360 GB/s)");
  auto slow = judge_all_reduce(recorded("all_reduce_4x8_slow.txt"),
                               {"gpu-01", "gpu-02", "gpu-03", "gpu-04"}, two, t,
                               {"gpu-03", "gpu-04"}, {"gpu-03"});
  EXPECT_EQ(slow.verdict(), "warn");
  ASSERT_EQ(slow.findings_size(), 1);
  EXPECT_EQ(slow.findings(0).what(),
            "all-reduce over 4 machines at 60% of expected (215 of 360 GB/s) at 8 GiB: gpu-03, "
            "gpu-04 joined since the 2-machine group passed (gpu-03 with a topology finding)");
  t.allreduce_fail_fraction = 0.7;
  EXPECT_EQ(judge_all_reduce(recorded("all_reduce_4x8_slow.txt"), {"a", "b", "c", "d"}, two, t)
              .verdict(),
            "fail");

  latest_map latest;
  for (const auto& s : {step_of({"gpu-01", "gpu-02"}, pass),
                        step_of({"gpu-01", "gpu-02", "gpu-03", "gpu-04"}, slow)})
    latest[latest_key(s)] = s;
  EXPECT_EQ(latest.size(), 2u) << "each group keeps its own latest";
  v1::MachineList list;
  for (const auto& m : ms)
    *list.add_machines() = m;
  auto report = build_report(list, latest, "h100", 0);
  ASSERT_EQ(report.all_reduce_size(), 2);
  EXPECT_EQ(report.all_reduce(0).machines(), 2u);
  EXPECT_DOUBLE_EQ(report.all_reduce(0).busbw_gbs(), 342.80);
  EXPECT_EQ(report.all_reduce(0).curve_size(), 31);
  EXPECT_EQ(report.all_reduce(1).verdict(), "warn");
  EXPECT_EQ(report.rows(0).all_reduce(), "warn") << "the largest group gpu-01 is in";
  EXPECT_EQ(report.rows(2).all_reduce(), "warn");
  EXPECT_EQ(report.summary(),
            "0/4 machines pass; all-reduce over 4 machines at 60% of expected (215 of 360 GB/s) "
            "at 8 GiB: gpu-03, gpu-04 joined since the 2-machine group passed (gpu-03 with a "
            "topology finding); gpu-03 mlx5_5 trained at 200 Gb/s, its peers at 400 Gb/s: every "
            "collective over rail 5 runs at that pace.")
    << "the all-reduce's finding is said once";
  // A group that passes is the summary's last words, as the seed has them.
  latest.erase(latest_key(step_of({"gpu-01", "gpu-02", "gpu-03", "gpu-04"}, slow)));
  EXPECT_NE(build_report(list, latest, "h100", 0)
              .summary()
              .find("; all-reduce over 2 machines at 95% of expected (343 of 360 GB/s)."),
            std::string::npos);
  auto text = cli::format_report(report);
  EXPECT_NE(text.find("All-reduce: bus bandwidth (GB/s) by message size\n"
                      "    SIZE  2 machines  4 machines\n"
                      "   1 MiB         4.9         3.2\n"),
            std::string::npos)
    << text;
  EXPECT_NE(text.find("   8 GiB       342.8       214.7\n"
                      "expected       360.0       360.0\n"
                      " verdict        pass        warn\n"),
            std::string::npos)
    << text;
  EXPECT_NE(text.find("! all-reduce over 4 machines at 60% of expected"), std::string::npos)
    << text;
  auto html = cli::format_report_html(report, "Cluster Report");
  EXPECT_NE(html.find("<table class=\"allreduce\">"), std::string::npos);
  EXPECT_NE(html.find("title=\"gpu-01, gpu-02, gpu-03, gpu-04\""), std::string::npos);
}
