// Events at a PCI address with no GPU (issue 17, rule 6), and what an Xid
// line says besides its number (rules 5 and 9). See device_events.hpp.

#include "runtime/faults/device_events.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "runtime/faults/fault_latch.hpp"

namespace astraeus {

namespace {

std::string lower(std::string_view text) {
  std::string out{text};
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

constexpr int64_t day_ms = 24 * 60 * 60 * 1000;

} // namespace

std::optional<bool> fatal_severity(std::string_view text) {
  auto t = lower(text);
  for (const char* non : {"nonfatal", "non-fatal", "non fatal"})
    if (t.find(non) != std::string::npos)
      return false;
  for (size_t at = t.find("fatal"); at != std::string::npos; at = t.find("fatal", at + 1)) {
    bool starts = at == 0 || !word_char(t[at - 1]);
    bool ends = at + 5 >= t.size() || !word_char(t[at + 5]);
    if (starts && ends)
      return true;
  }
  return std::nullopt;
}

std::pair<int32_t, std::string> process_of(std::string_view text) {
  auto field = [&](std::string_view key) -> std::string {
    auto at = text.find(key);
    if (at == std::string_view::npos)
      return {};
    auto from = at + key.size();
    auto to = text.find_first_of(", ", from);
    auto value = std::string{text.substr(from, to == std::string_view::npos ? std::string_view::npos
                                                                            : to - from)};
    return value.find("unknown") != std::string::npos ? std::string{} : value;
  };
  int32_t pid = 0;
  auto p = field("pid=");
  if (!p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; })
      && p.size() <= 9)
    pid = static_cast<int32_t>(std::stol(p));
  return {pid, field("name=")};
}

std::vector<const v1::Gpu*> gpus_linked_to(const v1::GpuSection& section,
                                           const std::string& pci) {
  std::vector<const v1::Gpu*> out;
  if (pci.empty())
    return out;
  for (const auto& g : section.gpus())
    if (std::any_of(g.nvlinks().begin(), g.nvlinks().end(),
                    [&](const v1::NvLink& l) { return l.remote_pci_address() == pci; }))
      out.push_back(&g);
  return out;
}

void add_device_conditions(v1::GpuSection& section, int64_t now_unix_ms) {
  bool has_switch = false;
  for (const auto& g : section.gpus())
    for (const auto& l : g.nvlinks())
      has_switch = has_switch || l.remote_kind() == "switch";
  std::string fabric, other;
  for (const auto& inc : section.unmapped_incidents()) {
    if (inc.pci_address().empty() || (inc.action() != "fence" && inc.action() != "at-risk")
        || now_unix_ms - inc.last_seen_unix_ms() > day_ms)
      continue;
    auto users = gpus_linked_to(section, inc.pci_address());
    bool at_fabric = !users.empty() || inc.kind() == "nvswitch-sxid";
    std::string what = inc.pci_address() + " ("
                       + (inc.kind() == "nvswitch-sxid" ? std::string{"NVSwitch"}
                                                        : std::string{"no GPU there"})
                       + "): " + inc.text();
    if (at_fabric) {
      std::string ids;
      for (const auto* g : users)
        ids += (ids.empty() ? "" : ", ") + g->id();
      what += ids.empty() ? "" : "; GPUs using it " + std::string{inc.action() == "fence"
                                                                     ? "fenced"
                                                                     : "at risk"}
                                   + ": " + ids;
      fabric += (fabric.empty() ? "" : "; ") + what;
    } else {
      other += (other.empty() ? "" : "; ") + what;
    }
  }
  if (!fabric.empty() || has_switch) {
    auto* c = section.add_conditions();
    c->set_type("NVLink fabric healthy");
    c->set_status(fabric.empty());
    c->set_reason(fabric.empty() ? "FabricHealthy" : "FabricFault");
    c->set_message(fabric.empty() ? "no fault logged at the NVLink fabric's devices in 24 h"
                                  : fabric);
  }
  if (!other.empty()) {
    auto* c = section.add_conditions();
    c->set_type("Devices without a GPU");
    c->set_status(false);
    c->set_reason("DeviceEvent");
    c->set_message(other);
  }
}

caf::expected<bool> fault_latches::on_device_event(const gpu_event& ev,
                                                   const v1::GpuSection& known,
                                                   xid_action action, int64_t now_unix_ms) {
  bool is_new = false;
  const auto users = gpus_linked_to(known, ev.pci_address);
  const std::string where = (ev.kind == gpu_event_kind::nvswitch_sxid ? "NVSwitch " : "device ")
                            + ev.pci_address;
  for (const auto* g : users) {
    if (g->id().empty())
      continue;
    if (action == xid_action::fence) {
      v1::FaultLatch f;
      f.set_gpu_id(g->id());
      f.set_pci_address(g->pci_address());
      f.set_reason("NVLink fabric fault at " + where);
      f.set_source("kernel-log");
      if (ev.xid)
        f.set_xid(*ev.xid);
      f.set_evidence(ev.text);
      spdlog::warn("latch: GPU {} uses {}, which logged a fault: {}", g->id(), where, ev.text);
      auto r = latch("fabric-" + ev.pci_address, std::move(f), now_unix_ms);
      if (!r)
        return r;
      is_new = is_new || *r;
    } else if (action == xid_action::at_risk) {
      v1::GpuIncident inc;
      inc.set_gpu_id(g->id());
      inc.set_pci_address(g->pci_address());
      inc.set_kind("fabric");
      inc.set_action("at-risk");
      inc.set_text(where + ": " + ev.text);
      if (auto err = record(std::move(inc), now_unix_ms))
        return err;
    }
  }
  return is_new;
}

} // namespace astraeus
