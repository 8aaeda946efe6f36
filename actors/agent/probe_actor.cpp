#include "actors/agent/probe_actor.hpp"

namespace astraeus {

probe_actor::behavior_type probe(probe_actor::stateful_pointer<probe_state> self,
                                 gpu_discovery_options options) {
  self->state.discovery = std::make_unique<gpu_discovery>(std::move(options));
  return {
    [self](atom::discovered, bool rdma_up) -> v1::GpuSection {
      return self->state.discovery->discover(rdma_up);
    },
  };
}

} // namespace astraeus
