// What the validation commands print (validation_format.hpp).

#include "bin/validation_format.hpp"

#include <algorithm>
#include <set>

#include "actors/validation/pair_matrix.hpp"
#include "actors/validation/validation_plan.hpp"
#include "bin/cli_format.hpp"
#include "runtime/process/duration_text.hpp"
#include "runtime/process/wall_clock.hpp"

namespace astraeus::cli {

namespace {

std::string joined(const google::protobuf::RepeatedPtrField<std::string>& xs) {
  std::string out;
  for (const auto& x : xs)
    out += (out.empty() ? "" : ", ") + x;
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '&': out += "&amp;"; break;
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '"': out += "&quot;"; break;
    default: out += c;
    }
  }
  return out;
}

/// A step's machine: "gpu-01", a pair's "gpu-01–gpu-02".
std::string step_machines(const v1::ValidationStep& s) {
  return s.peer().empty() ? s.machine() : s.machine() + "\xE2\x80\x93" + s.peer();
}

std::vector<std::string> row_cells(const v1::ReportRow& r) {
  return {r.machine(), r.state(), r.verdict(), r.quick(), r.dcgm(), r.burn(),
          r.copies(), r.disk(), r.pairs(), r.all_reduce()};
}

const std::vector<std::string>& report_header() {
  static const std::vector<std::string> h{"MACHINE", "STATE", "VERDICT", "QUICK", "DCGM",
                                          "BURN", "COPIES", "DISK", "PAIRS", "ALL-REDUCE"};
  return h;
}

} // namespace

std::string format_validation_started(const v1::Validation& v) {
  std::string out = "validation " + v.id() + ": " + v.suite() + " on " + joined(v.machines())
                    + "\n";
  if (!v.console_url().empty())
    out += v.console_url() + "\n";
  return out;
}

std::string format_validation_progress(const v1::Validation& v) {
  int done = 0;
  std::string running, waiting;
  std::set<std::string> said;
  for (const auto& s : v.steps()) {
    if (s.state() == "Done" || s.state() == "Failed")
      ++done;
    else if (s.state() == "Running")
      running += (running.empty() ? "" : ", ") + step_machines(s) + " " + s.check();
    else if (!s.reason().empty() && said.insert(s.machine()).second)
      waiting += (waiting.empty() ? "" : "; ") + s.reason();
  }
  std::string out = "  " + std::to_string(done) + "/" + std::to_string(v.steps_size())
                    + " steps done";
  if (!running.empty())
    out += "; running: " + running;
  if (!waiting.empty())
    out += "; waiting: " + waiting;
  return out + "\n";
}

std::string format_validation_outcome(const v1::Validation& v) {
  auto head = v.id() + " " + v.suite() + " " + v.state() + " ("
              + (v.trigger().empty() ? "on-demand" : v.trigger()) + ")\n";
  if (v.state() == "Skipped")
    return head + "Nothing was measured: every step was skipped ("
           + validation::skip_reasons(v) + ").\n";
  auto out = head;
  if (v.state() == "Cancelled") {
    // What had ended keeps its result (the Cluster Report shows it).
    int ended = 0;
    for (const auto& s : v.steps())
      ended += s.state() == "Done" || s.state() == "Failed" ? 1 : 0;
    out += "C" + validation::cancelled_words(v.cancelled_by(), v.cancel_reason()).substr(1)
           + ": " + std::to_string(ended) + " of " + std::to_string(v.steps_size())
           + " steps had ended"
           + (ended > 0 ? " (their results are kept)" : std::string{})
           + "; the others did not run or were stopped.\n";
    // "0/1 machines pass" read as a failure: a cancelled one judged nothing.
    if (v.machines_passed() > 0)
      out += std::to_string(v.machines_passed()) + " of " + std::to_string(v.machines_size())
             + " machines had passed every check before it.\n";
    return out;
  }
  out += std::to_string(v.machines_passed()) + "/" + std::to_string(v.machines_size())
         + " machines pass.\n";
  // What failed, step by step (a new-user trial's `--wait` said only "0/1
  // machines pass"): each failed step's words, as `astra validation ID`
  // gives them, then where to read the rest.
  size_t failed = 0;
  for (const auto& s : v.steps()) {
    if (s.verdict() != "fail")
      continue;
    std::string why = s.result().summary().empty() ? s.reason() : s.result().summary();
    out += "  " + step_machines(s) + " " + s.check() + ": fail"
           + (why.empty() ? std::string{} : ": " + why) + "\n";
    for (const auto& f : s.result().findings())
      if (f.severity() == "fail" && !f.fix().empty())
        out += "    fix: " + f.fix() + "\n";
    ++failed;
  }
  if (failed > 0)
    out += "See `astra astraeus validation " + v.id() + "` for every step.\n";
  return out;
}

