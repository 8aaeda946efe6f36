#pragma once
/// @file
/// The one JSON mapping of Astraeus' messages: the protobuf JSON mapping
/// with every field printed, the proto's field names, and the typed twins
/// left out (messages/typed_twins.hpp: users read the words). `astra -o
/// json` and the HTTP API both print through here, so they print the same
/// objects; the API reads request bodies through here too.

#include <cstdint>
#include <string>
#include <string_view>

#include <caf/error.hpp>

namespace google::protobuf {
class Message;
} // namespace google::protobuf

namespace astraeus {

/// `msg` as JSON: `whitespace` true indents it (astra), false prints one line
/// (the API).
std::string message_to_json(const google::protobuf::Message& msg, bool whitespace);

/// Parses `text` into `out` (cleared first). Unknown fields are refused so a
/// misspelt field is not silently dropped. Errors: ec::invalid_request with
/// the parser's words, e.g. "body: invalid JSON: Expected : between key:value
/// pair" or "body: Invalid value for boolean field \"cordoned\"". `what`
/// names the document in the message ("body").
caf::error message_from_json(std::string_view text, google::protobuf::Message& out,
                             const std::string& what = "body");

/// A partial update: parses `text` as message_from_json does, then sets in
/// `into` only the fields whose keys the JSON object has (by the proto's
/// name or the JSON name); every other field of `into` keeps its value, so
/// `{"burn_in_seconds": 120}` changes the burn-in alone. On an error `into`
/// is unchanged; errors as message_from_json's.
caf::error merge_json_keys(std::string_view text, google::protobuf::Message& into,
                           const std::string& what = "body");

/// `unix_ms` as RFC 3339 in UTC, "2026-12-01T14:05:09Z": how the API's
/// answers write a date beside its `*_unix_ms` field (a join token's
/// `expires`).
std::string rfc3339_utc(int64_t unix_ms);

} // namespace astraeus
