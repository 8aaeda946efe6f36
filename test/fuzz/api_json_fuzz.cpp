// libFuzzer target: the HTTP API's JSON decoding (messages/json.hpp), what
// every API body goes through. The first byte picks the message the body is
// read as; the rest is the body. Invariants: no crash, no sanitizer report,
// a refused body leaves the message empty, and an accepted one prints back
// to JSON that parses into the same message. Issue 19.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include <google/protobuf/util/message_differencer.h>

#include "messages/astraeus.pb.h"
#include "messages/json.hpp"

using namespace astraeus;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  std::unique_ptr<google::protobuf::Message> msg;
  switch (data[0] % 6) {
    case 0: msg = std::make_unique<v1::CreateJoinToken>(); break;
    case 1: msg = std::make_unique<v1::SetLabels>(); break;
    case 2: msg = std::make_unique<v1::Workspace>(); break;
    case 3: msg = std::make_unique<v1::CreateApiToken>(); break;
    case 4: msg = std::make_unique<v1::SetMaintenance>(); break;
    default: msg = std::make_unique<v1::RunSpec>(); break;
  }
  std::string_view body{reinterpret_cast<const char*>(data + 1), size - 1};
  if (message_from_json(body, *msg)) {
    if (msg->ByteSizeLong() != 0)
      std::abort();  // a refused body must leave nothing behind
    return 0;
  }
  auto again = msg->New();
  std::unique_ptr<google::protobuf::Message> owned{again};
  if (message_from_json(message_to_json(*msg, false), *again))
    std::abort();  // what we print must read back
  if (!google::protobuf::util::MessageDifferencer::Equals(*again, *msg))
    std::abort();  // (maps serialise in any order: compare fields)
  return 0;
}
