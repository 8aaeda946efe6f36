#pragma once
/// @file
/// Astraeus' error codes. Every fallible call returns `caf::error` or
/// `caf::expected<T>` carrying one of these, made with
/// `caf::make_error(astraeus::ec::X, "lower-case context")`.

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

namespace astraeus {

/// The error codes of Astraeus. Names are stable: they appear on the wire
/// (`v1::Error.code`, `v1::Refusal.code`) and in `astra` output.
enum class ec : uint8_t {
  /// Not an error.
  none = 0,
  /// A configuration key is unknown or its value is malformed.
  invalid_config,
  /// The store could not be opened, read or written (names the path).
  store_failure,
  /// A stored value does not parse (names the family and key).
  corrupt_record,
  /// A frame is malformed, truncated or does not parse.
  malformed_frame,
  /// A frame's length exceeds the configured cap.
  frame_too_large,
  /// The peer speaks another protocol version.
  incompatible_protocol,
  /// The peer sent something out of order (e.g. a report before hello).
  protocol_violation,
  /// No machine has the given name.
  no_such_machine,
  /// The name is registered to another machine identity.
  identity_mismatch,
  /// A request is missing a field or has a bad value.
  invalid_request,
  /// The controller could not be reached or did not answer in time.
  unreachable,
  /// A host file could not be read or parsed (names the path).
  host_read_failure,
  /// The peer said nothing before its deadline.
  timeout,
  /// The machine's agent is not connected (e.g. to clear a fault).
  not_connected,
  /// The secure channel's handshake failed: a bad signature or key, or
  /// the controller's key is not the pinned one (issue 7).
  handshake_failed,
  /// A sealed frame did not open: tampered, replayed, reordered or a frame
  /// was dropped. The session ends.
  channel_broken,
  /// A new machine presented no join token (or an unknown one).
  enrollment_required,
  /// The join token was already used by another machine (the seed's
  /// ENROLLMENT_USED).
  enrollment_used,
  /// The join token expired before it was used.
  enrollment_expired,
  /// No API token, or one that is unknown, expired or revoked.
  unauthenticated,
  /// The caller's role may not do this (e.g. a member cordoning).
  permission_denied,
  /// The request is well formed and allowed, but the cluster's state
  /// refuses it (e.g. revoking the cluster's last owner API token). The API
  /// answers 409 FAILED_PRECONDITION.
  failed_precondition,
  /// HA mode: this controller is a standby; another leads (its gate is
  /// named: v1::Refusal.leader).
  not_leader,
  /// HA mode: no controller leads yet (an election is under way); retry.
  no_leader,
};

/// The stable name of `x`, e.g. "no_such_machine".
const char* to_string(ec x);

/// Renders an Astraeus error for humans: its context's text, or the code
/// name when it has no context. Registered with CAF by
/// `astraeus::add_error_category(cfg)`.
std::string render_error(const caf::error& err);

/// Registers the "astraeus" error category on `cfg` (call on every
/// process's config; see shared/notes/caf-0.17.md).
void add_error_category(caf::actor_system_config& cfg);

} // namespace astraeus

CAF_ERROR_CODE_ENUM(astraeus::ec, "astraeus")
