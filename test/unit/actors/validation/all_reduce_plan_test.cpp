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
#include "runtime/validation/all_reduce_check.hpp"
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
  EXPECT_NE(garbage.findings(0).fix().find("astraeus-check allreduce"), std::string::npos);
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

// The steps (issue 12): acceptance and network add one all-reduce step per
// group after the pairs (the first k machines, in rank order); they start
// one at a time, smallest first, once every other step is finished.
TEST(AllReducePlan, TheGroupsRunAfterThePairsOneAtATimeSmallestFirst) {
  v1::StartValidation start;
  start.set_suite("network");
  auto v = make_validation("val-20261203-00ab12", start, {"gpu-01", "gpu-02", "gpu-03"},
                           "on-demand", 0);
  std::vector<int> groups;
  for (int i = 0; i < v.steps_size(); ++i)
    if (is_all_reduce(v.steps(i)))
      groups.push_back(i);
  ASSERT_EQ(groups.size(), 2u) << "groups of 2 and of all 3";
  EXPECT_EQ(groups.front(), 3) << "after the 3 pairs";
  EXPECT_EQ(v.steps(3).group_machines_size(), 2);
  EXPECT_EQ(v.steps(4).group_machines(2), "gpu-03");
  EXPECT_EQ(latest_key(v.steps(4)), (std::pair<std::string, std::string>{"gpu-01", "allreduce/3"}));
  EXPECT_FALSE(startable_all_reduce(v)) << "the pairs are not finished";
  EXPECT_FALSE(next_step(v, "gpu-01")) << "an all-reduce is no machine step";
  for (int i = 0; i < 3; ++i)
    v.mutable_steps(i)->set_state(done);
  ASSERT_EQ(startable_all_reduce(v), std::optional<int>{3});
  v.mutable_steps(3)->set_state(running);
  EXPECT_FALSE(startable_all_reduce(v)) << "the groups overlap: one at a time";
  EXPECT_TRUE(has_running(v, "gpu-02")) << "a group holds every machine of it";
  EXPECT_FALSE(has_running(v, "gpu-03"));
  EXPECT_EQ(machine_verdict(v, "gpu-01"), "") << "gpu-01's all-reduce is not finished";
  v.mutable_steps(3)->set_state(done);
  v.mutable_steps(3)->set_verdict("pass");
  EXPECT_EQ(startable_all_reduce(v), std::optional<int>{4});
  EXPECT_EQ(all_reduce_joined(v, 4), std::vector<std::string>{"gpu-03"})
    << "the group of 2 passed: gpu-03 joined since";
  v.mutable_steps(3)->set_verdict("warn");
  EXPECT_TRUE(all_reduce_joined(v, 4).empty());

  v1::StartValidation quick;
  quick.set_suite("quick");
  auto q = make_validation("val-20261203-00ab13", quick, {"gpu-01", "gpu-02"}, "on-demand", 0);
  for (const auto& s : q.steps())
    EXPECT_FALSE(is_all_reduce(s)) << "the quick suite has no fabric steps";
}

// Each rank is a run pinned to its machine holding its GPUs: rank 0 listens
// on the root port (its own address), the others name rank 0's address. A
// machine removed ends the group's step and every rank's run.
TEST(AllReducePlan, EachRankRunsOnItsMachineAndTheOthersNameRankZerosAddress) {
  v1::StartValidation start;
  start.set_suite("network");
  auto v = make_validation("val-20261203-00ab12", start, {"gpu-01", "gpu-02"}, "on-demand", 0);
  ASSERT_EQ(v.steps_size(), 2);
  v.mutable_steps(1)->set_attempts(1);
  auto r0 = all_reduce_spec(v, 1, 0, 8, ":18600", "astraeus-check");
  EXPECT_EQ(r0.name(), "val-20261203-00ab12-allreduce-2-1-r0");
  EXPECT_EQ(r0.labels().at("astraeus.io/machine"), "gpu-01");
  EXPECT_EQ(r0.gpus_per_worker(), 8u);
  std::vector<std::string> cmd(r0.command().begin(), r0.command().end());
  EXPECT_EQ(cmd, (std::vector<std::string>{"astraeus-check", "allreduce", "--json", "--rank", "0",
                                           "--ranks", "2", "--root", ":18600", "--gpus", "8"}));
  auto r1 = all_reduce_spec(v, 1, 1, 4, "10.0.0.1:18600", "astraeus-check");
  EXPECT_EQ(r1.labels().at("astraeus.io/machine"), "gpu-02");
  EXPECT_EQ(r1.command(8), "10.0.0.1:18600");
  EXPECT_EQ(r1.priority(), -1000) << "a check gives way to real work";

  v.mutable_steps(0)->set_state(done);
  v.mutable_steps(1)->set_state(running);
  v.mutable_steps(1)->set_run(r1.name());
  std::vector<std::string> runs;
  auto ended = end_removed(v, "gpu-02", 5, runs);
  EXPECT_EQ(ended, std::vector<int>{1});
  EXPECT_EQ(runs, (std::vector<std::string>{r0.name(), r1.name()})) << "every rank's run";
  EXPECT_EQ(v.steps(1).reason(), "machine gpu-02 was removed before the check finished");
}

