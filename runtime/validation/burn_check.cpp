#include "runtime/validation/burn_check.hpp"

#include <algorithm>
#include <cstdio>

#include "runtime/faults/xid_policy.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/validation/fix_commands.hpp"

namespace astraeus::validation {

namespace {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

/// NVIDIA's meaning of an Xid, from the Xid policy's table.
std::string xid_meaning(uint64_t xid) {
  static const auto table = xid_policy{}.table();
  for (const auto& e : table.entries())
    if (e.xid() == xid)
      return e.meaning();
  return {};
}

/// The fix for clocks held back by `reasons` (disallowed bits only).
std::string reason_fix(uint64_t reasons, const std::string& gpu) {
  if (reasons & (clock_reason::hw_slowdown | clock_reason::hw_power_brake))
    return "check " + gpu + "'s power cables and the chassis' power supplies and power brake "
           "(`nvidia-smi -q -d PERFORMANCE -i " + gpu + "`); replace the GPU if it persists";
  return "reset the clock settings of " + gpu + " (`nvidia-smi -rac -i " + gpu
         + "`, `nvidia-smi -rgc`)";
}

}  // namespace

std::string clock_reason_text(uint64_t r) {
  static const std::pair<uint64_t, const char*> names[] = {
    {clock_reason::gpu_idle, "idle"},
    {clock_reason::applications_clocks, "applications clocks setting"},
    {clock_reason::sw_power_cap, "power cap"},
    {clock_reason::hw_slowdown, "HW slowdown"},
    {clock_reason::sync_boost, "sync boost"},
    {clock_reason::sw_thermal, "SW thermal slowdown"},
    {clock_reason::hw_thermal, "HW thermal slowdown"},
    {clock_reason::hw_power_brake, "HW power brake"},
    {clock_reason::display_clocks, "display clock setting"},
  };
  std::string out;
  for (const auto& [bit, name] : names)
    if (r & bit)
      out += (out.empty() ? "" : ", ") + std::string{name};
  if (r & ~uint64_t{0x1ff})
    out += std::string{out.empty() ? "" : ", "} + "other (0x" + [&] {
      char b[20];
      std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(r & ~uint64_t{0x1ff}));
      return std::string{b};
    }() + ")";
  return out;
}

