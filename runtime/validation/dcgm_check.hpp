#pragma once
/// @file
/// The dcgm check (issue 21): `dcgmi diag -r <level> -j` where DCGM is
/// installed, parsed per test and GPU. DCGM is not in Debian: without
/// dcgmi the verdict is skipped and the summary says how to install it
/// (shared/notes/anchors/validation-anchors.md, "DCGM: what it is and what
/// happens without it"). Reads both JSON shapes: DCGM 3.x ("DCGM GPU
/// Diagnostic", results per "gpu_id"/"gpu_ids") and 4.x ("DCGM
/// Diagnostic", results per "entity_id").

#include <string>
#include <string_view>

#include "runtime/validation/check_options.hpp"
#include "runtime/validation/check_result.hpp"

namespace astraeus::validation {

/// The summary of a skipped dcgm check: DCGM is not installed, not in
/// Debian, and how to install it.
extern const char* const dcgm_not_installed;

/// Parses dcgmi's JSON into measurements (one per test and GPU: value 1
/// for Pass, 0 otherwise) and findings (Fail: fail, Warn: warn, with
/// DCGM's warning text and error id). Errors: ec::invalid_request when the
/// text is not dcgmi diag JSON.
caf::expected<check_result> parse_dcgm_diag(std::string_view json_text, int level);

/// Runs the dcgm check with `o.dcgmi` at `o.dcgm_level` (else dcgm.level).
check_result run_dcgm(const check_options& o);

}  // namespace astraeus::validation