// astraeus-check allreduce's table is all_reduce_perf's: the reader here
// takes it as it is, and the rows it carries in its result give the same
// judgement (a wrong value fails naming the size; a sweep cut short fails).
TEST(AllReducePlan, TheChecksTableAndItsResultReadAsAllReducePerfs) {
  std::vector<all_reduce_timing> rows;
  for (uint64_t bytes : all_reduce_sizes(8, uint64_t{1} << 30)) {
    all_reduce_timing r;
    r.bytes = bytes;
    r.time_us = 20 + bytes / 1e3 / 180;
    r.algbw_gbs = bytes / 1e3 / r.time_us;
    r.busbw_gbs = all_reduce_busbw(r.algbw_gbs, 16);
    r.in_place_time_us = r.time_us;
    r.in_place_algbw_gbs = r.algbw_gbs;
    r.in_place_busbw_gbs = r.busbw_gbs;
    rows.push_back(r);
  }
  ASSERT_EQ(rows.size(), 28u) << "8 B to 1 GiB, doubling";
  EXPECT_NEAR(all_reduce_busbw(180, 16), 337.5, 1e-9) << "algbw x 2(n-1)/n";
  EXPECT_EQ(all_reduce_busbw(2118, 1), 0) << "one GPU crosses no link (nccl-tests prints 0.00)";
  auto text = format_all_reduce_table(rows, 16, 8, uint64_t{1} << 30);
  auto parsed = parse_all_reduce_perf(text);
  ASSERT_TRUE(parsed) << render_error(parsed.error()) << text;
  ASSERT_EQ(parsed->rows.size(), 28u);
  EXPECT_EQ(parsed->max_bytes, uint64_t{1} << 30);
  EXPECT_EQ(parsed->truncated, "");
  EXPECT_EQ(parsed->rows.back().wrong, 0);
  EXPECT_NEAR(parsed->rows.back().busbw_gbs, rows.back().busbw_gbs, 0.01);
  thresholds t;
  auto from_text = judge_all_reduce(text, {"gpu-01", "gpu-02"}, 360, t);
  EXPECT_EQ(from_text.verdict(), "pass");
  EXPECT_EQ(from_text.summary(), "all-reduce over 2 machines at 93% of expected (336 of 360 GB/s)")
    << "20 us of latency over 1 GiB at 180 GB/s algbw";

  check_result r;
  r.check = "allreduce";
  add_all_reduce_rows(r, rows, uint64_t{1} << 30);
  auto result = parse_result(to_json_line(r), "allreduce");
  ASSERT_TRUE(result) << render_error(result.error());
  auto from_result = judge_all_reduce(all_reduce_output_of(*result), {"gpu-01", "gpu-02"}, 360, t);
  EXPECT_EQ(from_result.summary(), from_text.summary());
  EXPECT_EQ(from_result.measurements_size(), from_text.measurements_size());

  // Rank 0's result as the validation reads it, judged over two machines.
  auto judge_rows = [&](const std::vector<all_reduce_timing>& measured) {
    check_result c;
    c.check = "allreduce";
    add_all_reduce_rows(c, measured, uint64_t{1} << 30);
    auto line = parse_result(to_json_line(c), "allreduce");
    EXPECT_TRUE(line);
    return judge_all_reduce(all_reduce_output_of(*line), {"gpu-01", "gpu-02"}, 360, t);
  };
  rows[20].in_place_wrong = 3;
  auto judged = judge_rows(rows);
  EXPECT_EQ(judged.verdict(), "fail");
  EXPECT_NE(judged.summary().find("3 wrong value(s) at 8 MiB (in-place)"), std::string::npos)
    << judged.summary();

  rows.resize(10);
  auto short_sweep = judge_rows(rows);
  EXPECT_EQ(short_sweep.verdict(), "fail");
  EXPECT_NE(short_sweep.summary().find("stopped at 4 KiB of 1 GiB"), std::string::npos)
    << short_sweep.summary();
  EXPECT_FALSE(all_reduce_output_of(v1::CheckResult{})) << "no size: nothing to judge";
}

// --root as the validation gives it: rank 0 ":PORT", the others "ADDR:PORT".
TEST(AllReducePlan, TheRootIsHostAndPort) {
  auto r0 = parse_root(":18600");
  ASSERT_TRUE(r0);
  EXPECT_EQ(r0->first, "");
  EXPECT_EQ(r0->second, 18600);
  auto v6 = parse_root("[fd00::1]:18600");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->first, "fd00::1");
  EXPECT_FALSE(parse_root("10.0.0.1"));
  EXPECT_NE(render_error(parse_root("10.0.0.1:0").error())
              .find("--root '10.0.0.1:0' has no port from 1 to 65534 (HOST:PORT)"),
            std::string::npos);
}
