#include "actors/controller/gpu_health.hpp"

#include "messages/gpu_read.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace astraeus {

void gpu_health_history::add(const v1::Gpu& g, time_point now,
                             std::chrono::hours window) {
  sample s;
  s.at = now;
  if (g.ecc().has_volatile_correctable())
    s.ecc = g.ecc().volatile_correctable();
  if (g.has_pcie_replays())
    s.replays = g.pcie_replays();
  if (!g.nvlinks().empty()) {
    uint64_t sum = 0;
    bool any = false;
    for (const auto& l : g.nvlinks()) {
      if (l.has_replay_errors()) { sum += l.replay_errors(); any = true; }
      if (l.has_recovery_errors()) { sum += l.recovery_errors(); any = true; }
      if (l.has_crc_errors()) { sum += l.crc_errors(); any = true; }
    }
    if (any)
      s.nvlink = sum;
  }
  s.thermal = g.has_thermal_slowdown() && g.thermal_slowdown();
  // A run of equal samples keeps only its first and last: the middle ones
  // add no growth and split no heat interval, so every answer stays exact,
  // and a GPU whose counters stand still (most of them, most of the time)
  // keeps a handful of samples instead of one per report (8,640 a day at
  // the default 10 s).
  auto same = [](const sample& a, const sample& b) {
    return a.ecc == b.ecc && a.replays == b.replays && a.nvlink == b.nvlink
           && a.thermal == b.thermal;
  };
  auto n = samples_.size();
  if (n >= 2 && same(samples_[n - 2], samples_[n - 1]) && same(samples_[n - 1], s))
    samples_.back() = s;
  else
    samples_.push_back(s);
  window_start_ = now - window;
  // Keep one sample at or before the window's start as the baseline.
  while (samples_.size() >= 2 && samples_[1].at <= window_start_)
    samples_.pop_front();
}

uint64_t gpu_health_history::growth(std::optional<uint64_t> sample::*field) const {
  uint64_t total = 0;
  std::optional<uint64_t> prev;
  for (const auto& s : samples_) {
    const auto& v = s.*field;
    if (!v)
      continue;
    if (prev && *v > *prev)
      total += *v - *prev;
    prev = v;
  }
  return total;
}

uint64_t gpu_health_history::correctable_ecc() const {
  return growth(&sample::ecc);
}

uint64_t gpu_health_history::pcie_replays() const {
  return growth(&sample::replays);
}

uint64_t gpu_health_history::nvlink_errors() const {
  return growth(&sample::nvlink);
}

std::chrono::seconds gpu_health_history::thermal_slowdown() const {
  std::chrono::steady_clock::duration total{0};
  for (size_t i = 0; i + 1 < samples_.size(); ++i) {
    if (!samples_[i].thermal)
      continue;
    auto from = std::max(samples_[i].at, window_start_);
    auto to = samples_[i + 1].at;
    if (to > from)
      total += to - from;
  }
  return std::chrono::duration_cast<std::chrono::seconds>(total);
}

