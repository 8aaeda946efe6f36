// The logic of a validation (actors/validation/validation_plan.hpp) and the
// Cluster Report (cluster_report.hpp, bin/validation_format.hpp): what a
// user reads in `astra astraeus validate` and `astra astraeus report`.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include "actors/validation/all_reduce_plan.hpp"
#include "actors/validation/cluster_report.hpp"
#include "actors/validation/pair_plan.hpp"
#include "actors/validation/validation_plan.hpp"
#include "bin/validation_format.hpp"
#include "messages/error.hpp"

using namespace astraeus;
namespace val = astraeus::validation;

namespace {

v1::Validation acceptance_of(std::vector<std::string> machines) {
  v1::StartValidation start;
  start.set_suite("acceptance");
  start.set_pool("h100");
  return val::make_validation("val-20261006-7f3a2c", start, machines, "on-demand", 0);
}

std::string result_json(const std::string& check, const std::string& verdict) {
  return R"({"check":")" + check + R"(","verdict":")" + verdict
         + R"(","summary":"ok","measurements":[],"findings":[],"duration_s":1.5})";
}

v1::Run ended_run(const std::string& result, bool preempted = false) {
  v1::Run run;
  run.set_state(preempted ? "Stopped" : "Stopped");
  run.set_preempted(preempted);
  auto* w = run.add_workers();
  if (!result.empty())
    (*w->mutable_outputs())["astraeus.result"] = result;
  return run;
}

/// `checks` on `machine` passed, as their latest steps.
void add_passes(val::latest_map& latest, const std::string& machine,
                std::initializer_list<const char*> checks) {
  for (auto c : checks) {
    v1::ValidationStep s;
    s.set_machine(machine);
    s.set_check(c);
    s.set_state(val::done);
    s.set_verdict("pass");
    latest[{machine, c}] = s;
  }
}

v1::MachineView machine_view(const std::string& name, v1::Machine::State s = v1::Machine::Up) {
  v1::MachineView m;
  m.set_name(name);
  m.set_state(s);
  (*m.mutable_labels())["pool"] = "h100";
  return m;
}

} // namespace

TEST(ValidationPlan, AcceptanceRunsEveryCheckInOrderOnEachMachine) {
  EXPECT_EQ(val::checks_of("acceptance"),
            (std::vector<std::string>{"quick", "dcgm", "burn", "copies", "disk"}));
  EXPECT_EQ(val::checks_of("copies"), (std::vector<std::string>{"copies"}));
  EXPECT_TRUE(val::checks_of("pairs").empty());
  auto v = acceptance_of({"gpu-01", "gpu-02"});
  ASSERT_EQ(v.steps_size(), 12) << "10 checks, then the pair, then the all-reduce";
  EXPECT_EQ(v.steps(0).machine(), "gpu-01");
  EXPECT_EQ(v.steps(0).check(), "quick");
  EXPECT_EQ(v.steps(5).machine(), "gpu-02");
  EXPECT_EQ(v.state(), "Running");
}

TEST(ValidationPlan, IdsAreDatedWithSixHexDigits) {
  // 2026-10-06T12:00:00Z
  EXPECT_EQ(val::make_id(1791288000000, 0x7f3a2c), "val-20261006-7f3a2c");
}

TEST(ValidationPlan, OneCheckAtATimePerMachine) {
  auto v = acceptance_of({"gpu-01", "gpu-02"});
  auto first = val::next_step(v, "gpu-01");
  ASSERT_TRUE(first);
  v.mutable_steps(*first)->set_state(val::running);
  EXPECT_FALSE(val::next_step(v, "gpu-01")) << "a second check started on a busy machine";
  EXPECT_TRUE(val::next_step(v, "gpu-02")) << "another machine may run its own check";
}

TEST(ValidationPlan, ACheckCommandCarriesItsOptions) {
  auto v = acceptance_of({"gpu-01"});
  v.set_burn_in_seconds(600);
  v.set_dcgm_level(3);
  v.set_data_dir("/mnt/nvme0/astraeus");
  EXPECT_EQ(val::command_of(v, "burn", "astraeus-check"),
            (std::vector<std::string>{"astraeus-check", "burn", "--json", "--duration", "10m"}));
  EXPECT_EQ(val::command_of(v, "dcgm", "/opt/check"),
            (std::vector<std::string>{"/opt/check", "dcgm", "--json", "--level", "3"}));
  EXPECT_EQ(val::command_of(v, "disk", "c").back(), "/mnt/nvme0/astraeus");
  auto spec = val::run_spec(v, 2, 8, "astraeus-check");
  EXPECT_EQ(spec.runtime(), "process");
  EXPECT_EQ(spec.gpus_per_worker(), 8u);
  EXPECT_LT(spec.priority(), 0);
  EXPECT_EQ(spec.validation(), v.id());
  EXPECT_TRUE(spec.result_line());
  EXPECT_EQ(spec.labels().at("astraeus.io/machine"), "gpu-01");
  EXPECT_LE(spec.name().size(), 63u);
}

