// The Cluster Report (cluster_report.hpp).

#include "actors/validation/cluster_report.hpp"
#include "actors/validation/all_reduce_plan.hpp"
#include "actors/validation/pair_plan.hpp"
#include "actors/validation/topology_findings.hpp"
#include "actors/validation/validation_plan.hpp"
#include "runtime/validation/fix_commands.hpp"

#include <algorithm>
#include <map>
#include <vector>

namespace astraeus::validation {

namespace {

constexpr const char* none = "\xE2\x80\x94";  // "—"

/// A verdict's weight in a machine's VERDICT: fail 4, warn 3, pass 2,
/// skipped 1 (nothing measured: a machine whose every check was skipped is
/// "skipped", not counted as passing), never run 0.
int rank_of(const std::string& v) {
  return v == "fail" ? 4 : v == "warn" ? 3 : v == "pass" ? 2 : v == "skipped" ? 1 : 0;
}

/// A cell: the latest verdict of `check` on `machine`, "—" never run.
std::string cell(const latest_map& latest, const std::string& machine, const std::string& check) {
  auto it = latest.find({machine, check});
  if (it == latest.end())
    return none;
  const auto& s = it->second;
  if (s.state() == "Failed")
    return "fail";
  return s.verdict().empty() ? none : s.verdict();
}

v1::CheckFinding named(v1::CheckFinding f, const std::string& machine) {
  if (f.machine().empty())
    f.set_machine(machine);
  if (f.what().rfind(machine, 0) != 0)
    f.set_what(machine + " " + f.what());
  return f;
}

/// The latest pair steps of machines in `names`, by the pair's server.
std::vector<const v1::ValidationStep*> pair_steps(const latest_map& latest,
                                                  const std::vector<std::string>& names) {
  std::vector<const v1::ValidationStep*> out;
  for (const auto& [key, step] : latest)
    if (is_pair(step) && std::binary_search(names.begin(), names.end(), step.machine())
        && std::binary_search(names.begin(), names.end(), step.peer()))
      out.push_back(&step);
  return out;
}

/// The PAIRS cell of `machine`: machine_pairs_verdict() of its pairs, each
/// the worse of its step's verdict and its rails' (a pair that could not
/// run: fail); "—" when it is in none.
std::string pairs_cell(const std::vector<const v1::ValidationStep*>& steps,
                       const std::vector<v1::PairResult>& pairs, const std::string& machine) {
  std::vector<std::string> verdicts;
  for (const auto* s : steps) {
    if ((s->machine() != machine && s->peer() != machine)
        || (s->state() != "Failed" && s->state() != "Done"))
      continue;
    std::string v = s->state() == "Failed" ? "fail" : s->verdict();
    for (const auto& p : pairs)
      if (p.a() == s->machine() && p.b() == s->peer() && rank_of(p.verdict()) > rank_of(v))
        v = p.verdict();
    verdicts.push_back(v);
  }
  auto v = machine_pairs_verdict(verdicts);
  return v.empty() ? std::string{none} : v;
}

/// The latest all-reduce steps whose groups are all among `names`, by group
/// size.
std::vector<const v1::ValidationStep*> all_reduce_steps(const latest_map& latest,
                                                        const std::vector<std::string>& names) {
  std::vector<const v1::ValidationStep*> out;
  for (const auto& [key, step] : latest)
    if (step.check() == all_reduce_check && step.group_machines_size() > 0
        && std::all_of(step.group_machines().begin(), step.group_machines().end(),
                       [&](const auto& m) {
                         return std::binary_search(names.begin(), names.end(), m);
                       }))
      out.push_back(&step);
  std::sort(out.begin(), out.end(), [](const auto* a, const auto* b) {
    return a->group_machines_size() < b->group_machines_size();
  });
  return out;
}

/// The ALL-REDUCE cell of `machine`: the verdict of the largest group it is
/// in ("—" none).
std::string all_reduce_cell(const std::vector<const v1::ValidationStep*>& steps,
                            const std::string& machine) {
  std::string cell = none;
  for (const auto* s : steps)
    if (std::find(s->group_machines().begin(), s->group_machines().end(), machine)
        != s->group_machines().end())
      cell = s->state() == "Failed" ? "fail" : s->verdict().empty() ? none : s->verdict();
  return cell;
}

/// What the Running validations have yet to finish on one machine: the
/// first such validation (the summary names it) and, by cell (a check, or
/// "pairs" / "allreduce"), "running" or "queued".
struct in_progress {
  const v1::Validation* validation = nullptr;
  std::map<std::string, std::string> cells;
};

/// The machines Running validations of `validations` have yet to finish
/// with, by name.
std::map<std::string, in_progress>
being_validated(const std::map<std::string, v1::Validation>& validations) {
  std::map<std::string, in_progress> out;
  for (const auto& [id, v] : validations) {
    if (v.state() != "Running")
      continue;
    for (const auto& s : v.steps()) {
      if (s.state() == "Done" || s.state() == "Failed")
        continue;
      const std::string cell = is_pair(s)         ? std::string{pair_check}
                               : is_all_reduce(s) ? std::string{all_reduce_check}
                                                  : s.check();
      const std::string word = s.state() == "Running" ? "running" : "queued";
      for (const auto& m : step_machines(s)) {
        auto& p = out[m];
        if (p.validation == nullptr)
          p.validation = &v;
        auto& c = p.cells[cell];
        if (c != "running")
          c = word;
      }
    }
  }
  return out;
}

} // namespace

std::string readiness(const v1::MachineView& m) {
  switch (m.state()) {
  case v1::Machine::Up:
    // Up but taking no new work: said as `astra machines` says it (a
    // new-user trial read a drained machine as Ready here).
    if (m.drained())
      return "Drained";
    if (m.drain_deadline_unix_ms() != 0)
      return "Draining";
    if (m.cordoned())
      return "Cordoned";
    return "Ready";
  case v1::Machine::Accepting: return "Accepting";
  case v1::Machine::Down: return "Down";
  case v1::Machine::Maintenance: return "Maintenance";
  case v1::Machine::Idle: return "Idle";
  default: return v1::Machine::State_Name(m.state());
  }
}

v1::ClusterReport build_report(const v1::MachineList& machines, const latest_map& latest,
                               const std::string& pool, int64_t now_unix_ms,
                               const std::map<std::string, v1::Validation>& validations) {
  v1::ClusterReport out;
  out.set_generated_unix_ms(now_unix_ms);
  std::vector<const v1::MachineView*> rows;
  for (const auto& m : machines.machines()) {
    auto p = m.labels().find("pool");
    if (!pool.empty() && (p == m.labels().end() || p->second != pool))
      continue;
    rows.push_back(&m);
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto* a, const auto* b) { return a->name() < b->name(); });
  std::vector<v1::CheckFinding> fails, warns;
  uint32_t passing = 0;
  // Issue 12: what the topology finds on a machine makes its VERDICT warn
  // while its checks pass (the seed's gpu-06 with a port at 200 Gb/s).
  auto topology = analyse_topology(machines, pool, now_unix_ms);
  // Issue 12: the pairs among these machines, judged against the best pair.
  std::vector<std::string> names;
  for (const auto* m : rows)
    names.push_back(m->name());
  auto pair_steps_in = pair_steps(latest, names);
  auto pairs = pair_results(pair_steps_in, check_policy{}.values());
  for (const auto& p : pairs)
    *out.add_pairs() = p;
  // Issue 12: the all-reduce over growing groups of these machines.
  auto all_reduce_in = all_reduce_steps(latest, names);
  std::vector<v1::AllReducePoint> all_reduce;
  for (const auto* step : all_reduce_in)
    all_reduce.push_back(all_reduce_point(*step));
  for (const auto& p : all_reduce)
    *out.add_all_reduce() = p;
  // A new-user trial: "2/8 machines pass" counted a machine whose
  // acceptance still ran (its burn-in Running) as passing.
  const auto unfinished = being_validated(validations);
  std::vector<std::string> validated;  // "acceptance val-… runs on gpu-06"
  for (const auto* m : rows) {
    auto* row = out.add_rows();
    row->set_machine(m->name());
    row->set_state(readiness(*m));
    row->set_quick(cell(latest, m->name(), "quick"));
    row->set_dcgm(cell(latest, m->name(), "dcgm"));
    row->set_burn(cell(latest, m->name(), "burn"));
    row->set_copies(cell(latest, m->name(), "copies"));
    row->set_disk(cell(latest, m->name(), "disk"));
    row->set_pairs(pairs_cell(pair_steps_in, pairs, m->name()));
    row->set_all_reduce(all_reduce_cell(all_reduce_in, m->name()));
    int worst = 0;
    for (const auto* c : {&row->quick(), &row->dcgm(), &row->burn(), &row->copies(), &row->disk(),
                          &row->pairs(), &row->all_reduce()})
      worst = std::max(worst, rank_of(*c));
    for (const auto& check : {"quick", "dcgm", "burn", "copies", "disk"}) {
      auto it = latest.find({m->name(), check});
      if (it == latest.end())
        continue;
      const auto& s = it->second;
      for (const auto& f : s.result().findings()) {
        (f.severity() == "fail" ? fails : warns).push_back(named(f, m->name()));
        worst = std::max(worst, f.severity() == "fail" ? 4 : 3);
      }
      if (s.state() == "Failed") {
        v1::CheckFinding f;
        f.set_severity("fail");
        f.set_machine(m->name());
        f.set_check(check);
        f.set_what(m->name() + " " + check + " check could not run: " + s.reason());
        // A check that no GPU of the machine could be given for (usable_gpus:
        // "none of gpu-08's 8 GPUs can be had") needs its GPUs fixed, not
        // the check program (a sixth new-user trial read the latter for GPUs
        // set aside as another machine's).
        if (s.reason().rfind("none of " + m->name() + "'s ", 0) == 0)
          f.set_fix("Fix what keeps " + m->name() + "'s GPUs from every run (set aside, "
                    "Faulty or Foreign: `" + fix_command::gpus(m->name()) + "` says which "
                    "and why), then `" + fix_command::validate_machine(check, m->name())
                    + "`.");
        else
          f.set_fix("Check that the check program (validation.check_program) is installed and "
                    "runs on " + m->name() + ", then `"
                    + fix_command::validate_machine(check, m->name()) + "`.");
        fails.push_back(std::move(f));
      }
    }
    for (const auto* s : pair_steps_in) {
      if (s->machine() != m->name())
        continue;  // a pair's findings are told once, under its server
      for (const auto& f : s->result().findings())
        (f.severity() == "fail" ? fails : warns).push_back(named(f, m->name()));
      if (s->state() == "Failed") {
        v1::CheckFinding f;
        f.set_severity("fail");
        f.set_machine(m->name());
        f.set_check(pair_check);
        f.set_what(pair_label(*s) + " pair check could not run: " + s->reason());
        auto own_pool = m->labels().find("pool");
        f.set_fix("Check that perftest (ib_write_bw) is installed on both machines and that "
                  "they reach each other, then `"
                  + fix_command::validate_pool(
                      "network", !pool.empty() || own_pool == m->labels().end()
                                   ? pool
                                   : own_pool->second)
                  + "`.");
        fails.push_back(std::move(f));
      }
    }
    for (const auto* s : all_reduce_in) {
      if (s->machine() != m->name())
        continue;  // a group's findings are told once, under its first machine
      // Its words name the group ("all-reduce over 4 machines ..."), not one machine.
      for (auto f : s->result().findings()) {
        f.set_machine(m->name());
        f.set_check(all_reduce_check);
        (f.severity() == "fail" ? fails : warns).push_back(std::move(f));
      }
    }
    // An acceptance that ended without passing keeps the machine from work
    // until it passes or is accepted: that is something to fix, whatever
    // its checks say (a new-user trial saw "What to fix (0)" for a machine
    // whose acceptance ended Skipped).
    if (m->state() == v1::Machine::Accepting && !m->acceptance_ended().empty()) {
      v1::CheckFinding f;
      f.set_severity("fail");
      f.set_machine(m->name());
      f.set_check("acceptance");
      f.set_what(m->name() + " takes no work: its acceptance " + m->acceptance_validation() + " "
                 + m->acceptance_ended());
      f.set_fix("See `astra astraeus validation " + m->acceptance_validation()
                + "`; fix what it names and run it again (`"
                + fix_command::validate_machine("acceptance", m->name())
                + "`), or accept the machine anyway: `astra astraeus accept " + m->name()
                + " --reason REASON`.");
      fails.push_back(std::move(f));
      // Its VERDICT says so too: a seventh trial read "pass" (and "1/2
      // machines pass") beside a machine whose acceptance was cancelled
      // after its quick check and DCGM passed.
      worst = 4;
    }
    for (const auto& f : topology.findings())
      if (f.machine() == m->name()) {
        warns.push_back(f);
        if (worst >= 1)
          worst = std::max(worst, 3);
      }
    const char* verdict = worst == 4   ? "fail"
                          : worst == 3 ? "warn"
                          : worst == 2 ? "pass"
                          : worst == 1 ? "skipped"
                                       : none;
    if (auto p = unfinished.find(m->name()); p != unfinished.end()) {
      // Not yet a verdict: the checks still to come are said as such.
      const std::pair<std::string*, const char*> row_cells[] = {
        {row->mutable_quick(), "quick"},   {row->mutable_dcgm(), "dcgm"},
        {row->mutable_burn(), "burn"},     {row->mutable_copies(), "copies"},
        {row->mutable_disk(), "disk"},     {row->mutable_pairs(), pair_check},
        {row->mutable_all_reduce(), all_reduce_check}};
      for (const auto& [cell, check] : row_cells)
        if (auto c = p->second.cells.find(check); c != p->second.cells.end())
          *cell = c->second;
      verdict = validating;
      const auto& v = *p->second.validation;
      auto words = v.suite() + " " + v.id() + " runs on ";
      auto same = std::find_if(validated.begin(), validated.end(), [&](const std::string& w) {
        return w.rfind(words, 0) == 0;
      });
      if (same == validated.end())
        validated.push_back(words + m->name());
      else
        *same += ", " + m->name();
    }
    row->set_verdict(verdict);
    // An Accepting machine takes no work: not counted as passing.
    passing += verdict == std::string{"pass"} && m->state() != v1::Machine::Accepting ? 1 : 0;
  }
  for (auto& f : fails)
    *out.add_findings() = std::move(f);
  for (auto& f : warns)
    *out.add_findings() = std::move(f);
  out.set_machines(static_cast<uint32_t>(rows.size()));
  out.set_passing(passing);
  std::string summary = std::to_string(passing) + "/" + std::to_string(rows.size())
                        + " machines pass";
  if (!validated.empty()) {
    size_t count = 0;
    for (const auto& r : out.rows())
      count += r.verdict() == validating ? 1 : 0;
    summary += "; " + std::to_string(count) + " being validated (";
    for (size_t i = 0; i < validated.size(); ++i)
      summary += (i == 0 ? "" : "; ") + validated[i];
    summary += ")";
  }
  bool any_run = std::any_of(out.rows().begin(), out.rows().end(),
                             [](const auto& r) { return r.verdict() != none; });
  if (rows.empty())
    summary = "No machines" + (pool.empty() ? std::string{} : " in pool " + pool) + ".";
  else if (!any_run)
    summary += "; nothing checked yet: `" + fix_command::validate_pool("acceptance", pool) + "`.";
  else {
    // Machines an admin shipped as-is (`astra astraeus accept --reason`):
    // their findings stay below, and why they take work anyway is said.
    for (const auto* m : rows)
      if (!m->accepted_reason().empty())
        summary += "; " + m->name() + " accepted as-is: " + m->accepted_reason();
    bool all_reduce_said = false;
    for (int i = 0; i < out.findings_size() && i < 3; ++i) {
      summary += "; " + out.findings(i).what();
      all_reduce_said = all_reduce_said || out.findings(i).check() == all_reduce_check;
    }
    if (auto weakest = weakest_pair_phrase(pairs); !weakest.empty())
      summary += "; " + weakest;
    else if (!pair_steps_in.empty()
             && std::all_of(pair_steps_in.begin(), pair_steps_in.end(),
                            [](const v1::ValidationStep* s) { return s->verdict() == "skipped"; })) {
      // Nothing measured between the machines, said so (a re-check found the
      // report silent: no matrix, nothing in What to fix, "3/3 pass").
      const auto& r = pair_steps_in.front()->result();
      summary += "; the pairs were not measured ("
                 + (r.summary().empty() ? pair_steps_in.front()->reason() : r.summary()) + ")";
    }
    if (auto phrase = all_reduce_phrase(all_reduce); !phrase.empty() && !all_reduce_said)
      summary += "; " + phrase;
    summary += ".";
  }
  out.set_summary(summary);
  return out;
}

} // namespace astraeus::validation
