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
}

} // namespace astraeus