std::string format_validation_list(const v1::ValidationList& list) {
  if (list.validations().empty())
    return "No validations yet: astra astraeus validate --suite acceptance --pool POOL\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& v : list.validations()) {
    std::string target = v.pool().empty() ? joined(v.machines()) : "pool " + v.pool();
    std::string pass = v.state() == "Running"
                         ? "—"
                         : std::to_string(v.machines_passed()) + "/"
                             + std::to_string(v.machines_size());
    // Running with nothing started yet (every check waits for its
    // machine's slot or GPUs) reads as Queued (a seventh trial).
    std::string state = v.state();
    if (state == "Running"
        && std::none_of(v.steps().begin(), v.steps().end(), [](const v1::ValidationStep& s) {
             return s.state() != "Queued";
           }))
      state = "Queued";
    rows.push_back({v.id(), v.suite(), target, state, pass, v.trigger(),
                    format_utc(v.created_unix_ms())});
  }
  return render_table({"ID", "SUITE", "ON", "STATE", "PASS", "TRIGGER", "CREATED"}, rows);
}

std::string format_validation(const v1::Validation& v) {
  std::string out = v.id() + " " + v.suite() + " " + v.state() + " ("
                    + (v.trigger().empty() ? "on-demand" : v.trigger()) + ")\n";
  if (!v.note().empty())
    out += "note: " + v.note() + "\n";
  if (v.state() == "Cancelled")
    out += validation::cancelled_words(v.cancelled_by(), v.cancel_reason()) + "\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : v.steps()) {
    std::string why = s.result().summary().empty() ? s.reason() : s.result().summary();
    // What a controller restart did to it (it went on, or ran again).
    if (!s.restarted().empty() && why.find(s.restarted()) == std::string::npos)
      why += (why.empty() ? "" : "; ") + s.restarted();
    rows.push_back({step_machines(s), s.check(), s.state(), s.verdict().empty() ? "—" : s.verdict(),
                    std::to_string(s.yields()), why});
  }
  return out + render_table({"MACHINE", "CHECK", "STATE", "VERDICT", "YIELDED", "WHY"}, rows);
}

std::string format_report(const v1::ClusterReport& r) {
  std::string out = r.summary() + "\n\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& row : r.rows())
    rows.push_back(row_cells(row));
  out += render_table(report_header(), rows);
  // The bring-up seed's order: the machines, what to fix, the pairs'
  // matrix and the all-reduce curve (on 8+ machines the matrix pushed the
  // fixes off the screen).
  out += "\nWhat to fix (" + std::to_string(r.findings_size()) + ")\n";
  for (const auto& f : r.findings()) {
    out += "! " + f.what() + "\n";
    if (!f.fix().empty())
      out += "  fix: " + f.fix() + "\n";
  }
  if (r.pairs_size() > 0)
    out += "\n" + validation::pairs_matrix_text(r.pairs());
  const std::vector<v1::AllReducePoint> curve{r.all_reduce().begin(), r.all_reduce().end()};
  if (!curve.empty())
    out += "\n" + validation::all_reduce_curve_text(curve);
  return out;
}

