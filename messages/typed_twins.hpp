#pragma once
/// @file
/// The typed twins of string fields (issue 11): every field marked
/// `[(typed_twin) = true]` in messages/astraeus.proto, the `*_code` enum
/// beside the word it types. Stored and sent with the word; left out where
/// users read a document (the CLI's JSON), so what they see stays the word.

namespace google::protobuf {
class Message;
} // namespace google::protobuf

namespace astraeus {

/// Clears every typed-twin field of `msg` and of every message it holds
/// (repeated fields included; map values are not descended into: no map in
/// the schema holds a message with a twin). The twins are `optional`, so a
/// cleared one is absent from JSON even with `always_print_primitive_fields`.
void clear_typed_twins(google::protobuf::Message& msg);

} // namespace astraeus
