#pragma once
/// @file
/// Process-wide logging through spdlog. Every line names its actor or
/// component first ("machine gpu-01: ..."), so a grep finds one actor's story.

#include <string>

#include <caf/error.hpp>

namespace astraeus {

/// Sets up the default spdlog logger for `process` (e.g. "controller").
/// `level`: trace|debug|info|warn|error|off. `file`: empty = stderr.
/// Errors: `ec::invalid_config` for an unknown level or a file that cannot
/// be opened (the message names it).
caf::error setup_logging(const std::string& process, const std::string& level,
                         const std::string& file);

} // namespace astraeus
