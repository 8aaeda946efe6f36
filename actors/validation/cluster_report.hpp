#pragma once
/// @file
/// The Cluster Report (`astra astraeus report`): each machine against each
/// check's latest result, what to fix, and the one-sentence summary.
/// Source: shared/seeds/bring-up-a-gpu-cluster.md, step 4; issue 21
/// ("Commands, report, policy").

#include <map>
#include <string>
#include <utility>

#include "messages/astraeus.pb.h"

namespace astraeus::validation {

/// The latest step per (machine, check).
using latest_map = std::map<std::pair<std::string, std::string>, v1::ValidationStep>;

/// The readiness a report shows: `Ready` (Up, and accepted or in no
/// acceptance pool), `Cordoned`, `Draining` or `Drained` (Up but taking no
/// new work), `Accepting`, `Down`, `Idle`, `Maintenance`.
std::string readiness(const v1::MachineView& m);

/// The report over `machines` (only those of `pool` unless empty):
/// cells are the latest verdicts ("—" never run; PAIRS the worst of the
/// machine's latest pairs, judged against the best pair as pair_results
/// does; ALL-REDUCE the verdict of the largest all-reduce group the machine
/// is in, "—" none); `all_reduce` the latest all-reduce steps whose groups
/// are among these machines, by group size, with their curves
/// (all_reduce_plan.hpp); `pairs` the pairs among
/// these machines (pair_plan.hpp); a machine's VERDICT is the worst of its
/// cells (fail > warn > pass; "—" when none ran); `passing` counts `pass`
/// only; the findings are every latest result's (fail first), each `what`
/// starting with its machine's name (an all-reduce's with its group, under
/// its first machine), plus a check that could not run; the
/// summary is "N/M machines pass", the first three findings and the weakest
/// pair ("pair gpu-03–gpu-06 at 92% of the best pair") and the largest
/// all-reduce group ("all-reduce over 8 machines at 93% of expected (291 of
/// 313 GB/s)").
///
/// A machine that a Running validation of `validations` covers and has not
/// finished with (its acceptance still runs) is being validated: its
/// VERDICT is `validating` and it is not counted as passing; each cell whose
/// check that validation has yet to finish there says `running` or `queued`
/// (its step's state), not a verdict from before; the summary adds "N being
/// validated (acceptance val-… runs there)".
v1::ClusterReport build_report(const v1::MachineList& machines, const latest_map& latest,
                               const std::string& pool, int64_t now_unix_ms,
                               const std::map<std::string, v1::Validation>& validations = {});

/// The VERDICT of a machine a Running validation has not finished with.
inline constexpr const char* validating = "validating";

} // namespace astraeus::validation
