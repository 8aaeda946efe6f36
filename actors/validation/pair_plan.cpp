// The pairs of a validation without actors (pair_plan.hpp).

#include "actors/validation/pair_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "actors/validation/all_reduce_plan.hpp"
#include "actors/validation/validation_plan.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/validation/fix_commands.hpp"

namespace astraeus::validation {

namespace {

constexpr const char* en_dash = "\xE2\x80\x93";
constexpr const char* of_best_marker = "of the best pair on that rail";

bool active(const v1::RdmaPort& p) {
  return ascii_lower(p.state()).find("active") != std::string::npos;
}

std::string one_decimal(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

bool finished_step(const v1::ValidationStep& s) {
  return s.state() == done || s.state() == failed;
}

} // namespace

std::vector<pair_round> pair_rounds(int n) {
  std::vector<pair_round> rounds;
  if (n < 2)
    return rounds;
  int m = n % 2 == 0 ? n : n + 1;  // odd: one slot is the bye
  std::vector<int> ring(m);
  for (int i = 0; i < m; ++i)
    ring[i] = i;
  for (int r = 0; r < m - 1; ++r) {
    pair_round round;
    for (int i = 0; i < m / 2; ++i) {
      int a = ring[i], b = ring[m - 1 - i];
      if (a < n && b < n)
        round.emplace_back(std::min(a, b), std::max(a, b));
    }
    std::sort(round.begin(), round.end());
    rounds.push_back(std::move(round));
    std::rotate(ring.begin() + 1, ring.end() - 1, ring.end());
  }
  return rounds;
}

bool suite_has_pairs(const std::string& suite) {
  return suite == "acceptance" || suite == "network";
}

void add_pair_steps(v1::Validation& v) {
  auto rounds = pair_rounds(v.machines_size());
  for (size_t r = 0; r < rounds.size(); ++r)
    for (const auto& [a, b] : rounds[r]) {
      auto* s = v.add_steps();
      s->set_machine(v.machines(a));
      s->set_peer(v.machines(b));
      s->set_round(static_cast<uint32_t>(r));
      s->set_check(pair_check);
      s->set_state(queued);
      s->set_validation(v.id());
    }
}

bool is_pair(const v1::ValidationStep& step) {
  return step.check() == pair_check;
}

bool machine_steps_finished(const v1::Validation& v) {
  return std::all_of(v.steps().begin(), v.steps().end(),
                     [](const auto& s) {
                       return is_pair(s) || is_all_reduce(s) || finished_step(s);
                     });
}

std::vector<int> startable_pairs(const v1::Validation& v) {
  std::vector<int> out;
  if (!machine_steps_finished(v))
    return out;
  std::optional<uint32_t> round;
  for (const auto& s : v.steps())
    if (is_pair(s) && !finished_step(s))
      round = std::min(round.value_or(s.round()), s.round());
  if (!round)
    return out;
  for (int i = 0; i < v.steps_size(); ++i) {
    const auto& s = v.steps(i);
    if (is_pair(s) && s.round() == *round && (s.state() == queued || s.state() == yielded))
      out.push_back(i);
  }
  return out;
}

std::vector<pair_rail> shared_rails(const v1::MachineView& a, const v1::MachineView& b) {
  std::vector<pair_rail> out;
  for (const auto& pa : a.facts().rdma_ports()) {
    if (!active(pa))
      continue;
    for (const auto& pb : b.facts().rdma_ports())
      if (pb.device() == pa.device() && pb.port() == pa.port() && active(pb)
          && pb.link_layer() == pa.link_layer()
          && (pa.subnet_prefix().empty() || pb.subnet_prefix().empty()
              || pa.subnet_prefix() == pb.subnet_prefix())) {
        double rate = std::min(pa.rate_gbps(), pb.rate_gbps());
        out.push_back({pa.device(), pa.port() == 0 ? 1u : pa.port(), rate > 0 ? rate : 1});
        break;
      }
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) {
    return std::tie(x.device, x.port) < std::tie(y.device, y.port);
  });
  return out;
}

std::string pair_run_name(const v1::Validation& v, int index, uint32_t attempt, bool server) {
  const auto& s = v.steps(index);
  return clean_run_name(v.id() + "-" + s.machine() + "-" + s.peer() + "-"
                        + std::to_string(attempt) + (server ? "-s" : "-c"));
}

v1::RunSpec pair_spec(const v1::Validation& v, int index, bool server,
                      const std::vector<pair_rail>& rails, const std::string& server_address,
                      const std::string& program) {
  const auto& s = v.steps(index);
  std::vector<std::string> command{program, "pair", "--json", "--role",
                                   server ? "server" : "client", "--rails",
                                   format_pair_rails(rails)};
  if (!server) {
    command.push_back("--peer");
    command.push_back(server_address);
  }
  return check_spec(v, pair_run_name(v, index, s.attempts(), server),
                    server ? s.machine() : s.peer(), command, 0);
}

std::string pair_label(const v1::ValidationStep& step) {
  return step.machine() + en_dash + step.peer();
}

namespace {

/// The best pair on each rail (device): its figure, and its figure over its
/// trained rate (how close a pair comes to what its links allow).
struct rail_best {
  double gbps = 0;
  double efficiency = 0;
};

double efficiency(const v1::PairResult& p) {
  return p.rate_gbps() > 0 ? p.gbps() / p.rate_gbps() : 0;
}

std::map<std::string, rail_best> bests_of(const std::vector<v1::PairResult>& results) {
  std::map<std::string, rail_best> out;
  for (const auto& p : results) {
    auto& b = out[p.device()];
    b.gbps = std::max(b.gbps, p.gbps());
    b.efficiency = std::max(b.efficiency, efficiency(p));
  }
  return out;
}

/// Below the best pair on its rail by more than its trained rate explains:
/// a pair whose slower end trained at 200 Gb/s is not held against pairs at
/// 400 (the topology finding names that port).
bool below_peers(const v1::PairResult& p, const rail_best& best, const thresholds& t) {
  return efficiency(p) < t.pairs_peer_fraction * best.efficiency;
}

} // namespace

std::vector<v1::PairResult> pair_results(const std::vector<const v1::ValidationStep*>& steps,
                                         const thresholds& t) {
  std::vector<v1::PairResult> out;
  for (const auto* s : steps) {
    if (!is_pair(*s) || s->state() != done)
      continue;
    std::map<std::string, double> rate;
    for (const auto& m : s->result().measurements())
      if (m.name() == "rate")
        rate[m.gpu()] = m.value();
    for (const auto& m : s->result().measurements()) {
      if (m.name() != "write_bw")
        continue;
      v1::PairResult p;
      p.set_a(s->machine());
      p.set_b(s->peer());
      p.set_device(m.gpu());
      p.set_gbps(m.value());
      p.set_rate_gbps(rate[m.gpu()]);
      p.set_verdict(m.verdict().empty() ? "pass" : m.verdict());
      out.push_back(std::move(p));
    }
  }
  auto bests = bests_of(out);
  for (auto& p : out) {
    const auto& b = bests[p.device()];
    p.set_of_best(b.gbps > 0 ? p.gbps() / b.gbps : 0);
    if (p.verdict() == "pass" && below_peers(p, b, t))
      p.set_verdict("warn");
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) {
    return std::tie(x.a(), x.b(), x.device()) < std::tie(y.a(), y.b(), y.device());
  });
  return out;
}

