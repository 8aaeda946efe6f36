#include "runtime/validation/check_policy.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "messages/error.hpp"
#include "runtime/host/sysfs_text.hpp"

namespace astraeus::validation {

namespace {

enum class range { positive, fraction, any };

/// One row of the table: a figure (member != nullptr) or a rule without one.
struct row_spec {
  const char* check;
  const char* key;
  double thresholds::*member;
  range allowed;
  const char* unit;
  const char* rule;  // "{}" stands for the value
  const char* source;
};

constexpr const char* anchors = "shared/notes/anchors/validation-anchors.md";

// The table. Rules without a figure come with member == nullptr.
const row_spec table[] = {
  {"quick", "", nullptr, range::any, "", "the NVIDIA driver is loaded and NVML initialises: else fail",
   "seed bring-up-a-gpu-cluster.md, step 2"},
  {"quick", "", nullptr, range::any, "",
   "every NVIDIA GPU on the PCI bus is listed by NVML: else fail, naming the GPU",
   "seed bring-up-a-gpu-cluster.md, step 2"},
  {"quick", "quick.nvml_deadline_ms", &thresholds::quick_nvml_deadline_ms, range::positive, "ms",
   "an NVML call slower than {} ms: fail (the GPU or driver is unresponsive)",
   "the agent's gpu.call_deadline default (config/agent.yaml)"},
  {"quick", "", nullptr, range::any, "",
   "the NVIDIA CDI spec lists exactly this machine's GPUs with device nodes that exist: else fail",
   "seed gpus.md, \"How a worker gets its GPUs\""},
  {"quick", "quick.link_width_fraction", &thresholds::quick_link_width_fraction, range::fraction,
   "fraction", "PCIe current_link_width below {} x max_link_width: fail",
   "issue 21 (sysfs current_link_* against max_link_*)"},
  {"quick", "", nullptr, range::any, "",
   "PCIe current_link_speed below max_link_speed: warn (an idle GPU may lower its speed; copies judges "
   "the speed under load)",
   "[R] NVIDIA GPUs drop the link speed when idle"},
  {"copies", "copies.pcie_efficiency", &thresholds::copies_pcie_efficiency, range::fraction,
   "fraction",
   "H2D and D2H floor = the link's raw rate at max width and speed x {} (Gen5 x16: 63.0 GB/s -> 48); "
   "below the floor: fail",
   "Azure NHC nd96isr_h100_v5.conf: >= 48 GB/s each way on PCIe Gen5 x16"},
  {"copies", "copies.warn_margin", &thresholds::copies_warn_margin, range::positive, "x floor",
   "at or above the floor but below floor x {}: warn", "Azure NHC (warn below 1.05 x 48)"},
  {"copies", "copies.nvswitch_floor_gbs", &thresholds::copies_nvswitch_floor_gbs, range::positive,
   "GB/s", "peer copy between GPUs on NVSwitch below {} GB/s: fail",
   "Azure NHC nd96isr_h100_v5.conf: D2D >= 335 GB/s"},
  {"copies", "copies.peer_fraction", &thresholds::copies_peer_fraction, range::fraction, "fraction",
   "any copy figure below {} x the best GPU of the machine: warn", "[R] anchors goal 2; 0.9 as "
   "Mellanox ngc_multinode_perf PR #43"},
  {"copies", "copies.size_mib", &thresholds::copies_size_mib, range::positive, "MiB",
   "each copy moves {} MiB (pinned host memory)", "[R] large enough for the copy engines' peak"},
  {"copies", "copies.repeats", &thresholds::copies_repeats, range::positive, "copies",
   "each figure is the best of {} timed copies (cuEvent)", "[R]"},
  {"burn", "burn.duration_s", &thresholds::burn_duration_s, range::positive, "s",
   "a burn-in runs {} s unless --duration says otherwise", "seed bring-up-a-gpu-cluster.md: 10-minute burn-in"},
  {"burn", "", nullptr, range::any, "", "an Xid or a CUDA error during the burn-in: fail",
   "issue 21"},
  {"burn", "burn.peer_fraction", &thresholds::burn_peer_fraction, range::fraction, "fraction",
   "a GPU below {} x the best GPU's work rate at equal clocks: fail", "issue 21 (> 10 % slower than its peers)"},
  {"burn", "burn.equal_clock_fraction", &thresholds::burn_equal_clock_fraction, range::fraction,
   "fraction", "mean SM clocks within {} of each other count as equal; work is compared per MHz "
   "of SM clock, so a GPU slowed only by its clocks is judged by the throttle rule", "[R]"},
  {"burn", "", nullptr, range::any, "",
   "clocks held back for a reason other than power cap, thermal slowdown, sync boost or idle "
   "(HW slowdown, HW power brake, applications or display clock setting): fail",
   "issue 21; reasons as NVML's nvmlClocksEventReason* bits"},
  {"burn", "burn.max_temperature_c", &thresholds::burn_max_temperature_c, range::positive, "C",
   "a GPU hotter than {} C during the burn-in: warn", "[R] below H100's slowdown temperature"},
  {"burn", "burn.sample_interval_ms", &thresholds::burn_sample_interval_ms, range::positive, "ms",
   "clocks, temperature, power and throttle reasons are sampled every {} ms", "[R]"},
  {"disk", "disk.nvme_seq_read_mbs", &thresholds::disk_nvme_seq_read_mbs, range::positive, "MB/s",
   "NVMe sequential read below {} MB/s: fail", "[R] a quarter of a Gen4 U.2 drive (PM9A3 6.5 GB/s, heise.de/-4720224)"},
  {"disk", "disk.nvme_seq_write_mbs", &thresholds::disk_nvme_seq_write_mbs, range::positive, "MB/s",
   "NVMe sequential write below {} MB/s: fail", "[R] under a third of PM9A3's 3.5 GB/s"},
  {"disk", "disk.nvme_rand_read_iops", &thresholds::disk_nvme_rand_read_iops, range::positive,
   "IOPS", "NVMe 4 KiB random read below {} IOPS: fail", "[R] about a ninth of PM9A3's 900k"},
  {"disk", "disk.ssd_seq_read_mbs", &thresholds::disk_ssd_seq_read_mbs, range::positive, "MB/s",
   "SATA/SAS SSD sequential read below {} MB/s: fail", "[R] SATA 6 Gb/s gives about 550"},
  {"disk", "disk.ssd_seq_write_mbs", &thresholds::disk_ssd_seq_write_mbs, range::positive, "MB/s",
   "SATA/SAS SSD sequential write below {} MB/s: fail", "[R]"},
  {"disk", "disk.ssd_rand_read_iops", &thresholds::disk_ssd_rand_read_iops, range::positive, "IOPS",
   "SATA/SAS SSD 4 KiB random read below {} IOPS: fail", "[R]"},
  {"disk", "disk.hdd_seq_read_mbs", &thresholds::disk_hdd_seq_read_mbs, range::positive, "MB/s",
   "rotating disk sequential read below {} MB/s: fail", "[R]"},
  {"disk", "disk.hdd_seq_write_mbs", &thresholds::disk_hdd_seq_write_mbs, range::positive, "MB/s",
   "rotating disk sequential write below {} MB/s: fail", "[R]"},
  {"disk", "disk.hdd_rand_read_iops", &thresholds::disk_hdd_rand_read_iops, range::positive, "IOPS",
   "rotating disk 4 KiB random read below {} IOPS: fail", "[R]"},
  {"disk", "disk.peer_fraction", &thresholds::disk_peer_fraction, range::fraction, "fraction",
   "a figure below {} x the best peer machine's (--peers): warn", "[R] as copies.peer_fraction"},
  {"disk", "disk.size_mib", &thresholds::disk_size_mib, range::positive, "MiB",
   "the test file is {} MiB in the data directory, removed afterwards", "[R]"},
  {"disk", "disk.runtime_s", &thresholds::disk_runtime_s, range::positive, "s",
   "each of the three tests (seq read, seq write, rand read) runs {} s at most", "[R]"},
  {"disk", "", nullptr, range::any, "",
   "the device class (NVMe, SSD, HDD) is read from sysfs (queue/rotational, the nvme driver)",
   "Linux sysfs block/<dev>/queue/rotational"},
  {"dcgm", "dcgm.level", &thresholds::dcgm_level, range::positive, "level",
   "dcgmi diag -r {} (1 seconds, 2 about 2 min, 3 about 15 min, 4 extended); a test that fails: fail; "
   "warns: warn", "NVIDIA dcgmi-diag reference; anchors: default r2"},
  {"dcgm", "dcgm.timeout_s", &thresholds::dcgm_timeout_s, range::positive, "s",
   "dcgmi diag running past {} s: fail", "NVSentinel provider timeout 1800 s"},
  {"dcgm", "", nullptr, range::any, "",
   "dcgmi not installed: skipped (DCGM is not in Debian; the other checks stand in)", anchors},
  {"pair", "pairs.rate_fraction", &thresholds::pairs_rate_fraction, range::fraction, "fraction",
   "ib_write_bw on a rail below {} x its trained rate (the slower end's, sysfs): warn",
   "Mellanox ngc_multinode_perf PR #43 (0.9 x port rate); Azure NHC 380 of 400 Gb/s"},
  {"pair", "pairs.fail_fraction", &thresholds::pairs_fail_fraction, range::fraction, "fraction",
   "ib_write_bw on a rail below {} x its trained rate, or no figure at all: fail",
   "[R] half the rate is a broken link, not a slow one; NVIDIA CRE PR #6 (fail closed)"},
  {"pair", "pairs.peer_fraction", &thresholds::pairs_peer_fraction, range::fraction, "fraction",
   "a pair's rail below {} x the best pair's on that rail: warn (the controller, over every pair)",
   "[R] anchors goal 2; seed: \"pair gpu-03\xE2\x80\x93gpu-06 at 92% of the best pair\""},
  {"pair", "pairs.duration_s", &thresholds::pairs_duration_s, range::positive, "s",
   "ib_write_bw -D {} per rail, rails one after another", "[R] 8 rails x 5 s within the anchors' 45 s a round"},
  {"pair", "pairs.connect_timeout_s", &thresholds::pairs_connect_timeout_s, range::positive, "s",
   "server and client wait {} s for each other per rail: then fail", "[R]"},
  {"pair", "pairs.base_port", &thresholds::pairs_base_port, range::positive, "TCP port",
   "rail k's ib_write_bw listens on TCP port {} + k", "perftest's default port 18515"},
  {"pair", "", nullptr, range::any, "",
   "pairs run in rounds of disjoint pairs (the circle method): n machines take n-1 rounds, "
   "n rounds when n is odd (each machine sits one out)", "issue 12"},
  {"allreduce", "allreduce.efficiency", &thresholds::allreduce_efficiency, range::fraction,
   "fraction",
   "expected bus bandwidth across machines = the rails every machine of the group has Active x "
   "their slowest trained rate / 8 x {} (8 x 400 Gb/s: 360 GB/s)",
   "NVIDIA nccl-tests #290: 46-48 GB/s NCCL per 400 Gb/s port (0.92-0.96 of 50 GB/s)"},
  {"allreduce", "allreduce.warn_fraction", &thresholds::allreduce_warn_fraction,
   range::fraction, "fraction",
   "all_reduce_perf's busbw at its largest message below {} x expected: warn",
   "[R] anchors goal 2 (0.9 of expected)"},
  {"allreduce", "allreduce.fail_fraction", &thresholds::allreduce_fail_fraction,
   range::fraction, "fraction",
   "busbw at the largest message below {} x expected, a wrong value (#wrong > 0) at any size, "
   "or output cut short: fail", "[R] as pairs.fail_fraction; NVIDIA CRE PR #6 (fail closed)"},
  {"allreduce", "", nullptr, range::any, "",
   "NCCL all-reduce (astraeus-check allreduce, all_reduce_perf's table) over one gang of 2, "
   "4, 8, ... machines and then all of them", "seed bring-up-a-gpu-cluster.md, step 3"},
};

std::string value_text(double v) {
  return show_number(v);
}

std::string fill(const char* rule, const std::string& value) {
  std::string out = rule;
  if (auto i = out.find("{}"); i != std::string::npos)
    out.replace(i, 2, value);
  return out;
}

}  // namespace

caf::error check_policy::set(const std::string& key, double value) {
  const row_spec* best = nullptr;
  size_t best_distance = ~size_t{0};
  for (const auto& r : table) {
    if (!r.member)
      continue;
    if (key == r.key) {
      if (!std::isfinite(value) || value < 0 || (r.allowed == range::positive && value <= 0)
          || (r.allowed == range::fraction && value > 1))
        return caf::make_error(ec::invalid_config,
                               "validation policy: " + key + " = " + value_text(value)
                                 + " is out of range ("
                                 + (r.allowed == range::fraction ? "a fraction from 0 to 1"
                                                                 : "a positive number")
                                 + ")");
      values_.*(r.member) = value;
      if (std::find(overridden_.begin(), overridden_.end(), key) == overridden_.end())
        overridden_.push_back(key);
      return caf::none;
    }
    auto d = edit_distance(key, r.key);
    if (d < best_distance) {
      best_distance = d;
      best = &r;
    }
  }
  std::string hint = best && best_distance <= 4 ? std::string{"; did you mean "} + best->key + "?"
                                                : std::string{};
  return caf::make_error(ec::invalid_config,
                         "validation policy: unknown key " + key + hint
                           + " (astraeus-check explain lists every key)");
}

namespace {

caf::error apply_node(check_policy& p, const YAML::Node& node, const std::string& prefix,
                      const std::string& origin) {
  for (const auto& kv : node) {
    auto key = prefix + kv.first.as<std::string>();
    if (kv.second.IsMap()) {
      if (auto err = apply_node(p, kv.second, key + ".", origin))
        return err;
      continue;
    }
    if (!kv.second.IsScalar())
      return caf::make_error(ec::invalid_config, origin + ": " + key + " is not a number");
    auto text = kv.second.as<std::string>();
    auto v = parse_double(trim(text));
    if (!v)
      return caf::make_error(ec::invalid_config,
                             origin + ": " + key + ": '" + text + "' is not a number");
    if (auto err = p.set(key, *v))
      return caf::make_error(ec::invalid_config, origin + ": " + render_error(err));
  }
  return caf::none;
}

}  // namespace

caf::error check_policy::apply_yaml(const std::string& yaml_text, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return caf::make_error(ec::invalid_config, origin + ": not YAML: " + e.what());
  }
  if (root.IsNull())
    return caf::none;
  if (!root.IsMap())
    return caf::make_error(ec::invalid_config, origin + ": not a mapping of keys to numbers");
  try {
    return apply_node(*this, root, "", origin);
  } catch (const YAML::Exception& e) {
    return caf::make_error(ec::invalid_config, origin + ": " + e.what());
  }
}

