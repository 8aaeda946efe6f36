#pragma once
/// @file
/// The pairs' matrix and the all-reduce curve of the Cluster Report (issue 12;
/// shared/seeds/bring-up-a-gpu-cluster.md, step 4: "the pairs' matrix"):
/// each pair's RDMA write bandwidth summed over its rails, as a share of the
/// best pair's, in text (compact, for `astra astraeus report`) and as an
/// HTML heat map (for `--html`); the all-reduce's bus bandwidth by message
/// size for each group (all_reduce_plan.hpp), in text and as an HTML table
/// of bars.

#include <string>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus::validation {

/// The matrix as text: a heading "Pairs: % of the best pair (B Gb/s over R
/// rails)", then one row and one column per machine (sorted), each cell
/// the pair's share of the best pair in whole percent, "·" on the
/// diagonal, "—" for a pair not measured; a cell whose pair has a rail
/// that warns ends in "~", one that fails in "!". Ends with a legend line
/// and a newline. "" when `pairs` is empty.
std::string pairs_matrix_text(const google::protobuf::RepeatedPtrField<v1::PairResult>& pairs);

/// The same as an HTML fragment: a heading and a table whose cells are
/// coloured from red (half the best pair or less) to green (the best),
/// each with a title listing its rails ("mlx5_5 195.2 Gb/s of 200 trained,
/// 50% of the best"). "" when `pairs` is empty.
std::string pairs_matrix_html(const google::protobuf::RepeatedPtrField<v1::PairResult>& pairs);

/// The all-reduce curve as text: a heading, then one column per group
/// ("2 machines"), one row per size shown (1 MiB and every fourth power of
/// two above it, and the largest size), each cell the bus bandwidth in GB/s
/// ("—" not measured), then the rows "expected" and "verdict". "" when
/// `points` is empty; when no group has a figure (every one skipped), one
/// line instead: "All-reduce: not measured (2 machines: skipped: why; 3
/// machines: skipped)".
std::string all_reduce_curve_text(const std::vector<v1::AllReducePoint>& points);

/// The same as an HTML fragment: a heading and a table whose cells are bars
/// of the share of the expected figure (red at half or less, green at all of
/// it). "" when `points` is empty.
std::string all_reduce_curve_html(const std::vector<v1::AllReducePoint>& points);

} // namespace astraeus::validation
