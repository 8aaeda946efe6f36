#pragma once
/// @file
/// A run's outputs (`outputs: true`): each worker gets ASTRAEUS_OUTPUTS, a
/// file it writes `key=value` lines to; when it ends, its agent reads the
/// file and reports the pairs with the worker's status, and the controller
/// keeps them on the run (`astra run show NAME`).
/// Source: shared/seeds/inside-a-worker.md ("Features you turn on",
/// "Filesystem": `/var/run/astraeus/outputs`, writable, with `outputs`).
///
/// Where the file is: in a container, `/var/run/astraeus/outputs/outputs`,
/// the folder bind-mounted from the worker's own folder on the machine
/// (`<worker dir>/outputs`); a host process (the `process` runtime) is told
/// that host folder's file itself.

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include <caf/error.hpp>

namespace astraeus {

/// The folder a container sees its outputs file in.
inline constexpr const char* container_outputs_dir = "/var/run/astraeus/outputs";

/// ASTRAEUS_OUTPUTS in a container: `container_outputs_dir` + "/outputs".
inline constexpr const char* container_outputs_file = "/var/run/astraeus/outputs/outputs";

/// The most of an outputs file that is read, in bytes (64 KiB); what is
/// beyond is left out with a warning.
inline constexpr size_t max_outputs_bytes = 64 * 1024;

/// The host folder of a worker's outputs: `<worker_dir>/outputs`.
std::string outputs_host_dir(const std::string& worker_dir);

/// Makes `<worker_dir>/outputs` afresh for a worker about to start: an
/// outputs file left from an earlier start is removed; the folder belongs to
/// `uid`:`gid` (the container's user; a failed chown, e.g. an agent that is
/// not root, is no error: the folder is then open to all, mode 0777).
/// Errors: ec::store_failure naming the folder and the system error.
caf::error prepare_outputs_dir(const std::string& worker_dir, unsigned uid, unsigned gid);

/// What an outputs file says.
struct worker_outputs {
  /// The `key=value` pairs; a later line with the same key wins. Keys and
  /// values are kept as written (a value may hold '='); a "\r" ending a line
  /// is dropped.
  std::map<std::string, std::string> values;
  /// One line per problem, for the worker's log and the agent's:
  /// `outputs line 3: "oops" is not key=value (skipped)`, or that the file
  /// is larger than `max_outputs_bytes` and the rest was left out.
  std::vector<std::string> warnings;
};

/// Parses an outputs file's text: one `key=value` per line; blank lines are
/// skipped quietly; a line without '=', or with an empty key, is skipped
/// with a warning naming its number and its text (at most 60 characters).
worker_outputs parse_outputs(const std::string& text);

/// Reads the outputs file of the worker whose folder is `worker_dir`
/// (`<worker_dir>/outputs/outputs`): at most `max_outputs_bytes` (a line cut
/// by the cap is dropped, with a warning). A missing file gives no values
/// and no warnings (the worker wrote none).
worker_outputs read_outputs(const std::string& worker_dir);

} // namespace astraeus
