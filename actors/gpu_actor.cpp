#include "actors/gpu_actor.hpp"

#include <chrono>

namespace astraeus {

v1::GpuView gpu_state::view() const {
  v1::GpuView out;
  out.set_machine(machine);
  *out.mutable_gpu() = facts;
  out.set_health("Healthy");
  out.set_holder(holder);
  out.set_last_seen_unix_ms(last_seen_unix_ms);
  out.set_machine_up(machine_up);
  return out;
}

gpu_actor::behavior_type gpu(gpu_actor::stateful_pointer<gpu_state> self,
                             std::string machine, v1::Gpu facts,
                             bool machine_up) {
  auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
  };
  self->state.machine = std::move(machine);
  self->state.facts = std::move(facts);
  self->state.machine_up = machine_up;
  self->state.last_seen_unix_ms = machine_up ? now_ms() : 0;
  return {
    [self, now_ms](v1::Gpu& facts) {
      self->state.facts = std::move(facts);
      self->state.last_seen_unix_ms = now_ms();
    },
    [self](atom::machine_up, bool up) { self->state.machine_up = up; },
    [self](atom::get) { return self->state.view(); },
  };
}

} // namespace astraeus
