#pragma once
/// @file
/// The gate's wire format: each frame is a 4-byte big-endian length followed
/// by that many bytes of a serialized `astraeus::v1::Frame`. The length is
/// checked against a cap before anything is allocated for the body.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// The gate protocol version this build speaks: 2 since the secure channel
/// (runtime/gate/secure_channel.hpp). A hello carrying another version is refused
/// with `ec::incompatible_protocol`.
constexpr uint32_t protocol_version = 2;

/// Size of the length prefix, in bytes.
constexpr size_t frame_header_size = 4;

/// Default frame-size cap, in bytes (1 MiB); configurable as `gate.frame_cap`.
constexpr uint64_t default_frame_cap = 1u << 20;

/// Serializes `frame` with its 4-byte big-endian length prefix.
std::string encode_frame(const v1::Frame& frame);

/// The 4-byte big-endian length prefix of an `n`-byte record.
std::string frame_length_prefix(uint32_t n);

/// Reads a length prefix (exactly `frame_header_size` bytes at `header`).
/// Errors: `ec::malformed_frame` for a zero length (a frame without a body),
/// `ec::frame_too_large` when the length exceeds `cap` bytes.
caf::expected<uint32_t> decode_frame_length(const char* header, uint64_t cap);

/// Parses a frame body of `size` bytes. Errors: `ec::malformed_frame` when
/// the bytes are not a `v1::Frame` or the frame carries no body.
caf::expected<v1::Frame> decode_frame_body(const char* data, size_t size);

/// A short name of the frame's body for logs, e.g. "hello", "report".
std::string_view frame_kind(const v1::Frame& frame);

/// Incremental decoder for a byte stream: feed it what the socket gave,
/// then take whole frames out. After an error the reader stays failed.
class frame_reader {
public:
  /// A reader that refuses frames longer than `cap` bytes.
  explicit frame_reader(uint64_t cap = default_frame_cap) : cap_(cap) {
  }

  /// Appends `size` received bytes.
  void feed(const char* data, size_t size);

  /// The next whole frame; `std::nullopt` when more bytes are needed.
  /// Errors as `decode_frame_length` and `decode_frame_body`.
  caf::expected<std::optional<v1::Frame>> next();

  /// The next whole record's bytes (what follows a length prefix, unparsed:
  /// a sealed frame); `std::nullopt` when more bytes are needed. Errors as
  /// `decode_frame_length`.
  caf::expected<std::optional<std::string>> next_record();

  /// Changes the cap for the records still to come (the secure channel
  /// accepts only small records before its handshake completes).
  void set_cap(uint64_t cap) {
    cap_ = cap;
  }

private:
  uint64_t cap_;
  std::string buffer_;
  caf::error failed_;
};

} // namespace astraeus
