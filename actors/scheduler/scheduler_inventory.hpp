#pragma once
/// @file
/// What of a machine's snapshot reaches the placement index (issue 18, rules
/// 1 and 2). GPUs are keyed by (machine, id) in the index, so the PCI-address
/// ids of identical machines never collide; a real UUID two machines report
/// is set aside on both (neither loses its other GPUs); a GPU listed twice
/// is placed once; a GPU with unknown health is set aside. The machine's
/// labels and state always reach the index, whatever its GPU list holds.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "actors/scheduler/placement.hpp"
#include "messages/astraeus.pb.h"

namespace astraeus {

/// Whether `id` is a PCI address (`0000:01:00.0`, domain of 4 to 8 hex
/// digits): the id of a GPU no driver named by UUID (an NVIDIA GPU lost
/// before NVML named it, an AMD card without `unique_id`), the same on every
/// identical machine, so never a conflict between machines.
bool is_pci_address_id(std::string_view id);

/// The real GPU UUIDs (ids that are not PCI addresses) each machine reports,
/// to find a UUID two machines claim. Kept compact (issue 14): a machine's
/// UUIDs packed in one string, and one 32-byte entry per UUID keyed by its
/// hash, so 100,000 machines x 8 GPUs take ~75 MiB (two maps of string sets
/// took ~216 MiB and two thirds of the snapshots' time). Two UUIDs of one
/// hash are told apart by the packed strings: a conflict is always exact.
class gpu_claims {
public:
  /// Replaces what `machine` claims with the real UUIDs among `ids` (empty
  /// ids and PCI addresses are not claims; an id listed twice counts once);
  /// answers the other machines whose conflicts may have changed (those
  /// sharing a UUID with it before or now), by name.
  std::set<std::string> update(const std::string& machine, const std::vector<std::string>& ids);

  /// The other machines that claim `id` too, sorted by name (empty: no
  /// conflict).
  std::vector<std::string> others(const std::string& machine, const std::string& id) const;

private:
  /// `machine`'s number, given on its first claim and kept.
  uint32_t number_of(const std::string& machine);
  /// Whether machine `n` claims `id`.
  bool claims(uint32_t n, std::string_view id) const;

  std::unordered_map<std::string, uint32_t> number_;
  std::vector<std::string> names_;  ///< by number
  /// By number: the UUIDs it claims, each as a 4-byte length and its bytes.
  std::vector<std::string> packed_;
  /// By a UUID's hash: the machines claiming a UUID of that hash.
  std::unordered_multimap<uint64_t, uint32_t> by_hash_;
};

/// A snapshot made fit for the placement index: the spec and the GPUs left
/// out of it, each with why.
struct admitted_snapshot {
  /// Name, labels, schedulable and the GPUs that may be placed onto (their
  /// NVLink peers renumbered to this list).
  machine_spec spec;
  /// The GPUs left out, in the snapshot's order, each with why.
  std::vector<v1::SetAsideGpu> set_aside;
};

/// Admits snapshot `m`: every GPU except those without an id, repeated ids
/// (the first kept), unknown health, real UUIDs another machine in `claims`
/// reports, and those past 64. Never fails: a bad GPU never hides the
/// machine.
admitted_snapshot admit_snapshot(const v1::SchedulerMachine& m, const gpu_claims& claims);

} // namespace astraeus
