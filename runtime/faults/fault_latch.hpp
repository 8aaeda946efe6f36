#pragma once
/// @file
/// GPU fault latches on the machine. A fault (a fatal Xid from the kernel
/// log, a failed row remap, active uncorrectable ECC errors, every NVLink
/// link down, a broken NVLink fabric, an AMD reset that failed) is written to
/// the agent's RocksDB with `sync=true` before it is reported, survives agent
/// restarts and reboots, and goes away only when an admin clears it or the
/// GPU is replaced (another id at its PCI address). Repeats fold into one
/// latch with a count and a last-seen time. Reasons read exactly as the seed
/// words them (shared/seeds/gpus.md, "What fences a GPU").

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/astraeus.pb.h"
#include "runtime/process/boot_clock.hpp"
#include "runtime/faults/kmsg.hpp"
#include "runtime/faults/xid_policy.hpp"

namespace astraeus {

class Store;

/// The latches of one machine, kept in its agent's store (family "faults").
/// One thread at a time.
class fault_latches {
public:
  /// Loads the latches, incidents, Xid policy and kernel-log position kept
  /// in `store`. `boot_id`: this boot's id (a new boot resets the position).
  /// Errors: the store's.
  static caf::expected<fault_latches> load(std::shared_ptr<Store> store,
                                           std::string boot_id);

  /// Times the AMD reset window (`amd_reset_window_ms`) on `clock` from now
  /// on (the system's boot clock by default; a test's moves by hand): a
  /// duration, so a wall clock set forward never makes a reset in progress
  /// a fault (issue 23 item 4).
  void set_boot_clock(std::shared_ptr<const boot_clock> clock) {
    boot_ = std::move(clock);
  }

  /// Uses `policy` from now on and keeps it (the controller sends it).
  caf::error set_policy(const xid_policy& policy);

  /// The policy in force.
  const xid_policy& policy() const {
    return policy_;
  }

  /// Handles one kernel-log event, mapping it to a GPU of `known` by its
  /// PCI address. A fencing event becomes (or repeats) a latch, written with
  /// sync (without, under defer_sync); others become incidents. A fencing event at an address no GPU of
  /// `known` has is latched against that PCI address (gpu_id empty) while
  /// `known` is not a complete read (discovery has not finished, NVML
  /// hangs) or its PCI bus shows a GPU there (the driver dropped it), and
  /// fences the GPU that appears there later (on_readings attaches its
  /// UUID); after a complete read, an address with no GPU on the bus (an
  /// NVSwitch, a bridge) gives an unmapped incident. Returns true when a new latch was written (report it at once).
  ///
  /// Which records are skipped (rule 10): an event whose (sequence, part)
  /// is at or before the stored position of this boot, unless it comes
  /// after a backward jump of the log within this read (`after_jump`); and,
  /// whatever its position, the very same record again (sequence, part and
  /// text) within this run, so a record an admin's clear followed never
  /// fences again. A line of a syslog file (kern.log) or of `dmesg -T`
  /// whose time (`gpu_event::wall`) is more than `earlier_boot_slack_ms`
  /// before this boot began (`now_unix_ms` less the boot clock) is of an
  /// earlier boot: history, not evidence; it is skipped and logged (the
  /// first three of a run), as /dev/kmsg holds only this boot's records.
  /// A latch the store refuses (a full disk) is kept in
  /// memory with `not_durable` set, still fences its GPU and is reported
  /// so marked; `retry_not_durable` writes it later (issue 23 item 1).
  /// Errors: the store's, for everything but the latch itself.
  caf::expected<bool> on_event(const gpu_event& ev, const v1::GpuSection& known,
                               int64_t now_unix_ms);

  /// How far before this boot's start a syslog line's time may be and still
  /// count as this boot's: the wall clock is often set (NTP, the RTC's
  /// zone) in the boot's first minutes, after the kernel's first lines.
  static constexpr int64_t earlier_boot_slack_ms = 10 * 60 * 1000;

  /// Handles a discovery pass: attaches latches held against a PCI address
  /// to the GPU now found there, latches the faults its readings show, a
  /// `lost` GPU ("lost: ..."), and a GPU `unresponsive` for
  /// unresponsive_passes_to_latch passes in a row (a shorter hang is shown
  /// Faulty by the controller but not latched), and drops the latches of
  /// GPUs that were replaced. Returns true when a latch was added, moved or
  /// dropped.
  caf::expected<bool> on_readings(const v1::GpuSection& section,
                                  int64_t now_unix_ms);

