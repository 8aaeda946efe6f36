// The logic of a validation without actors (validation_plan.hpp).

#include "actors/validation/validation_plan.hpp"
#include "actors/validation/all_reduce_plan.hpp"
#include "actors/validation/pair_plan.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <map>

#include <google/protobuf/util/json_util.h>

#include "messages/error.hpp"
#include "actors/controller/machine_actor.hpp"
#include "runtime/process/duration_limits.hpp"
#include "runtime/process/duration_text.hpp"
#include "runtime/validation/fix_commands.hpp"

namespace astraeus::validation {

namespace {

const std::vector<std::string>& all_checks() {
  static const std::vector<std::string> checks{"quick", "dcgm", "burn", "copies", "disk"};
  return checks;
}

bool is_verdict(const std::string& v) {
  return v == "pass" || v == "warn" || v == "fail" || v == "skipped";
}

/// The worst of two machine verdicts (fail > warn > pass).
int rank_of(const std::string& v) {
  return v == "fail" ? 2 : v == "warn" ? 1 : 0;
}

} // namespace

std::vector<std::string> checks_of(const std::string& suite) {
  if (suite == "acceptance")
    return all_checks();
  for (const auto& c : all_checks())
    if (c == suite)
      return {c};
  return {};
}

std::string suite_names() {
  return "acceptance, quick, dcgm, burn, copies, disk, network";
}

bool known_suite(const std::string& suite) {
  return !checks_of(suite).empty() || suite_has_pairs(suite);
}

std::pair<std::string, std::string> latest_key(const v1::ValidationStep& step) {
  if (is_pair(step))
    return {step.machine(), std::string{pair_check} + "/" + step.peer()};
  if (step.check() == all_reduce_check)
    return {step.machine(),
            std::string{all_reduce_check} + "/" + std::to_string(step.group_machines_size())};
  return {step.machine(), step.check()};
}

caf::error check_settings(uint64_t burn_in_seconds, const std::string& data_dir) {
  if (auto err = check_seconds_bound(burn_in_seconds, "burn_in_seconds", max_burn_in_seconds))
    return err;
  if (!data_dir.empty())
    if (auto why = data_location_problem(data_dir))
      return caf::make_error(ec::invalid_request, "data_dir '" + data_dir + "' " + *why);
  return caf::none;
}

std::string make_id(int64_t unix_ms, uint64_t random) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "val-%04d%02d%02d-%06llx", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, static_cast<unsigned long long>(random & 0xffffff));
  return buf;
}

v1::Validation make_validation(const std::string& id, const v1::StartValidation& start,
                               const std::vector<std::string>& machines,
                               const std::string& trigger, int64_t now_unix_ms) {
  v1::Validation v;
  v.set_id(id);
  v.set_suite(start.suite());
  v.set_pool(start.pool());
  v.set_state("Running");
  v.set_trigger(trigger);
  v.set_note(start.note());
  v.set_created_unix_ms(now_unix_ms);
  v.set_burn_in_seconds(start.burn_in_seconds());
  v.set_dcgm_level(start.dcgm_level());
  v.set_data_dir(start.data_dir());
  for (const auto& m : machines) {
    v.add_machines(m);
    for (const auto& c : checks_of(start.suite())) {
      auto* s = v.add_steps();
      s->set_machine(m);
      s->set_check(c);
      s->set_state(queued);
      s->set_validation(id);
    }
  }
  if (suite_has_pairs(start.suite())) {
    add_pair_steps(v);
    add_all_reduce_steps(v);
  }
  return v;
}

std::vector<std::string> resume(v1::Validation& v) {
  std::vector<std::string> stale;
  for (int i = 0; i < v.steps_size(); ++i) {
    auto& s = *v.mutable_steps(i);
    if (s.state() != running)
      continue;
    if (!is_all_reduce(s)) {
      s.set_restarted(restarted_kept(s.run()));
      continue;
    }
    for (auto& run : step_runs(v, i))
      stale.push_back(std::move(run));
    s.set_state(queued);
    s.set_reason("the controller restarted while it ran: it runs again (an all-reduce is "
                 "judged against figures the controller kept in memory)");
    s.set_restarted(s.reason());
  }
  return stale;
}

