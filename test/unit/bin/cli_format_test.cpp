// What `astra` prints of the typed vocabularies (bin/cli_format.cpp): the
// words users read stay the words, whether a record carries the `*_code`
// twins (this build's writers) or the strings only (older ones).

#include <gtest/gtest.h>

#include <sstream>

#include "bin/cli_format.hpp"
#include "bin/validation_format.hpp"
#include "messages/gpu_health_state.hpp"
#include "messages/gpu_read.hpp"
#include "messages/run_state.hpp"
#include "messages/worker_state.hpp"

using namespace astraeus;

namespace {

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

/// A GPU view as this build writes it (words and twins) and as an older
/// controller wrote it (words only).
std::pair<v1::GpuList, v1::GpuList> gpu_lists(gpu_health health, gpu_read_status status) {
  v1::GpuList typed;
  auto* v = typed.add_gpus();
  v->set_machine("gpu-01");
  v->mutable_gpu()->set_id("GPU-1");
  set_health(*v, health);
  set_read_status(*v->mutable_gpu(), status);
  v->add_health_reasons("the GPU does not answer");
  v1::GpuList words = typed;
  words.mutable_gpus(0)->clear_health_code();
  words.mutable_gpus(0)->mutable_gpu()->clear_status_code();
  return {typed, words};
}

} // namespace

TEST(CliFormat, JsonShowsTheWordsAndNoTwins) {
  auto [typed, words] = gpu_lists(gpu_health::faulty, gpu_read_status::lost);
  EXPECT_EQ(cli::to_json(typed), cli::to_json(words));
  EXPECT_EQ(cli::to_json_compact(typed), cli::to_json_compact(words));
  EXPECT_FALSE(contains(cli::to_json(typed), "_code")) << cli::to_json(typed);
  EXPECT_TRUE(contains(cli::to_json(typed), "\"health\": \"Faulty\""));
  EXPECT_TRUE(contains(cli::to_json(typed), "\"status\": \"lost\""));
  v1::Run run;
  set_state(run, run_state::running);
  set_state(*run.add_workers(), worker_state::oom_killed);
  // (A worker's exit_code, issue 23 item 6, is a field of its own.)
  EXPECT_FALSE(contains(cli::to_json(run), "state_code")) << cli::to_json(run);
  EXPECT_TRUE(contains(cli::to_json(run), "\"state\": \"OOMKilled\""));
}

TEST(CliFormat, AGpuThatDoesNotAnswerSaysSoInItsHealth) {
  for (auto status : {gpu_read_status::unresponsive, gpu_read_status::lost,
                      gpu_read_status::unavailable}) {
    auto [typed, words] = gpu_lists(gpu_health::faulty, status);
    auto want = std::string{"Faulty: the GPU does not answer ("} + to_string(status) + ")";
    EXPECT_TRUE(contains(cli::format_gpu_list(typed, 0), want)) << cli::format_gpu_list(typed, 0);
    EXPECT_EQ(cli::format_gpu_list(typed, 0), cli::format_gpu_list(words, 0));
  }
  auto [typed, words] = gpu_lists(gpu_health::at_risk, gpu_read_status::ok);
  EXPECT_TRUE(contains(cli::format_gpu_list(words, 0), "AtRisk: the GPU does not answer  "))
    << cli::format_gpu_list(words, 0);
  EXPECT_FALSE(contains(cli::format_gpu_list(words, 0), "(ok)"));
}

TEST(CliFormat, AnEndedRunShowsItsReasonFromEitherForm) {
  v1::Run run;
  run.mutable_spec()->set_name("train");
  set_state(run, run_state::failed);
  run.set_waiting_reason("worker train-0 Failed: exited with code 3");
  auto typed = cli::format_run(run, 0);
  EXPECT_TRUE(contains(typed, "State:       Failed\n")) << typed;
  EXPECT_TRUE(contains(typed, "Reason:      worker train-0 Failed")) << typed;
  run.clear_state_code();
  EXPECT_EQ(cli::format_run(run, 0), typed);
}

