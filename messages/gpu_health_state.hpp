#pragma once
/// @file
/// A GPU's health as one type for the whole controller: the health judge
/// (actors/controller/gpu_health.hpp) decides it, the machine actor hands
/// it to the scheduler (`v1::SchedulerGpu`), the placement engine acts on it
/// (actors/scheduler/placement.hpp) and `astra gpus` shows it
/// (`v1::GpuView`). Stored records carry the word ("Healthy") and, since
/// issue 11, `health_code`; the accessors read the enum when set, else the
/// word.

#include <cstdint>
#include <optional>
#include <string_view>

namespace astraeus {

namespace v1 {
class GpuView;
class SchedulerGpu;
} // namespace v1

/// A GPU's health (shared/seeds/gpus.md, "Health"; values equal
/// `v1::GpuHealth`).
enum class gpu_health : uint8_t {
  healthy = 1, ///< used
  at_risk = 2, ///< used only when no healthy placement exists; never for healthy_only
  faulty = 3,  ///< fenced: never used
  foreign = 4, ///< memory in use outside Astraeus: not used meanwhile
};

/// "Healthy", "AtRisk", "Faulty" or "Foreign" (the words users read).
const char* to_string(gpu_health x);
/// The health for its word; nullopt for any other word (also for "").
std::optional<gpu_health> parse_gpu_health(std::string_view text);

/// The health a view shows: `health_code` when set, else `health` parsed
/// ("" and unknown words read as Healthy, as `astra gpus` showed them).
gpu_health health_of(const v1::GpuView& view);
/// The health the scheduler acts on: `health_code` when set, else `health`
/// parsed ("" is Healthy; nullopt for an unknown word).
std::optional<gpu_health> health_of(const v1::SchedulerGpu& gpu);
/// Set `health_code` and `health`.
void set_health(v1::GpuView& view, gpu_health health);
void set_health(v1::SchedulerGpu& gpu, gpu_health health);

} // namespace astraeus
