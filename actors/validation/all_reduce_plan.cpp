// The all-reduce of a validation without actors (all_reduce_plan.hpp).

#include "actors/validation/all_reduce_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>

#include "actors/validation/validation_plan.hpp"
#include "messages/error.hpp"
#include "runtime/host/sysfs_text.hpp"

namespace astraeus::validation {

namespace {

/// The space-separated fields of `line` (all_reduce_perf pads with spaces).
std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  for (auto piece : split(trim(line), ' '))
    if (!piece.empty())
      out.push_back(piece);
  return out;
}

std::optional<double> number(std::string_view s) {
  return parse_double(s);
}

/// The column indexes of the table's header: each name's occurrences.
struct columns {
  std::map<std::string, std::vector<size_t>> at;
  size_t count = 0;

  std::optional<size_t> index(const std::string& name, size_t nth) const {
    auto it = at.find(name);
    if (it == at.end() || it->second.size() <= nth)
      return std::nullopt;
    return it->second[nth];
  }
};

/// A header line names "size" and "busbw" ("#       size  count  type ...").
std::optional<columns> header_of(std::string_view line) {
  if (line.empty() || line.front() != '#')
    return std::nullopt;
  auto f = fields(line.substr(1));
  columns c;
  for (size_t i = 0; i < f.size(); ++i) {
    std::string name{f[i]};
    if (name == "error")  // nccl-tests before 2.10
      name = "#wrong";
    c.at[name].push_back(i);
  }
  c.count = f.size();
  if (!c.at.count("size") || !c.at.count("busbw") || c.at.at("size").front() != 0)
    return std::nullopt;
  return c;
}

int64_t wrong_of(std::string_view s) {
  auto v = number(s);
  if (!v)
    return -1;  // "N/A": not checked
  return static_cast<int64_t>(std::llround(*v));
}

std::string percent(double fraction) {
  return std::to_string(static_cast<int>(std::lround(fraction * 100))) + "%";
}

std::string gbs(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f", v);
  return buf;
}

bool infiniband_active(const v1::MachineView& m) {
  return std::any_of(m.facts().rdma_ports().begin(), m.facts().rdma_ports().end(),
                     [](const v1::RdmaPort& p) {
                       return p.state() == "ACTIVE" && p.link_layer() == "InfiniBand";
                     });
}

std::string list_of(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

/// Sets `out.truncated` when its last size is below its maxBytes, or it has
/// no "# Avg bus bandwidth" (it did not finish).
void mark_truncated(all_reduce_output& out) {
  auto last = out.rows.back().bytes;
  if (out.max_bytes > 0 && last < out.max_bytes)
    out.truncated = "stopped at " + size_text(last) + " of " + size_text(out.max_bytes)
                    + ": the output ends there";
  else if (!out.avg_busbw_gbs)
    out.truncated = "no '# Avg bus bandwidth' line: all_reduce_perf did not finish";
}

bool finished_step(const v1::ValidationStep& s) {
  return s.state() == done || s.state() == failed;
}

} // namespace

bool is_all_reduce(const v1::ValidationStep& step) {
  return step.check() == all_reduce_check;
}

void add_all_reduce_steps(v1::Validation& v) {
  for (int k : all_reduce_group_sizes(v.machines_size())) {
    auto* s = v.add_steps();
    s->set_machine(v.machines(0));
    s->set_check(all_reduce_check);
    s->set_state(queued);
    s->set_validation(v.id());
    for (int i = 0; i < k; ++i)
      s->add_group_machines(v.machines(i));
  }
}

std::optional<int> startable_all_reduce(const v1::Validation& v) {
  for (const auto& s : v.steps())
    if (!is_all_reduce(s) && !finished_step(s))
      return std::nullopt;
  for (int i = 0; i < v.steps_size(); ++i) {
    const auto& s = v.steps(i);
    if (!is_all_reduce(s) || finished_step(s))
      continue;
    if (s.state() == queued || s.state() == yielded)
      return i;
    return std::nullopt;  // one runs: the next waits
  }
  return std::nullopt;
}

std::string all_reduce_run_name(const v1::Validation& v, int index, uint32_t attempt, int rank) {
  return clean_run_name(v.id() + "-allreduce-"
                        + std::to_string(v.steps(index).group_machines_size()) + "-"
                        + std::to_string(attempt) + "-r" + std::to_string(rank));
}

v1::RunSpec all_reduce_spec(const v1::Validation& v, int index, int rank, uint32_t gpus,
                            const std::string& root, const std::string& program) {
  const auto& s = v.steps(index);
  std::vector<std::string> command{program,     "allreduce",
                                   "--json",    "--rank",
                                   std::to_string(rank), "--ranks",
                                   std::to_string(s.group_machines_size()), "--root",
                                   root,        "--gpus",
                                   std::to_string(gpus)};
  return check_spec(v, all_reduce_run_name(v, index, s.attempts(), rank), s.group_machines(rank),
                    command, gpus);
}

std::vector<std::string> all_reduce_joined(const v1::Validation& v, int index) {
  const auto& s = v.steps(index);
  const v1::ValidationStep* before = nullptr;
  for (int i = 0; i < index; ++i)
    if (is_all_reduce(v.steps(i)))
      before = &v.steps(i);
  if (!before || before->state() != done || before->verdict() != "pass")
    return {};
  std::vector<std::string> out;
  for (const auto& m : s.group_machines())
    if (std::find(before->group_machines().begin(), before->group_machines().end(), m)
        == before->group_machines().end())
      out.push_back(m);
  return out;
}

std::vector<int> all_reduce_group_sizes(int n) {
  std::vector<int> out;
  for (int k = 2; k <= n; k *= 2)
    out.push_back(k);
  if (n >= 2 && out.back() != n)
    out.push_back(n);
  return out;
}

std::string size_text(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && u < 4 && std::fmod(v, 1024) == 0) {
    v /= 1024;
    ++u;
  }
  return show_number(v) + " " + units[u];
}