void judge_burn(const std::vector<burn_figures>& gpus, const std::string& watch_problem,
                const thresholds& t, check_result& out) {
  if (!watch_problem.empty())
    out.add_finding(verdict::warn, "",
                    "NVML could not be watched during the burn-in (" + watch_problem
                      + "): clocks, throttling and Xids were not checked",
                    "run the quick check: the NVIDIA driver and NVML must answer");
  bool all_clocks = std::all_of(gpus.begin(), gpus.end(), [](const burn_figures& g) {
    return g.mean_sm_clock_mhz && *g.mean_sm_clock_mhz > 0;
  });
  // Work per MHz where every GPU's clock is known ("at equal clocks"), else raw.
  auto rate = [&](const burn_figures& g) {
    return all_clocks ? *g.tflops / *g.mean_sm_clock_mhz : *g.tflops;
  };
  const burn_figures* best = nullptr;
  double best_raw = 0;  // the most work any GPU did, TFLOP/s
  for (const auto& g : gpus)
    if (g.tflops && g.cuda_error.empty()) {
      if (!best || rate(g) > rate(*best))
        best = &g;
      best_raw = std::max(best_raw, *g.tflops);
    }
  for (const auto& g : gpus) {
    if (!g.cuda_error.empty())
      out.add_finding(verdict::fail, g.gpu, "CUDA error on " + g.gpu + " during the burn-in: "
                                              + g.cuda_error,
                      "look for an Xid for " + g.gpu + " in `dmesg`; reset the GPU when idle or "
                      "reboot; an error that recurs means a faulty GPU");
    for (auto xid : g.xids) {
      auto meaning = xid_meaning(xid);
      out.add_finding(verdict::fail, g.gpu,
                      "Xid " + std::to_string(xid) + " on " + g.gpu + " during the burn-in"
                        + (meaning.empty() ? "" : " (" + meaning + ")"),
                      "see `" + fix_command::xids() + "` for what Xid " + std::to_string(xid)
                        + " means; reset the GPU or reboot, and replace it if the Xid returns");
    }
    if (g.wrong_results)
      out.add_finding(verdict::fail, g.gpu,
                      g.gpu + " computed results that differ between passes of the same kernel",
                      "take " + g.gpu + " out of service and run `dcgmi diag -r 3`; wrong results "
                      "mean a faulty GPU (RMA)");
    if (auto bad = g.reasons_seen & ~clock_reason::allowed)
      out.add_finding(verdict::fail, g.gpu,
                      g.gpu + "'s clocks were held back by " + clock_reason_text(bad)
                        + " during the burn-in", reason_fix(bad, g.gpu));
    if (g.max_temperature_c) {
      bool hot = *g.max_temperature_c > t.burn_max_temperature_c;
      out.add_measurement({"max_temperature", g.gpu, "", *g.max_temperature_c, "C",
                           "<= " + show_number(t.burn_max_temperature_c),
                           hot ? verdict::warn : verdict::pass});
      if (hot)
        out.add_finding(verdict::warn, g.gpu,
                        g.gpu + " reached " + fmt(*g.max_temperature_c) + " C during the burn-in",
                        "check the airflow and fans of the chassis around " + g.gpu);
    }
    if (g.mean_sm_clock_mhz)
      out.add_measurement({"sm_clock", g.gpu, "", *g.mean_sm_clock_mhz, "MHz", "", verdict::pass});
    if (g.mean_power_w)
      out.add_measurement({"power", g.gpu, "", *g.mean_power_w, "W", "", verdict::pass});
    if (!g.tflops || !best)
      continue;
    // Per MHz excuses a GPU held to a lower clock; it never condemns one
    // that did as much work as the best (a seventh new-user trial's six
    // GPUs at 1980 MHz "failed" beside two at 345 MHz doing the same 50
    // TFLOP/s).
    bool slow = gpus.size() > 1 && rate(g) < t.burn_peer_fraction * rate(*best)
                && *g.tflops < t.burn_peer_fraction * best_raw;
    out.add_measurement({"fp32", g.gpu, "", *g.tflops, "TFLOP/s",
                         gpus.size() > 1 ? ">= " + show_number(t.burn_peer_fraction) + " x best"
                                             + (all_clocks ? " per MHz" : "")
                                         : "",
                         slow ? verdict::fail : verdict::pass});
    if (slow) {
      const auto percent =
        std::to_string(static_cast<int>(rate(g) / rate(*best) * 100 + 0.5)) + " %";
      std::string what = g.gpu + " did " + fmt(*g.tflops) + " TFLOP/s, " + percent
                         + " of the best GPU's " + fmt(*best->tflops) + " (" + best->gpu + ")";
      if (all_clocks) {
        double lo = std::min(*g.mean_sm_clock_mhz, *best->mean_sm_clock_mhz);
        double hi = std::max(*g.mean_sm_clock_mhz, *best->mean_sm_clock_mhz);
        if (lo >= t.burn_equal_clock_fraction * hi)
          what += " at equal clocks (" + fmt(*g.mean_sm_clock_mhz) + " vs "
                  + fmt(*best->mean_sm_clock_mhz) + " MHz)";
        else
          // Clocks apart: the share is of the work per MHz, which the raw
          // figures alone do not show (a sixth new-user trial read "did
          // 50.0 TFLOP/s, 17 % of the best GPU's 50.0").
          what = g.gpu + " did " + fmt(*g.tflops) + " TFLOP/s at "
                 + fmt(*g.mean_sm_clock_mhz) + " MHz, " + percent
                 + " of the best GPU's work per MHz of SM clock (" + best->gpu + ": "
                 + fmt(*best->tflops) + " TFLOP/s at " + fmt(*best->mean_sm_clock_mhz)
                 + " MHz)";
      }
      out.add_finding(verdict::fail, g.gpu, what,
                      "run `dcgmi diag -r 3` on " + g.gpu + "; reseat it, and replace it if it "
                      "stays slower than its peers");
    }
  }
}

}  // namespace astraeus::validation
