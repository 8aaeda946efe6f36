#include "messages/gpu_health_state.hpp"

#include "messages/astraeus.pb.h"

namespace astraeus {

// The C++ values are the wire values.
static_assert(static_cast<int>(gpu_health::healthy) == v1::GpuHealth::healthy);
static_assert(static_cast<int>(gpu_health::at_risk) == v1::GpuHealth::at_risk);
static_assert(static_cast<int>(gpu_health::faulty) == v1::GpuHealth::faulty);
static_assert(static_cast<int>(gpu_health::foreign) == v1::GpuHealth::foreign);

namespace {

std::optional<gpu_health> from_code(v1::GpuHealth::Value code) {
  if (code == v1::GpuHealth::unset || !v1::GpuHealth::Value_IsValid(code))
    return std::nullopt;
  return static_cast<gpu_health>(code);
}

v1::GpuHealth::Value to_code(gpu_health health) {
  return static_cast<v1::GpuHealth::Value>(health);
}

} // namespace

const char* to_string(gpu_health x) {
  switch (x) {
    case gpu_health::healthy: return "Healthy";
    case gpu_health::at_risk: return "AtRisk";
    case gpu_health::faulty: return "Faulty";
    case gpu_health::foreign: return "Foreign";
  }
  return "Faulty";
}

std::optional<gpu_health> parse_gpu_health(std::string_view text) {
  for (auto x : {gpu_health::healthy, gpu_health::at_risk, gpu_health::faulty,
                 gpu_health::foreign})
    if (text == to_string(x))
      return x;
  return std::nullopt;
}

gpu_health health_of(const v1::GpuView& view) {
  if (auto h = from_code(view.health_code()))
    return *h;
  return parse_gpu_health(view.health()).value_or(gpu_health::healthy);
}

std::optional<gpu_health> health_of(const v1::SchedulerGpu& gpu) {
  if (auto h = from_code(gpu.health_code()))
    return h;
  if (gpu.health().empty())
    return gpu_health::healthy;
  return parse_gpu_health(gpu.health());
}

void set_health(v1::GpuView& view, gpu_health health) {
  view.set_health_code(to_code(health));
  view.set_health(to_string(health));
}

void set_health(v1::SchedulerGpu& gpu, gpu_health health) {
  gpu.set_health_code(to_code(health));
  gpu.set_health(to_string(health));
}

} // namespace astraeus
