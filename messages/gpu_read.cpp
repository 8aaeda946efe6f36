#include "messages/gpu_read.hpp"

#include "messages/astraeus.pb.h"

namespace astraeus {

// The C++ values are the wire values.
static_assert(static_cast<int>(gpu_read_status::ok) == v1::GpuReadStatus::ok);
static_assert(static_cast<int>(gpu_read_status::unresponsive) == v1::GpuReadStatus::unresponsive);
static_assert(static_cast<int>(gpu_read_status::lost) == v1::GpuReadStatus::lost);
static_assert(static_cast<int>(gpu_read_status::unavailable) == v1::GpuReadStatus::unavailable);
static_assert(static_cast<int>(gpu_read_as::unknown) == v1::GpuReadAs::unset);
static_assert(static_cast<int>(gpu_read_as::pending) == v1::GpuReadAs::pending);
static_assert(static_cast<int>(gpu_read_as::driver) == v1::GpuReadAs::driver);
static_assert(static_cast<int>(gpu_read_as::nvidia_smi) == v1::GpuReadAs::nvidia_smi);
static_assert(static_cast<int>(gpu_read_as::no_gpu) == v1::GpuReadAs::no_gpu);
static_assert(static_cast<int>(gpu_read_as::unresponsive) == v1::GpuReadAs::unresponsive);
static_assert(static_cast<int>(gpu_read_as::unavailable) == v1::GpuReadAs::unavailable);

namespace {

constexpr gpu_read_status all_statuses[] = {gpu_read_status::ok, gpu_read_status::unresponsive,
                                            gpu_read_status::lost, gpu_read_status::unavailable};

constexpr gpu_read_as all_reads[] = {gpu_read_as::pending,      gpu_read_as::driver,
                                     gpu_read_as::nvidia_smi,   gpu_read_as::no_gpu,
                                     gpu_read_as::unresponsive, gpu_read_as::unavailable};

} // namespace

const char* to_string(gpu_read_status x) {
  switch (x) {
    case gpu_read_status::ok: return "ok";
    case gpu_read_status::unresponsive: return "unresponsive";
    case gpu_read_status::lost: return "lost";
    case gpu_read_status::unavailable: return "unavailable";
  }
  return "ok";
}

std::optional<gpu_read_status> parse_gpu_read_status(std::string_view text) {
  if (text.empty())
    return gpu_read_status::ok;
  for (auto x : all_statuses)
    if (text == to_string(x))
      return x;
  return std::nullopt;
}

gpu_read_status read_status(const v1::Gpu& gpu) {
  if (gpu.status_code() != v1::GpuReadStatus::unset
      && v1::GpuReadStatus::Value_IsValid(gpu.status_code()))
    return static_cast<gpu_read_status>(gpu.status_code());
  return parse_gpu_read_status(gpu.status()).value_or(gpu_read_status::ok);
}

void set_read_status(v1::Gpu& gpu, gpu_read_status status) {
  gpu.set_status_code(static_cast<v1::GpuReadStatus::Value>(status));
  gpu.set_status(to_string(status));
}

bool answers(gpu_read_status status) {
  return status == gpu_read_status::ok;
}

bool readings_current(gpu_read_status status) {
  return status == gpu_read_status::ok || status == gpu_read_status::lost;
}

const char* to_string(gpu_read_as x) {
  switch (x) {
    case gpu_read_as::unknown: return "";
    case gpu_read_as::pending: return "pending";
    case gpu_read_as::driver: return "driver: healthy";
    case gpu_read_as::nvidia_smi: return "nvidia-smi";
    case gpu_read_as::no_gpu: return "no-gpu";
    case gpu_read_as::unresponsive: return "unresponsive";
    case gpu_read_as::unavailable: return "unavailable";
  }
  return "";
}

gpu_read_as parse_gpu_read_as(std::string_view text) {
  for (auto x : all_reads)
    if (text == to_string(x))
      return x;
  return gpu_read_as::unknown;
}

gpu_read_as read_as(const v1::GpuSection& section) {
  if (section.read_as_code() != v1::GpuReadAs::unset
      && v1::GpuReadAs::Value_IsValid(section.read_as_code()))
    return static_cast<gpu_read_as>(section.read_as_code());
  return parse_gpu_read_as(section.read_as());
}

void set_read_as(v1::GpuSection& section, gpu_read_as how) {
  section.set_read_as_code(static_cast<v1::GpuReadAs::Value>(how));
  section.set_read_as(to_string(how));
}

bool is_complete_read(gpu_read_as how) {
  return how == gpu_read_as::driver || how == gpu_read_as::nvidia_smi
         || how == gpu_read_as::no_gpu;
}

} // namespace astraeus
