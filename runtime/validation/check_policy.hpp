#pragma once
/// @file
/// Every threshold and verdict rule of `astraeus-check`, as one table of
/// data (like the Xid policy, runtime/faults/xid_policy.hpp): each row names
/// its key, value, unit, the rule it sets with the verdict it gives, and the
/// source of the figure. `astraeus-check explain` and `astra astraeus
/// validate --explain` print it (render_policy_table); `--policy FILE` (YAML,
/// `key: value` per line, e.g. `copies.peer_fraction: 0.85`) overrides
/// values. Figures: shared/notes/anchors/validation-anchors.md; [R] marks a
/// figure reasoned here, not taken from a source.

#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace astraeus::validation {

/// The figures the checks judge by. Units as named; fractions are 0..1.
struct thresholds {
  // quick
  double quick_nvml_deadline_ms = 2000;   ///< one NVML call's deadline
  double quick_link_width_fraction = 1.0; ///< current/max PCIe width below: fail
  // copies
  double copies_pcie_efficiency = 0.762;  ///< floor = link raw GB/s x this
  double copies_warn_margin = 1.05;       ///< below floor x this: warn
  double copies_nvswitch_floor_gbs = 335; ///< peer copy over NVSwitch, GB/s
  double copies_peer_fraction = 0.9;      ///< below best peer x this: warn
  double copies_size_mib = 256;           ///< bytes per copy, MiB
  double copies_repeats = 5;              ///< copies timed per figure
  // burn
  double burn_duration_s = 600;           ///< default burn-in length
  double burn_peer_fraction = 0.9;        ///< below best peer x this (equal clocks): fail
  double burn_equal_clock_fraction = 0.97;///< clocks within this of each other are "equal"
  double burn_sample_interval_ms = 1000;  ///< NVML sampling period
  double burn_max_temperature_c = 90;     ///< hotter: warn
  // disk
  double disk_nvme_seq_read_mbs = 1500;
  double disk_nvme_seq_write_mbs = 1000;
  double disk_nvme_rand_read_iops = 100000;
  double disk_ssd_seq_read_mbs = 400;
  double disk_ssd_seq_write_mbs = 300;
  double disk_ssd_rand_read_iops = 20000;
  double disk_hdd_seq_read_mbs = 100;
  double disk_hdd_seq_write_mbs = 80;
  double disk_hdd_rand_read_iops = 80;
  double disk_peer_fraction = 0.9;        ///< below best peer x this: warn
  double disk_size_mib = 1024;            ///< test file size
  double disk_runtime_s = 15;             ///< per fio job
  // dcgm
  double dcgm_level = 2;                  ///< dcgmi diag -r level
  double dcgm_timeout_s = 1800;           ///< dcgmi's deadline
  // pair (issue 12)
  double pairs_rate_fraction = 0.9;       ///< below trained rate x this: warn
  double pairs_fail_fraction = 0.5;       ///< below trained rate x this: fail
  double pairs_peer_fraction = 0.9;       ///< below the best pair on the rail x this: warn
  double pairs_duration_s = 5;            ///< ib_write_bw -D per rail
  double pairs_connect_timeout_s = 60;    ///< how long the two ends wait for each other
  double pairs_base_port = 18515;         ///< rail k uses TCP port base + k
  // all-reduce (issue 12)
  double allreduce_efficiency = 0.9;      ///< expected busbw = rails x rate / 8 x this
  double allreduce_warn_fraction = 0.9;   ///< below expected x this: warn
  double allreduce_fail_fraction = 0.5;   ///< below expected x this: fail
};

/// One row of the table, as printed.
struct policy_row {
  std::string check;    ///< "quick", "copies", "burn", "disk", "dcgm", "pair", "allreduce"
  std::string key;      ///< "copies.peer_fraction"; empty for a rule without a figure
  std::string value;    ///< "0.9" ("—" for a rule without a figure)
  std::string unit;     ///< "fraction", "GB/s", "ms", ...
  std::string rule;     ///< the rule with its verdict: "below 0.9 x the best GPU: warn"
  std::string source;   ///< where the figure comes from
  bool overridden = false;  ///< set by --policy / config
};

/// The thresholds in force: built-in values plus overrides.
class check_policy {
public:
  /// The built-in values.
  check_policy() = default;

  /// The values in force.
  const thresholds& values() const { return values_; }

  /// Sets one key ("copies.peer_fraction") to `value`. Errors:
  /// ec::invalid_config for an unknown key (with the nearest key as a
  /// hint) or a value out of the key's range (negative, or a fraction
  /// over 1).
  caf::error set(const std::string& key, double value);

  /// Applies the `key: value` pairs of a YAML mapping (flat keys, or nested
  /// `copies: {peer_fraction: 0.85}`). Errors: ec::invalid_config naming
  /// the file and the key or value that was wrong.
  caf::error apply_yaml(const std::string& yaml_text, const std::string& origin);

  /// Reads `path` and applies it (apply_yaml). Errors: ec::invalid_config
  /// when the file cannot be read.
  caf::error apply_file(const std::string& path);

  /// Every row, in table order (by check: quick, copies, burn, disk, dcgm,
  /// pair, allreduce).
  std::vector<policy_row> rows() const;

private:
  thresholds values_;
  std::vector<std::string> overridden_;
};

/// The table as text: one block per check, columns KEY VALUE UNIT RULE
/// SOURCE, an asterisk after overridden values; ends with a newline.
std::string render_policy_table(const check_policy& policy);

/// The rows as one line of JSON: {"thresholds":[{"check","key","value",
/// "unit","rule","source","overridden"}]} (value as text, "—" for a rule
/// without a figure), for `astraeus-check explain --json` and the API.
std::string policy_rows_json(const check_policy& policy);

}  // namespace astraeus::validation