std::vector<int> judge_pairs(v1::Validation& v, const thresholds& t) {
  std::vector<int> changed;
  std::vector<const v1::ValidationStep*> steps;
  for (const auto& s : v.steps()) {
    if (is_pair(s) && !finished_step(s))
      return changed;
    steps.push_back(&s);
  }
  auto results = pair_results(steps, t);
  auto bests = bests_of(results);
  for (int i = 0; i < v.steps_size(); ++i) {
    auto& s = *v.mutable_steps(i);
    if (!is_pair(s) || s.state() != done)
      continue;
    bool judged = std::any_of(s.result().findings().begin(), s.result().findings().end(),
                              [](const auto& f) {
                                return f.what().find(of_best_marker) != std::string::npos;
                              });
    if (judged)
      continue;
    bool added = false;
    for (const auto& p : results) {
      if (p.a() != s.machine() || p.b() != s.peer() || !below_peers(p, bests[p.device()], t))
        continue;
      auto* f = s.mutable_result()->add_findings();
      f->set_severity("warn");
      f->set_gpu(p.device());
      f->set_machine(s.machine());
      f->set_check(pair_check);
      f->set_what(pair_label(s) + " " + p.device() + " at "
                  + std::to_string(static_cast<int>(std::lround(p.of_best() * 100))) + "% "
                  + of_best_marker + " (" + one_decimal(p.gbps()) + " of "
                  + one_decimal(bests[p.device()].gbps) + " Gb/s)");
      f->set_fix("Compare both machines' " + p.device() + " in `" + fix_command::topology() + "`; "
                 "`mlxlink -d " + p.device() + " -m` on " + s.machine() + " and " + s.peer()
                 + " shows each link's speed and errors.");
      added = true;
    }
    if (!added)
      continue;
    if (s.verdict() == "pass" || s.verdict() == "skipped")
      s.set_verdict("warn");
    if (s.result().verdict() == "pass")
      s.mutable_result()->set_verdict("warn");
    changed.push_back(i);
  }
  return changed;
}

std::string machine_pairs_verdict(const std::vector<std::string>& verdicts) {
  if (verdicts.empty())
    return {};
  size_t bad = 0, skipped = 0;
  std::string worst = "pass";
  for (const auto& v : verdicts) {
    skipped += v == "skipped";
    if (v != "fail" && v != "warn")
      continue;
    ++bad;
    if (worst != "fail")
      worst = v;
  }
  if (skipped == verdicts.size())
    return "skipped";
  return bad * 2 > verdicts.size() ? worst : "pass";
}

std::string weakest_pair_phrase(const std::vector<v1::PairResult>& pairs) {
  std::map<std::pair<std::string, std::string>, double> total;
  for (const auto& p : pairs)
    total[{p.a(), p.b()}] += p.gbps();
  if (total.size() < 2)
    return {};
  auto weakest = total.begin();
  double top = 0;
  for (auto it = total.begin(); it != total.end(); ++it) {
    top = std::max(top, it->second);
    if (it->second < weakest->second)
      weakest = it;
  }
  if (top <= 0)
    return {};
  return "pair " + weakest->first.first + en_dash + weakest->first.second + " at "
         + std::to_string(static_cast<int>(std::lround(weakest->second / top * 100)))
         + "% of the best pair";
}

}  // namespace astraeus::validation