TEST(ValidationPlan, GarbageResultsFailTheStepNamingWhatWasWrong) {
  auto err = [](const std::string& line, const std::string& check) {
    auto r = val::parse_result(line, check);
    return r ? std::string{"parsed"} : render_error(r.error());
  };
  EXPECT_NE(err("", "copies").find("no result line"), std::string::npos);
  EXPECT_NE(err("Segmentation fault", "copies").find("not a JSON result: 'Segmentation fault'"),
            std::string::npos);
  EXPECT_NE(err("{\"check\": ", "copies").find("not valid JSON"), std::string::npos);
  EXPECT_NE(err(result_json("dcgm", "pass"), "copies").find("for check dcgm, not copies"),
            std::string::npos);
  EXPECT_NE(err(result_json("copies", "great"), "copies").find("verdict 'great'"),
            std::string::npos);
  // Fields the checks add later are ignored.
  auto ok = val::parse_result(
    R"({"check":"copies","verdict":"warn","new_field":1,"measurements":[{"name":"h2d","gpu":"GPU-1","value":52.1,"unit":"GB/s","expected":"≥ 48","verdict":"pass"}]})",
    "copies");
  ASSERT_TRUE(ok) << render_error(ok.error());
  EXPECT_EQ(ok->verdict(), "warn");
  EXPECT_DOUBLE_EQ(ok->measurements(0).value(), 52.1);

  v1::ValidationStep step;
  step.set_machine("gpu-01");
  step.set_check("copies");
  step.set_state(val::running);
  ASSERT_TRUE(val::apply_run(step, ended_run("garbage"), 5));
  EXPECT_EQ(step.state(), val::failed);
  EXPECT_NE(step.reason().find("garbage"), std::string::npos);
}

TEST(ValidationPlan, AStepThatGaveWayIsQueuedAgainNeverFailed) {
  auto v = acceptance_of({"gpu-01"});
  auto burn = 2;
  ASSERT_EQ(v.steps(burn).check(), "burn");
  for (int i = 0; i < burn; ++i) {
    v.mutable_steps(i)->set_state(val::done);
    v.mutable_steps(i)->set_verdict("pass");
  }
  auto& step = *v.mutable_steps(burn);
  step.set_state(val::running);
  v1::Run running;
  running.set_state("Running");
  EXPECT_FALSE(val::apply_run(step, running, 1)) << "a running run is not an end";
  ASSERT_TRUE(val::apply_run(step, ended_run("", true), 2));
  EXPECT_EQ(step.state(), val::yielded);
  EXPECT_EQ(step.yields(), 1u);
  EXPECT_TRUE(step.verdict().empty());
  EXPECT_EQ(val::next_step(v, "gpu-01"), burn) << "the yielded burn-in runs next";
  EXPECT_FALSE(val::finished(v));
}

// A new-user trial: `astra drain` during a burn-in stopped its run; the
// check's last line was a progress line and the step failed as if the check
// program were broken, with a fix to reinstall it. A check the controller
// stopped judged nothing: it is queued again. One that ended by itself with
// garbage is still failed, and one stopped with a good result is judged.
TEST(ValidationPlan, ACheckStoppedByADrainIsQueuedAgainNotFailed) {
  v1::ValidationStep step;
  step.set_machine("gpu-03");
  step.set_check("burn");
  step.set_state(val::running);
  auto drained = ended_run("burn: 8 GPU(s) for 300 s");
  drained.set_waiting_reason("machine gpu-03 was drained");
  ASSERT_TRUE(val::apply_run(step, drained, 5));
  EXPECT_EQ(step.state(), val::yielded);
  EXPECT_TRUE(step.verdict().empty());
  EXPECT_EQ(step.reason(), "its run was stopped (machine gpu-03 was drained) before the check "
                           "ended; queued again");
  step.set_state(val::running);
  auto garbage = ended_run("garbage");
  garbage.set_waiting_reason("completed: every worker exited with code 0");
  ASSERT_TRUE(val::apply_run(step, garbage, 6));
  EXPECT_EQ(step.state(), val::failed);
  step.set_state(val::running);
  auto judged = ended_run(R"({"check":"burn","verdict":"pass"})");
  judged.set_waiting_reason("machine gpu-03 was drained");
  ASSERT_TRUE(val::apply_run(step, judged, 7));
  EXPECT_EQ(step.state(), val::done);
  EXPECT_EQ(step.verdict(), "pass");
}

