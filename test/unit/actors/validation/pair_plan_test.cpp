// Issue 12, the pairs (actors/validation/pair_plan.hpp, pair_matrix.hpp):
// the round schedule for n = 2..16, the pair steps and their runs, the rails
// two machines share, the judgement against the best pair, the Cluster
// Report's PAIRS column and matrix as `astra astraeus report` prints them,
// and the degraded ports NCCL_IB_HCA leaves out (ib_port_exclusions.hpp).

#include "actors/validation/pair_plan.hpp"

#include <set>

#include <gtest/gtest.h>

#include "actors/validation/all_reduce_plan.hpp"
#include "actors/validation/cluster_report.hpp"
#include "actors/validation/ib_port_exclusions.hpp"
#include "actors/validation/pair_matrix.hpp"
#include "actors/validation/validation_plan.hpp"
#include "bin/validation_format.hpp"
#include "unit/actors/validation/fabric_fixtures.hpp"

using namespace astraeus;
using namespace astraeus::validation;

namespace {

/// A machine of pool h100 with 8 Active 400 Gb/s InfiniBand ports; `slow`
/// names one trained at 200 Gb/s (the seed's gpu-06 mlx5_5).
v1::MachineView machine(const std::string& name, const std::string& slow = {}) {
  return test::ib_machine(name, slow);
}

/// The network suite over `machines`, its pair steps alone (the all-reduce
/// steps that follow them are all_reduce_plan_test.cpp's).
v1::Validation network_of(std::vector<std::string> machines) {
  v1::StartValidation start;
  start.set_suite("network");
  start.set_pool("h100");
  auto v = make_validation("val-20261006-7f3a2c", start, machines, "on-demand", 0);
  while (v.steps_size() > 0 && is_all_reduce(v.steps(v.steps_size() - 1)))
    v.mutable_steps()->RemoveLast();
  return v;
}

/// A pair step Done as `astraeus-check pair` would leave it: every shared
/// rail at `gbps`, a rail trained at 200 at 195.3, rail `slow` at 300.
void finish_pair(v1::ValidationStep& s, const v1::MachineView& a, const v1::MachineView& b,
                 double gbps = 391.2, const std::string& slow = {}) {
  check_result r;
  r.check = "pair";
  for (const auto& rail : shared_rails(a, b))
    judge_rail(r, rail, rail.rate_gbps < 400 ? 195.3 : rail.device == slow ? 300.0 : gbps,
               thresholds{});
  s.set_state(done);
  s.set_verdict(to_string(r.result));
  auto* out = s.mutable_result();
  out->set_check("pair");
  out->set_verdict(to_string(r.result));
  for (const auto& m : r.measurements) {
    auto* cm = out->add_measurements();
    cm->set_name(m.name);
    cm->set_gpu(m.gpu);
    cm->set_value(m.value);
    cm->set_unit(m.unit);
    cm->set_verdict(to_string(m.result));
  }
}

} // namespace

TEST(PairRounds, EveryPairOnceInDisjointRoundsForTwoToSixteenMachines) {
  EXPECT_TRUE(pair_rounds(0).empty());
  EXPECT_TRUE(pair_rounds(1).empty());
  for (int n = 2; n <= 16; ++n) {
    auto rounds = pair_rounds(n);
    // Even n: n-1 rounds; odd n: n rounds, each machine sitting one out.
    EXPECT_EQ(static_cast<int>(rounds.size()), n % 2 == 0 ? n - 1 : n) << n;
    std::set<std::pair<int, int>> seen;
    for (const auto& round : rounds) {
      EXPECT_EQ(static_cast<int>(round.size()), n / 2) << n;
      std::set<int> busy;
      for (const auto& [a, b] : round) {
        EXPECT_LT(a, b);
        EXPECT_GE(a, 0);
        EXPECT_LT(b, n);
        EXPECT_TRUE(busy.insert(a).second && busy.insert(b).second)
          << "n=" << n << ": a machine twice in one round";
        EXPECT_TRUE(seen.insert({a, b}).second) << "n=" << n << ": pair " << a << "-" << b;
      }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), n * (n - 1) / 2) << n;
  }
}