caf::expected<all_reduce_output> parse_all_reduce_perf(std::string_view text) {
  all_reduce_output out;
  std::optional<columns> cols;
  for (auto line : split_lines(text)) {
    auto f = fields(line);
    if (f.empty())
      continue;
    if (f[0] == "#") {
      // "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: ..."
      for (size_t i = 0; i + 1 < f.size(); ++i)
        if (f[i] == "maxBytes")
          if (auto v = number(f[i + 1]))
            out.max_bytes = static_cast<uint64_t>(*v);
      // "# Avg bus bandwidth    : 82.3287"
      if (f.size() >= 6 && f[1] == "Avg" && f[2] == "bus" && f[3] == "bandwidth")
        out.avg_busbw_gbs = number(f.back());
    }
    if (auto h = header_of(line)) {
      cols = std::move(h);
      continue;
    }
    if (!cols || f.size() != cols->count || !all_digits(f[0]))
      continue;
    auto at = [&](const char* name, size_t nth) -> std::optional<double> {
      auto i = cols->index(name, nth);
      return i ? number(f[*i]) : std::nullopt;
    };
    auto busbw = at("busbw", 0);
    if (!busbw)
      continue;
    all_reduce_row r;
    r.bytes = std::strtoull(std::string{f[0]}.c_str(), nullptr, 10);
    r.busbw_gbs = *busbw;
    r.algbw_gbs = at("algbw", 0).value_or(0);
    r.in_place_busbw_gbs = at("busbw", 1).value_or(0);
    if (auto i = cols->index("#wrong", 0))
      r.wrong = wrong_of(f[*i]);
    if (auto i = cols->index("#wrong", 1))
      r.in_place_wrong = wrong_of(f[*i]);
    out.rows.push_back(r);
  }
  if (out.rows.empty())
    return caf::make_error(ec::invalid_request,
                           "no all_reduce_perf table in the output (a row of size, count, type, "
                           "..., busbw under its header)");
  mark_truncated(out);
  return out;
}