  /// Latches a hand-over that cannot work (issue 18, rule 3): GPU `gpu_id`
  /// (at `pci_address`) is Faulty with `reason` ("hand-over failing:
  /// /dev/nvidia3 missing"), `evidence` the worker's error; written with
  /// sync, so work stops landing on a GPU that cannot be handed over until
  /// an admin clears it. Returns true when new. Errors: the store's.
  caf::expected<bool> on_hand_over_failure(const std::string& gpu_id,
                                           const std::string& pci_address,
                                           const std::string& reason,
                                           const std::string& evidence, int64_t now_unix_ms);

  /// Writes the latches held in memory only (`not_durable` set: the store
  /// refused them, e.g. a full disk) now that it may take them; returns how
  /// many were written. Errors: the store's (they stay held and marked).
  caf::expected<size_t> retry_not_durable();
  /// Latches held in memory only, waiting for the store.
  size_t not_durable_count() const {
    return not_durable_.size();
  }

  /// Issue 17 (latency): with `on`, a new or repeated latch is written
  /// without sync, so its report can leave at once; the caller then makes
  /// the store's log durable (Store::sync_wal, on a wal_syncer) and tells
  /// `synced`. The kernel-log position is written after the latch in the
  /// same log, so it is never durable without it (a killed agent keeps
  /// both; a power loss before the sync loses both). Off (the default):
  /// every latch is written with sync before its call returns.
  void defer_sync(bool on) {
    defer_sync_ = on;
  }
  /// With defer_sync: the generation of the newest latch write not known
  /// durable yet; 0 when every latch is. Pass it to `synced` once a sync
  /// started after this call has finished.
  uint64_t unsynced_generation() const {
    return unsynced_.empty() ? 0 : write_generation_;
  }
  /// A sync of the store's log that started after `unsynced_generation()`
  /// returned `generation` has finished with `err`: the latches written up to
  /// it are durable; on an error they are held as not durable (reported so,
  /// written again by retry_not_durable). Returns how many were marked not
  /// durable.
  size_t synced(uint64_t generation, const caf::error& err);
  /// Clears every latch of `gpu_id`; returns whether one was latched.
  caf::expected<bool> clear(const std::string& gpu_id);

  /// Adds each GPU's latches and incidents to `section`; a GPU with a latch
  /// that discovery no longer sees (e.g. fallen off the bus), or a latch
  /// held against a PCI address where no GPU is known yet, is listed with
  /// status "lost" (its id: the UUID, else the address); incidents logged
  /// before their GPU was known go to the GPU now at their address; the
  /// rest that map to no GPU go to unmapped_incidents.
  void annotate(v1::GpuSection& section) const;

  /// Every latch, by GPU id.
  const std::map<std::string, std::vector<v1::FaultLatch>>& latches() const {
    return latches_;
  }

  /// Passes in a row a GPU must stay unresponsive before that is latched.
  static constexpr int unresponsive_passes_to_latch = 3;

  /// How long an AMD GPU reset may take: one that began ("GPU reset
  /// begin!") and logged no success within this is a driver fault
  /// (on_readings latches it).
  static constexpr int64_t amd_reset_window_ms = 60 * 1000;

private:
  fault_latches() = default;
  // Whom a latch at `pci` goes to: the GPU there, a GPU latched there
  // before, the address itself, or "" (no GPU: an incident).
  std::string holder_for(const std::string& pci, const v1::Gpu* gpu,
                         const v1::GpuSection& known) const;
  // The record was handled before (position or the same record again; a
  // plain line: the same timestamp and text in an earlier run of this boot).
  bool seen_before(const gpu_event& ev) const;
  // Keeps the position after `ev` (store, no sync) and remembers it.
  void keep_position(const gpu_event& ev);
  // Moves latches held against a PCI address to the GPU found there.
  caf::expected<bool> adopt(const v1::GpuSection& section);
  // Folds an Xid 79 and a fallen-off-the-bus notice of `holder` into one
  // latch; true when it did (nothing else to write).
  caf::expected<bool> fold_fallen(const gpu_event& ev, const std::string& holder,
                                  std::string& rule, std::string& reason,
                                  int64_t now_unix_ms);
  // Counts an application Xid's process for `holder`; the distinct
  // processes (oldest first: "pid 100", or a name where the line gives no
  // pid) behind the GPU's application Xids in the last 24 h, empty when
  // the line names no process.
  std::vector<std::string> application_processes(const gpu_event& ev, const std::string& holder,
                                                 int64_t now_unix_ms);
  // Latches the AMD resets that began and logged no success in time.
  caf::expected<bool> latch_unfinished_resets(int64_t now_unix_ms);
  // Latches what a GPU's read status calls for (lost, a long hang).
  caf::expected<bool> latch_status(const v1::Gpu& g, int64_t now_unix_ms);
  // repeat: a kernel-log event counts as a repeat; a reading that still
  // shows the same fault does not (no count, no write).
  caf::expected<bool> latch(const std::string& rule, v1::FaultLatch fault,
                            int64_t now_unix_ms, bool repeat = true);
  // The latch a GPU's NVML recovery action calls for: "Xid <n> fault" for
  // its latest Xid (the driver confirmed it), else a driver fault.
  std::optional<std::pair<std::string, v1::FaultLatch>>
  confirmed_by_driver(const v1::Gpu& g) const;
  caf::error record(v1::GpuIncident incident, int64_t now_unix_ms);
  // An event at an address with no GPU (issue 17, rule 6;
  // runtime/faults/device_events.cpp): the GPUs whose NVLinks lead there are
  // latched ("NVLink fabric fault at NVSwitch <pci>") when `action` is
  // fence, or get an at-risk incident; true when a latch is new.
  caf::expected<bool> on_device_event(const gpu_event& ev, const v1::GpuSection& known,
                                      xid_action action, int64_t now_unix_ms);

