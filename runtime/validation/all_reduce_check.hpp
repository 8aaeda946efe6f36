#pragma once
/// @file
/// The all-reduce check (issue 12; shared/seeds/bring-up-a-gpu-cluster.md,
/// step 3: "an all-reduce across growing groups"): one `astraeus-check
/// allreduce --rank R --ranks N --root HOST:PORT` per machine of a group,
/// each driving all of its GPUs, without MPI. The ranks first meet over TCP
/// at the root (rank 0 listens on PORT, the others connect and say whether
/// they can run), then NCCL bootstraps through its own NCCL_COMM_ID at
/// HOST:PORT+1 (with it set, every rank's ncclGetUniqueId gives the same id
/// and rank 0's ncclCommInitRank creates the bootstrap root there), and
/// ncclAllReduce (sum, float) sweeps message sizes by doubling, each result
/// checked. libnccl.so.2 and libcuda.so.1 are loaded with dlopen: nothing is
/// linked at build time; without NCCL the check is skipped, naming NVIDIA's
/// package. Rank 0 prints its table in nccl-tests' all_reduce_perf layout
/// (so actors/validation/all_reduce_plan.hpp reads it) and carries its rows
/// in its result's measurements; the judgement against the expected bus
/// bandwidth is the controller's (it knows every machine's rails).
///
/// Stand-in (tests): with ASTRAEUS_CUDA_FIXTURE set the ranks still meet
/// over TCP, but nothing is loaded: rank 0's table runs at the fixture's
/// "allreduce_busbw_gbs" (test/fixtures/checks/README.md).
///
/// Not yet run on real GPUs: the NCCL path is written against NCCL's
/// documented API (nccl.h 2.x) and has not met a cluster.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

#include "runtime/validation/check_options.hpp"
#include "runtime/validation/check_result.hpp"

namespace astraeus::validation {

/// The TCP port rank 0 listens on for its group to meet (`--root ADDR:PORT`
/// as the validation gives it); NCCL's bootstrap root takes the next one.
inline constexpr uint16_t all_reduce_root_port = 18600;

/// One size of the sweep: out-of-place and in-place time (us), bandwidths
/// (GB/s) and wrong values (-1: not checked).
struct all_reduce_timing {
  uint64_t bytes = 0;
  double time_us = 0, algbw_gbs = 0, busbw_gbs = 0;
  int64_t wrong = 0;
  double in_place_time_us = 0, in_place_algbw_gbs = 0, in_place_busbw_gbs = 0;
  int64_t in_place_wrong = 0;
};

/// The bus bandwidth of an all-reduce over `ranks` GPUs at `algbw_gbs`:
/// algbw x 2(n-1)/n (nccl-tests' PERFORMANCE.md): 0 for one GPU, which
/// crosses no link (all_reduce_perf prints 0.00 there too).
double all_reduce_busbw(double algbw_gbs, int ranks);

/// `--root`: "HOST:PORT" (HOST may be empty for rank 0: its own address).
/// Errors: ec::invalid_request naming what is wrong.
caf::expected<std::pair<std::string, uint16_t>> parse_root(std::string_view text);

/// The sizes swept: `min_bytes`, doubling, up to `max_bytes` (both rounded
/// down to whole floats, at least 4 bytes).
std::vector<uint64_t> all_reduce_sizes(uint64_t min_bytes, uint64_t max_bytes);

/// The table rank 0 prints, in all_reduce_perf's layout: the "# nThread ...
/// minBytes ... maxBytes ..." line, the header with its out-of-place and
/// in-place columns, one row per timing, "# Out of bounds values" and "#
/// Avg bus bandwidth" (the mean of every row's out-of-place and in-place
/// busbw). `gpus` the GPUs of all ranks together.
std::string format_all_reduce_table(const std::vector<all_reduce_timing>& rows, int gpus,
                                    uint64_t min_bytes, uint64_t max_bytes);

/// Adds the rows to `r` as measurements: per size (gpu = the size in bytes)
/// "busbw", "busbw_in_place", "algbw" (GB/s), "wrong" and "wrong_in_place"
/// (values; a wrong value fails with a finding naming the size), and
/// "max_bytes" once.
void add_all_reduce_rows(check_result& r, const std::vector<all_reduce_timing>& rows,
                         uint64_t max_bytes);

/// Runs the check as rank `o.allreduce_rank` of `o.allreduce_ranks`; prints
/// rank 0's table on stdout before the result. A rank that cannot reach the
/// root within `o.allreduce_connect_timeout` (or a root that does not hear
/// from every rank) fails naming the address.
check_result run_all_reduce(const check_options& o);

}  // namespace astraeus::validation