TEST(PairPlan, NetworkSuiteIsThePairsAloneAcceptanceEndsWithThem) {
  EXPECT_TRUE(known_suite("network"));
  EXPECT_FALSE(known_suite("pairs"));
  auto v = network_of({"gpu-01", "gpu-02", "gpu-03", "gpu-04"});
  ASSERT_EQ(v.steps_size(), 6);
  v1::StartValidation network;
  network.set_suite("network");
  EXPECT_EQ(make_validation("val-x", network, {"a", "b", "c", "d"}, "on-demand", 0).steps_size(),
            8)
    << "6 pairs, then the all-reduce over 2 and over 4";
  EXPECT_EQ(v.steps(0).check(), "pair");
  EXPECT_EQ(v.steps(0).round(), 0u);
  EXPECT_EQ(v.steps(5).round(), 2u);
  EXPECT_EQ(startable_pairs(v), (std::vector<int>{0, 1})) << "round 0: two disjoint pairs";
  EXPECT_FALSE(next_step(v, "gpu-01")) << "pairs start by round, not per machine";

  v1::StartValidation start;
  start.set_suite("acceptance");
  auto a = make_validation("val-x", start, {"gpu-01", "gpu-02"}, "on-demand", 0);
  ASSERT_EQ(a.steps_size(), 12) << "10 checks, the pair, the all-reduce";
  EXPECT_EQ(a.steps(10).machine(), "gpu-01");
  EXPECT_EQ(a.steps(10).peer(), "gpu-02");
  EXPECT_TRUE(startable_pairs(a).empty()) << "the machines' own checks come first";
  for (int i = 0; i < 10; ++i)
    a.mutable_steps(i)->set_state(done);
  EXPECT_EQ(startable_pairs(a), (std::vector<int>{10}));
}

TEST(PairPlan, RoundsRunOneAfterAnother) {
  auto v = network_of({"gpu-01", "gpu-02", "gpu-03", "gpu-04"});
  v.mutable_steps(0)->set_state(running);
  EXPECT_EQ(startable_pairs(v), (std::vector<int>{1}));
  EXPECT_TRUE(has_running(v, v.steps(0).peer())) << "the client's machine is busy too";
  v.mutable_steps(0)->set_state(done);
  v.mutable_steps(1)->set_state(failed);
  EXPECT_EQ(startable_pairs(v), (std::vector<int>{2, 3}));
}

TEST(PairPlan, RailsAreTheSameDeviceActiveOnBothAtTheSlowerEndsRate) {
  auto a = machine("gpu-03");
  auto b = machine("gpu-06", "mlx5_5");
  (*b.mutable_facts()->mutable_rdma_ports())[7].set_state("DOWN");  // mlx5_11
  auto rails = shared_rails(a, b);
  ASSERT_EQ(rails.size(), 7u);
  EXPECT_EQ(rails[0].device, "mlx5_0");
  EXPECT_EQ(format_pair_rails(rails),
            "mlx5_0:1:400,mlx5_10:1:400,mlx5_3:1:400,mlx5_4:1:400,mlx5_5:1:200,mlx5_6:1:400,"
            "mlx5_9:1:400");
}

TEST(PairPlan, TheServerAndClientRunsOfAPair) {
  auto v = network_of({"gpu-03", "gpu-06"});
  v.mutable_steps(0)->set_attempts(1);
  std::vector<pair_rail> rails{{"mlx5_0", 1, 400}};
  auto server = pair_spec(v, 0, true, rails, "10.0.0.3", "astraeus-check");
  auto client = pair_spec(v, 0, false, rails, "10.0.0.3", "astraeus-check");
  EXPECT_EQ(server.name(), "val-20261006-7f3a2c-gpu-03-gpu-06-1-s");
  EXPECT_EQ(client.name(), "val-20261006-7f3a2c-gpu-03-gpu-06-1-c");
  EXPECT_EQ(server.labels().at("astraeus.io/machine"), "gpu-03");
  EXPECT_EQ(client.labels().at("astraeus.io/machine"), "gpu-06");
  EXPECT_EQ(std::vector<std::string>(client.command().begin(), client.command().end()),
            (std::vector<std::string>{"astraeus-check", "pair", "--json", "--role", "client",
                                      "--rails", "mlx5_0:1:400", "--peer", "10.0.0.3"}));
  EXPECT_EQ(server.gpus_per_worker(), 0u);
  EXPECT_EQ(server.priority(), -1000);
  EXPECT_TRUE(client.result_line());
  // After a controller restart both ends' runs went on: the pair is waited
  // for, holding both machines (a new-user trial saw a check run again).
  v.mutable_steps(0)->set_state(running);
  v.mutable_steps(0)->set_run(client.name());
  EXPECT_TRUE(resume(v).empty());
  EXPECT_EQ(v.steps(0).state(), running);
  EXPECT_EQ(held_machines(v), (std::vector<std::string>{"gpu-03", "gpu-06"}));
}

