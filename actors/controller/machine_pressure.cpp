#include "actors/controller/machine_pressure.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string_view>

namespace astraeus {

std::string format_bytes(uint64_t bytes) {
  static constexpr std::array<const char*, 6> units{"B",   "KiB", "MiB",
                                                    "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < units.size()) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0 || value >= 100.0 || value == static_cast<uint64_t>(value))
    std::snprintf(buf, sizeof(buf), "%.0f %s", value, units[unit]);
  else
    std::snprintf(buf, sizeof(buf), "%.1f %s", value, units[unit]);
  return buf;
}

pressure_verdict evaluate_pressure(const v1::HostFacts& facts,
                                   const pressure_thresholds& limits) {
  pressure_verdict out;
  char buf[160];
  const auto& mem = facts.memory();
  if (mem.total_bytes() > 0) {
    auto by_percent = static_cast<uint64_t>(
      static_cast<double>(mem.total_bytes()) * limits.memory_available_min_percent
      / 100.0);
    auto floor = std::max(limits.memory_available_min_bytes, by_percent);
    if (mem.available_bytes() < floor) {
      out.memory = true;
      out.reasons.push_back("memory available " + format_bytes(mem.available_bytes())
                            + " < " + format_bytes(floor));
    }
  }
  if (mem.pressure().present()
      && mem.pressure().full_avg10() > limits.memory_psi_full_avg10_max) {
    out.memory = true;
    std::snprintf(buf, sizeof(buf),
                  "memory stalls: PSI full avg10 %.1f%% > %.1f%%",
                  mem.pressure().full_avg10(), limits.memory_psi_full_avg10_max);
    out.reasons.emplace_back(buf);
  }
  static constexpr std::array<std::string_view, 5> watched{
    "/", "/var", "/var/lib", "/var/lib/astraeus", "/tmp"};
  for (const auto& fs : facts.filesystems()) {
    if (fs.shared() || fs.read_only() || fs.size_bytes() == 0)
      continue;
    if (std::find(watched.begin(), watched.end(), fs.mount_point())
        == watched.end())
      continue;
    auto free_percent = 100.0 * static_cast<double>(fs.free_bytes())
                        / static_cast<double>(fs.size_bytes());
    if (free_percent < limits.disk_free_min_percent) {
      out.disk = true;
      std::snprintf(buf, sizeof(buf), "disk %s has %.1f%% free (< %.0f%%)",
                    fs.mount_point().c_str(), free_percent,
                    limits.disk_free_min_percent);
      out.reasons.emplace_back(buf);
    }
  }
  return out;
}

} // namespace astraeus
