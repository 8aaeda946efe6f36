#pragma once
/// @file
/// The pair check (issue 12; shared/seeds/bring-up-a-gpu-cluster.md, step 3:
/// "the fabric between every pair"): RDMA write bandwidth between two
/// machines, one rail (the same device and port on both) at a time, with
/// perftest's `ib_write_bw` (Debian's `perftest`). One machine runs
/// `astraeus-check pair --role server`, the other `--role client --peer
/// ADDR`; both walk the same rails in the same order, rail k on TCP port
/// pairs.base_port + k. Each side reports "BW average" in Gb/s per rail,
/// judged against the rail's trained rate (the slower end's, given by the
/// controller in --rails). The comparison with the best pair is the
/// controller's (actors/validation/pair_plan.hpp): only it sees every pair.

#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

#include "runtime/validation/check_options.hpp"
#include "runtime/validation/check_result.hpp"

namespace astraeus::validation {

/// One rail of a pair: the device and port (the same on both machines) and
/// the trained rate of the slower end, Gb/s.
struct pair_rail {
  std::string device;     ///< "mlx5_5"
  uint32_t port = 1;      ///< 1-based
  double rate_gbps = 0;   ///< 200
};

/// Parses --rails: "mlx5_0:1:400,mlx5_5:1:200" (device:port:rate in Gb/s).
/// Errors: ec::invalid_request naming the entry that is malformed (an empty
/// list, a missing field, a port or rate that is not a positive number).
caf::expected<std::vector<pair_rail>> parse_pair_rails(std::string_view text);

/// The same list as --rails takes it.
std::string format_pair_rails(const std::vector<pair_rail>& rails);

/// The "BW average" of one ib_write_bw run, in Gb/s: read from the column
/// headed "BW average[Gb/sec]" (--report_gbits) or "BW average[MB/sec]"
/// (MiB/s, converted) of the first result line under that header. Errors:
/// ec::invalid_request when there is no such header or no number under it.
caf::expected<double> parse_ib_write_bw(std::string_view output);

/// Judges one rail's measured `gbps` against its trained rate with `t`:
/// below pairs.fail_fraction x rate: fail; below pairs.rate_fraction x rate:
/// warn (with a finding naming the rail, the figures and the fix). Adds the
/// measurements "write_bw" (value Gb/s, gpu = the device) and "rate" (the
/// trained rate) to `r`.
void judge_rail(check_result& r, const pair_rail& rail, double gbps, const thresholds& t);

/// Runs the pair check: `o.pair_role` "server" or "client", `o.pair_rails`,
/// `o.pair_peer` (client), `o.ib_write_bw`. Without ib_write_bw: fail
/// ("apt install perftest"). A rail whose run gives no figure fails (a
/// missing measurement never passes).
check_result run_pair(const check_options& o);

}  // namespace astraeus::validation
