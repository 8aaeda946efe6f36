#include "runtime/process/system_setup.hpp"

#include <caf/io/middleman.hpp>

#include "messages/error.hpp"
#include "messages/type_ids.hpp"

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
  // variable that an enqueue from another thread (the I/O multiplexer, a
  // syncer) notifies. A message arriving during those 50 ms waits up to
  // ~100 us for the next poll, on every hop: kernel-log line -> agent ->
  // gate -> machine -> GPU actor is several such hops (issue 17's latency).
  // Without the polling phase an idle worker waits on the condition
  // variable at once and is woken by the enqueue; it also stops burning CPU
  // on polls while the process idles (an agent beside the GPU work).
  cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
}

} // namespace astraeus