// `astra gpu show`'s history (issue 13 item 6): one sparkline per series
// over the last hour, a blank for a minute without a report.
TEST(CliFormat, GpuHistoryDrawsTheLastHourAsSparklines) {
  constexpr int64_t now = 1'796'083'200'000;
  v1::GpuHistory h;
  h.set_machine("gpu-01");
  h.set_gpu("GPU-1");
  h.set_retention_seconds(24 * 3600);
  // An old point (before the hour) is not drawn.
  auto* old = h.add_samples();
  old->set_unix_ms(now - 2 * 3600'000);
  old->set_utilization_percent(100);
  // 0 % an hour ago rising to 100 % now; no report in minute 30.
  for (int m = 0; m < 60; ++m) {
    if (m == 30)
      continue;
    auto* s = h.add_samples();
    s->set_unix_ms(now - 3600'000 + m * 60'000 + 1000);
    s->set_utilization_percent(m * 100.0 / 59);
    s->set_temperature_c(50 + m % 2);
    s->set_xid_events(m >= 40 ? 2 : 0);
  }
  auto text = cli::format_gpu_history(h, now);
  EXPECT_TRUE(contains(text, "History: the last hour, one column a minute (24 h kept"));
  EXPECT_TRUE(contains(text, "SERIES"));
  EXPECT_TRUE(contains(text, "utilisation"));
  EXPECT_TRUE(contains(text, "temperature"));
  EXPECT_TRUE(contains(text, "errors"));
  // Series the GPU never reported are left out.
  EXPECT_FALSE(contains(text, "power"));
  // The utilisation line starts at the lowest bar and ends at the highest,
  // with a blank for minute 30.
  auto line_of = [&](const std::string& name) {
    auto at = text.find(name);
    return at == std::string::npos ? std::string{} : text.substr(at, text.find('\n', at) - at);
  };
  auto util = line_of("utilisation");
  EXPECT_TRUE(contains(util, "▁▁▁")) << util;
  EXPECT_TRUE(contains(util, "███")) << util;
  EXPECT_TRUE(contains(util, "▄ ▄") || contains(util, "▄ ▅")) << util;
  EXPECT_TRUE(contains(util, "100 %")) << util;
  EXPECT_TRUE(contains(line_of("temperature"), "51 °C"));
  // The errors went from 0 to 2 in the hour.
  EXPECT_TRUE(contains(line_of("errors"), "▁▁▁▁")) << line_of("errors");
  EXPECT_TRUE(contains(line_of("errors"), "████")) << line_of("errors");
  // Nothing in the last hour: said in words.
  auto quiet = cli::format_gpu_history(h, now + 3 * 3600'000);
  EXPECT_TRUE(contains(quiet, "no report of this GPU in the last hour")) << quiet;
}

// The submission line (issue 13 item 1): the seed's "whoami submitted to
// gpu-east: <console URL>", the cluster only without a console address, and
// a waiting run's reason on a line of its own.
TEST(CliFormat, SubmissionLineEndsInTheRunsConsolePage) {
  v1::Run r;
  r.mutable_spec()->set_name("whoami");
  r.set_state("Placed");
  r.set_console_url("https://console.astralyx.cloud/o/acme/w/vision/jobs/gpu-east/whoami");
  EXPECT_EQ(cli::format_submitted(r, "gpu-east"),
            "whoami submitted to gpu-east: "
            "https://console.astralyx.cloud/o/acme/w/vision/jobs/gpu-east/whoami\n");
  r.clear_console_url();
  EXPECT_EQ(cli::format_submitted(r, "gpu-east"), "whoami submitted to gpu-east\n");
  r.set_state("Waiting");
  r.set_waiting_reason("cannot fit anywhere now: the cluster has no machines");
  EXPECT_EQ(cli::format_submitted(r, "gpu-east"),
            "whoami submitted to gpu-east\n"
            "Waiting (cannot fit anywhere now: the cluster has no machines)\n");
}

// issue 22: `astra run show` names the cores, NUMA nodes and RDMA devices
// each worker got; `-o json` carries assigned_gpu_ids; `astra machine`
// shows CPU use and the NUMA nodes.
TEST(CliFormat, RunShowNamesTheCoresAndDevicesItsWorkersGot) {
  v1::Run run;
  run.mutable_spec()->set_name("train");
  run.mutable_spec()->set_rdma(true);
  set_state(run, run_state::running);
  auto* w = run.add_workers();
  w->set_name("train-0");
  w->set_machine("gpu-01");
  w->add_gpu_ids("GPU-1");
  w->add_assigned_gpu_ids("GPU-1");
  w->set_cpus("0-15");
  w->set_mems("0");
  w->add_rdma_devices("/dev/infiniband/uverbs0");
  w->add_rdma_devices("/dev/infiniband/rdma_cm");
  set_state(*w, worker_state::running);
  auto text = cli::format_run(run, 0);
  EXPECT_TRUE(contains(text, "Cores and devices")) << text;
  EXPECT_TRUE(contains(text, "0-15")) << text;
  EXPECT_TRUE(contains(text, "/dev/infiniband/uverbs0,/dev/infiniband/rdma_cm")) << text;
  EXPECT_TRUE(contains(text, ", RDMA devices")) << text;
  EXPECT_FALSE(contains(text, "one per machine")) << text;
  run.mutable_spec()->set_one_worker_per_machine(true);  // sbatch --nodes=N
  EXPECT_TRUE(contains(cli::format_run(run, 0), ", RDMA devices, one per machine"));
  auto json = cli::to_json(run);
  EXPECT_TRUE(contains(json, "\"assigned_gpu_ids\"")) << json;
  EXPECT_TRUE(contains(json, "\"gpu_ids\"")) << json;
}

// An array's copies end on their own: run show counts how they ended and
// names those that did not complete.
TEST(CliFormat, RunShowCountsHowTheCopiesOfAnArrayEnded) {
  v1::Run run;
  run.mutable_spec()->set_name("sweep");
  run.mutable_spec()->set_array_size(4);
  run.set_copies_placed(4);
  set_state(run, run_state::running);
  auto end = [&run](int copy, const char* state, const char* why) {
    auto* e = run.add_copy_ends();
    e->set_copy(copy);
    e->set_state(state);
    e->set_reason(why);
  };
  end(0, "Stopped", "completed: every worker exited with code 0");
  end(2, "Failed", "worker sweep[2]-0 Failed: exited with code 1");
  end(3, "Stopped", "time limit of 1m reached");
  auto text = cli::format_run(run, 0);
  EXPECT_TRUE(contains(text, "Array:       4 of 4 copies placed, 3 ended (1 completed, 1 "
                             "failed, 1 stopped)\n"))
    << text;
  EXPECT_TRUE(contains(text, "  sweep[2]: Failed: worker sweep[2]-0 Failed: exited with "
                             "code 1\n"))
    << text;
  EXPECT_TRUE(contains(text, "  sweep[3]: Stopped: time limit of 1m reached\n")) << text;
  EXPECT_FALSE(contains(text, "sweep[0]:")) << "a completed copy is only counted";
  EXPECT_TRUE(contains(cli::to_json(run), "\"copy_ends\"")) << cli::to_json(run);
}

// Issue 23 item 6: a deleted run's workers show Stopping, then how they
// ended.
TEST(CliFormat, RunShowSaysHowADeletedRunsWorkersEnded) {
  v1::Run run;
  run.mutable_spec()->set_name("d");
  set_state(run, run_state::stopped);
  run.set_deleted(true);
  run.set_waiting_reason("deleted: its workers are stopping");
  auto* w0 = run.add_workers();
  w0->set_name("d-0");
  w0->set_machine("gpu-01");
  set_state(*w0, worker_state::cancelled);
  w0->set_exit_code(137);
  w0->set_detail("stopped: killed after the stop grace");
  auto* w1 = run.add_workers();
  w1->set_name("d-1");
  w1->set_machine("gpu-01");
  set_state(*w1, worker_state::stopping);
  auto text = cli::format_run(run, 0);
  EXPECT_TRUE(contains(text, "Reason:      deleted: its workers are stopping\n")) << text;
  EXPECT_TRUE(contains(text, "How they ended")) << text;
  EXPECT_TRUE(contains(text, "stopped: killed after the stop grace")) << text;
  EXPECT_TRUE(contains(text, "137")) << text;
  EXPECT_TRUE(contains(text, "Stopping")) << text;
  // A worker its agent no longer held (the agent was killed -9) has no
  // exit code: "-", not 0.
  set_state(*w1, worker_state::stopped);
  w1->set_detail("its agent no longer holds it");
  text = cli::format_run(run, 0);
  auto ended = text.substr(text.find("How they ended"));
  auto row = ended.substr(ended.find("d-1"));
  row = row.substr(0, row.find('\n'));
  std::istringstream cells{row};
  std::string name, state, code;
  cells >> name >> state >> code;
  EXPECT_EQ(state, "Stopped") << text;
  EXPECT_EQ(code, "-") << text;
}

// Issue 12: `astra run show` names the degraded ports each worker's
// NCCL_IB_HCA leaves out, or keeps (its machine's last ones), and why.
TEST(CliFormat, RunShowNamesTheDegradedPortsItsWorkersNcclLeavesOut) {
  v1::Run run;
  run.mutable_spec()->set_name("train");
  set_state(run, run_state::running);
  auto* w = run.add_workers();
  w->set_name("train-0");
  w->set_machine("gpu-06");
  w->add_gpu_ids("GPU-1");
  auto* d = w->add_degraded_ib_ports();
  d->set_port("mlx5_5:1");
  d->set_why("gpu-06 mlx5_5 trained at 200 Gb/s, its peers at 400 Gb/s");
  auto* k = w->add_degraded_ib_ports();
  k->set_port("mlx5_7:1");
  k->set_why("gpu-06 mlx5_7 trained at 200 Gb/s, its peers at 400 Gb/s");
  k->set_kept(true);
  auto text = cli::format_run(run, 0);
  EXPECT_TRUE(contains(text, "\nDegraded RDMA ports (NCCL_IB_HCA)\n"
                             "  WORKER   MACHINE  PORT      NCCL_IB_HCA")) << text;
  EXPECT_TRUE(contains(text, "  train-0  gpu-06   mlx5_5:1  left out  ")) << text;
  EXPECT_TRUE(contains(text, "mlx5_7:1  kept: leaving it out would leave no port  gpu-06 mlx5_7"))
    << text;
}

TEST(CliFormat, MachineShowsCpuUseAndNumaNodes) {
  v1::MachineView m;
  auto* cpu = m.mutable_facts()->mutable_cpu();
  cpu->set_use_percent(37.5);
  auto* n = cpu->add_nodes();
  n->set_id(1);
  n->set_cpulist("56-111,168-223");
  n->set_memory_total_bytes(1ull << 40);
  n->set_memory_free_bytes(1ull << 39);
  auto text = cli::format_machine(m, 0);
  EXPECT_TRUE(contains(text, "  Use:       37.5% (over the last report interval)\n")) << text;
  EXPECT_TRUE(contains(text, "  NUMA 1:    CPUs 56-111,168-223, 512 GiB free of 1 TiB\n"))
    << text;
}

// Issue 21: `astra machine` says whether the machine is accepted in a pool
// that requires acceptance, and how to accept one that waits.
TEST(CliFormat, MachineSaysWhetherItIsAccepted) {
  v1::MachineView m;
  m.set_name("gpu-03");
  m.set_state(v1::Machine::Accepting);
  auto waiting = cli::format_machine(m, 0);
  EXPECT_TRUE(contains(waiting, "Acceptance:")) << waiting;
  EXPECT_TRUE(contains(waiting, "`astra astraeus accept gpu-03 --reason …`")) << waiting;
  EXPECT_TRUE(contains(waiting, "New work:    no (Accepting: only its acceptance checks run "
                                "until it passes)\n"))
    << waiting;
  // A failed acceptance is named, as the waiting runs name it (a new-user
  // trial saw "not yet" after it had failed).
  m.set_acceptance_validation("val-20261207-6344b1");
  m.set_acceptance_ended("failed");
  auto failed = cli::format_machine(m, 0);
  EXPECT_TRUE(contains(failed, "Acceptance:  acceptance val-20261207-6344b1 failed: see `astra "
                               "astraeus validation val-20261207-6344b1`"))
    << failed;
  EXPECT_FALSE(contains(failed, "not yet")) << failed;
  m.set_state(v1::Machine::Up);
  m.set_accepted(true);
  auto accepted = cli::format_machine(m, 0);
  EXPECT_TRUE(contains(accepted, "accepted (its pool requires acceptance)")) << accepted;
}

// A machine installed with --accept in a pool that does not require
// acceptance takes work while its acceptance runs: `astra machine` names
// that acceptance (a new-user trial saw it only in the JSON). A cancelled
// acceptance of an Accepting machine says how to run another.
TEST(CliFormat, MachineNamesTheAcceptanceItAskedForAtInstallAndACancelledOne) {
  v1::MachineView m;
  m.set_name("gpu-04");
  m.set_state(v1::Machine::Up);
  m.set_acceptance_requested(true);
  auto asked = cli::format_machine(m, 0);
  EXPECT_TRUE(contains(asked, "Acceptance:  asked for at install (--accept): it starts once the "
                              "machines joining with it are in\n"))
    << asked;
  m.set_acceptance_validation("val-20261207-0a0a01");
  auto runs = cli::format_machine(m, 0);
  EXPECT_TRUE(contains(runs, "Acceptance:  acceptance val-20261207-0a0a01 (asked for at install, "
                             "--accept) runs: see `astra astraeus validation "
                             "val-20261207-0a0a01`; it takes work meanwhile"))
    << runs;
  m.set_acceptance_requested(false);
  m.set_state(v1::Machine::Accepting);
  m.set_acceptance_ended("was cancelled by alice");
  auto cancelled = cli::format_machine(m, 0);
  EXPECT_TRUE(contains(cancelled, "Acceptance:  acceptance val-20261207-0a0a01 was cancelled by "
                                  "alice: `astra astraeus validate --suite acceptance --machine "
                                  "gpu-04` runs another; it takes no work"))
    << cancelled;
}

// HA mode (issue 15): `astra --addr A,B,C tokens create` against a controller
// that advertises no gate prints an install command naming every gate the
// user gave, not only the leader's that answered; one address, or an
// advertised gate, leaves the controller's command as it was.
TEST(JoinTokenForAddr, AnInstallCommandNamesEveryGateAstraWasGiven) {
  v1::JoinToken token;
  token.set_token("astj_x");
  token.set_controller_key("ab12");
  install_site_info site;
  site.api_url = "https://10.0.0.1:7451";
  site.gate_address = "10.0.0.1:7450";
  site.organization = "Acme";
  token.set_install(install_script_command(token, site));
  auto list = "10.0.0.1:7450,10.0.0.2:7450,10.0.0.3:7450";
  auto ha = cli::join_token_for(token, list);
  EXPECT_TRUE(contains(ha.install(), std::string{" --apiserver "} + list + " --token-file"))
    << ha.install();
  EXPECT_TRUE(contains(ha.install(), "https://10.0.0.1:7451/api/v1/install.sh")) << ha.install();
  EXPECT_EQ(cli::join_token_for(token, "10.0.0.1:7450").install(), token.install());
  // `-o json` names the gate the command uses, never "" (a new-user trial).
  EXPECT_EQ(ha.controller_address(), list);
  EXPECT_EQ(cli::join_token_for(token, "10.0.0.1:7450").controller_address(), "10.0.0.1:7450");
  // The gate the command names, not how astra reached it (a ninth trial:
  // --addr localhost:7450 beside a command naming 10.0.0.1:7450).
  EXPECT_EQ(cli::join_token_for(token, "localhost:7450").controller_address(), "10.0.0.1:7450");
  auto advertised = token;
  advertised.set_controller_address("gate.example:7450");
  EXPECT_EQ(cli::join_token_for(advertised, list).install(), token.install());
  EXPECT_EQ(cli::join_token_for(advertised, list).controller_address(), "gate.example:7450");
  // No install site (an older controller): the agent's own command, with
  // the list.
  v1::JoinToken bare = token;
  bare.clear_install();
  EXPECT_TRUE(contains(cli::join_token_for(bare, list).install(),
                       std::string{"astraeus-agent --controller "} + list + " --controller-key ab12"))
    << cli::join_token_for(bare, list).install();
}

// Found by a helper: a member's refused `POST .../nodes/a%0Ab%1B%5B31mRED/cordon`
// put a newline and a colour escape into the audit log, which `astra audit`
// printed live. A table cell shows control bytes as \xHH; UTF-8 stays.
TEST(CliFormat, ATableShowsControlBytesAndDoesNotActOnThem) {
  auto out = cli::render_table({"WHO", "TARGET"}, {{"bob", "a\nb\x1b[31mRED"}, {"é", "ok"}});
  EXPECT_EQ(out, "WHO  TARGET\n"
                 "bob  a\\x0ab\\x1b[31mRED\n"
                 "é    ok\n");
}

// A new-user trial: two runs named `t`, in workspaces default and vision,
// were two identical rows of `astra runs`. With runs of several workspaces,
// each row says its workspace first; with one, the table is as before.
TEST(CliFormat, RunsOfSeveralWorkspacesSayWhichWorkspaceEachIsIn) {
  v1::RunList list;
  auto* a = list.add_runs();
  a->mutable_spec()->set_name("t");
  a->set_state("Running");
  auto one = cli::format_run_list(list, 0);
  EXPECT_EQ(one.rfind("NAME", 0), 0u) << one;
  EXPECT_EQ(one.find("WORKSPACE"), std::string::npos) << one;
  auto* b = list.add_runs();
  b->mutable_spec()->set_name("t");
  b->mutable_spec()->set_workspace("vision");
  b->set_state("Waiting");
  auto two = cli::format_run_list(list, 0);
  EXPECT_EQ(two.rfind("WORKSPACE", 0), 0u) << two;
  EXPECT_NE(two.find("\ndefault "), std::string::npos) << two;
  EXPECT_NE(two.find("\nvision "), std::string::npos) << two;
}

// `astra slurm squeue` is `astra runs` (README): both leave the
// validations' check runs out and count them (a new-user trial saw squeue
// list all 18).
TEST(CliFormat, TheUsersRunsLeaveTheValidationsCheckRunsOut) {
  v1::RunList list;
  list.add_runs()->mutable_spec()->set_name("train");
  auto* check = list.add_runs();
  check->mutable_spec()->set_name("val-1-quick-vm");
  check->mutable_spec()->set_validation("val-1");
  auto mine = cli::format_user_runs(list, 0, false);
  EXPECT_TRUE(contains(mine, "train")) << mine;
  EXPECT_FALSE(contains(mine, "val-1-quick-vm")) << mine;
  EXPECT_TRUE(contains(mine, "(1 validation check run not shown: astra runs --all)")) << mine;
  EXPECT_TRUE(contains(cli::format_user_runs(list, 0, true), "val-1-quick-vm"));
}

// A new-user trial: `astra validate --wait` ended "0/1 machines pass." and
// said nothing of what failed. Each failed step is named with its words and
// its fix.
TEST(CliFormat, AValidationsOutcomeNamesWhatFailedAndTheFix) {
  v1::Validation v;
  v.set_id("val-1");
  v.set_suite("disk");
  v.set_state("Failed");
  v.add_machines("vm");
  auto* s = v.add_steps();
  s->set_machine("vm");
  s->set_check("disk");
  s->set_verdict("fail");
  s->mutable_result()->set_summary("1 finding: the data directory /x does not exist");
  auto* f = s->mutable_result()->add_findings();
  f->set_severity("fail");
  f->set_fix("create it on the machine (mkdir -p /x)");
  auto out = cli::format_validation_outcome(v);
  EXPECT_TRUE(contains(out, "0/1 machines pass.\n")) << out;
  EXPECT_TRUE(contains(out, "  vm disk: fail: 1 finding: the data directory /x does not exist\n"))
    << out;
  EXPECT_TRUE(contains(out, "    fix: create it on the machine (mkdir -p /x)\n")) << out;
  EXPECT_TRUE(contains(out, "astra astraeus validation val-1")) << out;
}

// Fourth new-user trial: the README promises "seen in process 4242
// (train.py)" in `astra machine` for a latched fault too; only incidents said it.
TEST(CliFormat, ALatchedFaultSaysTheProcessItsXidLineNamed) {
  v1::GpuSection s;
  auto* g = s.add_gpus();
  g->set_id("GPU-5f1e");
  auto* l = g->add_latches();
  l->set_reason("Xid 79 fault");
  l->set_source("kernel-log");
  l->set_count(1);
  l->set_pid(4242);
  l->set_process_name("train.py");
  auto page = astraeus::cli::format_gpu_section(s);
  EXPECT_NE(page.find("GPU-5f1e: FAULT Xid 79 fault (kernel-log, 1x, last "), std::string::npos)
    << page;
  EXPECT_NE(page.find(", seen in process 4242 (train.py))"), std::string::npos) << page;
}

// A seventh new-user trial: `astra astraeus validations` said Running for
// a validation none of whose checks had started (each waiting for its
// machine's slot). It reads Queued until one starts.
TEST(CliFormat, AValidationNoneOfWhoseChecksStartedIsListedQueued) {
  v1::ValidationList list;
  auto* v = list.add_validations();
  v->set_id("val-20261207-0d0d01");
  v->set_suite("burn");
  v->add_machines("gpu-01");
  v->set_state("Running");
  v->add_steps()->set_state("Queued");
  auto queued = cli::format_validation_list(list);
  EXPECT_TRUE(contains(queued, " Queued ")) << queued;
  v->mutable_steps(0)->set_state("Running");
  auto running = cli::format_validation_list(list);
  EXPECT_TRUE(contains(running, " Running ")) << running;
}

// drove-gpu-scheduling.md: "The executor reports free and used GPU counts
// ... The UI and APIs show these counts": `astra machines` says how many of
// a machine's GPUs are held (the GPU list's holders); none held, nothing.
TEST(CliFormat, MachinesSaysHowManyOfEachMachinesGpusAreHeld) {
  v1::MachineList list;
  for (const char* name : {"gpu-01", "gpu-02"}) {
    auto* m = list.add_machines();
    m->set_name(name);
    m->set_state(v1::Machine::Up);
    m->mutable_facts()->mutable_gpus()->set_read_as("nvml");
    for (int i = 0; i < 8; ++i)
      m->mutable_facts()->mutable_gpus()->add_gpus()->set_id(std::string{name} + "-" +
                                                            std::to_string(i));
  }
  v1::GpuList gpus;
  for (int i = 0; i < 3; ++i) {
    auto* g = gpus.add_gpus();
    g->set_machine("gpu-01");
    g->set_holder("train-" + std::to_string(i));
  }
  gpus.add_gpus()->set_machine("gpu-02");
  auto text = cli::format_machine_list(list, 0, &gpus);
  auto line_of = [&text](const std::string& name) {
    auto at = text.find("\n" + name + " ");
    return at == std::string::npos ? std::string{} : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  };
  EXPECT_TRUE(contains(line_of("gpu-01"), "8 (nvml), 3 held")) << text;
  EXPECT_TRUE(contains(line_of("gpu-02"), "8 (nvml) ")) << text;
  EXPECT_FALSE(contains(line_of("gpu-02"), "held")) << text;
  EXPECT_FALSE(contains(cli::format_machine_list(list, 0), "held")) << "no GPU list: no count";
}
