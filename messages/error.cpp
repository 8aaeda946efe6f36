#include "messages/error.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/message.hpp>

namespace astraeus {

const char* to_string(ec x) {
  switch (x) {
    case ec::none: return "none";
    case ec::invalid_config: return "invalid_config";
    case ec::store_failure: return "store_failure";
    case ec::corrupt_record: return "corrupt_record";
    case ec::malformed_frame: return "malformed_frame";
    case ec::frame_too_large: return "frame_too_large";
    case ec::incompatible_protocol: return "incompatible_protocol";
    case ec::protocol_violation: return "protocol_violation";
    case ec::no_such_machine: return "no_such_machine";
    case ec::identity_mismatch: return "identity_mismatch";
    case ec::invalid_request: return "invalid_request";
    case ec::unreachable: return "unreachable";
    case ec::host_read_failure: return "host_read_failure";
    case ec::timeout: return "timeout";
    case ec::not_connected: return "not_connected";
    case ec::handshake_failed: return "handshake_failed";
    case ec::channel_broken: return "channel_broken";
    case ec::enrollment_required: return "enrollment_required";
    case ec::enrollment_used: return "enrollment_used";
    case ec::enrollment_expired: return "enrollment_expired";
    case ec::unauthenticated: return "unauthenticated";
    case ec::permission_denied: return "permission_denied";
    case ec::failed_precondition: return "failed_precondition";
    case ec::not_leader: return "not_leader";
    case ec::no_leader: return "no_leader";
  }
  return "unknown";
}

namespace {

std::string context_text(const caf::message& ctx) {
  std::string out;
  for (size_t i = 0; i < ctx.size(); ++i) {
    if (!out.empty())
      out += ": ";
    if (ctx.match_element<std::string>(i))
      out += ctx.get_as<std::string>(i);
    else
      out += ctx.stringify(i);
  }
  return out;
}

} // namespace

std::string render_error(const caf::error& err) {
  if (!err)
    return "no error";
  if (err.category() == caf::atom("astraeus")) {
    auto text = context_text(err.context());
    return text.empty() ? std::string{to_string(static_cast<ec>(err.code()))}
                        : text;
  }
  auto text = context_text(err.context());
  return text.empty() ? caf::to_string(err) : text;
}

void add_error_category(caf::actor_system_config& cfg) {
  cfg.add_error_category(
    caf::atom("astraeus"), [](uint8_t code, caf::atom_value,
                              const caf::message& ctx) -> std::string {
      auto text = context_text(ctx);
      std::string out = "astraeus.";
      out += to_string(static_cast<ec>(code));
      if (!text.empty()) {
        out += ": ";
        out += text;
      }
      return out;
    });
}

} // namespace astraeus