caf::expected<all_reduce_output> all_reduce_output_of(const v1::CheckResult& measured) {
  all_reduce_output out;
  std::map<uint64_t, all_reduce_row> rows;
  for (const auto& m : measured.measurements()) {
    if (m.name() == "max_bytes") {
      out.max_bytes = static_cast<uint64_t>(m.value());
      continue;
    }
    if (m.gpu().empty() || !all_digits(m.gpu()))
      continue;
    auto& row = rows[std::strtoull(m.gpu().c_str(), nullptr, 10)];
    if (m.name() == "busbw")
      row.busbw_gbs = m.value();
    else if (m.name() == "busbw_in_place")
      row.in_place_busbw_gbs = m.value();
    else if (m.name() == "algbw")
      row.algbw_gbs = m.value();
    else if (m.name() == "wrong")
      row.wrong = static_cast<int64_t>(std::llround(m.value()));
    else if (m.name() == "wrong_in_place")
      row.in_place_wrong = static_cast<int64_t>(std::llround(m.value()));
  }
  for (auto& [bytes, row] : rows) {
    row.bytes = bytes;
    out.rows.push_back(row);
  }
  if (out.rows.empty())
    return caf::make_error(ec::invalid_request,
                           "rank 0's result holds no all-reduce size (" + measured.summary()
                             + ")");
  out.avg_busbw_gbs = 0.0;  // the check finished: its result line is its last
  mark_truncated(out);
  return out;
}

double expected_all_reduce_gbs(const std::vector<const v1::MachineView*>& group,
                               const thresholds& t) {
  if (group.empty())
    return 0;
  const bool infiniband = std::all_of(group.begin(), group.end(),
                                      [](const auto* m) { return infiniband_active(*m); });
  // Rail (device, port) -> the slowest rate and how many machines have it.
  std::map<std::pair<std::string, uint32_t>, std::pair<double, size_t>> rails;
  for (const auto* m : group)
    for (const auto& p : m->facts().rdma_ports()) {
      if (p.state() != "ACTIVE" || (infiniband && p.link_layer() != "InfiniBand"))
        continue;
      auto& r = rails.try_emplace({p.device(), p.port()}, p.rate_gbps(), 0).first->second;
      r.first = std::min(r.first, p.rate_gbps());
      ++r.second;
    }
  double gbps = 0;
  for (const auto& [key, r] : rails)
    if (r.second == group.size())
      gbps += r.first;
  return gbps / 8 * t.allreduce_efficiency;
}

v1::CheckResult judge_all_reduce(std::string_view text, const std::vector<std::string>& group,
                                 double expected_gbs, const thresholds& t,
                                 const std::vector<std::string>& joined,
                                 const std::vector<std::string>& suspects) {
  return judge_all_reduce(parse_all_reduce_perf(text), group, expected_gbs, t, joined, suspects);
}