// A new-user trial: a controller restart (kill -9, an upgrade) deleted a
// burn-in that its agent still ran and ran it from scratch. The checks' runs
// outlive the controller: a step in flight is kept and waited for; only an
// all-reduce (judged against figures kept in memory) runs again.
TEST(ValidationPlan, ARestartKeepsTheChecksInFlightAndRunsOnlyAnAllReduceAgain) {
  auto v = acceptance_of({"gpu-01", "gpu-02"});
  v.mutable_steps(0)->set_state(val::done);
  v.mutable_steps(0)->set_verdict("pass");
  auto* burn = v.mutable_steps(2);
  ASSERT_EQ(burn->check(), "burn");
  burn->set_state(val::running);
  burn->set_attempts(2);
  burn->set_run("val-20261006-7f3a2c-gpu-01-burn-2");
  auto* pair = v.mutable_steps(10);
  ASSERT_TRUE(val::is_pair(*pair));
  pair->set_state(val::running);
  pair->set_attempts(1);
  pair->set_run("val-20261006-7f3a2c-gpu-01-gpu-02-1-c");
  auto stale = val::resume(v);
  EXPECT_TRUE(stale.empty()) << "no run that went on is removed";
  EXPECT_EQ(v.steps(0).state(), val::done) << "a finished step is not run again";
  EXPECT_EQ(v.steps(2).state(), val::running) << "the burn-in is waited for";
  EXPECT_EQ(v.steps(2).attempts(), 2u);
  EXPECT_EQ(v.steps(2).restarted(),
            "the controller restarted while it ran; its run val-20261006-7f3a2c-gpu-01-burn-2 "
            "went on and was waited for");
  EXPECT_EQ(v.steps(10).state(), val::running);
  EXPECT_EQ(val::next_step(v, "gpu-01"), std::nullopt) << "nothing else starts beside it";
  EXPECT_EQ(val::held_machines(v), (std::vector<std::string>{"gpu-01", "gpu-02"}));

  auto w = acceptance_of({"gpu-01", "gpu-02"});
  auto* all_reduce = w.mutable_steps(11);
  ASSERT_EQ(all_reduce->check(), "allreduce");
  all_reduce->set_state(val::running);
  all_reduce->set_attempts(1);
  all_reduce->set_run(val::all_reduce_run_name(w, 11, 1, 1));
  stale = val::resume(w);
  EXPECT_EQ(stale.size(), 2u) << "both ranks' runs are removed";
  EXPECT_EQ(w.steps(11).state(), val::queued);
  EXPECT_NE(w.steps(11).restarted().find("the controller restarted while it ran: it runs again"),
            std::string::npos)
    << w.steps(11).restarted();
  EXPECT_TRUE(val::held_machines(w).empty());
}

TEST(ValidationPlan, TheVerdictIsTheWorstOfEachMachine) {
  auto v = acceptance_of({"gpu-01", "gpu-02"});
  for (auto& s : *v.mutable_steps()) {
    ASSERT_TRUE(val::apply_run(s, ended_run(result_json(s.check(), "pass")), 9));
  }
  auto* copies = v.mutable_steps(8);  // gpu-02 copies
  ASSERT_EQ(copies->check(), "copies");
  ASSERT_TRUE(val::apply_run(*copies, ended_run(result_json("copies", "fail")), 9));
  ASSERT_TRUE(val::conclude(v, 10));
  EXPECT_EQ(val::machine_verdict(v, "gpu-01"), "pass");
  EXPECT_EQ(val::machine_verdict(v, "gpu-02"), "fail");
  EXPECT_EQ(v.state(), "Failed");
  EXPECT_EQ(cli::format_validation_outcome(v),
            "val-20261006-7f3a2c acceptance Failed (on-demand)\n1/2 machines pass.\n"
            "  gpu-02 copies: fail: ok\n"
            "See `astra astraeus validation val-20261006-7f3a2c` for every step.\n");
}