  std::shared_ptr<Store> store_;
  std::string boot_id_;
  uint64_t position_ = 0;
  uint32_t position_part_ = 0;
  /// Records handled in this run ("sequence/part/text"), the newest last.
  std::deque<std::string> handled_order_;
  std::set<std::string> handled_;
  /// Plain dmesg lines (no sequence number, a "[ seconds.fraction]"
  /// timestamp: a regular file given as kmsg.path) handled in an earlier run
  /// of this boot, by `plain_record_key`: a file is read from its start at
  /// every agent start, and its lines carry no position to go by.
  std::set<std::string> plain_handled_before_;
  /// This boot's plain records kept in the store, by key (so the lowest
  /// timestamp first: it is forgotten first beyond the bound, 10,000).
  std::set<std::string> plain_kept_;
  /// Unresponsive passes in a row, by GPU id.
  std::map<std::string, int> unresponsive_passes_;
  /// AMD resets begun and not yet succeeded: GPU (id, else address) ->
  /// (its PCI address, when the reset began on the boot clock, ms).
  std::map<std::string, std::pair<std::string, int64_t>> resets_begun_;
  /// The clock of the AMD reset window, and of when this boot began.
  std::shared_ptr<const boot_clock> boot_ = real_boot_clock();
  /// Lines of earlier boots skipped in this run (`on_event`).
  uint64_t earlier_boot_lines_ = 0;
  /// Application Xids by GPU (id, else address): process ("pid=" or
  /// "name=" of the line) -> when it last reported one (wall clock, ms).
  std::map<std::string, std::map<std::string, int64_t>> app_processes_;
  xid_policy policy_;
  /// GPU id (the PCI address while none is known) -> its latches (one per
  /// rule).
  std::map<std::string, std::vector<v1::FaultLatch>> latches_;
  /// Rule keys by GPU id, parallel to latches_.
  std::map<std::string, std::vector<std::string>> rules_;
  /// Incidents by store key.
  std::map<std::string, v1::GpuIncident> incidents_;
  /// (GPU id, rule) of the latches the store refused (held in memory only).
  std::set<std::pair<std::string, std::string>> not_durable_;
  /// defer_sync: latch writes go without sync (see defer_sync).
  bool defer_sync_ = false;
  /// (GPU id, rule) -> the generation of its write not known durable yet.
  std::map<std::pair<std::string, std::string>, uint64_t> unsynced_;
  uint64_t write_generation_ = 0;
};

/// The words for an NVML recovery action (nvmlDeviceGpuRecoveryAction_t):
/// 1 -> "GPU reset", 2 -> "node reboot", ...; unknown values name the number.
std::string recovery_action_name(uint32_t action);

/// The reason text of a fatal Xid: "Xid 79 fault".
std::string xid_fault_reason(uint32_t xid);

/// The latches a GPU's readings call for, as (rule, latch) pairs: row-remap
/// failure, uncorrectable rows remapped, active uncorrectable ECC, every
/// NVLink link inactive, fabric route unhealthy or registration failed.
/// Historical scars (aggregate ECC, retired pages, a pending remap, some
/// links down) call for none.
std::vector<std::pair<std::string, v1::FaultLatch>>
faults_in_readings(const v1::Gpu& gpu);

/// This boot's id from <root>/proc/sys/kernel/random/boot_id; where the host
/// root has none (a fixture, /proc not mounted there), this system's own
/// (the same kernel); "" if neither can be read.
std::string read_boot_id(const std::string& root);

} // namespace astraeus
