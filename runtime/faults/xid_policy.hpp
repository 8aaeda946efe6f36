#pragma once
/// @file
/// What Astraeus does on each NVIDIA Xid: fence the GPU (`Faulty`), mark it
/// `AtRisk`, or record the event as history. The built-in table follows the
/// seed (shared/seeds/gpus.md, "What fences a GPU": Xid 48, 63, 74, 79, 92,
/// 95, 119, 120, 149 and 154 fence) with meanings from NVIDIA's Xid catalogue;
/// every entry can be overridden in the controller's config (`xid.fence`,
/// `xid.at_risk`, `xid.record`), and `astra xids` prints the table in force.
/// The AMD table (issue 17, rule 4: amdgpu's fatal messages) is kept here
/// too, overridable with `amd.fence`, `amd.at_risk`, `amd.record`, and
/// printed by `astra xids` after the Xid table.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// The action for one Xid.
enum class xid_action { fence, at_risk, record };

/// "fence", "at-risk", "record".
const char* to_string(xid_action a);

/// The fleet's Xid policy: built-in table plus overrides.
class xid_policy {
public:
  /// The built-in table (the seed's fatal list fences; everything else is
  /// recorded).
  xid_policy();

  /// Applies overrides: each list is Xid numbers. An Xid in two lists is
  /// an error naming it. Errors: ec::invalid_config.
  caf::error override_with(const std::vector<uint32_t>& fence,
                           const std::vector<uint32_t>& at_risk,
                           const std::vector<uint32_t>& record);

  /// The action for `xid` (record for Xids not in the table).
  xid_action action(uint32_t xid) const;

  /// Whether `xid` is an application Xid (13, 31, 43, 45, 69: usually the
  /// program's fault, per NVIDIA's catalogue) that only counts as a sign:
  /// the GPU is at risk once it reports such Xids from
  /// application_processes() different processes within 24 h, while one
  /// job crashing again and again marks nothing. False when an override
  /// set the Xid's action.
  bool application(uint32_t xid) const;

  /// Whether `xid` fences only when the driver confirms a fault (issue 17,
  /// rule 5: the NVLink family 144-148 and 150; source: NVIDIA's Xid
  /// catalogue, "NVLink" errors): the line says "Fatal", or NVML's recovery
  /// action asks for a reset or a reboot; otherwise the event counts toward
  /// the NVLink-errors sign. False when an override set the Xid's action.
  bool fence_when_confirmed(uint32_t xid) const;

  /// Sets N, the distinct processes after which application Xids mark a GPU
  /// at risk (config `xid.application_processes`, default 3). Errors:
  /// ec::invalid_config for 0 or more than 1000.
  caf::error set_application_processes(uint32_t n);

  /// The action for an AMD kernel-log event (issue 17, rule 4), by its
  /// name: "amd_reset_failed", "amd_reset_unfinished", "amd_vram_lost",
  /// "amd_ras_fatal", "amd_ring_timeout" (record for others).
  xid_action amd_action(const std::string& event) const;

  /// The AMD events the table knows, in its order.
  static std::vector<std::string> amd_events();

  /// Applies AMD overrides (config `amd.fence`, `amd.at_risk`,
  /// `amd.record`): lists of event names. Errors: ec::invalid_config naming
  /// an unknown event (and the known ones) or an event in two lists.
  caf::error override_amd(const std::vector<std::string>& fence,
                          const std::vector<std::string>& at_risk,
                          const std::vector<std::string>& record);

  /// Distinct processes after which application Xids mark a GPU at risk.
  uint32_t application_processes() const {
    return application_processes_;
  }

  /// The table as `astra xids` shows it, sorted by Xid.
  v1::XidPolicyTable table() const;

  /// Loads a table sent by the controller (unknown actions are ignored).
  static xid_policy from_table(const v1::XidPolicyTable& table);

private:
  struct entry {
    xid_action action;
    std::string meaning;
    bool overridden = false;
  };
  std::map<uint32_t, entry> entries_;
  std::map<std::string, entry> amd_;
  uint32_t application_processes_ = 3;
};

/// Parses "48, 63,74" into numbers. Errors: ec::invalid_config naming the
/// bad item.
caf::expected<std::vector<uint32_t>> parse_xid_list(std::string_view text);

/// Parses "amd_ring_timeout, amd_vram_lost" into trimmed names (empty items
/// dropped); the names are checked by xid_policy::override_amd.
std::vector<std::string> parse_name_list(std::string_view text);

} // namespace astraeus