std::vector<std::string> held_machines(const v1::Validation& v) {
  std::vector<std::string> out;
  for (const auto& s : v.steps())
    if (s.state() == running)
      for (auto& m : step_machines(s))
        if (std::find(out.begin(), out.end(), m) == out.end())
          out.push_back(std::move(m));
  return out;
}

std::string restarted_kept(const std::string& run) {
  return "the controller restarted while it ran; its run " + run
         + " went on and was waited for";
}

std::string restarted_gone(const std::string& run, const std::string& why) {
  return "the controller restarted while it ran and its run " + run + " was gone (" + why
         + "): it ran again";
}

std::vector<std::string> step_machines(const v1::ValidationStep& step) {
  std::vector<std::string> out{step.machine()};
  auto add = [&](const std::string& m) {
    if (!m.empty() && std::find(out.begin(), out.end(), m) == out.end())
      out.push_back(m);
  };
  add(step.peer());
  for (const auto& m : step.group_machines())
    add(m);
  return out;
}

bool involves(const v1::ValidationStep& step, const std::string& machine) {
  auto ms = step_machines(step);
  return std::find(ms.begin(), ms.end(), machine) != ms.end();
}

std::vector<std::string> step_runs(const v1::Validation& v, int index) {
  const auto& s = v.steps(index);
  std::vector<std::string> out;
  if (is_all_reduce(s)) {
    // Every rank's run (those not submitted yet are not found: harmless).
    for (int r = 0; r < s.group_machines_size(); ++r)
      out.push_back(all_reduce_run_name(v, index, s.attempts(), r));
    return out;
  }
  if (!s.run().empty())
    out.push_back(s.run());
  // A pair's server runs beside its client (the step names the client once
  // it is submitted).
  if (is_pair(s) && s.run() != pair_run_name(v, index, s.attempts(), true))
    out.push_back(pair_run_name(v, index, s.attempts(), true));
  return out;
}

bool has_running(const v1::Validation& v, const std::string& machine) {
  return std::any_of(v.steps().begin(), v.steps().end(), [&](const auto& s) {
    return s.state() == running && involves(s, machine);
  });
}

std::optional<int> next_step(const v1::Validation& v, const std::string& machine) {
  if (has_running(v, machine))
    return std::nullopt;
  for (int i = 0; i < v.steps_size(); ++i) {
    const auto& s = v.steps(i);
    if (s.machine() == machine && !is_pair(s) && !is_all_reduce(s)
        && (s.state() == queued || s.state() == yielded))
      return i;
  }
  return std::nullopt;
}

std::string run_name(const v1::Validation& v, int index, uint32_t attempt) {
  const auto& s = v.steps(index);
  return clean_run_name(v.id() + "-" + s.machine() + "-" + s.check() + "-"
                        + std::to_string(attempt));
}