// Trial: `validate --suite network --wait` said "Passed … 2/2 machines pass"
// when its only step was skipped (no Active RDMA port on a shared rail).
TEST(ValidationPlan, AValidationThatMeasuredNothingIsSkippedWithTheReason) {
  v1::StartValidation start;
  start.set_suite("network");
  start.set_pool("h100");
  auto v = val::make_validation("val-20261006-7f3a2c", start, {"gpu-01", "gpu-02"},
                                "on-demand", 0);
  ASSERT_EQ(v.steps_size(), 2) << "the pair, the all-reduce";
  val::end_skipped(*v.mutable_steps(0),
                   "no RDMA port is Active on the same rail (device and port) of gpu-01 and "
                   "gpu-02",
                   9);
  val::end_skipped(*v.mutable_steps(1),
                   "no RDMA port is Active on the same rail (device and port) of every machine "
                   "of the group (gpu-01, gpu-02)",
                   9);
  ASSERT_TRUE(val::conclude(v, 10));
  EXPECT_EQ(v.state(), "Skipped");
  EXPECT_EQ(v.machines_passed(), 0u);
  EXPECT_EQ(val::machine_verdict(v, "gpu-01"), "skipped") << "no acceptance on nothing";
  EXPECT_EQ(cli::format_validation_outcome(v),
            "val-20261006-7f3a2c network Skipped (on-demand)\nNothing was measured: every "
            "step was skipped (no RDMA port is Active on the same rail (device and port) of "
            "gpu-01 and gpu-02; no RDMA port is Active on the same rail (device and port) of "
            "every machine of the group (gpu-01, gpu-02)).\n");
  // One step measured something: the validation passes, the rest counted as
  // measured only where they were.
  auto a = acceptance_of({"gpu-01"});
  for (auto& s : *a.mutable_steps())
    ASSERT_TRUE(val::apply_run(s, ended_run(result_json(s.check(), s.check() == "quick"
                                                                    ? "pass" : "skipped")), 9));
  ASSERT_TRUE(val::conclude(a, 10));
  EXPECT_EQ(a.state(), "Passed");
  EXPECT_EQ(a.machines_passed(), 1u);
}

// Trial: `validate --data-dir relative` was accepted, and a burn-in of
// 2^64-1 seconds too; refused up front, naming the field.
TEST(ValidationPlan, SettingsAreCheckedBeforeAnythingIsStored) {
  EXPECT_FALSE(val::check_settings(0, ""));
  EXPECT_FALSE(val::check_settings(7 * 86400, "/mnt/nvme0/astraeus"));
  EXPECT_EQ(render_error(val::check_settings(0, "relative")),
            "data_dir 'relative' is not an absolute path (it must start with /)");
  EXPECT_EQ(render_error(val::check_settings(18446744073709551615ull, "")),
            "burn_in_seconds: 18446744073709551615 is too long: at most 604800 (7d)");
}

TEST(ClusterReport, NamesTheSlowGpuWithItsFixAndCountsPassOnly) {
  v1::MachineList machines;
  for (auto n : {"gpu-02", "gpu-01", "gpu-03"})
    *machines.add_machines() = machine_view(n);
  *machines.add_machines() = machine_view("gpu-04", v1::Machine::Accepting);
  val::latest_map latest;
  for (auto m : {"gpu-01", "gpu-02", "gpu-03"})
    add_passes(latest, m, {"quick", "dcgm", "burn", "copies", "disk"});
  auto& slow = latest[{"gpu-03", "copies"}];
  slow.set_verdict("fail");
  auto* f = slow.mutable_result()->add_findings();
  f->set_severity("fail");
  f->set_gpu("GPU-3");
  f->set_what("GPU 3 host-to-device 21.4 GB/s, expected ≥ 48 (PCIe Gen5 x16)");
  f->set_fix("Reseat GPU 3 (its link trained at x8: lspci -vv)");
  auto report = val::build_report(machines, latest, "h100", 0);
  ASSERT_EQ(report.rows_size(), 4);
  EXPECT_EQ(report.rows(0).machine(), "gpu-01");
  EXPECT_EQ(report.rows(2).copies(), "fail");
  EXPECT_EQ(report.rows(2).verdict(), "fail");
  EXPECT_EQ(report.rows(3).state(), "Accepting");
  EXPECT_EQ(report.rows(0).state(), "Ready");
  EXPECT_EQ(report.rows(0).pairs(), "\xE2\x80\x94");
  EXPECT_EQ(report.passing(), 2u);
  EXPECT_EQ(report.summary(),
            "2/4 machines pass; gpu-03 GPU 3 host-to-device 21.4 GB/s, expected ≥ 48 "
            "(PCIe Gen5 x16).");
  auto text = cli::format_report(report);
  EXPECT_NE(text.find("MACHINE  STATE      VERDICT  QUICK  DCGM  BURN  COPIES  DISK  PAIRS  "
                      "ALL-REDUCE"),
            std::string::npos)
    << text;
  EXPECT_NE(text.find("What to fix (1)\n! gpu-03 GPU 3 host-to-device"), std::string::npos);
  EXPECT_NE(text.find("  fix: Reseat GPU 3"), std::string::npos);
  auto html = cli::format_report_html(report, "Cluster Report");
  EXPECT_NE(html.find("<td class=\"fail\">fail</td>"), std::string::npos);
  EXPECT_NE(html.find("fix: Reseat GPU 3"), std::string::npos);
}

