#include "runtime/validation/check_result.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

#include "messages/error.hpp"

namespace astraeus::validation {

const char* to_string(verdict v) {
  switch (v) {
    case verdict::skipped: return "skipped";
    case verdict::pass: return "pass";
    case verdict::warn: return "warn";
    case verdict::fail: return "fail";
  }
  return "fail";
}

std::optional<verdict> parse_verdict(std::string_view text) {
  for (auto v : {verdict::skipped, verdict::pass, verdict::warn, verdict::fail})
    if (text == to_string(v))
      return v;
  return std::nullopt;
}

verdict worse(verdict a, verdict b) {
  return static_cast<int>(a) >= static_cast<int>(b) ? a : b;
}

void check_result::add_finding(verdict severity, std::string gpu, std::string what,
                               std::string fix) {
  result = worse(result, severity);
  findings.push_back(finding{severity, std::move(gpu), std::move(what), std::move(fix)});
}

void check_result::add_measurement(measurement m) {
  result = worse(result, m.result);
  measurements.push_back(std::move(m));
}

std::string to_json_line(const check_result& r) {
  // nlohmann::ordered_json keeps the contract's key order.
  nlohmann::ordered_json j;
  j["check"] = r.check;
  j["verdict"] = to_string(r.result);
  j["summary"] = r.summary;
  auto ms = nlohmann::ordered_json::array();
  for (const auto& m : r.measurements) {
    nlohmann::ordered_json e;
    e["name"] = m.name;
    e["gpu"] = m.gpu;
    if (!m.peer.empty())
      e["peer"] = m.peer;
    // Three decimals are more than any check measures to.
    e["value"] = std::isfinite(m.value) ? std::round(m.value * 1000) / 1000 : 0.0;
    e["unit"] = m.unit;
    e["expected"] = m.expected;
    e["verdict"] = to_string(m.result);
    ms.push_back(std::move(e));
  }
  j["measurements"] = std::move(ms);
  auto fs = nlohmann::ordered_json::array();
  for (const auto& f : r.findings) {
    nlohmann::ordered_json e;
    e["severity"] = to_string(f.severity);
    e["gpu"] = f.gpu;
    e["what"] = f.what;
    e["fix"] = f.fix;
    fs.push_back(std::move(e));
  }
  j["findings"] = std::move(fs);
  j["duration_s"] = static_cast<double>(static_cast<long long>(r.duration_s * 10 + 0.5)) / 10;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

caf::error bad(const std::string& what) {
  return caf::make_error(ec::invalid_request, "check result: " + what);
}

std::string text_of(const nlohmann::json& j, const char* key) {
  auto i = j.find(key);
  return i != j.end() && i->is_string() ? i->get<std::string>() : std::string{};
}

}  // namespace

caf::expected<check_result> parse_check_result(std::string_view line) {
  auto j = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return bad("not a JSON object");
  check_result r;
  r.check = text_of(j, "check");
  if (r.check.empty())
    return bad("no \"check\"");
  auto v = parse_verdict(text_of(j, "verdict"));
  if (!v)
    return bad("\"verdict\" is not pass, warn, fail or skipped");
  r.result = *v;
  r.summary = text_of(j, "summary");
  if (auto i = j.find("duration_s"); i != j.end() && i->is_number())
    r.duration_s = i->get<double>();
  if (auto i = j.find("measurements"); i != j.end() && i->is_array()) {
    for (const auto& e : *i) {
      if (!e.is_object())
        return bad("a measurement is not an object");
      measurement m;
      m.name = text_of(e, "name");
      m.gpu = text_of(e, "gpu");
      m.peer = text_of(e, "peer");
      if (auto x = e.find("value"); x != e.end() && x->is_number())
        m.value = x->get<double>();
      m.unit = text_of(e, "unit");
      m.expected = text_of(e, "expected");
      auto mv = parse_verdict(text_of(e, "verdict"));
      if (!mv)
        return bad("measurement \"" + m.name + "\" has no valid verdict");
      m.result = *mv;
      r.measurements.push_back(std::move(m));
    }
  }
  if (auto i = j.find("findings"); i != j.end() && i->is_array()) {
    for (const auto& e : *i) {
      if (!e.is_object())
        return bad("a finding is not an object");
      finding f;
      auto sv = parse_verdict(text_of(e, "severity"));
      if (!sv)
        return bad("a finding has no valid severity");
      f.severity = *sv;
      f.gpu = text_of(e, "gpu");
      f.what = text_of(e, "what");
      f.fix = text_of(e, "fix");
      r.findings.push_back(std::move(f));
    }
  }
  return r;
}

int exit_status(verdict v) {
  return v == verdict::fail ? 1 : 0;
}

std::string default_summary(const check_result& r) {
  if (!r.findings.empty()) {
    auto n = r.findings.size();
    return std::to_string(n) + (n == 1 ? " finding: " : " findings: ") + r.findings.front().what;
  }
  return "all " + std::to_string(r.measurements.size()) + " measurements pass";
}

check_result finish_result(check_result r, std::chrono::steady_clock::time_point start,
                           const std::string& pass_summary) {
  if (r.summary.empty())
    r.summary = r.findings.empty() ? pass_summary : default_summary(r);
  r.duration_s =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace astraeus::validation