caf::error check_policy::apply_file(const std::string& path) {
  auto f = read_small_file(path);
  if (f.error != 0)
    return caf::make_error(ec::invalid_config,
                           "validation policy " + path + ": cannot read it ("
                             + std::string{std::strerror(f.error)} + ")");
  return apply_yaml(f.text, path);
}

std::vector<policy_row> check_policy::rows() const {
  std::vector<policy_row> out;
  for (const auto& r : table) {
    policy_row row;
    row.check = r.check;
    row.key = r.key;
    row.unit = r.unit;
    row.source = r.source;
    if (r.member) {
      row.value = value_text(values_.*(r.member));
      row.overridden = std::find(overridden_.begin(), overridden_.end(), row.key)
                       != overridden_.end();
    } else {
      row.value = "—";
    }
    row.rule = fill(r.rule, row.value);
    out.push_back(std::move(row));
  }
  return out;
}

std::string render_policy_table(const check_policy& policy) {
  auto rows = policy.rows();
  size_t key_w = 3, value_w = 5, unit_w = 4;
  for (const auto& r : rows) {
    key_w = std::max(key_w, r.key.size());
    value_w = std::max(value_w, r.value.size() + (r.overridden ? 1 : 0));
    unit_w = std::max(unit_w, r.unit.size());
  }
  auto pad = [](std::string s, size_t w) {
    // "—" is three bytes but one column.
    size_t shown = s == "—" ? 1 : s.size();
    if (shown < w)
      s.append(w - shown, ' ');
    return s;
  };
  std::ostringstream out;
  std::string check;
  for (const auto& r : rows) {
    if (r.check != check) {
      check = r.check;
      out << (out.tellp() > 0 ? "\n" : "") << check << "\n";
      out << "  " << pad("KEY", key_w) << "  " << pad("VALUE", value_w) << "  "
          << pad("UNIT", unit_w) << "  RULE (VERDICT)  [SOURCE]\n";
    }
    out << "  " << pad(r.key.empty() ? "-" : r.key, key_w) << "  "
        << pad(r.value + (r.overridden ? "*" : ""), value_w) << "  " << pad(r.unit, unit_w)
        << "  " << r.rule << "  [" << r.source << "]\n";
  }
  out << "\n* overridden by the policy file. Verdicts: pass, warn, fail; a check that cannot run "
         "here is skipped.\n";
  return out.str();
}

std::string policy_rows_json(const check_policy& policy) {
  auto rows = nlohmann::ordered_json::array();
  for (const auto& r : policy.rows()) {
    nlohmann::ordered_json j;
    j["check"] = r.check;
    j["key"] = r.key;
    j["value"] = r.value;
    j["unit"] = r.unit;
    j["rule"] = r.rule;
    j["source"] = r.source;
    j["overridden"] = r.overridden;
    rows.push_back(std::move(j));
  }
  nlohmann::ordered_json out;
  out["thresholds"] = std::move(rows);
  return out.dump();
}

}  // namespace astraeus::validation