// A sixth new-user trial: a quick check that no GPU could be given for (all
// set aside: another machine reported their UUIDs) was told to "check that
// the check program is installed". Its fix is about the GPUs.
TEST(ClusterReport, ACheckThatNoGpuCouldBeGivenForIsFixedAtTheGpus) {
  v1::MachineList machines;
  *machines.add_machines() = machine_view("gpu-08");
  val::latest_map latest;
  v1::ValidationStep s;
  s.set_machine("gpu-08");
  s.set_check("quick");
  s.set_state("Failed");
  s.set_reason("none of gpu-08's 8 GPUs can be had: GPU-0 is set aside (GPU GPU-0 is also "
               "reported by machine gpu-07)");
  latest[{"gpu-08", "quick"}] = s;
  auto report = val::build_report(machines, latest, "", 0);
  ASSERT_EQ(report.findings_size(), 1);
  EXPECT_EQ(report.findings(0).fix(),
            "Fix what keeps gpu-08's GPUs from every run (set aside, Faulty or Foreign: "
            "`astra gpus --machine gpu-08` says which and why), then `astra astraeus validate "
            "--suite quick --machine gpu-08`.");
}

TEST(ClusterReport, AWarningFindingMakesTheMachineWarn) {
  v1::MachineList machines;
  *machines.add_machines() = machine_view("gpu-06");
  val::latest_map latest;
  v1::ValidationStep s;
  s.set_machine("gpu-06");
  s.set_check("quick");
  s.set_state(val::done);
  s.set_verdict("pass");
  auto* f = s.mutable_result()->add_findings();
  f->set_severity("warn");
  f->set_what("gpu-06 PCIe link of GPU 5 at Gen4");
  latest[{"gpu-06", "quick"}] = s;
  auto report = val::build_report(machines, latest, "", 0);
  EXPECT_EQ(report.rows(0).verdict(), "warn");
  EXPECT_EQ(report.passing(), 0u);
  EXPECT_EQ(report.findings(0).what(), "gpu-06 PCIe link of GPU 5 at Gen4")
    << "a finding naming its machine is not named twice";
}

// A new-user trial: "2/8 machines pass" with gpu-06 "Ready pass pass pass
// — — — — —" while its acceptance's burn-in ran and its copies, disk and
// pair waited. A machine being validated is not passing, and says so.
TEST(ClusterReport, AMachineWhoseAcceptanceStillRunsIsBeingValidatedNotPassing) {
  v1::MachineList machines;
  for (const auto* m : {"gpu-05", "gpu-06"})
    *machines.add_machines() = machine_view(m);
  val::latest_map latest;
  add_passes(latest, "gpu-05", {"quick", "dcgm", "burn", "copies", "disk"});
  add_passes(latest, "gpu-06", {"quick", "dcgm"});
  v1::StartValidation start;
  start.set_suite("acceptance");
  start.set_machine("gpu-06");
  auto v = val::make_validation("val-20261006-0c0c06", start, {"gpu-06"}, "installer", 0);
  v.mutable_steps(0)->set_state(val::done);
  v.mutable_steps(0)->set_verdict("pass");
  v.mutable_steps(1)->set_state(val::done);
  v.mutable_steps(1)->set_verdict("pass");
  v.mutable_steps(2)->set_state(val::running);
  std::map<std::string, v1::Validation> validations{{v.id(), v}};
  auto report = val::build_report(machines, latest, "h100", 0, validations);
  ASSERT_EQ(report.rows_size(), 2);
  EXPECT_EQ(report.rows(0).verdict(), "pass");
  const auto& six = report.rows(1);
  EXPECT_EQ(six.state(), "Ready");
  EXPECT_EQ(six.verdict(), "validating");
  EXPECT_EQ(six.quick(), "pass");
  EXPECT_EQ(six.burn(), "running");
  EXPECT_EQ(six.copies(), "queued");
  EXPECT_EQ(six.disk(), "queued");
  EXPECT_EQ(report.passing(), 1u);
  EXPECT_EQ(report.summary(), "1/2 machines pass; 1 being validated (acceptance "
                              "val-20261006-0c0c06 runs on gpu-06).");
  // Once it has ended, the machine's verdict is its checks'.
  v.set_state("Passed");
  validations[v.id()] = v;
  EXPECT_EQ(val::build_report(machines, latest, "h100", 0, validations).rows(1).verdict(),
            "pass");
}