v1::CheckResult judge_all_reduce(const caf::expected<all_reduce_output>& out,
                                 const std::vector<std::string>& group, double expected_gbs,
                                 const thresholds& t, const std::vector<std::string>& joined,
                                 const std::vector<std::string>& suspects) {
  v1::CheckResult r;
  r.set_check(all_reduce_check);
  const std::string over = "all-reduce over " + std::to_string(group.size()) + " machines";
  auto fail = [&](const std::string& what, const std::string& fix) {
    r.set_verdict("fail");
    r.set_summary(over + ": " + what);
    auto* f = r.add_findings();
    f->set_severity("fail");
    f->set_what(over + " (" + list_of(group) + "): " + what);
    f->set_fix(fix);
  };
  if (!out) {
    fail(render_error(out.error()),
         "Read rank 0's log (`astra logs RUN`): `astraeus-check allreduce` prints its "
         "all_reduce_perf table there, or why it stopped.");
    return r;
  }
  for (const auto& row : out->rows) {
    auto m = [&](const char* name, double value) {
      auto* x = r.add_measurements();
      x->set_name(name);
      x->set_gpu(std::to_string(row.bytes));
      x->set_value(value);
      x->set_unit("GB/s");
    };
    m("busbw", std::max(row.busbw_gbs, row.in_place_busbw_gbs));
    m("algbw", row.algbw_gbs);
  }
  auto* e = r.add_measurements();
  e->set_name("expected");
  e->set_value(expected_gbs);
  e->set_unit("GB/s");
  for (const auto& row : out->rows)
    if (row.wrong > 0 || row.in_place_wrong > 0) {
      fail("all_reduce_perf counted " + std::to_string(std::max(row.wrong, row.in_place_wrong))
             + " wrong value(s) at " + size_text(row.bytes) + " ("
             + (row.wrong > 0 ? "out-of-place" : "in-place") + "): data was corrupted",
           "Run the pairs (`astra astraeus validate --suite network`) and DCGM on these "
           "machines: a wrong sum is a faulty GPU, NIC or link, not a slow one.");
      return r;
    }
  if (!out->truncated.empty()) {
    fail("all_reduce_perf's output is cut short: " + out->truncated,
         "Read the run's log (`astra logs RUN`) for why all_reduce_perf stopped (an NCCL "
         "error, a worker that was stopped).");
    return r;
  }
  const auto& last = out->rows.back();
  double busbw = std::max(last.busbw_gbs, last.in_place_busbw_gbs);
  std::string figure = over + " at " + (expected_gbs > 0 ? percent(busbw / expected_gbs) : "?")
                       + " of expected (" + gbs(busbw) + " of " + gbs(expected_gbs) + " GB/s)";
  r.set_summary(figure);
  r.set_verdict("pass");
  if (expected_gbs <= 0)
    return r;
  double fraction = busbw / expected_gbs;
  if (fraction >= t.allreduce_warn_fraction)
    return r;
  const char* severity = fraction < t.allreduce_fail_fraction ? "fail" : "warn";
  r.set_verdict(severity);
  std::string who;
  if (!joined.empty()) {
    std::vector<std::string> named = suspects;
    for (const auto& j : joined)
      if (std::find(named.begin(), named.end(), j) == named.end())
        named.push_back(j);
    who = ": " + list_of(named) + " joined since the "
          + std::to_string(group.size() - joined.size()) + "-machine group passed";
    if (!suspects.empty())
      who += " (" + list_of(suspects) + " with a topology finding)";
  }
  auto* f = r.add_findings();
  f->set_severity(severity);
  f->set_what(figure + " at " + size_text(last.bytes) + who);
  f->set_fix("Check Topology (`astra astraeus topology`) for a finding on "
             + (joined.empty() ? std::string{"these machines"} : list_of(joined))
             + ", then run the pairs (`astra astraeus validate --suite network`) before "
               "assuming the fabric is fine.");
  return r;
}

v1::AllReducePoint all_reduce_point(const v1::ValidationStep& step) {
  v1::AllReducePoint p;
  p.set_machines(static_cast<uint32_t>(step.group_machines_size()));
  *p.mutable_group() = step.group_machines();
  p.set_verdict(step.state() == "Failed" ? "fail" : step.verdict());
  std::map<uint64_t, std::pair<double, double>> curve;  // bytes -> (busbw, algbw)
  for (const auto& m : step.result().measurements()) {
    if (m.name() == "expected")
      p.set_expected_gbs(m.value());
    else if (m.name() == "busbw")
      curve[std::strtoull(m.gpu().c_str(), nullptr, 10)].first = m.value();
    else if (m.name() == "algbw")
      curve[std::strtoull(m.gpu().c_str(), nullptr, 10)].second = m.value();
  }
  for (const auto& [bytes, bw] : curve) {
    auto* s = p.add_curve();
    s->set_bytes(bytes);
    s->set_busbw_gbs(bw.first);
    s->set_algbw_gbs(bw.second);
  }
  if (!curve.empty())
    p.set_busbw_gbs(curve.rbegin()->second.first);
  if (p.expected_gbs() > 0)
    p.set_fraction(p.busbw_gbs() / p.expected_gbs());
  if (p.verdict() != "pass")
    p.set_note(step.result().summary().empty() ? step.reason() : step.result().summary());
  return p;
}

std::string all_reduce_phrase(const std::vector<v1::AllReducePoint>& points) {
  const v1::AllReducePoint* largest = nullptr;
  for (const auto& p : points)
    if (p.busbw_gbs() > 0 && (!largest || p.machines() > largest->machines()))
      largest = &p;
  if (!largest || largest->expected_gbs() <= 0)
    return {};
  return "all-reduce over " + std::to_string(largest->machines()) + " machines at "
         + percent(largest->fraction()) + " of expected (" + gbs(largest->busbw_gbs()) + " of "
         + gbs(largest->expected_gbs()) + " GB/s)";
}

} // namespace astraeus::validation
