#include "messages/api_error.hpp"

#include <cctype>

#include "messages/astraeus.pb.h"

namespace astraeus {

std::string api_error_code(const std::string& code) {
  std::string out = code;
  for (auto& c : out)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

int http_status_of(const v1::Error& err) {
  const auto& c = err.code();
  const auto& m = err.message();
  if (c == "unauthenticated")
    return 401;
  if (c == "permission_denied")
    return 403;
  if (c == "no_such_machine")
    return 404;
  if (c == "not_connected" || c == "enrollment_used" || c == "identity_mismatch"
      || c == "failed_precondition")
    return 409;
  if (c == "enrollment_expired")
    return 410;
  if (c == "timeout" || c == "unreachable")
    return 504;
  if (c == "invalid_request") {
    // The request table's words tell a missing thing and a name in use
    // from a bad value (actors/controller/cluster_requests.cpp).
    if (m.rfind("no run named", 0) == 0 || m.rfind("no workspace named", 0) == 0
        || m.rfind("no validation named", 0) == 0
        || m.find("has no worker") != std::string::npos
        || m.find(" has no GPU ") != std::string::npos
        || m.rfind("no API token has", 0) == 0 || m.rfind("no join token has", 0) == 0
        || m.rfind("no validation policy for", 0) == 0)
      return 404;
    if (m.find("already exists") != std::string::npos
        || m.find("exists already") != std::string::npos
        || m.find(" is already stopping") != std::string::npos  // issue 23 item 6
        || m.find(" is already deleted") != std::string::npos)
      return 409;
    if (m.rfind("this controller", 0) == 0)
      return 501;
    return 400;
  }
  if (c == "store_failure" || c == "corrupt_record")
    return 500;
  return 500;
}

std::string api_error_code(const v1::Error& err) {
  if (err.code() == "invalid_request") {
    auto status = http_status_of(err);
    if (status == 404)
      return api_error_code("not_found");
    if (status == 409)
      return api_error_code("already_exists");
  }
  return api_error_code(err.code());
}

} // namespace astraeus
