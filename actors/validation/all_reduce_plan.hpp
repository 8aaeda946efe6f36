#pragma once
/// @file
/// The all-reduce of a validation, without actors (issue 12;
/// shared/seeds/bring-up-a-gpu-cluster.md, step 3: "an all-reduce across
/// growing groups"): the groups, the bus bandwidth the hardware should give,
/// all_reduce_perf's output (NVIDIA nccl-tests) read robustly, and its
/// judgement; the report's ALL-REDUCE cell, sentence and curve.
/// Thresholds: runtime/validation/check_policy.hpp (allreduce.*).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"
#include "runtime/validation/check_policy.hpp"

namespace astraeus::validation {

/// The check name of an all-reduce step (ValidationStep.check; its
/// `group_machines` the group in rank order, `machine` its first).
inline constexpr const char* all_reduce_check = "allreduce";

/// Whether `step` is an all-reduce step.
bool is_all_reduce(const v1::ValidationStep& step);

/// Appends one Queued all-reduce step per group size of `v`'s machines
/// (all_reduce_group_sizes; the group of size k is its first k machines, in
/// rank order; `machine` the first), after its other steps.
void add_all_reduce_steps(v1::Validation& v);

/// The all-reduce step that may start now: once every other step is Done or
/// Failed (the machines' own checks, then the pairs), the first all-reduce
/// step not yet finished, when it is Queued or Yielded (the groups overlap:
/// one at a time, smallest first); nullopt otherwise.
std::optional<int> startable_all_reduce(const v1::Validation& v);

/// The run of rank `rank` of all-reduce step `index` at `attempt`:
/// "<id>-allreduce-<group size>-<attempt>-r<rank>".
std::string all_reduce_run_name(const v1::Validation& v, int index, uint32_t attempt, int rank);

/// The run of rank `rank` of all-reduce step `index`: `program allreduce
/// --json --rank R --ranks N --root ROOT --gpus K` as a host process
/// holding `gpus` GPUs (K) of group machine `rank`, at the lowest priority.
/// ROOT is ":PORT" for rank 0 (it listens; its own address is MASTER_ADDR)
/// and "ADDR:PORT" for the others (ADDR: the address rank 0's machine
/// reports, as its placed run's MASTER_ADDR).
v1::RunSpec all_reduce_spec(const v1::Validation& v, int index, int rank, uint32_t gpus,
                            const std::string& root, const std::string& program);

/// The machines of all-reduce step `index`'s group that joined since the
/// previous (smaller) group, when that one passed; empty otherwise (the
/// first group, or one after a group that did not pass).
std::vector<std::string> all_reduce_joined(const v1::Validation& v, int index);

/// The group sizes over `n` machines: 2, 4, 8, ... up to n, and n itself
/// when it is not a power of two (n = 6: 2, 4, 6). Empty for n < 2.
std::vector<int> all_reduce_group_sizes(int n);

/// One row of all_reduce_perf's table.
struct all_reduce_row {
  uint64_t bytes = 0;
  double algbw_gbs = 0;      ///< out-of-place
  double busbw_gbs = 0;      ///< out-of-place
  double in_place_busbw_gbs = 0;
  /// #wrong of the out-of-place and in-place runs; -1 where not checked
  /// ("N/A": all_reduce_perf -c 0).
  int64_t wrong = -1;
  int64_t in_place_wrong = -1;
};

/// What all_reduce_perf printed.
struct all_reduce_output {
  std::vector<all_reduce_row> rows;         ///< in the order printed
  uint64_t max_bytes = 0;                   ///< "maxBytes" of its first line; 0 unknown
  std::optional<double> avg_busbw_gbs;      ///< "# Avg bus bandwidth"; absent: it did not finish
  /// "" when the output is whole; else why not ("stopped at 1 GiB of 8 GiB:
  /// the output ends there", "no '# Avg bus bandwidth' line: it did not finish").
  std::string truncated;
};

/// Reads all_reduce_perf's output: the table under the header naming
/// "size" and "busbw" (columns found by name, so an older table without
/// "root" or with "error" for "#wrong" reads too; the first time/algbw/busbw/
/// #wrong are out-of-place, the second in-place), rows whose first field is
/// a size; any other line (NCCL INFO, warnings, a row cut short) is
/// skipped. Errors: ec::invalid_request when no row can be read ("no
/// all_reduce_perf table in the output").
caf::expected<all_reduce_output> parse_all_reduce_perf(std::string_view text);

/// The bus bandwidth an all-reduce over `group` should reach at large
/// messages, GB/s: across machines it is bounded by each machine's network,
/// so the rails (a device and port Active on every machine of the group,
/// InfiniBand where they have any) each at the slowest trained rate in the
/// group, summed, in GB/s (/8), x allreduce.efficiency (NVIDIA: 46-48 GB/s
/// NCCL per 400 Gb/s port). 8 x 400 Gb/s at 0.9: 360 GB/s. 0 when the
/// group shares no rail.
double expected_all_reduce_gbs(const std::vector<const v1::MachineView*>& group,
                               const thresholds& t);

/// What rank 0 of `astraeus-check allreduce` measured, read back from its
/// result's measurements (runtime/validation/all_reduce_check.hpp: per size
/// busbw, busbw_in_place, algbw, wrong, wrong_in_place; max_bytes), as
/// parse_all_reduce_perf reads its table (cut short when the last size is
/// below max_bytes). Errors: ec::invalid_request when it holds no size.
caf::expected<all_reduce_output> all_reduce_output_of(const v1::CheckResult& measured);

/// Judges the output of one group (`text`, rank 0's log) against
/// `expected_gbs` as a check result (check "allreduce"): fail when it cannot
/// be read, is truncated or counts a wrong value (#wrong != 0, naming the
/// size); else the bus bandwidth at the largest size (the better of
/// out-of-place and in-place) below allreduce.fail_fraction x expected:
/// fail, below allreduce.warn_fraction x: warn (summary "all-reduce over 4
/// machines at 59% of expected (214 of 360 GB/s)"). A group below the bar
/// that a smaller group of `passed_before` machines (0: none) cleared names
/// the machines that joined since, those with a topology finding
/// (`suspects`) first. Measurements: "busbw" per size (gpu = the size in
/// bytes, value GB/s), "algbw" likewise, and "expected" (GB/s).
v1::CheckResult judge_all_reduce(std::string_view text, const std::vector<std::string>& group,
                                 double expected_gbs, const thresholds& t,
                                 const std::vector<std::string>& joined = {},
                                 const std::vector<std::string>& suspects = {});

/// As above, for an output already read (or the error reading it).
v1::CheckResult judge_all_reduce(const caf::expected<all_reduce_output>& out,
                                 const std::vector<std::string>& group, double expected_gbs,
                                 const thresholds& t, const std::vector<std::string>& joined = {},
                                 const std::vector<std::string>& suspects = {});

/// The report's point of a Done all-reduce step: its group, figure,
/// expected, fraction, verdict and curve (from its measurements), its note
/// the step's summary when it is not a pass.
v1::AllReducePoint all_reduce_point(const v1::ValidationStep& step);

/// "all-reduce over 8 machines at 93% of expected (291 of 313 GB/s)" for the
/// largest group of `points`; "" when there is none.
std::string all_reduce_phrase(const std::vector<v1::AllReducePoint>& points);

/// "8 B", "64 KiB", "8 GiB": a message size as the curve shows it.
std::string size_text(uint64_t bytes);

} // namespace astraeus::validation
