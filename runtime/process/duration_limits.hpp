#pragma once
/// @file
/// Durations people type (`--burn-in 10m`, `--deadline 1h`, `--ttl 30d`)
/// and API fields in seconds (`burn_in_seconds`), each with the longest
/// value that makes sense: one parser and one bound check, so a negative
/// value never wraps to 18446744073709551316 s and an absurd one (a token
/// valid until the year 275817) is refused naming the limit.

#include <cstdint>
#include <string_view>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace astraeus {

/// The longest burn-in of a validation or a pool's acceptance: 7 days.
constexpr uint64_t max_burn_in_seconds = 7ull * 86400;

/// The longest drain deadline (`astra drain --deadline`): 30 days.
constexpr uint64_t max_drain_deadline_seconds = 30ull * 86400;

/// The longest an API token may stay valid (`astra api-tokens create
/// --ttl`): 10 years (3650 days). No TTL at all: valid until revoked.
constexpr uint64_t max_api_token_ttl_seconds = 3650ull * 86400;

/// Parses `text` ("10m", "1h30m", "7d", "90" seconds) for `what` (the
/// flag, e.g. "--burn-in") in whole seconds, at most `max_seconds`.
/// Errors (ec::invalid_request): "--burn-in: '-5m' is not a duration: it is
/// negative", "--burn-in: '5x' is not a duration (use 10m, 90s, 2h, 7d or a
/// number of seconds)", "--burn-in: '99999999h' is too long: at most 7d".
caf::expected<uint64_t> parse_bounded_seconds(std::string_view text, std::string_view what,
                                              uint64_t max_seconds);

/// Refuses `seconds` over `max_seconds` for `what` (an API field, e.g.
/// "burn_in_seconds"): ec::invalid_request "burn_in_seconds: 18446744073709551615
/// is too long: at most 604800 (7d)". None when within.
caf::error check_seconds_bound(uint64_t seconds, std::string_view what, uint64_t max_seconds);

} // namespace astraeus
