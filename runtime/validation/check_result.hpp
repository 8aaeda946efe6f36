#pragma once
/// @file
/// What one check of `astraeus-check` found, and the one JSON line it
/// prints as the last line of its stdout (the contract the validation actor
/// reads; shared/DESIGN.md, "Validation"):
///   {"check":"copies","verdict":"pass|warn|fail|skipped","summary":"...",
///    "measurements":[{"name":"h2d","gpu":"GPU-...","value":52.1,
///      "unit":"GB/s","expected":">= 48","verdict":"pass"}],
///    "findings":[{"severity":"fail|warn","gpu":"...","what":"...","fix":"..."}],
///    "duration_s":12.3}
/// A measurement may carry "peer" (the other GPU of a peer copy).

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

namespace astraeus::validation {

/// A verdict, from best to worst: skipped (the check could not run here,
/// e.g. DCGM not installed), pass, warn, fail.
enum class verdict { skipped, pass, warn, fail };

/// "skipped", "pass", "warn", "fail".
const char* to_string(verdict v);

/// The verdict named `text` (as to_string writes it); nullopt otherwise.
std::optional<verdict> parse_verdict(std::string_view text);

/// The worse of `a` and `b` (fail > warn > pass > skipped).
verdict worse(verdict a, verdict b);

/// One figure a check measured, with what it was judged against.
struct measurement {
  std::string name;      ///< "h2d", "d2h", "d2d", "peer", "pcie_link", "seq_read"...
  std::string gpu;       ///< the GPU's UUID or PCI address; a device for disk
  std::string peer;      ///< the other GPU of a peer copy; empty otherwise
  double value = 0;      ///< in `unit`
  std::string unit;      ///< "GB/s", "ms", "lanes", "MB/s", "IOPS"...
  std::string expected;  ///< the rule, readable: ">= 48", "== 16"
  verdict result = verdict::pass;
};

/// Something a person should fix, with how.
struct finding {
  verdict severity = verdict::fail;  ///< fail or warn
  std::string gpu;                   ///< what it is about (GPU, device); may be empty
  std::string what;                  ///< one sentence with the numbers
  std::string fix;                   ///< one sentence: what sets it right
};

/// The result of one check.
struct check_result {
  std::string check;     ///< "quick", "copies", "burn", "disk", "dcgm"
  verdict result = verdict::pass;
  std::string summary;   ///< one sentence
  std::vector<measurement> measurements;
  std::vector<finding> findings;
  double duration_s = 0;

  /// Adds a finding and makes `result` at least its severity.
  void add_finding(verdict severity, std::string gpu, std::string what, std::string fix);
  /// Adds a measurement and makes `result` at least its verdict.
  void add_measurement(measurement m);
};

/// The result as one line of JSON (no newline), keys in the contract's order.
std::string to_json_line(const check_result& r);

/// Parses a line written by to_json_line (unknown keys ignored). Errors:
/// ec::invalid_request naming what is missing or malformed.
caf::expected<check_result> parse_check_result(std::string_view line);

/// The process exit status for a verdict: 1 for fail, 0 otherwise.
int exit_status(verdict v);

/// The default summary when a check has nothing better to say: "<N>
/// finding(s): <first finding's what>" or "all <M> measurements pass".
std::string default_summary(const check_result& r);

/// Closes a check's result: when `r.summary` is empty, sets it to
/// `pass_summary` if there is no finding, else to default_summary(); sets
/// `r.duration_s` to the seconds since `start`. Returns `r`.
check_result finish_result(check_result r, std::chrono::steady_clock::time_point start,
                           const std::string& pass_summary);

}  // namespace astraeus::validation