health_verdict evaluate_health(const v1::Gpu& g, const gpu_health_history& h,
                               bool assigned, int64_t now_unix_ms,
                               const health_thresholds& limits) {
  health_verdict out;
  char buf[160];
  // Faulty: anything latched.
  for (const auto& f : g.latches())
    out.reasons.push_back(f.reason());
  if (!out.reasons.empty()) {
    out.health = gpu_health::faulty;
    return out;
  }
  // Faulty: a GPU that does not answer its driver (lost, hung NVML calls,
  // a driver that cannot be read) is never placed, so never Healthy. A hang
  // that persists is latched on the machine (fault_latches); a short one is
  // shown here and clears with the next good read.
  if (auto status = read_status(g); !answers(status)) {
    out.health = gpu_health::faulty;
    out.reasons.push_back(std::string{to_string(status)} + ": "
                          + (g.status_detail().empty() ? "it does not answer its driver"
                                                       : g.status_detail()));
    return out;
  }
  // Foreign: memory in use that Astraeus did not hand out.
  if (!assigned && g.has_memory_total_bytes() && g.has_memory_used_bytes()
      && g.memory_total_bytes() > 0) {
    auto pct = 100.0 * static_cast<double>(g.memory_used_bytes())
               / static_cast<double>(g.memory_total_bytes());
    if (pct > limits.foreign_memory_percent) {
      // One decimal, rounded up: just over the limit never reads as the limit.
      std::snprintf(buf, sizeof(buf),
                    "%.1f%% of its memory in use outside Astraeus (> %.0f%%)",
                    std::ceil(pct * 10.0) / 10.0, limits.foreign_memory_percent);
      out.health = gpu_health::foreign;
      out.reasons.emplace_back(buf);
      return out;
    }
  }
  // AtRisk: what usually precedes a fault.
  auto over = [&](uint64_t n, uint64_t limit, const char* what) {
    if (n > limit)
      out.reasons.push_back(std::to_string(n) + " " + what + " in 24 h (> "
                            + std::to_string(limit) + ")");
  };
  over(h.correctable_ecc(), limits.correctable_ecc_24h, "correctable memory errors");
  over(h.pcie_replays(), limits.pcie_replays_24h, "PCIe replays");
  // NVLink-family Xids the driver did not confirm as faults count as NVLink
  // errors too (issue 17, rule 5): each logged event in the window once.
  uint64_t nvlink_xids = 0;
  {
    auto window_ms = std::chrono::duration_cast<std::chrono::milliseconds>(limits.window).count();
    for (const auto& inc : g.incidents())
      if (inc.action() == "nvlink-errors" && now_unix_ms - inc.last_seen_unix_ms() <= window_ms)
        nvlink_xids += inc.count();
  }
  over(h.nvlink_errors() + nvlink_xids, limits.nvlink_errors_24h, "NVLink errors");
  auto hot = h.thermal_slowdown();
  if (hot > limits.thermal_slowdown_24h)
    out.reasons.push_back("slowed down by heat for "
                          + std::to_string(hot.count() / 60) + " min "
                          + std::to_string(hot.count() % 60) + " s in 24 h (> "
                          + std::to_string(limits.thermal_slowdown_24h.count() / 60)
                          + " min)");
  if (g.temperatures_size() > 0) {
    // Sensors by label (AMD): the seed's threshold is written for the edge
    // sensor; junction and memory run hotter by design and are judged
    // against their own critical limit, where the driver gives one.
    for (const auto& t : g.temperatures()) {
      if (t.label() == "edge" && t.celsius() >= limits.temperature_c)
        std::snprintf(buf, sizeof(buf), "edge temperature %.0f °C (>= %.0f °C)", t.celsius(),
                      limits.temperature_c);
      else if (t.label() != "edge" && t.has_critical_c() && t.celsius() >= t.critical_c())
        std::snprintf(buf, sizeof(buf), "%s temperature %.0f °C (>= its critical %.0f °C)",
                      t.label().c_str(), t.celsius(), t.critical_c());
      else
        continue;
      out.reasons.emplace_back(buf);
    }
  } else if (g.has_temperature_c() && g.temperature_c() >= limits.temperature_c) {
    std::snprintf(buf, sizeof(buf), "temperature %.0f °C (>= %.0f °C)",
                  g.temperature_c(), limits.temperature_c);
    out.reasons.emplace_back(buf);
  }
  if (g.row_remapping().has_pending() && g.row_remapping().pending())
    out.reasons.push_back("a memory row is waiting to be remapped");
  auto window_ms = std::chrono::duration_cast<std::chrono::milliseconds>(limits.window).count();
  for (const auto& inc : g.incidents())
    if (inc.action() == "at-risk" && now_unix_ms - inc.last_seen_unix_ms() <= window_ms)
      out.reasons.push_back(
        (inc.has_xid() ? "Xid " + std::to_string(inc.xid()) : inc.kind())
        + " in the last 24 h (" + std::to_string(inc.count()) + "x): " + inc.text());
  if (!out.reasons.empty())
    out.health = gpu_health::at_risk;
  return out;
}

} // namespace astraeus
