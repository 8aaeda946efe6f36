#include "runtime/faults/fault_latch.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "messages/error.hpp"
#include "messages/gpu_read.hpp"
#include "runtime/faults/device_events.hpp"
#include "store/store.hpp"

namespace astraeus {

namespace {

constexpr const char* latch_prefix = "latch/";
constexpr const char* incident_prefix = "incident/";
constexpr const char* policy_key = "policy";
constexpr const char* position_key = "kmsg-position";
/// Plain kernel-log lines handled in this boot:
/// "kmsg-plain/<boot id>/<timestamp us, 20 digits>/<FNV-1a of the text, 16 hex>".
constexpr const char* plain_prefix = "kmsg-plain/";
/// Plain records remembered per boot at most (the oldest forgotten first).
constexpr size_t max_plain_records = 10000;

/// FNV-1a, 64 bits: stable across builds (the key is stored).
uint64_t fnv1a(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

/// The store key of plain record `ev` (timestamp and text) in boot `boot`;
/// zero-padded so that the keys of a boot sort by timestamp.
std::string plain_record_key(const std::string& boot, const gpu_event& ev) {
  char tail[64];
  std::snprintf(tail, sizeof tail, "/%020llu/%016llx",
                static_cast<unsigned long long>(ev.timestamp_us),
                static_cast<unsigned long long>(fnv1a(ev.text)));
  return plain_prefix + boot + tail;
}
/// Incidents kept at most (oldest dropped first).
constexpr size_t max_incidents = 500;

std::string latch_key(const std::string& gpu, const std::string& rule) {
  return latch_prefix + gpu + "/" + rule;
}

const v1::Gpu* find_by_pci(const v1::GpuSection& s, const std::string& pci) {
  if (pci.empty())
    return nullptr;
  for (const auto& g : s.gpus())
    if (g.pci_address() == pci)
      return &g;
  return nullptr;
}

/// Whom a stored latch belongs to: its GPU, else the PCI address it was
/// latched against before a GPU was known there.
std::string holder_of(const v1::FaultLatch& f) {
  return f.gpu_id().empty() ? f.pci_address() : f.gpu_id();
}

/// Records remembered as handled in one run, at most.
constexpr size_t max_handled = 4096;

std::string record_key(const gpu_event& ev) {
  return std::to_string(ev.sequence) + "/" + std::to_string(ev.part) + "/" + ev.text;
}

std::string kind_name(gpu_event_kind k) {
  std::string out = to_string(k);
  std::replace(out.begin(), out.end(), '_', '-');
  return out;
}

/// " [evidence]" for a latch's log line, or nothing when its reason
/// already says it ("lost: missing from NVML …" with that same detail as
/// evidence: a user trial read it doubled).
std::string evidence_note(const v1::FaultLatch& f) {
  if (f.evidence().empty() || f.reason().find(f.evidence()) != std::string::npos)
    return {};
  return " [" + f.evidence() + "]";
}

} // namespace

std::string recovery_action_name(uint32_t action) {
  switch (action) {
    case 0: return "none";
    case 1: return "GPU reset";
    case 2: return "node reboot";
    case 3: return "drain P2P";
    case 4: return "drain P2P and reset";
    case 5: return "recover IMEX domain";
    case 6: return "bus reset";
    case 7: return "system reboot";
    default: return "unknown (" + std::to_string(action) + ")";
  }
}

std::string xid_fault_reason(uint32_t xid) {
  return "Xid " + std::to_string(xid) + " fault";
}

std::string read_boot_id(const std::string& root) {
  auto read = [](const std::filesystem::path& at) {
    std::ifstream in{at / "proc/sys/kernel/random/boot_id"};
    std::string id;
    std::getline(in, id);
    return id;
  };
  auto id = read(root);
  // A host root without it (a fixture, a host's /proc not mounted there): the
  // kernel this agent runs on is the one whose log it reads (a container
  // shares its host's kernel), so its own boot id is the boot's.
  if (id.empty() && std::filesystem::path{root} != "/")
    id = read("/");
  return id;
}

std::vector<std::pair<std::string, v1::FaultLatch>>
faults_in_readings(const v1::Gpu& g) {
  std::vector<std::pair<std::string, v1::FaultLatch>> out;
  auto add = [&](const char* rule, std::string reason, std::string evidence) {
    v1::FaultLatch f;
    f.set_gpu_id(g.id());
    f.set_pci_address(g.pci_address());
    f.set_reason(std::move(reason));
    f.set_source(g.vendor() == "amd" ? "sysfs" : "nvml");
    f.set_evidence(std::move(evidence));
    out.emplace_back(rule, std::move(f));
  };
  const auto& rr = g.row_remapping();
  if (rr.has_failed() && rr.failed())
    add("row-remap-failure", "row-remap failure — GPU needs RMA",
        "row remapping failed");
  if (rr.has_uncorrectable_rows() && rr.uncorrectable_rows() > 0)
    add("uncorrectable-rows",
        std::to_string(rr.uncorrectable_rows()) + " uncorrectable row(s) remapped",
        "remapped rows: " + std::to_string(rr.uncorrectable_rows()) + " uncorrectable");
  const auto& ecc = g.ecc();
  if (ecc.has_volatile_uncorrectable() && ecc.volatile_uncorrectable() > 0)
    add("active-uncorrectable-ecc",
        std::to_string(ecc.volatile_uncorrectable())
          + " active uncorrectable ECC error(s)",
        "volatile uncorrectable ECC count "
          + std::to_string(ecc.volatile_uncorrectable()));
  if (!g.nvlinks().empty()
      && std::none_of(g.nvlinks().begin(), g.nvlinks().end(),
                      [](const auto& l) { return l.active(); }))
    add("nvlink-inactive",
        "all " + std::to_string(g.nvlinks_size()) + " NVLink link(s) inactive",
        "NVLink state: every link inactive");
  const auto& fab = g.fabric();
  if (fab.health() == "route-unhealthy")
    add("fabric-route", "NVLink fabric route unhealthy",
        "fabric health: route unhealthy");
  if (fab.state() == "completed" && fab.has_status() && fab.status() != 0)
    add("fabric-registration",
        "fabric registration failed (status " + std::to_string(fab.status()) + ")",
        "fabric registration status " + std::to_string(fab.status()));
  return out;
}

caf::expected<fault_latches> fault_latches::load(std::shared_ptr<Store> store,
                                                 std::string boot_id) {
  fault_latches out;
  out.store_ = std::move(store);
  out.boot_id_ = std::move(boot_id);
  std::vector<std::string> stale_plain;
  caf::error bad;
  auto err = out.store_->for_each(
    family::faults, [&](std::string_view key, std::string_view bytes) {
      auto k = std::string{key};
      if (k.rfind(latch_prefix, 0) == 0) {
        v1::FaultLatch f;
        if (!f.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
          spdlog::error("latch: stored latch '{}' does not parse; kept", k);
          return true;
        }
        auto rule = k.substr(k.rfind('/') + 1);
        out.latches_[holder_of(f)].push_back(f);
        out.rules_[holder_of(f)].push_back(rule);
      } else if (k.rfind(incident_prefix, 0) == 0) {
        v1::GpuIncident inc;
        if (inc.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
          out.incidents_[k] = inc;
      } else if (k == policy_key) {
        v1::XidPolicyTable t;
        if (t.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
          out.policy_ = xid_policy::from_table(t);
      } else if (k.rfind(plain_prefix, 0) == 0) {
        // This boot's plain records are remembered; another boot's forgotten.
        if (k.compare(std::strlen(plain_prefix), out.boot_id_.size() + 1, out.boot_id_ + "/") == 0)
          out.plain_handled_before_.insert(k);
        else
          stale_plain.push_back(k);
      } else if (k == position_key) {
        v1::KmsgPosition pos;
        if (pos.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))
            && pos.boot_id() == out.boot_id_) {
          out.position_ = pos.sequence();
          out.position_part_ = pos.part();
        }
      }
      return true;
    });
  if (err)
    return err;
  // Beyond the bound, the oldest of this boot's plain records go too (their
  // keys sort by timestamp).
  while (out.plain_handled_before_.size() > max_plain_records) {
    stale_plain.push_back(*out.plain_handled_before_.begin());
    out.plain_handled_before_.erase(out.plain_handled_before_.begin());
  }
  out.plain_kept_ = out.plain_handled_before_;
  for (const auto& k : stale_plain)
    if (auto gone = out.store_->erase(family::faults, k, false))
      spdlog::warn("latch: cannot forget kernel-log record {}: {}", k, render_error(gone));
  return out;
}

caf::error fault_latches::set_policy(const xid_policy& policy) {
  policy_ = policy;
  return store_->put(family::faults, policy_key, policy_.table(), true);
}

caf::expected<bool> fault_latches::latch(const std::string& rule,
                                         v1::FaultLatch fault,
                                         int64_t now_unix_ms, bool repeat) {
  auto gpu = holder_of(fault);
  auto& list = latches_[gpu];
  auto& rules = rules_[gpu];
  auto i = std::find(rules.begin(), rules.end(), rule);
  bool is_new = i == rules.end();
  v1::FaultLatch* slot;
  if (!is_new && !repeat) {
    // A reading that still shows a latched fault is the same fault, not a
    // repeat: nothing to count and nothing to write.
    const auto& held = list[static_cast<size_t>(i - rules.begin())];
    if (held.reason() == fault.reason() && held.evidence() == fault.evidence())
      return false;
  }
  if (is_new) {
    fault.set_first_seen_unix_ms(now_unix_ms);
    fault.set_count(0);
    list.push_back(fault);
    rules.push_back(rule);
    slot = &list.back();
  } else {
    slot = &list[static_cast<size_t>(i - rules.begin())];
    // The reason may carry a count that grew ("3 active uncorrectable ...").
    slot->set_reason(fault.reason());
    slot->set_evidence(fault.evidence());
  }
  slot->set_count(slot->count() + 1);
  slot->set_last_seen_unix_ms(now_unix_ms);
  slot->set_not_durable(false);
  if (auto err = store_->put(family::faults, latch_key(gpu, rule), *slot, !defer_sync_)) {
    // The store refuses writes (a full disk): the fault still fences its
    // GPU, held in memory and reported "not durable yet", and is written
    // as soon as the store takes writes (retry_not_durable). Issue 23.
    slot->set_not_durable(true);
    not_durable_.insert({gpu, rule});
    if (is_new)
      spdlog::warn("latch: GPU {} ({}) is Faulty: {}{} (not durable yet: {})", gpu,
                   slot->pci_address(), slot->reason(), evidence_note(*slot),
                   render_error(err));
    return is_new;
  }
  not_durable_.erase({gpu, rule});
  if (defer_sync_)
    unsynced_[{gpu, rule}] = ++write_generation_;
  if (is_new)
    spdlog::warn("latch: GPU {} ({}) is Faulty: {}{}", gpu,
                 slot->pci_address(), slot->reason(), evidence_note(*slot));
  return is_new;
}

caf::expected<bool> fault_latches::on_hand_over_failure(const std::string& gpu_id,
                                                        const std::string& pci_address,
                                                        const std::string& reason,
                                                        const std::string& evidence,
                                                        int64_t now_unix_ms) {
  v1::FaultLatch f;
  f.set_gpu_id(gpu_id);
  f.set_pci_address(pci_address);
  f.set_reason(reason);
  f.set_source("hand-over");
  f.set_evidence(evidence);
  return latch("hand-over", std::move(f), now_unix_ms, false);
}

caf::error fault_latches::record(v1::GpuIncident incident, int64_t now_unix_ms) {
  auto key = std::string{incident_prefix}
             + (incident.gpu_id().empty() ? "pci-" + incident.pci_address()
                                          : incident.gpu_id())
             + "/" + incident.kind() + "/"
             + (incident.has_xid() ? std::to_string(incident.xid()) : "-");
  auto& slot = incidents_[key];
  if (slot.count() == 0) {
    incident.set_first_seen_unix_ms(now_unix_ms);
    slot = std::move(incident);
  } else {
    slot.set_text(incident.text());
    slot.set_action(incident.action());  // an application Xid may turn at-risk
    slot.set_pid(incident.pid());  // the latest line's process (rule 9)
    slot.set_process_name(incident.process_name());
  }
  slot.set_count(slot.count() + 1);
  slot.set_last_seen_unix_ms(now_unix_ms);
  if (incidents_.size() > max_incidents) {
    auto oldest = std::min_element(incidents_.begin(), incidents_.end(),
                                   [](const auto& a, const auto& b) {
                                     return a.second.last_seen_unix_ms()
                                            < b.second.last_seen_unix_ms();
                                   });
    (void) store_->erase(family::faults, oldest->first, false);
    incidents_.erase(oldest);
  }
  if (auto i = incidents_.find(key); i != incidents_.end())
    return store_->put(family::faults, key, i->second, false);
  return caf::none;
}

std::string fault_latches::holder_for(const std::string& pci, const v1::Gpu* gpu,
                                      const v1::GpuSection& known) const {
  if (gpu != nullptr && !gpu->id().empty())
    return gpu->id();
  if (pci.empty())
    return {};
  // A GPU latched before at that address (lost, fallen off the bus).
  for (const auto& [id, list] : latches_)
    if (!list.empty() && list.front().pci_address() == pci)
      return id;
  // No GPU known there: the address itself, while discovery has not given
  // every GPU (not yet, NVML hangs) or where the PCI bus shows a GPU the
  // driver does not list. After a complete read, an address with nothing on
  // the bus (an NVSwitch, a bridge) is no GPU: the event stays an incident.
  // The bus says "nothing there" only when its scan saw GPUs at all: with no
  // PCI tree to read (a container without /sys/bus/pci, a host root without
  // one) it says nothing, and the fault is held against the address.
  bool bus_has = std::any_of(known.bus().begin(), known.bus().end(),
                             [&](const v1::BusGpu& b) { return b.pci_address() == pci; });
  bool bus_scanned = known.bus_size() > 0;
  if (!is_complete_read(read_as(known)) || bus_has || !bus_scanned)
    return pci;
  return {};
}

bool fault_latches::seen_before(const gpu_event& ev) const {
  if (ev.sequence == 0)
    // A plain dmesg line has no position to go by; one with a timestamp is
    // the same record as a line of the same timestamp and text handled in
    // an earlier run of this boot (the file is read again from its start).
    // Within a run every line is read once: an identical one is a repeat.
    return ev.timestamp_us != 0
           && plain_handled_before_.count(plain_record_key(boot_id_, ev)) > 0;
  if (handled_.count(record_key(ev)) > 0)
    return true;
  if (ev.after_jump)
    return false;
  return std::make_pair(ev.sequence, ev.part) <= std::make_pair(position_, position_part_);
}

void fault_latches::keep_position(const gpu_event& ev) {
  if (ev.sequence == 0) {
    // Remembered for the next run of this boot (no sync: as the position,
    // a record lost with a crash is read again, which only repeats it).
    if (ev.timestamp_us == 0)
      return;
    auto key = plain_record_key(boot_id_, ev);
    if (plain_kept_.count(key) > 0 || store_->put_raw(family::faults, key, "", false))
      return;
    plain_kept_.insert(std::move(key));
    // Beyond the bound the oldest (the lowest timestamp) is forgotten.
    while (plain_kept_.size() > max_plain_records) {
      (void) store_->erase(family::faults, *plain_kept_.begin(), false);
      plain_kept_.erase(plain_kept_.begin());
    }
    return;
  }
  position_ = ev.sequence;
  position_part_ = ev.part;
  auto key = record_key(ev);
  if (handled_.insert(key).second) {
    handled_order_.push_back(std::move(key));
    if (handled_order_.size() > max_handled) {
      handled_.erase(handled_order_.front());
      handled_order_.pop_front();
    }
  }
  v1::KmsgPosition pos;
  pos.set_boot_id(boot_id_);
  pos.set_sequence(position_);
  pos.set_part(position_part_);
  (void) store_->put(family::faults, position_key, pos, false);
}

caf::expected<bool> fault_latches::fold_fallen(const gpu_event& ev, const std::string& holder,
                                               std::string& rule, std::string& reason,
                                               int64_t now_unix_ms) {
  // "GPU has fallen off the bus" is what Xid 79 means: the notice and the Xid
  // line are several records of one event and fold into one latch, read
  // "Xid 79 fault" whichever came first. The notice is no Xid: it adds
  // nothing to the latch's count (the driver's Xid lines do), so one fault
  // that logged an Xid 79 and the notice reads 1x, not 2x.
  auto& rules = rules_[holder];
  auto has = [&](const char* r) {
    return std::find(rules.begin(), rules.end(), r) != rules.end();
  };
  if (ev.kind == gpu_event_kind::fallen_off_bus && has("xid-79"))
    return true;
  if (ev.kind != gpu_event_kind::xid || !has("driver-fault"))
    return false;
  auto& list = latches_[holder];
  auto at = static_cast<size_t>(
    std::find(rules.begin(), rules.end(), "driver-fault") - rules.begin());
  if (list[at].evidence().find("fallen off the bus") == std::string::npos)
    return false;
  // Renamed to the Xid: its count and first sighting carry over, the notice
  // counted as this Xid line (one event, 1x).
  auto old_latch = list[at];
  v1::FaultLatch f = old_latch;
  f.set_reason(reason);
  f.set_xid(79);
  f.set_evidence(ev.text);
  f.set_count(std::max<uint64_t>(old_latch.count(), 1));
  f.set_last_seen_unix_ms(now_unix_ms);
  if (auto err = store_->put(family::faults, latch_key(holder, rule), f, true))
    return err;
  if (auto err = store_->erase(family::faults, latch_key(holder, "driver-fault"), true))
    return err;
  list[at] = std::move(f);
  rules[at] = rule;
  return true;
}

caf::expected<bool> fault_latches::on_event(const gpu_event& ev,
                                            const v1::GpuSection& known,
                                            int64_t now_unix_ms) {
  if (seen_before(ev))
    return false;
  if (ev.sequence == 0 && ev.wall) {
    const int64_t booted = now_unix_ms - boot_->now_boot_ms();
    auto logged = resolve_wall_time(*ev.wall, now_unix_ms);
    if (logged && *logged < booted - earlier_boot_slack_ms) {
      if (++earlier_boot_lines_ <= 3)
        spdlog::info("kernel log: a line of an earlier boot fences nothing (logged {} s before "
                     "this boot began{}): {}",
                     (booted - *logged) / 1000,
                     earlier_boot_lines_ == 3 ? "; further ones are not logged" : "", ev.text);
      return false;
    }
  }
  if (ev.kind == gpu_event_kind::gpu_identity) {
    // "GPU at PCI:...: GPU-<uuid>": latches held against the address get
    // their UUID now, whether NVML lists the GPU or not.
    v1::GpuSection named;
    auto* g = named.add_gpus();
    g->set_id(ev.uuid);
    g->set_pci_address(ev.pci_address);
    auto adopted = adopt(named);
    if (adopted)
      keep_position(ev);
    return adopted;
  }
  const auto* gpu = find_by_pci(known, ev.pci_address);
  if (gpu == nullptr && ev.pci_address.empty() && ev.kind != gpu_event_kind::xid
      && ev.kind != gpu_event_kind::fallen_off_bus) {
    // An amdgpu line that names no device: the machine's only AMD GPU, if
    // it has exactly one; otherwise it stays an unmapped incident.
    const v1::Gpu* only = nullptr;
    int amd = 0;
    for (const auto& g : known.gpus())
      if (g.vendor() == "amd" && ++amd == 1)
        only = &g;
    if (amd == 1)
      gpu = only;
  }
  auto holder = holder_for(gpu != nullptr ? gpu->pci_address() : ev.pci_address, gpu, known);
  bool fences = false;
  std::string rule, reason;
  xid_action action = xid_action::record;
  // The distinct processes behind this GPU's application Xids in 24 h.
  std::vector<std::string> app_processes;
  switch (ev.kind) {
    case gpu_event_kind::xid:
      if (ev.xid) {
        action = policy_.action(*ev.xid);
        if (policy_.application(*ev.xid)) {
          app_processes = application_processes(ev, holder, now_unix_ms);
          if (app_processes.size() >= policy_.application_processes())
            action = xid_action::at_risk;
        }
        // The NVLink family (rule 5): a fault only when the line says Fatal
        // (the recovery action is read with the GPU, confirmed_by_driver);
        // else an NVLink error toward the seed's sign.
        if (policy_.fence_when_confirmed(*ev.xid))
          action = fatal_severity(ev.text).value_or(false) ? xid_action::fence
                                                           : xid_action::record;
        fences = action == xid_action::fence;
        rule = "xid-" + std::to_string(*ev.xid);
        reason = xid_fault_reason(*ev.xid);
      }
      break;
    case gpu_event_kind::fallen_off_bus:
      fences = true;
      action = xid_action::fence;
      rule = "driver-fault";
      reason = "driver fault: " + ev.text;
      break;
    case gpu_event_kind::amd_reset_failed:
    case gpu_event_kind::amd_vram_lost:
    case gpu_event_kind::amd_ras_fatal:
    case gpu_event_kind::amd_ring_timeout:
      // The AMD table (rule 4): fence, at-risk or record, overridable.
      action = policy_.amd_action(to_string(ev.kind));
      fences = action == xid_action::fence;
      rule = "driver-fault";
      reason = "driver fault: " + ev.text;
      if (ev.kind != gpu_event_kind::amd_ring_timeout)
        resets_begun_.erase(holder);
      break;
    case gpu_event_kind::nvswitch_sxid:
      // An NVSwitch error (rule 6): fatal ones fence the GPUs using the
      // switch, the others make them at risk.
      action = fatal_severity(ev.text).value_or(false) ? xid_action::fence
                                                       : xid_action::at_risk;
      break;
    case gpu_event_kind::amd_reset_begin:
      if (!holder.empty())
        resets_begun_[holder] = {gpu != nullptr ? gpu->pci_address() : ev.pci_address,
                                 boot_->now_boot_ms()};
      break;
    case gpu_event_kind::amd_reset_succeeded:
      resets_begun_.erase(holder);
      break;
    default:
      break;
  }
  bool fallen = ev.kind == gpu_event_kind::fallen_off_bus
                || (ev.kind == gpu_event_kind::xid && ev.xid && *ev.xid == 79);
  bool handled = false;
  if (fences && !holder.empty() && fallen) {
    auto folded = fold_fallen(ev, holder, rule, reason, now_unix_ms);
    if (!folded)
      return folded;
    handled = *folded;
  }
  bool is_new = false;
  if (handled) {
    // Folded above into the latch of the same event.
  } else if (fences && !holder.empty()) {
    v1::FaultLatch f;
    if (holder != ev.pci_address)
      f.set_gpu_id(holder);
    f.set_pci_address(gpu != nullptr ? gpu->pci_address() : ev.pci_address);
    f.set_reason(reason);
    f.set_source("kernel-log");
    if (ev.xid)
      f.set_xid(*ev.xid);
    f.set_evidence(ev.text);
    auto [pid, pname] = process_of(ev.text);  // shown, never blamed (rule 9)
    f.set_pid(pid);
    f.set_process_name(pname);
    if (holder == ev.pci_address)
      spdlog::warn("latch: no GPU known at {} yet; the fault is latched against the "
                   "address and fences the GPU found there: {}",
                   ev.pci_address, ev.text);
    auto r = latch(rule, std::move(f), now_unix_ms);
    if (!r)
      return r;
    is_new = *r;
  } else {
    v1::GpuIncident inc;
    if (gpu != nullptr)
      inc.set_gpu_id(gpu->id());
    inc.set_pci_address(gpu != nullptr ? gpu->pci_address() : ev.pci_address);
    inc.set_kind(kind_name(ev.kind));
    if (ev.xid)
      inc.set_xid(*ev.xid);
    inc.set_action(to_string(action));
    // An NVLink-family Xid the driver did not confirm counts toward the
    // NVLink-errors sign (actors/controller/gpu_health.cpp).
    if (ev.kind == gpu_event_kind::xid && ev.xid && policy_.fence_when_confirmed(*ev.xid))
      inc.set_action("nvlink-errors");
    inc.set_text(ev.text);
    if (action == xid_action::at_risk && !app_processes.empty()) {
      // Say why one job's crash made the GPU at risk: the processes, not
      // only the last line (a user trial read it as one crash).
      std::string who;
      for (size_t k = 0; k < app_processes.size() && k < 5; ++k)
        who += (k == 0 ? "" : ", ") + app_processes[k];
      if (app_processes.size() > 5)
        who += ", …";
      inc.set_text("application Xids from " + std::to_string(app_processes.size())
                   + " processes in 24 h (" + who + "; at risk from "
                   + std::to_string(policy_.application_processes()) + "); the last: " + ev.text);
    }
    auto [pid, pname] = process_of(ev.text);  // shown, never blamed (rule 9)
    inc.set_pid(pid);
    inc.set_process_name(pname);
    if (gpu == nullptr)
      spdlog::warn("latch: kernel event maps to no GPU ({}): {}",
                   ev.pci_address.empty() ? "no PCI address" : ev.pci_address,
                   ev.text);
    if (auto err = record(std::move(inc), now_unix_ms))
      return err;
    // At an address with no GPU (an NVSwitch, a bridge): the GPUs whose
    // NVLinks lead there are fenced or at risk (rule 6).
    if (gpu == nullptr && holder.empty() && !ev.pci_address.empty()
        && action != xid_action::record) {
      auto r = on_device_event(ev, known, action, now_unix_ms);
      if (!r)
        return r;
      is_new = *r;
    }
  }
  keep_position(ev);
  return is_new;
}

caf::expected<bool> fault_latches::adopt(const v1::GpuSection& section) {
  bool changed = false;
  for (const auto& g : section.gpus()) {
    const auto& pci = g.pci_address();
    if (g.id().empty() || pci.empty() || g.id() == pci)
      continue;
    auto held = latches_.find(pci);
    if (held == latches_.end())
      continue;
    auto list = std::move(held->second);
    auto rules = std::move(rules_[pci]);
    latches_.erase(held);
    rules_.erase(pci);
    for (size_t i = 0; i < list.size(); ++i) {
      auto f = list[i];
      f.set_gpu_id(g.id());
      auto& mine = latches_[g.id()];
      auto& my_rules = rules_[g.id()];
      auto at = std::find(my_rules.begin(), my_rules.end(), rules[i]);
      if (at == my_rules.end()) {
        mine.push_back(f);
        my_rules.push_back(rules[i]);
      } else {
        // The GPU had it latched too: one latch, the counts added.
        auto& same = mine[static_cast<size_t>(at - my_rules.begin())];
        same.set_count(same.count() + f.count());
        same.set_first_seen_unix_ms(std::min(same.first_seen_unix_ms(), f.first_seen_unix_ms()));
        same.set_last_seen_unix_ms(std::max(same.last_seen_unix_ms(), f.last_seen_unix_ms()));
        f = same;
      }
      if (auto err = store_->put(family::faults, latch_key(g.id(), rules[i]), f, true))
        return err;
      if (auto err = store_->erase(family::faults, latch_key(pci, rules[i]), true))
        return err;
    }
    spdlog::warn("latch: GPU {} found at {}, where a fault was latched before it was "
                 "known: it is Faulty",
                 g.id(), pci);
    changed = true;
  }
  return changed;
}

std::vector<std::string> fault_latches::application_processes(const gpu_event& ev,
                                                              const std::string& holder,
                                                              int64_t now_unix_ms) {
  if (holder.empty())
    return {};
  // "pid=1234, name=python3": the pid names the process; without one
  // ("pid='<unknown>'"), its name does.
  auto field = [&](const char* key) -> std::string {
    auto at = ev.text.find(key);
    if (at == std::string::npos)
      return {};
    auto from = at + std::char_traits<char>::length(key);
    auto to = ev.text.find_first_of(", ", from);
    auto value = ev.text.substr(from, to == std::string::npos ? std::string::npos : to - from);
    return value.empty() || value.find("unknown") != std::string::npos ? std::string{} : value;
  };
  auto process = field("pid=");
  if (process.empty())
    process = field("name=");
  if (process.empty())
    return {};
  constexpr int64_t day_ms = 24 * 60 * 60 * 1000;
  auto& seen = app_processes_[holder];
  seen[process] = now_unix_ms;
  std::vector<std::pair<int64_t, std::string>> recent;
  for (auto i = seen.begin(); i != seen.end();) {
    if (now_unix_ms - i->second > day_ms) {
      i = seen.erase(i);
      continue;
    }
    recent.emplace_back(i->second, i->first);
    ++i;
  }
  // The oldest first, as a user reads a story.
  std::sort(recent.begin(), recent.end());
  std::vector<std::string> out;
  for (auto& [when, name] : recent)
    out.push_back((name.find_first_not_of("0123456789") == std::string::npos ? "pid " : "")
                  + name);
  return out;
}

caf::expected<bool> fault_latches::latch_unfinished_resets(int64_t now_unix_ms) {
  bool added = false;
  for (auto i = resets_begun_.begin(); i != resets_begun_.end();) {
    const auto& [holder, begun] = *i;
    if (boot_->now_boot_ms() - begun.second <= amd_reset_window_ms) {
      ++i;
      continue;
    }
    // The AMD table decides (rule 4): fence (built in), or only history.
    const auto action = policy_.amd_action("amd_reset_unfinished");
    if (action != xid_action::fence) {
      v1::GpuIncident inc;
      if (holder != begun.first)
        inc.set_gpu_id(holder);
      inc.set_pci_address(begun.first);
      inc.set_kind("amd-reset-unfinished");
      inc.set_action(to_string(action));
      inc.set_text("a GPU reset began and logged no success within "
                   + std::to_string(amd_reset_window_ms / 1000) + " s");
      if (auto err = record(std::move(inc), now_unix_ms))
        return err;
      i = resets_begun_.erase(i);
      continue;
    }
    v1::FaultLatch f;
    if (holder != begun.first)
      f.set_gpu_id(holder);
    f.set_pci_address(begun.first);
    f.set_source("kernel-log");
    f.set_reason("driver fault: a GPU reset began and logged no success within "
                 + std::to_string(amd_reset_window_ms / 1000) + " s");
    f.set_evidence("amdgpu: GPU reset begin! without a \"GPU reset(...) succeeded!\" after it");
    auto r = latch("amd-reset-unfinished", std::move(f), now_unix_ms);
    if (!r)
      return r;
    added = added || *r;
    i = resets_begun_.erase(i);
  }
  return added;
}

caf::expected<bool> fault_latches::latch_status(const v1::Gpu& g, int64_t now_unix_ms) {
  auto status = read_status(g);
  if (status != gpu_read_status::unresponsive)
    unresponsive_passes_.erase(g.id());
  v1::FaultLatch f;
  f.set_gpu_id(g.id());
  f.set_pci_address(g.pci_address());
  f.set_source(g.vendor() == "amd" ? "sysfs" : "nvml");
  if (status == gpu_read_status::lost) {
    auto detail = g.status_detail().empty() ? std::string{"the driver says the GPU is lost"}
                                            : g.status_detail();
    f.set_reason("lost: " + detail);
    f.set_evidence(detail);
    auto& rules = rules_[g.id()];
    if (std::find(rules.begin(), rules.end(), "lost") != rules.end())
      return false;  // latched once; a lost GPU stays lost
    return latch("lost", std::move(f), now_unix_ms, false);
  }
  if (status != gpu_read_status::unresponsive)
    return false;
  int passes = ++unresponsive_passes_[g.id()];
  if (passes < unresponsive_passes_to_latch)
    return false;
  auto& rules = rules_[g.id()];
  if (std::find(rules.begin(), rules.end(), "unresponsive") != rules.end())
    return false;
  f.set_reason("unresponsive: NVML calls hung for " + std::to_string(passes)
               + " discovery passes in a row");
  f.set_evidence(g.status_detail());
  return latch("unresponsive", std::move(f), now_unix_ms, false);
}

caf::expected<bool> fault_latches::on_readings(const v1::GpuSection& section,
                                               int64_t now_unix_ms) {
  auto adopted = adopt(section);
  if (!adopted)
    return adopted;
  bool changed = *adopted;
  // A different GPU at a latched GPU's PCI address: it was replaced. (Not a
  // latch held against the address itself: adopt() gave it to that GPU.)
  for (auto it = latches_.begin(); it != latches_.end();) {
    const auto& id = it->first;
    const auto& pci = it->second.empty() ? std::string{} : it->second.front().pci_address();
    const auto* now = find_by_pci(section, pci);
    if (now != nullptr && !now->id().empty() && now->id() != id && id != pci
        && readings_current(read_status(*now))) {
      spdlog::info("latch: GPU at {} was replaced ({} -> {}); its fault latch "
                   "is dropped",
                   pci, id, now->id());
      for (const auto& rule : rules_[id])
        if (auto err = store_->erase(family::faults, latch_key(id, rule), true))
          return err;
      rules_.erase(id);
      it = latches_.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  auto unfinished = latch_unfinished_resets(now_unix_ms);
  if (!unfinished)
    return unfinished;
  changed = changed || *unfinished;
  for (const auto& g : section.gpus()) {
    if (g.id().empty())
      continue;
    auto by_status = latch_status(g, now_unix_ms);
    if (!by_status)
      return by_status.error();
    changed = changed || *by_status;
    if (!readings_current(read_status(g)))
      continue;
    auto faults = faults_in_readings(g);
    if (auto confirmed = confirmed_by_driver(g))
      faults.push_back(std::move(*confirmed));
    for (auto& [rule, fault] : faults) {
      auto r = latch(rule, std::move(fault), now_unix_ms, false);
      if (!r)
        return r.error();
      changed = changed || *r;
    }
  }
  return changed;
}

std::optional<std::pair<std::string, v1::FaultLatch>>
fault_latches::confirmed_by_driver(const v1::Gpu& g) const {
  if (!g.has_recovery_action() || g.recovery_action() == 0)
    return std::nullopt;
  // The Xid the driver confirmed: this GPU's latest one in the kernel log.
  const v1::GpuIncident* last = nullptr;
  for (const auto& [key, inc] : incidents_)
    if ((inc.gpu_id() == g.id()
         || (inc.gpu_id().empty() && !g.pci_address().empty()
             && inc.pci_address() == g.pci_address()))
        && inc.has_xid()
        && (last == nullptr || inc.last_seen_unix_ms() > last->last_seen_unix_ms()))
      last = &inc;
  v1::FaultLatch f;
  f.set_gpu_id(g.id());
  f.set_pci_address(g.pci_address());
  f.set_source("nvml");
  auto action = recovery_action_name(g.recovery_action());
  if (last != nullptr) {
    f.set_xid(last->xid());
    f.set_reason(xid_fault_reason(last->xid()));
    f.set_evidence("the driver confirmed it: recovery action " + action + " after "
                   + last->text());
    return std::make_pair("xid-" + std::to_string(last->xid()), std::move(f));
  }
  f.set_reason("driver fault: recovery action " + action);
  f.set_evidence("NVML recovery action " + std::to_string(g.recovery_action()) + " ("
                 + action + "), no Xid seen in the kernel log");
  return std::make_pair(std::string{"recovery-action"}, std::move(f));
}

caf::expected<size_t> fault_latches::retry_not_durable() {
  size_t written = 0;
  for (auto i = not_durable_.begin(); i != not_durable_.end();) {
    const auto& [gpu, rule] = *i;
    auto held = latches_.find(gpu);
    auto rs = rules_.find(gpu);
    if (held == latches_.end() || rs == rules_.end()) {
      i = not_durable_.erase(i);  // cleared meanwhile
      continue;
    }
    auto at = std::find(rs->second.begin(), rs->second.end(), rule);
    if (at == rs->second.end()) {
      i = not_durable_.erase(i);
      continue;
    }
    auto& slot = held->second[static_cast<size_t>(at - rs->second.begin())];
    v1::FaultLatch durable = slot;
    durable.set_not_durable(false);
    if (auto err = store_->put(family::faults, latch_key(gpu, rule), durable, true))
      return err;
    slot.set_not_durable(false);
    spdlog::info("latch: GPU {}'s fault {} is durable now", gpu, slot.reason());
    ++written;
    i = not_durable_.erase(i);
  }
  return written;
}

size_t fault_latches::synced(uint64_t generation, const caf::error& err) {
  size_t held = 0;
  for (auto i = unsynced_.begin(); i != unsynced_.end();) {
    if (i->second > generation) {
      ++i;
      continue;
    }
    if (err) {
      // Still latched and fencing; written again by retry_not_durable.
      const auto& [gpu, rule] = i->first;
      auto list = latches_.find(gpu);
      auto rs = rules_.find(gpu);
      if (list != latches_.end() && rs != rules_.end()) {
        auto at = std::find(rs->second.begin(), rs->second.end(), rule);
        if (at != rs->second.end()) {
          list->second[static_cast<size_t>(at - rs->second.begin())].set_not_durable(true);
          not_durable_.insert(i->first);
          ++held;
        }
      }
    }
    i = unsynced_.erase(i);
  }
  if (held > 0)
    spdlog::error("latch: {} fault latch(es) not durable: the store's sync failed: {}", held,
                  render_error(err));
  return held;
}

caf::expected<bool> fault_latches::clear(const std::string& gpu_id) {
  auto i = latches_.find(gpu_id);
  if (i == latches_.end() || i->second.empty())
    return false;
  for (const auto& rule : rules_[gpu_id])
    if (auto err = store_->erase(family::faults, latch_key(gpu_id, rule), true))
      return err;
  spdlog::info("latch: fault of GPU {} cleared by an admin", gpu_id);
  latches_.erase(i);
  rules_.erase(gpu_id);
  return true;
}

void fault_latches::annotate(v1::GpuSection& section) const {
  std::map<std::string, v1::Gpu*> by_id, by_pci;
  for (auto& g : *section.mutable_gpus()) {
    by_id[g.id()] = &g;
    if (!g.pci_address().empty())
      by_pci[g.pci_address()] = &g;
  }
  for (const auto& [id, list] : latches_) {
    if (list.empty())
      continue;
    const auto& pci = list.front().pci_address();
    auto* g = by_id.count(id) ? by_id[id] : nullptr;
    if (g == nullptr && id == pci && by_pci.count(pci))
      g = by_pci[pci];  // latched against the address; the GPU is there now
    if (g == nullptr) {
      // Latched but not seen now (e.g. fallen off the bus), or latched
      // against an address where no GPU is known yet: still listed.
      g = section.add_gpus();
      g->set_id(id);
      g->set_pci_address(pci);
      set_read_status(*g, gpu_read_status::lost);
      g->set_status_detail(id == pci ? "no GPU known at this PCI address yet; the kernel "
                                       "log reported a fault here"
                                     : "not reported by the driver since its fault");
      by_id[id] = g;
      if (!pci.empty())
        by_pci.emplace(pci, g);
    }
    for (const auto& f : list)
      *g->add_latches() = f;
  }
  for (const auto& [key, inc] : incidents_) {
    v1::Gpu* g = nullptr;
    if (!inc.gpu_id().empty()) {
      auto i = by_id.find(inc.gpu_id());
      g = i == by_id.end() ? nullptr : i->second;
    } else if (auto i = by_pci.find(inc.pci_address()); i != by_pci.end()) {
      g = i->second;  // logged before its GPU was known
    }
    if (g != nullptr)
      *g->add_incidents() = inc;
    else
      *section.add_unmapped_incidents() = inc;
  }
}

} // namespace astraeus