// Each rail against the best pair on it, relative to the rail's trained
// rate: gpu-06's mlx5_5 at 200 Gb/s runs at its pace (the topology finding
// names it), its mlx5_3 at 300 of 400 Gb/s does not.
TEST(PairPlan, ARailIsJudgedAgainstTheBestPairOnItAtItsTrainedRate) {
  std::vector<v1::MachineView> ms{machine("gpu-03"), machine("gpu-04"), machine("gpu-05"),
                                  machine("gpu-06", "mlx5_5")};
  auto v = network_of({"gpu-03", "gpu-04", "gpu-05", "gpu-06"});
  auto view = [&](const std::string& n) {
    for (const auto& m : ms)
      if (m.name() == n)
        return m;
    return v1::MachineView{};
  };
  auto finish = [&](v1::ValidationStep& s) {
    bool six = s.machine() == "gpu-06" || s.peer() == "gpu-06";
    finish_pair(s, view(s.machine()), view(s.peer()), 391.2, six ? "mlx5_3" : "");
  };
  for (int i = 0; i + 1 < v.steps_size(); ++i)
    finish(*v.mutable_steps(i));
  EXPECT_TRUE(judge_pairs(v, thresholds{}).empty()) << "not before every pair is finished";
  finish(*v.mutable_steps(v.steps_size() - 1));
  auto changed = judge_pairs(v, thresholds{});
  ASSERT_EQ(changed.size(), 3u) << "the three pairs with gpu-06";
  const auto& s = v.steps(changed[0]);
  EXPECT_EQ(s.verdict(), "warn");
  ASSERT_EQ(s.result().findings_size(), 1) << "mlx5_3 only: mlx5_5 runs at its trained rate";
  EXPECT_EQ(s.result().findings(0).what(),
            pair_label(s) + " mlx5_3 at 77% of the best pair on that rail (300.0 of 391.2 Gb/s)");
  EXPECT_TRUE(judge_pairs(v, thresholds{}).empty()) << "judged once";
  EXPECT_EQ(machine_verdict(v, "gpu-06"), "warn");
  EXPECT_EQ(machine_verdict(v, "gpu-03"), "pass")
    << "one of gpu-03's three pairs warns: gpu-06 is what the bad pairs share";
  EXPECT_EQ(machine_pairs_verdict({"warn"}), "warn") << "two machines: both";
  EXPECT_EQ(machine_pairs_verdict({"fail", "warn", "pass"}), "fail");
  EXPECT_EQ(machine_pairs_verdict({"skipped", "skipped"}), "skipped");
}

