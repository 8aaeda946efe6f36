#pragma once
/// @file
/// Small files that hold secrets or identities (an agent's key, the gate's
/// keys, the first owner API token, `astra login`'s credentials): written
/// atomically with mode 0600 from the moment they exist, read back trimmed.

#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace astraeus {

/// Writes `text` and a newline to `path` through a temporary file created
/// with mode 0600 (never readable by others, even for a moment), then
/// renames it into place; creates missing parent folders with mode 0700.
/// Errors: ec::store_failure naming the path and the reason.
caf::error write_private_file(const std::string& path, const std::string& text);

/// The content of `path` without surrounding blanks. Errors:
/// ec::store_failure naming the path ("cannot read ...: No such file or
/// directory").
caf::expected<std::string> read_trimmed_file(const std::string& path);

} // namespace astraeus
