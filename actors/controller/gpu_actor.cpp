#include "actors/controller/gpu_actor.hpp"

#include "messages/report_readings.hpp"
#include "runtime/process/wall_clock.hpp"

#include <chrono>

#include <spdlog/spdlog.h>

namespace astraeus {

v1::GpuView gpu_state::view() const {
  v1::GpuView out;
  out.set_machine(machine);
  *out.mutable_gpu() = facts;
  set_health(out, verdict.health);
  for (const auto& r : verdict.reasons)
    out.add_health_reasons(r);
  out.set_holder(holder);
  out.set_last_seen_unix_ms(last_seen_unix_ms);
  out.set_machine_up(machine_up);
  return out;
}

namespace {

std::string joined(const std::vector<std::string>& xs) {
  std::string out;
  for (const auto& x : xs)
    out += (out.empty() ? "" : "; ") + x;
  return out;
}

/// Re-judges the GPU and tells its machine when the health changed.
void judge(gpu_actor::stateful_pointer<gpu_state> self) {
  auto& st = self->state;
  auto before = st.verdict;
  st.verdict = evaluate_health(st.facts, st.history, !st.holder.empty(),
                               st.clock->now_unix_ms());
  // A field that keeps reading [Unknown Error] makes a usable GPU at risk.
  if (!st.read_error_reasons.empty()
      && (st.verdict.health == gpu_health::healthy || st.verdict.health == gpu_health::at_risk)) {
    st.verdict.health = gpu_health::at_risk;
    st.verdict.reasons.insert(st.verdict.reasons.end(), st.read_error_reasons.begin(),
                              st.read_error_reasons.end());
  }
  if (st.verdict.health == before.health && st.verdict.reasons == before.reasons)
    return;
  if (st.verdict.health != before.health)
    spdlog::log(st.verdict.health == gpu_health::healthy ? spdlog::level::info
                                                          : spdlog::level::warn,
                "gpu {} on {}: {} -> {}{}{}", st.facts.id(), st.machine,
                to_string(before.health), to_string(st.verdict.health),
                st.verdict.reasons.empty() ? "" : ": ", joined(st.verdict.reasons));
  if (st.machine_handle)
    self->send(st.machine_handle, atom::health_v, st.facts.id(), st.verdict.health,
               joined(st.verdict.reasons));
}

} // namespace

gpu_actor::behavior_type gpu(gpu_actor::stateful_pointer<gpu_state> self,
                             std::string machine, v1::Gpu facts,
                             bool machine_up, machine_actor machine_handle,
                             std::shared_ptr<const wall_clock> clock) {
  auto& st = self->state;
  st.clock = clock ? std::move(clock) : real_wall_clock();
  st.machine = std::move(machine);
  st.facts = std::move(facts);
  st.machine_up = machine_up;
  st.machine_handle = std::move(machine_handle);
  st.last_seen_unix_ms = machine_up ? st.clock->now_unix_ms() : 0;
  if (machine_up)
    st.history.add(st.facts, self->clock().now(), health_thresholds{}.window);
  judge(self);
  return {
    [self](v1::Gpu& facts) {
      auto& st = self->state;
      st.facts = std::move(facts);
      st.last_seen_unix_ms = st.clock->now_unix_ms();
      st.history.add(st.facts, self->clock().now(), health_thresholds{}.window);
      st.read_error_reasons = st.read_errors.take(st.facts);
      judge(self);
    },
    [self](atom::readings, const v1::GpuReadings& readings) {
      auto& st = self->state;
      apply_gpu_readings(readings, st.facts);
      st.last_seen_unix_ms = st.clock->now_unix_ms();
      st.history.add(st.facts, self->clock().now(), health_thresholds{}.window);
      // Its unknown fields are the full report's, read again (a readings
      // report is sent only while they stay the same): a streak goes on.
      st.read_error_reasons = st.read_errors.take(st.facts);
      judge(self);
    },
    [self](atom::machine_up, bool up) { self->state.machine_up = up; },
    [self](atom::assign, std::string& holder) {
      if (holder == self->state.holder)
        return;
      self->state.holder = std::move(holder);
      judge(self);
    },
    [self](atom::get) { return self->state.view(); },
  };
}

} // namespace astraeus