std::string format_report_html(const v1::ClusterReport& r, const std::string& title) {
  std::string out =
    "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>"
    + html_escape(title)
    + "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
      "collapse}td,th{border:1px solid #999;padding:.2em .6em;text-align:left}"
      ".fail{background:#fdd}.warn{background:#ffd}.pass{background:#dfd}"
      "@media print{body{margin:0}}</style></head><body>\n<h1>"
    + html_escape(title) + "</h1>\n<p>" + html_escape(r.summary()) + "</p>\n<table><tr>";
  for (const auto& h : report_header())
    out += "<th>" + h + "</th>";
  out += "</tr>\n";
  for (const auto& row : r.rows()) {
    out += "<tr>";
    for (const auto& c : row_cells(row))
      out += "<td class=\"" + html_escape(c) + "\">" + html_escape(c) + "</td>";
    out += "</tr>\n";
  }
  out += "</table>\n<h2>What to fix (" + std::to_string(r.findings_size()) + ")</h2>\n<ul>\n";
  for (const auto& f : r.findings())
    out += "<li class=\"" + html_escape(f.severity()) + "\">" + html_escape(f.what())
           + (f.fix().empty() ? "" : "<br>fix: " + html_escape(f.fix())) + "</li>\n";
  out += "</ul>\n" + validation::pairs_matrix_html(r.pairs());
  out += validation::all_reduce_curve_html({r.all_reduce().begin(), r.all_reduce().end()});
  out += "<p>Generated " + html_escape(format_utc(r.generated_unix_ms()))
         + "</p>\n</body></html>\n";
  return out;
}

std::string format_topology(const v1::TopologyReport& t) {
  std::string out = "Findings (" + std::to_string(t.findings_size()) + ")\n";
  for (const auto& f : t.findings()) {
    out += "! " + f.what() + "\n";
    if (!f.fix().empty())
      out += "fix: " + f.fix() + "\n";
  }
  if (t.fabrics_size() > 0) {
    std::vector<std::vector<std::string>> rows;
    auto join = [](const auto& list) {
      std::string s;
      for (const auto& x : list)
        s += (s.empty() ? "" : ",") + x;
      return s.empty() ? std::string{"-"} : s;
    };
    for (const auto& f : t.fabrics())
      rows.push_back({f.name(), f.subnet_prefix().empty() ? "-" : f.subnet_prefix(),
                      join(f.machines()), join(f.leaves())});
    out += "\nFabrics (" + std::to_string(t.fabrics_size()) + ")\n"
           + render_table({"FABRIC", "SUBNET", "MACHINES", "LEAVES"}, rows);
  }
  if (t.fabrics_size() == 0)
    out += "No machine reports an RDMA port: no fabric to work out.\n";
  for (const auto& n : t.not_checked())
    out += "Not checked: " + n + "\n";
  return out;
}

std::string format_policy(const v1::ValidationPolicy& p) {
  // As it is given (a new-user trial read a 7-day burn-in as "10080m").
  std::string burn = p.burn_in_seconds() == 0
                       ? "10m (default)"
                       : format_duration_exact(static_cast<int64_t>(p.burn_in_seconds()));
  return "pool " + p.pool() + ": "
         + (p.require_acceptance() ? "new machines must pass acceptance"
                                   : "acceptance not required")
         + "; burn-in " + burn + "; DCGM level "
         + (p.dcgm_level() == 0 ? std::string{"2 (default)"} : std::to_string(p.dcgm_level()))
         + (!p.has_exclude_degraded_ports() || p.exclude_degraded_ports()
              ? "; degraded RDMA ports left out of NCCL_IB_HCA"
              : "; degraded RDMA ports kept in NCCL_IB_HCA")
         + "\n";
}

} // namespace astraeus::cli
