#include "runtime/process/system_setup.hpp"

#include <caf/io/middleman.hpp>

#include "messages/error.hpp"
#include "messages/type_ids.hpp"
#include "runtime/process/wake_stealing.hpp"

namespace astraeus {

void register_astraeus_types(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::astraeus>();
  add_error_category(cfg);
}

void configure_actor_system(caf::actor_system_config& cfg) {
  register_astraeus_types(cfg);
  cfg.load<caf::io::middleman>();
  // CAF 0.17's work-stealing workers, out of work, spin 100 times, then poll
  // 500 times with a 50 us sleep between polls (~100 us each with the
  // kernel's timer slack, ~50 ms in all), and only then wait on a condition
  // variable that only an enqueue from outside the workers notifies (issue
  // 17's latency: up to ~100 us per hop; issue 14: with the polls off, a
  // message sent between actors never woke the idle worker, and the process
  // used one core). wake_stealing.hpp: the same queues, no polling phase,
  // and every enqueue wakes a sleeping worker.
  cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
  use_wake_stealing(cfg);
}

} // namespace astraeus