// A new-user trial: a pool's 7-day burn-in printed as "burn-in 10080m".
TEST(ValidationFormat, APolicysBurnInReadsAsItWasGiven) {
  v1::ValidationPolicy p;
  p.set_pool("h100");
  p.set_require_acceptance(true);
  p.set_burn_in_seconds(7 * 86400);
  EXPECT_NE(cli::format_policy(p).find("; burn-in 7d;"), std::string::npos)
    << cli::format_policy(p);
  p.set_burn_in_seconds(5400);
  EXPECT_NE(cli::format_policy(p).find("; burn-in 1h30m;"), std::string::npos)
    << cli::format_policy(p);
}

// Third new-user trial: a drained machine showed Ready, and a machine whose
// acceptance ended Skipped (it takes no work) had nothing to fix.
TEST(ClusterReport, AMachineTakingNoWorkIsNotReadyAndItsEndedAcceptanceIsToFix) {
  v1::MachineList machines;
  auto cordoned = machine_view("gpu-01");
  cordoned.set_cordoned(true);
  auto draining = machine_view("gpu-02");
  draining.set_cordoned(true);
  draining.set_drain_deadline_unix_ms(5'000);
  auto drained = machine_view("gpu-03");
  drained.set_cordoned(true);
  drained.set_drained(true);
  auto accepting = machine_view("gpu-04", v1::Machine::Accepting);
  accepting.set_acceptance_validation("val-20261207-0a1b2c");
  accepting.set_acceptance_ended("ended Skipped without passing");
  for (const auto& m : {cordoned, draining, drained, accepting, machine_view("gpu-05")})
    *machines.add_machines() = m;
  auto report = val::build_report(machines, {}, "", 0);
  ASSERT_EQ(report.rows_size(), 5);
  EXPECT_EQ(report.rows(0).state(), "Cordoned");
  EXPECT_EQ(report.rows(1).state(), "Draining");
  EXPECT_EQ(report.rows(2).state(), "Drained");
  EXPECT_EQ(report.rows(3).state(), "Accepting");
  EXPECT_EQ(report.rows(4).state(), "Ready");
  ASSERT_EQ(report.findings_size(), 1);
  EXPECT_EQ(report.findings(0).machine(), "gpu-04");
  EXPECT_EQ(report.findings(0).what(),
            "gpu-04 takes no work: its acceptance val-20261207-0a1b2c ended Skipped without "
            "passing");
  EXPECT_NE(report.findings(0).fix().find("astra astraeus accept gpu-04 --reason REASON"),
            std::string::npos)
    << report.findings(0).fix();
  EXPECT_NE(cli::format_report(report).find("What to fix (1)"), std::string::npos);
}

// A seventh new-user trial: an acceptance cancelled after its quick check
// and DCGM passed left the Accepting machine's VERDICT "pass" and the
// summary "1/2 machines pass" for a machine that takes no work.
TEST(ClusterReport, AnAcceptingMachineIsNeverCountedAsPassing) {
  v1::MachineList machines;
  auto cancelled = machine_view("gpu-01", v1::Machine::Accepting);
  cancelled.set_acceptance_validation("val-20261207-0c0c01");
  cancelled.set_acceptance_ended("was cancelled by alice");
  *machines.add_machines() = cancelled;
  *machines.add_machines() = machine_view("gpu-02", v1::Machine::Accepting);
  val::latest_map latest;
  add_passes(latest, "gpu-01", {"quick", "dcgm"});
  add_passes(latest, "gpu-02", {"quick", "dcgm", "burn", "copies", "disk"});
  auto report = val::build_report(machines, latest, "", 0);
  ASSERT_EQ(report.rows_size(), 2);
  EXPECT_EQ(report.rows(0).verdict(), "fail") << "it takes no work until accepted";
  EXPECT_EQ(report.passing(), 0u);
  EXPECT_EQ(report.summary().rfind("0/2 machines pass; gpu-01 takes no work: its acceptance "
                                   "val-20261207-0c0c01 was cancelled by alice",
                                   0),
            0u)
    << report.summary();
}

// Issue 20/21, the installer's --accept: one acceptance over a joining
// batch, 2 minutes after its last machine joined (virtual times, Unix ms).
TEST(InstallerBatch, StartsTwoMinutesAfterTheLastMachineOfTheBatch) {
  const int64_t delay = 2 * 60 * 1000;
  const int64_t t0 = 1'790'000'000'000;
  std::vector<val::batch_candidate> batch{{"gpu-02", t0, true}, {"gpu-01", t0 + 5'000, true}};
  EXPECT_TRUE(val::due_batch(batch, t0 + 5'000, delay).empty()) << "not at once";
  EXPECT_TRUE(val::due_batch(batch, t0 + delay, delay).empty())
    << "2 minutes after the first machine is too early: gpu-01 joined 5 s later";
  // A third machine joins before the batch is due: the start moves.
  batch.push_back({"gpu-03", t0 + 90'000, true});
  EXPECT_TRUE(val::due_batch(batch, t0 + 5'000 + delay, delay).empty());
  EXPECT_EQ(val::due_batch(batch, t0 + 90'000 + delay, delay),
            (std::vector<std::string>{"gpu-01", "gpu-02", "gpu-03"}));
  // A machine of the batch that is not Up is left for a later batch.
  batch[0].up = false;
  EXPECT_EQ(val::due_batch(batch, t0 + 90'000 + delay, delay),
            (std::vector<std::string>{"gpu-01", "gpu-03"}));
  EXPECT_TRUE(val::due_batch({}, t0, delay).empty());
  // A delay of 0 starts at once.
  EXPECT_EQ(val::due_batch({{"gpu-04", t0, true}}, t0, 0), (std::vector<std::string>{"gpu-04"}));
}

// A check that needs all of a machine's GPUs runs on those it can have and
// says which it left out and why; with none left it says so (and fails).
TEST(ValidationPlan, ACheckLeavesOutForeignFaultyAndSetAsideGpusAndSaysWhy) {
  auto m = machine_view("gpu-03");
  for (int i = 0; i < 8; ++i)
    m.mutable_facts()->mutable_gpus()->add_gpus()->set_id("GPU-" + std::to_string(i));
  v1::GpuList gpus;
  auto all = val::usable_gpus(m, gpus);
  EXPECT_EQ(all.total, 8u);
  EXPECT_EQ(all.count, 8u);
  EXPECT_EQ(all.note, "");
  auto* g = gpus.add_gpus();
  g->mutable_gpu()->set_id("GPU-2");
  g->set_health("Foreign");
  g->add_health_reasons("7 GiB in use by a process outside Astraeus");
  auto* a = m.add_set_aside_gpus();
  a->set_id("GPU-5");
  a->set_reason("GPU-5 is also reported by machine gpu-02");
  auto some = val::usable_gpus(m, gpus);
  EXPECT_EQ(some.count, 6u);
  EXPECT_EQ(some.note, "runs on 6 of 8 GPUs: GPU-2 is Foreign (7 GiB in use by a process "
                       "outside Astraeus); GPU-5 is set aside (GPU-5 is also reported by "
                       "machine gpu-02)");
  v1::MachineView one = machine_view("gpu-04");
  one.mutable_facts()->mutable_gpus()->add_gpus()->set_id("GPU-0");
  v1::GpuList faulty;
  auto* f = faulty.add_gpus();
  f->mutable_gpu()->set_id("GPU-0");
  f->set_health("Faulty");
  auto none = val::usable_gpus(one, faulty);
  EXPECT_EQ(none.count, 0u);
  EXPECT_EQ(none.note, "none of gpu-04's 1 GPUs can be had: GPU-0 is Faulty");
}

// Issue 20: the disk check tests the machine's data location; the
// validation's own data_dir wins; none chosen: "" (the step is skipped).
TEST(ValidationPlan, TheDiskCheckTestsTheMachinesDataLocation) {
  auto v = acceptance_of({"gpu-01"});
  auto m = machine_view("gpu-01");
  EXPECT_EQ(val::disk_folder(v, m), "");
  m.set_data_location("/mnt/nvme0/astraeus");
  EXPECT_EQ(val::disk_folder(v, m), "/mnt/nvme0/astraeus");
  v.set_data_dir("/scratch");
  EXPECT_EQ(val::disk_folder(v, m), "/scratch");
}

namespace {

/// The last line that check `check` printed on stdout on a real H200 VM
/// (test/fixtures/checks/h200/<check>.txt), as the agent keeps it for the
/// validation: its JSON result line, without the line end.
std::string h200_result_line(const std::string& check) {
  std::ifstream in(std::string{ASTRAEUS_FIXTURES} + "/checks/h200/" + check + ".txt");
  std::string last;
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      last = line;
  return last;
}

/// A step of `check` on the H200 VM, ended with its recorded result.
v1::ValidationStep h200_step(const std::string& check) {
  v1::ValidationStep step;
  step.set_machine("vm");
  step.set_check(check);
  step.set_state(val::running);
  EXPECT_TRUE(val::apply_run(step, ended_run(h200_result_line(check)), 7)) << check;
  return step;
}

} // namespace

TEST(ValidationPlan, TheRealH200ChecksEndWithTheirRecordedVerdicts) {
  // quick failed for the one thing that VM lacked: a CDI spec.
  auto quick = h200_step("quick");
  EXPECT_EQ(quick.state(), val::done) << quick.reason();
  EXPECT_EQ(quick.verdict(), "fail");
  EXPECT_EQ(quick.reason(), "");
  ASSERT_EQ(quick.result().findings_size(), 1);
  const auto& cdi = quick.result().findings(0);
  EXPECT_EQ(cdi.severity(), "fail");
  EXPECT_EQ(cdi.what(), "there is no NVIDIA CDI spec in /etc/cdi or /var/run/cdi");
  EXPECT_EQ(cdi.machine(), "vm");
  EXPECT_EQ(cdi.check(), "quick");
  EXPECT_EQ(quick.result().measurements_size(), 5);

  auto copies = h200_step("copies");
  EXPECT_EQ(copies.state(), val::done) << copies.reason();
  EXPECT_EQ(copies.verdict(), "pass");
  EXPECT_EQ(copies.result().findings_size(), 0);
  ASSERT_GE(copies.result().measurements_size(), 1);
  const auto& h2d = copies.result().measurements(0);
  EXPECT_EQ(h2d.name(), "h2d");
  EXPECT_EQ(h2d.gpu(), "GPU-f07d9499-5517-58bb-0785-0fb1950fb678");
  EXPECT_DOUBLE_EQ(h2d.value(), 55.351);
  EXPECT_EQ(h2d.unit(), "GB/s");

  auto burn = h200_step("burn");
  EXPECT_EQ(burn.state(), val::done) << burn.reason();
  EXPECT_EQ(burn.verdict(), "pass");
  EXPECT_EQ(burn.result().findings_size(), 0);
  ASSERT_EQ(burn.result().measurements_size(), 4);
  const auto& fp32 = burn.result().measurements(3);
  EXPECT_EQ(fp32.name(), "fp32");
  EXPECT_DOUBLE_EQ(fp32.value(), 55.247);
  EXPECT_EQ(fp32.unit(), "TFLOP/s");
  EXPECT_DOUBLE_EQ(burn.result().duration_s(), 45.2);
}

// A new-user trial: the disk check's fix said "astra machine data-location
// MACHINE PATH" (the check on the machine does not know its name); the
// controller names the machine.
TEST(ValidationPlan, AFindingsFixNamesTheMachine) {
  v1::ValidationStep step;
  step.set_machine("vm");
  step.set_check("disk");
  step.set_state(val::running);
  ASSERT_TRUE(val::apply_run(
    step,
    ended_run(R"({"check":"disk","verdict":"fail","summary":"1 finding","findings":[{"severity":"fail","what":"the data directory /x does not exist","fix":"create it on the machine (mkdir -p /x) or choose another with `astra machine data-location MACHINE PATH`, then run the disk check again"}]})"),
    5));
  ASSERT_EQ(step.result().findings_size(), 1);
  EXPECT_NE(step.result().findings(0).fix().find("`astra machine data-location vm PATH`"),
            std::string::npos)
    << step.result().findings(0).fix();
}