// The seed's step 4, over four machines: the PAIRS column, the weakest pair
// in the summary, the matrix, and What to fix.
TEST(PairReport, TheReportShowsThePairsColumnMatrixAndWeakestPair) {
  std::vector<v1::MachineView> ms{machine("gpu-03"), machine("gpu-04"), machine("gpu-05"),
                                  machine("gpu-06", "mlx5_5")};
  v1::MachineList list;
  for (const auto& m : ms)
    *list.add_machines() = m;
  auto v = network_of({"gpu-03", "gpu-04", "gpu-05", "gpu-06"});
  for (int i = 0; i < v.steps_size(); ++i) {
    const auto& s = v.steps(i);
    auto a = std::find_if(ms.begin(), ms.end(), [&](auto& m) { return m.name() == s.machine(); });
    auto b = std::find_if(ms.begin(), ms.end(), [&](auto& m) { return m.name() == s.peer(); });
    finish_pair(*v.mutable_steps(i), *a, *b, s.machine() == "gpu-04" ? 380.0 : 391.2);
  }
  judge_pairs(v, thresholds{});
  latest_map latest;
  for (const auto& s : v.steps())
    latest[latest_key(s)] = s;
  auto report = build_report(list, latest, "h100", 0);
  ASSERT_EQ(report.pairs_size(), 6 * 8);
  EXPECT_EQ(report.rows(0).pairs(), "pass");
  EXPECT_EQ(report.rows(3).pairs(), "pass") << "at its trained rate: the seed's gpu-06";
  EXPECT_EQ(report.rows(3).verdict(), "warn") << "the topology finding";
  // The seed's shape: gpu-06's port trained at 200 Gb/s is its VERDICT's
  // warn, its pairs run at that pace (PAIRS pass), and the weakest pair is
  // named; gpu-04's pairs run a little slower (380 Gb/s a rail).
  EXPECT_EQ(cli::format_report(report), R"(3/4 machines pass; gpu-06 mlx5_5 trained at 200 Gb/s, its peers at 400 Gb/s: every collective over rail 5 runs at that pace; pair gpu-04–gpu-06 at 91% of the best pair.

MACHINE  STATE  VERDICT  QUICK  DCGM  BURN  COPIES  DISK  PAIRS  ALL-REDUCE
gpu-03   Ready  pass     —      —     —     —       —     pass   —
gpu-04   Ready  pass     —      —     —     —       —     pass   —
gpu-05   Ready  pass     —      —     —     —       —     pass   —
gpu-06   Ready  warn     —      —     —     —       —     pass   —

What to fix (1)
! gpu-06 mlx5_5 trained at 200 Gb/s, its peers at 400 Gb/s: every collective over rail 5 runs at that pace
  fix: Reseat or replace the cable and transceiver of gpu-06 mlx5_5 (`mlxlink -d mlx5_5 -m` shows the link's speed and errors); until then NCCL_IB_HCA can leave the port out.

Pairs: % of the best pair (3129.6 Gb/s over 8 rails)
       gpu-03 gpu-04 gpu-05 gpu-06
gpu-03      ·   100%   100%    94%
gpu-04   100%      ·    97%    91%
gpu-05   100%    97%      ·    94%
gpu-06    94%    91%    94%      ·
(~ a rail warns, ! a rail fails; What to fix names them)
)");
  auto html = cli::format_report_html(report, "Cluster Report");
  EXPECT_NE(html.find("<table class=\"pairs\">"), std::string::npos);
  EXPECT_NE(html.find("background:hsl(120,70%,80%)"), std::string::npos) << "the best pair";
}

// A machine whose pairs were all skipped (no perftest on either end) was
// measured by nothing: its VERDICT is "skipped" and it does not count as
// passing (a user trial found it counted as a pass).
TEST(PairReport, AMachineWhosePairsWereAllSkippedIsNotCountedAsPassing) {
  std::vector<v1::MachineView> ms{machine("gpu-03"), machine("gpu-04")};
  v1::MachineList list;
  for (const auto& m : ms)
    *list.add_machines() = m;
  auto v = network_of({"gpu-03", "gpu-04"});
  ASSERT_EQ(v.steps_size(), 1);
  auto& s = *v.mutable_steps(0);
  s.set_state(done);
  s.set_verdict("skipped");
  s.mutable_result()->set_check("pair");
  s.mutable_result()->set_verdict("skipped");
  s.mutable_result()->set_summary("ib_write_bw is not installed");
  latest_map latest;
  latest[latest_key(s)] = s;
  auto report = build_report(list, latest, "h100", 0);
  ASSERT_EQ(report.rows_size(), 2);
  EXPECT_EQ(report.rows(0).pairs(), "skipped");
  EXPECT_EQ(report.rows(0).verdict(), "skipped");
  EXPECT_EQ(report.passing(), 0u);
  EXPECT_EQ(cli::format_report(report).rfind("0/2 machines pass", 0), 0u)
    << cli::format_report(report);
  // The summary says the pairs were not measured and why (a re-check found
  // the report silent about it: no matrix, nothing in What to fix).
  EXPECT_NE(report.summary().find("; the pairs were not measured (ib_write_bw is not installed)"),
            std::string::npos)
    << report.summary();
}

// Every all-reduce group skipped: no curve of empty columns, one line why.
TEST(AllReduceCurve, NoGroupMeasuredIsOneLineNotAnEmptyCurve) {
  std::vector<v1::AllReducePoint> points(2);
  points[0].set_machines(2);
  points[0].set_verdict("skipped");
  points[0].set_note("the group shares no Active rail");
  points[1].set_machines(3);
  points[1].set_verdict("skipped");
  EXPECT_EQ(all_reduce_curve_text(points),
            "All-reduce: not measured (2 machines: skipped: the group shares no Active "
            "rail; 3 machines: skipped)\n");
  EXPECT_EQ(all_reduce_curve_html(points).rfind("<p>All-reduce: not measured", 0), 0u);
}

// Issue 12: the seed's gpu-06 mlx5_5 at 200 Gb/s and a port down while its
// peers are up are left out of their machine's NCCL_IB_HCA; a machine every
// port of which is degraded keeps them; a pool whose policy says no keeps
// every port.
TEST(IbPortExclusions, APortBelowItsPeersOrDownIsLeftOutUnlessNoneWouldBeLeft) {
  v1::MachineList list;
  for (auto* n : {"gpu-03", "gpu-04", "gpu-05"})
    *list.add_machines() = machine(n);
  *list.add_machines() = machine("gpu-06", "mlx5_5");
  auto& down = *list.mutable_machines(2)->mutable_facts()->mutable_rdma_ports(5);  // mlx5_9
  down.set_state("DOWN");
  down.set_phys_state("Polling");
  auto all_slow = machine("gpu-07");
  for (auto& p : *all_slow.mutable_facts()->mutable_rdma_ports())
    p.set_rate_gbps(200);
  *list.add_machines() = all_slow;
  auto got = ib_port_exclusions(list, {}, {});
  ASSERT_EQ(got.machines_size(), 3) << got.ShortDebugString();
  EXPECT_EQ(got.machines(0).machine(), "gpu-05");
  ASSERT_EQ(got.machines(0).ports_size(), 1);
  EXPECT_EQ(got.machines(0).ports(0).port(), "mlx5_9:1");
  EXPECT_FALSE(got.machines(0).ports(0).kept());
  EXPECT_EQ(got.machines(0).ports(0).why(),
            "gpu-05 mlx5_9 is DOWN (Polling), its peers are Active: rail 9 has no link on gpu-05");
  const auto& six = got.machines(1);
  EXPECT_EQ(six.machine(), "gpu-06");
  ASSERT_EQ(six.ports_size(), 1);
  EXPECT_EQ(six.ports(0).port(), "mlx5_5:1");
  EXPECT_EQ(six.ports(0).why(), "gpu-06 mlx5_5 trained at 200 Gb/s, its peers at 400 Gb/s: every "
                                "collective over rail 5 runs at that pace");
  EXPECT_FALSE(six.ports(0).kept());
  const auto& seven = got.machines(2);
  EXPECT_EQ(seven.machine(), "gpu-07");
  ASSERT_EQ(seven.ports_size(), 8);
  for (const auto& p : seven.ports())
    EXPECT_TRUE(p.kept()) << p.port() << ": leaving all eight out would leave none";

  std::map<std::string, v1::ValidationPolicy> policies;
  policies["h100"].set_pool("h100");
  EXPECT_EQ(ib_port_exclusions(list, {}, policies).machines_size(), 3)
    << "a policy that does not say: on";
  policies["h100"].set_exclude_degraded_ports(false);
  EXPECT_EQ(ib_port_exclusions(list, {}, policies).machines_size(), 0);
}

// A device most of whose pairs fail is left out of its machine's NCCL_IB_HCA
// (every port of it); its peers, one bad pair each, keep theirs.
TEST(IbPortExclusions, ADeviceMostOfWhosePairsFailIsLeftOut) {
  std::vector<v1::MachineView> ms{machine("gpu-03"), machine("gpu-04"), machine("gpu-05"),
                                  machine("gpu-06")};
  v1::MachineList list;
  for (const auto& m : ms)
    *list.add_machines() = m;
  auto v = network_of({"gpu-03", "gpu-04", "gpu-05", "gpu-06"});
  for (int i = 0; i < v.steps_size(); ++i) {
    auto& s = *v.mutable_steps(i);
    auto a = std::find_if(ms.begin(), ms.end(), [&](auto& m) { return m.name() == s.machine(); });
    auto b = std::find_if(ms.begin(), ms.end(), [&](auto& m) { return m.name() == s.peer(); });
    finish_pair(s, *a, *b);
    if (s.machine() != "gpu-04" && s.peer() != "gpu-04")
      continue;
    for (auto& m : *s.mutable_result()->mutable_measurements())
      if (m.name() == "write_bw" && m.gpu() == "mlx5_3") {
        m.set_value(96.0);
        m.set_verdict("fail");
      }
  }
  latest_map latest;
  for (const auto& s : v.steps())
    latest[latest_key(s)] = s;
  auto got = ib_port_exclusions(list, latest, {});
  ASSERT_EQ(got.machines_size(), 1) << got.ShortDebugString();
  EXPECT_EQ(got.machines(0).machine(), "gpu-04");
  ASSERT_EQ(got.machines(0).ports_size(), 1);
  EXPECT_EQ(got.machines(0).ports(0).port(), "mlx5_3");
  EXPECT_EQ(got.machines(0).ports(0).why(), "gpu-04 mlx5_3: 3 of its 3 pairs on that rail fail");
}
