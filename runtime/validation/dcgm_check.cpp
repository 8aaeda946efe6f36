#include "runtime/validation/dcgm_check.hpp"

#include <chrono>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "messages/error.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/process/program_run.hpp"

namespace astraeus::validation {

const char* const dcgm_not_installed =
  "DCGM is not installed (no dcgmi; DCGM is not in Debian): install NVIDIA's "
  "datacenter-gpu-manager-4 from NVIDIA's CUDA repository and start nv-hostengine, or pass "
  "--dcgmi PATH; acceptance's burn and copies checks stand in for it";

namespace {

using json = nlohmann::json;

std::string text(const json& j, const char* key) {
  auto i = j.find(key);
  if (i == j.end())
    return {};
  if (i->is_string())
    return i->get<std::string>();
  if (i->is_number_integer())
    return std::to_string(i->get<long long>());
  return {};
}

verdict status_verdict(const std::string& s) {
  auto l = ascii_lower(s);
  if (l == "pass")
    return verdict::pass;
  if (l == "warn" || l == "warning")
    return verdict::warn;
  if (l == "fail")
    return verdict::fail;
  return verdict::skipped;  // Skip, Not Run
}

/// The warning texts of one result: "warnings": [{"warning": ..., "error_id": N}] or a string.
std::string warnings_of(const json& r) {
  std::string out;
  auto add = [&](const std::string& w) {
    if (!w.empty())
      out += (out.empty() ? "" : "; ") + w;
  };
  for (const char* key : {"warnings", "warning", "errors"}) {
    auto i = r.find(key);
    if (i == r.end())
      continue;
    if (i->is_string())
      add(i->get<std::string>());
    else if (i->is_array())
      for (const auto& w : *i) {
        if (w.is_string()) {
          add(w.get<std::string>());
        } else if (w.is_object()) {
          auto t = text(w, "warning");
          if (t.empty())
            t = text(w, "error");
          auto id = text(w, "error_id");
          add(t + (id.empty() ? "" : " (DCGM error " + id + ")"));
        }
      }
  }
  return out;
}

std::string gpu_of(const json& r) {
  for (const char* key : {"gpu_id", "entity_id", "gpu_ids"})
    if (auto t = text(r, key); !t.empty())
      return "GPU " + t;
  return {};
}

}  // namespace

caf::expected<check_result> parse_dcgm_diag(std::string_view json_text, int level) {
  // dcgmi may print a line before the JSON.
  auto b = json_text.find('{');
  auto e = json_text.rfind('}');
  if (b == std::string_view::npos || e == std::string_view::npos || e < b)
    return caf::make_error(ec::invalid_request, "dcgmi printed no JSON");
  auto j = json::parse(json_text.substr(b, e - b + 1), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return caf::make_error(ec::invalid_request, "dcgmi's output is not JSON");
  const json* diag = nullptr;
  for (const char* key : {"DCGM Diagnostic", "DCGM GPU Diagnostic"})
    if (auto i = j.find(key); i != j.end() && i->is_object())
      diag = &*i;
  if (!diag || !diag->contains("test_categories") || !(*diag)["test_categories"].is_array())
    return caf::make_error(ec::invalid_request,
                           "dcgmi's JSON has no \"DCGM Diagnostic\" test_categories");
  check_result out;
  out.check = "dcgm";
  int tests = 0;
  for (const auto& cat : (*diag)["test_categories"]) {
    if (!cat.is_object() || !cat.contains("tests") || !cat["tests"].is_array())
      continue;
    for (const auto& t : cat["tests"]) {
      auto name = text(t, "name");
      auto rs = t.find("results");
      if (rs == t.end() || !rs->is_array())
        continue;
      ++tests;
      for (const auto& r : *rs) {
        if (!r.is_object())
          continue;
        auto v = status_verdict(text(r, "status"));
        auto gpu = gpu_of(r);
        if (v == verdict::skipped)
          continue;
        out.add_measurement({"dcgm " + name, gpu, "", v == verdict::pass ? 1.0 : 0.0, "pass",
                             "Pass", v});
        if (v == verdict::pass)
          continue;
        auto w = warnings_of(r);
        out.add_finding(v, gpu,
                        "DCGM " + name + (gpu.empty() ? "" : " on " + gpu) + ": "
                          + (v == verdict::fail ? "failed" : "warned")
                          + (w.empty() ? "" : ": " + w),
                        "run `dcgmi diag -r " + std::to_string(level) + "` again"
                          + (gpu.empty() ? "" : " on " + gpu)
                          + "; a test that fails twice means the GPU needs service: "
                            "send DCGM's log (/var/log/nvidia-dcgm/) with the RMA");
      }
    }
  }
  if (tests == 0)
    return caf::make_error(ec::invalid_request, "dcgmi's JSON lists no test");
  out.summary = out.findings.empty() ? "DCGM diag level " + std::to_string(level) + ": "
                                         + std::to_string(tests) + " tests pass on every GPU"
                                     : default_summary(out);
  return out;
}

check_result run_dcgm(const check_options& o) {
  auto start = std::chrono::steady_clock::now();
  const auto& t = o.policy.values();
  int level = o.dcgm_level.value_or(static_cast<int>(t.dcgm_level));
  check_result out;
  out.check = "dcgm";
  auto dcgmi = resolve_program(o.dcgmi);
  if (dcgmi.empty() || ::access(dcgmi.c_str(), X_OK) != 0) {
    out.result = verdict::skipped;
    out.summary = dcgm_not_installed;
    return out;
  }
  auto deadline = start + std::chrono::milliseconds{static_cast<long long>(t.dcgm_timeout_s * 1000)};
  auto run = run_program(o.dcgmi, {"diag", "-r", std::to_string(level), "-j"}, deadline);
  auto took = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  if (!run.started || run.timed_out) {
    out.add_finding(verdict::fail, "",
                    run.timed_out ? "dcgmi diag -r " + std::to_string(level) + " ran past "
                                      + show_number(t.dcgm_timeout_s) + " s"
                                  : "dcgmi cannot run: " + run.error,
                    "check that nv-hostengine runs (`systemctl status nvidia-dcgm`) and that "
                    "dcgmi's version matches it");
    out.summary = out.findings.front().what;
    out.duration_s = took();
    return out;
  }
  auto parsed = parse_dcgm_diag(run.out, level);
  if (!parsed) {
    out.add_finding(verdict::fail, "",
                    "dcgmi diag exited " + std::to_string(run.exit_code) + ": "
                      + render_error(parsed.error()) + " (" + std::string{trim(run.err).substr(0, 200)}
                      + ")",
                    "check that nv-hostengine runs (`systemctl status nvidia-dcgm`)");
    out.summary = out.findings.front().what;
    out.duration_s = took();
    return out;
  }
  parsed->duration_s = took();
  return std::move(*parsed);
}

}  // namespace astraeus::validation
