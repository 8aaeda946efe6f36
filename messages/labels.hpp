#pragma once
/// @file
/// The one rule for a machine label, wherever a label is given: `astra
/// label`, a join token's labels (`astra tokens create --label`, the API's
/// enrollment-tokens body), a workspace grant. Keys may carry a prefix with
/// '/' as topology labels do (`topology.astraeus.io/rack=r12`, machines.md).
/// And how text a caller sent is kept or shown as one line (`one_line_text`).

#include <cstddef>
#include <string>
#include <string_view>

#include <caf/error.hpp>

namespace astraeus {

/// Longest label key, prefix included (characters).
constexpr size_t max_label_key = 253;
/// Longest label value (characters).
constexpr size_t max_label_value = 63;

/// Checks one label: the key is 1–253 letters, digits, '-', '_', '.' or
/// '/'; the value 1–63 letters, digits, '-', '_' or '.'. Returns none, or
/// ec::invalid_request naming the label and the rule it breaks.
caf::error check_label(const std::string& key, const std::string& value);

/// Checks an API token's name (who holds it, `astra api-tokens create
/// --name`): 1-63 letters, digits, '-', '_' or '.', as a label's value (the
/// controller's rule, checked by `astra` too). Returns none, or
/// ec::invalid_request "API token name 'X': 1-63 letters, digits, '-', '_' or '.'".
caf::error check_api_token_name(const std::string& name);

/// Checks a workspace name: 1-63 letters, digits and '-', starting with a
/// letter or digit (the controller's rule, checked by `astra` too, so a bad
/// name is a usage error before anything is sent). Returns none, or
/// ec::invalid_request "workspace name 'X': use 1-63 letters, ...".
caf::error check_workspace_name(const std::string& name);

/// `path` as a workspace's Bind grant is kept: absolute, without "." and
/// empty components or a trailing '/' ("/data//set/" -> "/data/set"); ""
/// when it is not a path a workspace may be granted (relative, "..",
/// control characters, longer than 4096 bytes, or "/": the whole machine).
/// Issue 16; the controller's rule, checked by `astra` too.
std::string normal_grant_path(const std::string& path);

/// `text` as one line for a log or a terminal: each control byte (below
/// 0x20, and 0x7f) written as "\xHH", so a name someone sent cannot start a
/// new line, move the cursor or colour the terminal; other bytes (UTF-8) as
/// they are. Longer than `most_bytes`: cut there (not inside a UTF-8
/// character) and "..." added.
std::string one_line_text(std::string_view text, size_t most_bytes = static_cast<size_t>(-1));

} // namespace astraeus
