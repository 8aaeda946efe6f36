#include "messages/report_readings.hpp"

namespace astraeus {

namespace {

void clear_gpu_readings(v1::Gpu& g) {
  g.clear_memory_used_bytes();
  g.clear_utilization_percent();
  g.clear_temperature_c();
  g.clear_power_watts();
  g.clear_sm_clock_mhz();
  g.clear_memory_clock_mhz();
  g.clear_fan_percent();
  g.clear_temperatures();
}

} // namespace

v1::HostFacts without_readings(const v1::HostFacts& facts) {
  v1::HostFacts out = facts;
  out.clear_uptime_seconds();
  auto* memory = out.mutable_memory();
  memory->clear_available_bytes();
  memory->clear_swap_free_bytes();
  memory->clear_pressure();
  out.clear_io_pressure();
  out.clear_cpu_pressure();
  out.mutable_cpu()->clear_use_percent();
  for (auto& node : *out.mutable_cpu()->mutable_nodes())
    node.clear_memory_free_bytes();
  for (auto& fs : *out.mutable_filesystems())
    fs.clear_free_bytes();
  for (auto& g : *out.mutable_gpus()->mutable_gpus())
    clear_gpu_readings(g);
  return out;
}

v1::HostReadings readings_only(const v1::HostFacts& facts) {
  v1::HostReadings out;
  out.set_uptime_seconds(facts.uptime_seconds());
  out.set_memory_available_bytes(facts.memory().available_bytes());
  out.set_swap_free_bytes(facts.memory().swap_free_bytes());
  if (facts.memory().has_pressure())
    *out.mutable_memory_pressure() = facts.memory().pressure();
  if (facts.has_io_pressure())
    *out.mutable_io_pressure() = facts.io_pressure();
  if (facts.has_cpu_pressure())
    *out.mutable_cpu_pressure() = facts.cpu_pressure();
  if (facts.cpu().has_use_percent())
    out.set_cpu_use_percent(facts.cpu().use_percent());
  for (const auto& node : facts.cpu().nodes()) {
    out.add_numa_node_ids(node.id());
    out.add_numa_memory_free_bytes(node.memory_free_bytes());
  }
  // Free space by position alone: the mount points are the full report's
  // (a mount or unmount makes the next report full).
  for (const auto& fs : facts.filesystems())
    out.add_filesystem_free_bytes(fs.free_bytes());
  for (const auto& g : facts.gpus().gpus()) {
    auto* r = out.add_gpus();
    r->set_id(g.id());
    if (g.has_memory_used_bytes()) r->set_memory_used_bytes(g.memory_used_bytes());
    if (g.has_utilization_percent()) r->set_utilization_percent(g.utilization_percent());
    if (g.has_temperature_c()) r->set_temperature_c(g.temperature_c());
    if (g.has_power_watts()) r->set_power_watts(g.power_watts());
    if (g.has_sm_clock_mhz()) r->set_sm_clock_mhz(g.sm_clock_mhz());
    if (g.has_memory_clock_mhz()) r->set_memory_clock_mhz(g.memory_clock_mhz());
    if (g.has_fan_percent()) r->set_fan_percent(g.fan_percent());
    *r->mutable_temperatures() = g.temperatures();
  }
  return out;
}

void apply_gpu_readings(const v1::GpuReadings& readings, v1::Gpu& facts) {
  clear_gpu_readings(facts);
  if (readings.has_memory_used_bytes()) facts.set_memory_used_bytes(readings.memory_used_bytes());
  if (readings.has_utilization_percent())
    facts.set_utilization_percent(readings.utilization_percent());
  if (readings.has_temperature_c()) facts.set_temperature_c(readings.temperature_c());
  if (readings.has_power_watts()) facts.set_power_watts(readings.power_watts());
  if (readings.has_sm_clock_mhz()) facts.set_sm_clock_mhz(readings.sm_clock_mhz());
  if (readings.has_memory_clock_mhz()) facts.set_memory_clock_mhz(readings.memory_clock_mhz());
  if (readings.has_fan_percent()) facts.set_fan_percent(readings.fan_percent());
  *facts.mutable_temperatures() = readings.temperatures();
}

std::string readings_misfit(const v1::HostReadings& readings, const v1::HostFacts& facts) {
  const auto& gpus = readings.gpus();
  if (gpus.size() != facts.gpus().gpus_size())
    return std::to_string(gpus.size()) + " GPU(s) in the readings, "
           + std::to_string(facts.gpus().gpus_size()) + " in the facts";
  for (int i = 0; i < gpus.size(); ++i)
    if (gpus.Get(i).id() != facts.gpus().gpus(i).id())
      return "GPU " + std::to_string(i) + " is " + gpus.Get(i).id() + " in the readings, "
             + facts.gpus().gpus(i).id() + " in the facts";
  if (readings.filesystem_free_bytes_size() != facts.filesystems_size())
    return "another count of filesystems";
  const auto& nodes = facts.cpu().nodes();
  if (readings.numa_node_ids_size() != nodes.size()
      || readings.numa_memory_free_bytes_size() != nodes.size())
    return "another count of NUMA nodes";
  for (int i = 0; i < nodes.size(); ++i)
    if (readings.numa_node_ids(i) != nodes.Get(i).id())
      return "another NUMA node at " + std::to_string(i);
  return {};
}

std::string apply_readings(v1::HostReadings& readings, v1::HostFacts& facts) {
  if (auto why = readings_misfit(readings, facts); !why.empty())
    return why;
  const auto& gpus = readings.gpus();
  facts.set_uptime_seconds(readings.uptime_seconds());
  auto* memory = facts.mutable_memory();
  memory->set_available_bytes(readings.memory_available_bytes());
  memory->set_swap_free_bytes(readings.swap_free_bytes());
  if (readings.has_memory_pressure())
    memory->mutable_pressure()->Swap(readings.mutable_memory_pressure());
  else
    memory->clear_pressure();
  if (readings.has_io_pressure())
    facts.mutable_io_pressure()->Swap(readings.mutable_io_pressure());
  else
    facts.clear_io_pressure();
  if (readings.has_cpu_pressure())
    facts.mutable_cpu_pressure()->Swap(readings.mutable_cpu_pressure());
  else
    facts.clear_cpu_pressure();
  auto* cpu = facts.mutable_cpu();
  if (readings.has_cpu_use_percent())
    cpu->set_use_percent(readings.cpu_use_percent());
  else
    cpu->clear_use_percent();
  for (int i = 0; i < readings.numa_memory_free_bytes_size(); ++i)
    cpu->mutable_nodes(i)->set_memory_free_bytes(readings.numa_memory_free_bytes(i));
  for (int i = 0; i < readings.filesystem_free_bytes_size(); ++i)
    facts.mutable_filesystems(i)->set_free_bytes(readings.filesystem_free_bytes(i));
  for (int i = 0; i < gpus.size(); ++i)
    apply_gpu_readings(gpus.Get(i), *facts.mutable_gpus()->mutable_gpus(i));
  return {};
}

} // namespace astraeus
