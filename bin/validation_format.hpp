#pragma once
/// @file
/// What `astra astraeus validate|validations|validation|report|policy`
/// print (issue 21; shared/seeds/bring-up-a-gpu-cluster.md, steps 3-4 and
/// 6), kept apart from the commands so unit tests assert the text.

#include <string>

#include "messages/astraeus.pb.h"

namespace astraeus::cli {

/// "validation val-…: acceptance on gpu-01, gpu-02, …" and the console URL
/// on its own line when the controller has one.
std::string format_validation_started(const v1::Validation& v);

/// One line of progress while `--wait` waits: steps done of all, what runs,
/// and why a step waits ("gpu-03: another check runs there").
std::string format_validation_progress(const v1::Validation& v);

/// "val-… acceptance Passed (on-demand)" and "8/8 machines pass."; for a
/// Skipped one, "Nothing was measured: every step was skipped (why)."
std::string format_validation_outcome(const v1::Validation& v);

/// `astra astraeus validations`: newest first.
std::string format_validation_list(const v1::ValidationList& list);

/// `astra astraeus validation ID`: its steps.
std::string format_validation(const v1::Validation& v);

/// `astra astraeus report`: the summary, the table MACHINE STATE VERDICT
/// QUICK DCGM BURN COPIES DISK PAIRS ALL-REDUCE, the pairs' matrix when
/// pairs were measured (pair_matrix.hpp), "What to fix (N)" with each
/// finding and its `fix:` line.
std::string format_report(const v1::ClusterReport& r);

/// `astra astraeus report --html FILE`: the same as a printable page, the
/// pairs' matrix as a heat map.
std::string format_report_html(const v1::ClusterReport& r, const std::string& title);

/// `astra astraeus topology` (issue 12; bring-up-a-gpu-cluster.md, step 5):
/// "Findings (N)" with "! what" and "fix: …" lines as the seed shows them,
/// then "Fabrics (N)" (FABRIC SUBNET MACHINES LEAVES) and "Not checked:"
/// lines.
std::string format_topology(const v1::TopologyReport& t);

/// `astra astraeus policy set|list`.
std::string format_policy(const v1::ValidationPolicy& p);

} // namespace astraeus::cli