std::string clean_run_name(std::string name) {
  for (auto& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-')
      c = '-';
  if (name.size() > 63)
    name = name.substr(name.size() - 63);
  while (!name.empty() && name.front() == '-')
    name.erase(name.begin());
  return name;
}

std::vector<std::string> command_of(const v1::Validation& v, const std::string& check,
                                    const std::string& program) {
  std::vector<std::string> cmd{program, check, "--json"};
  if (check == "burn") {
    uint64_t s = v.burn_in_seconds() == 0 ? 600 : v.burn_in_seconds();
    cmd.push_back("--duration");
    cmd.push_back(s % 60 == 0 ? std::to_string(s / 60) + "m" : std::to_string(s) + "s");
  } else if (check == "dcgm") {
    cmd.push_back("--level");
    cmd.push_back(std::to_string(v.dcgm_level() == 0 ? 2 : v.dcgm_level()));
  } else if (check == "disk") {
    // Without --data-dir: the worker's own folder, on the agent's data disk.
    cmd.push_back("--data-dir");
    cmd.push_back(v.data_dir().empty() ? "." : v.data_dir());
  }
  return cmd;
}

usable_gpus_t usable_gpus(const v1::MachineView& view, const v1::GpuList& gpus) {
  usable_gpus_t out;
  std::map<std::string, std::string> why;
  for (const auto& a : view.set_aside_gpus())
    why[a.id()] = "is set aside (" + a.reason() + ")";
  for (const auto& g : gpus.gpus()) {
    if (g.health() != "Foreign" && g.health() != "Faulty")
      continue;
    std::string reasons;
    for (const auto& r : g.health_reasons())
      reasons += (reasons.empty() ? "" : "; ") + r;
    why.emplace(g.gpu().id(), "is " + g.health() + (reasons.empty() ? "" : " (" + reasons + ")"));
  }
  std::string left_out;
  for (const auto& g : view.facts().gpus().gpus()) {
    ++out.total;
    auto w = why.find(g.id());
    if (w == why.end()) {
      ++out.count;
      continue;
    }
    left_out += (left_out.empty() ? "" : "; ") + g.id() + " " + w->second;
  }
  if (left_out.empty())
    return out;
  out.note = out.count == 0 ? "none of " + view.name() + "'s " + std::to_string(out.total)
                                + " GPUs can be had: " + left_out
                            : "runs on " + std::to_string(out.count) + " of "
                                + std::to_string(out.total) + " GPUs: " + left_out;
  return out;
}

std::vector<std::string> due_batch(const std::vector<batch_candidate>& candidates,
                                   int64_t now_unix_ms, int64_t delay_ms) {
  int64_t last = 0;
  for (const auto& c : candidates)
    last = std::max(last, c.joined_unix_ms);
  std::vector<std::string> out;
  if (candidates.empty() || now_unix_ms < last + delay_ms)
    return out;
  for (const auto& c : candidates)
    if (c.up)
      out.push_back(c.name);
  std::sort(out.begin(), out.end());
  return out;
}

std::string disk_folder(const v1::Validation& v, const v1::MachineView& view) {
  return v.data_dir().empty() ? view.data_location() : v.data_dir();
}

v1::RunSpec run_spec(const v1::Validation& v, int index, uint32_t gpus,
                     const std::string& program) {
  const auto& s = v.steps(index);
  return check_spec(v, run_name(v, index, s.attempts()), s.machine(),
                    command_of(v, s.check(), program), gpus);
}

v1::RunSpec check_spec(const v1::Validation& v, const std::string& name,
                       const std::string& machine, const std::vector<std::string>& command,
                       uint32_t gpus) {
  v1::RunSpec spec;
  spec.set_name(name);
  for (const auto& part : command)
    spec.add_command(part);
  spec.set_runtime("process");
  spec.set_gpus_per_worker(gpus);
  spec.set_workers(1);
  (*spec.mutable_labels())["astraeus.io/machine"] = machine;
  spec.set_priority(-1000);
  spec.set_validation(v.id());
  spec.set_result_line(true);
  spec.set_owner("validation " + v.id());
  return spec;
}

caf::expected<v1::CheckResult> parse_result(const std::string& line, const std::string& check) {
  auto first = line.find_first_not_of(" \t\r\n");
  if (first == std::string::npos)
    return caf::make_error(ec::invalid_request,
                           "the check printed no result line (is it astraeus-check with --json?)");
  if (line[first] != '{')
    return caf::make_error(ec::invalid_request,
                           "the check's last line is not a JSON result: '"
                             + line.substr(first, 120) + "'");
  v1::CheckResult out;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;
  auto status = google::protobuf::util::JsonStringToMessage(line, &out, opts);
  if (!status.ok())
    return caf::make_error(ec::invalid_request,
                           "the check's result is not valid JSON of a result: "
                             + std::string(status.message()));
  if (out.check().empty())
    return caf::make_error(ec::invalid_request, "the check's result has no \"check\"");
  if (out.check() != check)
    return caf::make_error(ec::invalid_request, "the result is for check " + out.check()
                                                  + ", not " + check);
  if (!is_verdict(out.verdict()))
    return caf::make_error(ec::invalid_request,
                           "the result's verdict '" + out.verdict()
                             + "' is not one of pass, warn, fail, skipped");
  for (const auto& f : out.findings())
    if (f.severity() != "fail" && f.severity() != "warn")
      return caf::make_error(ec::invalid_request, "a finding's severity '" + f.severity()
                                                    + "' is not fail or warn");
  return out;
}

bool apply_run(v1::ValidationStep& step, const v1::Run& run, int64_t now_unix_ms) {
  const auto& state = run.state();
  if (state != "Stopped" && state != "Failed")
    return false;
  step.set_finished_unix_ms(now_unix_ms);
  if (run.preempted()) {
    step.set_state(yielded);
    step.set_yields(step.yields() + 1);
    step.set_reason("gave way to real work; queued again");
    return true;
  }
  const v1::WorkerAssignment* w = run.workers_size() > 0 ? &run.workers(0) : nullptr;
  // Stopped by the controller before it ended by itself (a drain of its
  // machine): the check judged nothing, so its hardware is not failed for
  // it (a new-user trial's drain failed a burn-in with "the check's last
  // line is not a JSON result: 'burn: 8 GPU(s) for 300 s'"). It is queued
  // again, as a check that gave way is, and runs once the machine takes
  // work. A check that ended by itself with a result is judged on it.
  const bool stopped_early = state == "Stopped" && !run.waiting_reason().empty()
                             && run.waiting_reason().rfind("completed", 0) != 0;
  if (stopped_early
      && (!w || w->outputs().count("astraeus.result") == 0
          || !parse_result(w->outputs().at("astraeus.result"), step.check()))) {
    step.set_state(yielded);
    step.set_reason("its run was stopped (" + run.waiting_reason()
                    + ") before the check ended; queued again");
    return true;
  }
  if (!w || w->outputs().count("astraeus.result") == 0) {
    step.set_state(failed);
    step.set_verdict("fail");
    step.set_reason(run.waiting_reason().empty()
                      ? "the check ended (" + state + ") without a result"
                      : "the check ended without a result: " + run.waiting_reason());
    return true;
  }
  auto result = parse_result(w->outputs().at("astraeus.result"), step.check());
  if (!result) {
    step.set_state(failed);
    step.set_verdict("fail");
    step.set_reason(render_error(result.error()));
    return true;
  }
  // A check on the machine does not know its name: its fix commands say
  // MACHINE, which the controller fills in.
  const auto placeholder = fix_command::data_location("MACHINE");
  for (auto& f : *result->mutable_findings()) {
    f.set_machine(step.machine());
    f.set_check(step.check());
    if (auto at = f.fix().find(placeholder); at != std::string::npos)
      f.mutable_fix()->replace(at, placeholder.size(), fix_command::data_location(step.machine()));
  }
  step.set_state(done);
  step.set_verdict(result->verdict());
  step.set_reason("");
  *step.mutable_result() = std::move(*result);
  return true;
}

void end_failed(v1::ValidationStep& step, const std::string& why, int64_t now_unix_ms) {
  step.set_state(failed);
  step.set_verdict("fail");
  step.set_reason(why);
  step.set_finished_unix_ms(now_unix_ms);
}

void end_skipped(v1::ValidationStep& step, const std::string& why, int64_t now_unix_ms) {
  step.set_state(done);
  step.set_verdict("skipped");
  step.set_reason(why);
  auto* r = step.mutable_result();
  r->set_check(step.check());
  r->set_verdict("skipped");
  r->set_summary(why);
  step.set_finished_unix_ms(now_unix_ms);
}

std::string removed_reason(const std::string& machine) {
  return "machine " + machine + " was removed before the check finished";
}

std::vector<int> end_removed(v1::Validation& v, const std::string& machine,
                             int64_t now_unix_ms, std::vector<std::string>& runs) {
  std::vector<int> ended;
  for (int i = 0; i < v.steps_size(); ++i) {
    auto& s = *v.mutable_steps(i);
    if (!involves(s, machine) || s.state() == done || s.state() == failed)
      continue;
    if (s.state() == running)
      for (auto& run : step_runs(v, i))
        runs.push_back(std::move(run));
    s.set_state(failed);
    s.set_verdict("fail");
    s.set_reason(removed_reason(machine));
    s.set_finished_unix_ms(now_unix_ms);
    ended.push_back(i);
  }
  return ended;
}

std::string waiting_words(const v1::Run& run) {
  if (run.state() != "Waiting" || run.waiting_reason().empty())
    return {};
  return "its run waits: " + run.waiting_reason();
}

bool is_waiting_words(const std::string& reason) {
  return reason.rfind("its run waits: ", 0) == 0;
}

std::string cancelled_words(const std::string& by, const std::string& why) {
  return "cancelled by " + (by.empty() ? std::string{"an admin"} : by)
         + (why.empty() ? std::string{} : " (" + why + ")");
}

std::vector<std::string> cancel(v1::Validation& v, const std::string& by,
                                const std::string& why, int64_t now_unix_ms) {
  std::vector<std::string> runs;
  const auto words = cancelled_words(by, why);
  for (int i = 0; i < v.steps_size(); ++i) {
    auto& s = *v.mutable_steps(i);
    if (s.state() == done || s.state() == failed || s.state() == cancelled)
      continue;
    if (s.state() == running)
      for (auto& run : step_runs(v, i))
        runs.push_back(std::move(run));
    s.set_state(cancelled);
    s.clear_verdict();
    s.set_reason(words);
    s.set_finished_unix_ms(now_unix_ms);
  }
  uint32_t pass = 0;
  for (const auto& m : v.machines())
    pass += machine_verdict(v, m) == "pass" ? 1 : 0;
  v.set_machines_passed(pass);
  v.set_state("Cancelled");
  v.set_cancelled_by(by);
  v.set_cancel_reason(why);
  v.set_finished_unix_ms(now_unix_ms);
  return runs;
}

std::string machine_verdict(const v1::Validation& v, const std::string& machine) {
  int worst = 0;
  bool any = false, measured = false;
  std::vector<std::string> pairs;
  for (const auto& s : v.steps()) {
    if (!involves(s, machine))
      continue;
    if (s.state() != done && s.state() != failed)
      return "";
    auto verdict = s.state() == failed ? std::string{"fail"} : s.verdict();
    any = true;
    measured = measured || verdict != "skipped";
    if (is_pair(s))
      pairs.push_back(verdict);
    else
      worst = std::max(worst, s.state() == failed ? 2 : rank_of(verdict));
  }
  if (any && !measured)
    return "skipped";
  if (!pairs.empty())
    worst = std::max(worst, rank_of(machine_pairs_verdict(pairs)));
  return worst == 2 ? "fail" : worst == 1 ? "warn" : "pass";
}

bool finished(const v1::Validation& v) {
  return std::all_of(v.steps().begin(), v.steps().end(), [](const auto& s) {
    return s.state() == done || s.state() == failed;
  });
}

bool conclude(v1::Validation& v, int64_t now_unix_ms) {
  if (v.state() != "Running" || !finished(v))
    return false;
  uint32_t pass = 0;
  bool any_fail = false, any_warn = false;
  bool all_skipped = v.machines_size() > 0;
  for (const auto& m : v.machines()) {
    auto verdict = machine_verdict(v, m);
    pass += verdict == "pass" ? 1 : 0;
    any_fail = any_fail || verdict == "fail";
    any_warn = any_warn || verdict == "warn";
    all_skipped = all_skipped && verdict == "skipped";
  }
  v.set_machines_passed(pass);
  // Nothing measured is no pass: the network suite with no Active RDMA
  // port on a shared rail skips its every pair. A warning is said as such
  // (a ninth trial read "network Passed" beside "0/2 machines pass").
  v.set_state(any_fail      ? "Failed"
              : all_skipped ? "Skipped"
              : any_warn    ? "Warned"
                            : "Passed");
  v.set_finished_unix_ms(now_unix_ms);
  return true;
}

std::string skip_reasons(const v1::Validation& v) {
  std::vector<std::string> seen;
  for (const auto& s : v.steps()) {
    if (s.verdict() != "skipped")
      continue;
    auto why = s.result().summary().empty() ? s.reason() : s.result().summary();
    if (!why.empty() && std::find(seen.begin(), seen.end(), why) == seen.end())
      seen.push_back(why);
  }
  std::string out;
  for (const auto& why : seen)
    out += (out.empty() ? "" : "; ") + why;
  return out;
}

std::string outcome_line(const v1::Validation& v) {
  return v.id() + " " + v.suite() + " " + v.state() + " ("
         + (v.trigger().empty() ? "on-demand" : v.trigger()) + ")";
}

} // namespace astraeus::validation
