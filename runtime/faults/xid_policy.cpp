#include "runtime/faults/xid_policy.hpp"

#include <cctype>
#include <cstdlib>

#include "messages/error.hpp"

namespace astraeus {

namespace {

// NVIDIA's meanings (Xid Errors, NVIDIA GPU deployment and management
// documentation), shortened. Only the seed's list fences by default.
struct builtin {
  uint32_t xid;
  xid_action action;
  const char* meaning;
};

constexpr builtin builtins[] = {
  {8, xid_action::record, "GPU stopped processing"},
  {13, xid_action::record, "graphics engine exception (usually the application; at risk after 3 processes in 24 h)"},
  {31, xid_action::record, "GPU memory page fault (usually the application; at risk after 3 processes in 24 h)"},
  {32, xid_action::record, "invalid or corrupted push buffer stream"},
  {38, xid_action::record, "driver firmware error"},
  {43, xid_action::record, "GPU stopped processing (application fault; at risk after 3 processes in 24 h)"},
  {45, xid_action::record, "preemptive cleanup after an earlier error (at risk after 3 processes in 24 h)"},
  {48, xid_action::fence, "double-bit ECC error"},
  {61, xid_action::record, "internal micro-controller breakpoint/warning"},
  {62, xid_action::record, "internal micro-controller halt"},
  {63, xid_action::fence, "ECC page retirement or row remapping recording event"},
  {64, xid_action::record, "ECC page retirement or row remapper recording failure"},
  {68, xid_action::record, "NVDEC0 exception"},
  {69, xid_action::record, "graphics engine class error (at risk after 3 processes in 24 h)"},
  {74, xid_action::fence, "NVLink error"},
  {79, xid_action::fence, "GPU has fallen off the bus"},
  {92, xid_action::fence, "high single-bit ECC error rate"},
  // 94: a row waits to be remapped (the seed's at-risk sign) until the GPU is
  // reset; 95, the uncontained error, fences.
  {94, xid_action::at_risk, "contained uncorrectable ECC error: a row waits to be remapped"},
  {95, xid_action::fence, "uncontained ECC error"},
  {109, xid_action::record, "context switch timeout"},
  {119, xid_action::fence, "GSP RPC timeout"},
  {120, xid_action::fence, "GSP error"},
  {121, xid_action::record, "C2C link corrected error"},
  {122, xid_action::record, "SPI PMU RPC read failure"},
  {123, xid_action::record, "SPI PMU RPC write failure"},
  {140, xid_action::record, "ECC unrecovered error"},
  {143, xid_action::record, "GPU initialization failure"},
  // The NVLink family (issue 17, rule 5): 149 fences (the seed's list); the
  // others fence only when the driver confirms a fault (its recovery action,
  // or "Fatal" in the line), otherwise they count toward the NVLink-errors
  // sign (xid_policy::fence_when_confirmed).
  {144, xid_action::record, "NVLink SAW error (fences when the driver confirms: recovery action or Fatal)"},
  {145, xid_action::record, "NVLink RLW error (fences when the driver confirms: recovery action or Fatal)"},
  {146, xid_action::record, "NVLink TLW error (fences when the driver confirms: recovery action or Fatal)"},
  {147, xid_action::record, "NVLink TREX error (fences when the driver confirms: recovery action or Fatal)"},
  {148, xid_action::record, "NVLink NVLPW_CTRL error (fences when the driver confirms: recovery action or Fatal)"},
  {149, xid_action::fence, "NVLink NETIR error"},
  {150, xid_action::record, "NVLink MSE error (fences when the driver confirms: recovery action or Fatal)"},
  {154, xid_action::fence, "GPU recovery action changed (reset or reboot required)"},
};

/// Application Xids: a sign only when several processes report them.
constexpr uint32_t application_xids[] = {13, 31, 43, 45, 69};

/// The NVLink family but 149: fence only when the driver confirms.
constexpr uint32_t confirmed_xids[] = {144, 145, 146, 147, 148, 150};

/// The built-in AMD table (issue 17, rule 4): amdgpu's kernel-log events.
struct amd_builtin {
  const char* event;
  xid_action action;
  const char* meaning;
};

constexpr amd_builtin amd_builtins[] = {
  {"amd_reset_failed", xid_action::fence, "a GPU reset failed (\"GPU reset(<n>) failed\", \"ASIC reset failed\")"},
  {"amd_reset_unfinished", xid_action::fence, "a GPU reset began and logged no success within 60 s"},
  {"amd_vram_lost", xid_action::fence, "VRAM is lost due to GPU reset"},
  {"amd_ras_fatal", xid_action::fence, "RAS uncorrectable hardware error / fatal error event"},
  {"amd_ring_timeout", xid_action::at_risk, "a ring timed out (a job hung; the GPU was reset)"},
};

} // namespace

bool xid_policy::application(uint32_t xid) const {
  auto i = entries_.find(xid);
  if (i != entries_.end() && (i->second.overridden || i->second.action != xid_action::record))
    return false;
  for (auto x : application_xids)
    if (x == xid)
      return true;
  return false;
}

bool xid_policy::fence_when_confirmed(uint32_t xid) const {
  auto i = entries_.find(xid);
  if (i != entries_.end() && i->second.overridden)
    return false;
  for (auto x : confirmed_xids)
    if (x == xid)
      return true;
  return false;
}

caf::error xid_policy::set_application_processes(uint32_t n) {
  if (n == 0 || n > 1000)
    return caf::make_error(ec::invalid_config,
                           "xid.application_processes: " + std::to_string(n)
                             + " is not a number of processes from 1 to 1000");
  application_processes_ = n;
  return caf::none;
}

xid_action xid_policy::amd_action(const std::string& event) const {
  auto i = amd_.find(event);
  return i == amd_.end() ? xid_action::record : i->second.action;
}

std::vector<std::string> xid_policy::amd_events() {
  std::vector<std::string> out;
  for (const auto& b : amd_builtins)
    out.emplace_back(b.event);
  return out;
}

caf::error xid_policy::override_amd(const std::vector<std::string>& fence,
                                    const std::vector<std::string>& at_risk,
                                    const std::vector<std::string>& record) {
  std::map<std::string, const char*> seen;
  auto apply = [&](const std::vector<std::string>& xs, xid_action a,
                   const char* key) -> caf::error {
    for (const auto& x : xs) {
      auto e = amd_.find(x);
      if (e == amd_.end()) {
        std::string known;
        for (const auto& b : amd_builtins)
          known += (known.empty() ? "" : ", ") + std::string{b.event};
        return caf::make_error(ec::invalid_config, std::string{key} + ": '" + x
                                                     + "' is not an AMD event (one of "
                                                     + known + ")");
      }
      if (auto i = seen.find(x); i != seen.end())
        return caf::make_error(ec::invalid_config, "AMD event " + x + " is in both "
                                                     + i->second + " and " + key);
      seen[x] = key;
      e->second.action = a;
      e->second.overridden = true;
    }
    return caf::none;
  };
  if (auto err = apply(fence, xid_action::fence, "amd.fence"))
    return err;
  if (auto err = apply(at_risk, xid_action::at_risk, "amd.at_risk"))
    return err;
  return apply(record, xid_action::record, "amd.record");
}

const char* to_string(xid_action a) {
  switch (a) {
    case xid_action::fence: return "fence";
    case xid_action::at_risk: return "at-risk";
    case xid_action::record: return "record";
  }
  return "record";
}

xid_policy::xid_policy() {
  for (const auto& b : builtins)
    entries_[b.xid] = entry{b.action, b.meaning, false};
  for (const auto& b : amd_builtins)
    amd_[b.event] = entry{b.action, b.meaning, false};
}

caf::error xid_policy::override_with(const std::vector<uint32_t>& fence,
                                     const std::vector<uint32_t>& at_risk,
                                     const std::vector<uint32_t>& record) {
  std::map<uint32_t, const char*> seen;
  auto apply = [&](const std::vector<uint32_t>& xs, xid_action a,
                   const char* key) -> caf::error {
    for (auto x : xs) {
      if (auto i = seen.find(x); i != seen.end())
        return caf::make_error(ec::invalid_config,
                               "Xid " + std::to_string(x) + " is in both "
                                 + i->second + " and " + key);
      seen[x] = key;
      auto& e = entries_[x];
      e.action = a;
      e.overridden = true;
    }
    return caf::none;
  };
  if (auto err = apply(fence, xid_action::fence, "xid.fence"))
    return err;
  if (auto err = apply(at_risk, xid_action::at_risk, "xid.at_risk"))
    return err;
  return apply(record, xid_action::record, "xid.record");
}

xid_action xid_policy::action(uint32_t xid) const {
  auto i = entries_.find(xid);
  return i == entries_.end() ? xid_action::record : i->second.action;
}

v1::XidPolicyTable xid_policy::table() const {
  v1::XidPolicyTable out;
  out.set_default_action("record");
  for (const auto& [xid, e] : entries_) {
    auto* p = out.add_entries();
    p->set_xid(xid);
    p->set_action(to_string(e.action));
    // The built-in meanings name the default N; the table says the N in force.
    auto meaning = e.meaning;
    if (auto at = meaning.find("after 3 processes"); at != std::string::npos)
      meaning.replace(at, 17, "after " + std::to_string(application_processes_) + " processes");
    p->set_meaning(meaning);
    p->set_overridden(e.overridden);
    p->set_fence_when_confirmed(fence_when_confirmed(xid));
  }
  out.set_application_processes(application_processes_);
  for (const auto& b : amd_builtins) {
    const auto& e = amd_.at(b.event);
    auto* p = out.add_amd_entries();
    p->set_event(b.event);
    p->set_action(to_string(e.action));
    p->set_meaning(e.meaning);
    p->set_overridden(e.overridden);
  }
  return out;
}

xid_policy xid_policy::from_table(const v1::XidPolicyTable& table) {
  xid_policy out;
  for (const auto& p : table.entries()) {
    auto& e = out.entries_[p.xid()];
    if (p.action() == "fence")
      e.action = xid_action::fence;
    else if (p.action() == "at-risk")
      e.action = xid_action::at_risk;
    else if (p.action() == "record")
      e.action = xid_action::record;
    if (!p.meaning().empty())
      e.meaning = p.meaning();
    e.overridden = p.overridden();
  }
  if (table.application_processes() > 0)
    out.application_processes_ = table.application_processes();
  for (const auto& p : table.amd_entries()) {
    auto e = out.amd_.find(p.event());
    if (e == out.amd_.end())
      continue;  // an event this agent does not know
    if (p.action() == "fence")
      e->second.action = xid_action::fence;
    else if (p.action() == "at-risk")
      e->second.action = xid_action::at_risk;
    else if (p.action() == "record")
      e->second.action = xid_action::record;
    e->second.overridden = p.overridden();
  }
  return out;
}

std::vector<std::string> parse_name_list(std::string_view text) {
  std::vector<std::string> out;
  std::string item;
  auto flush = [&] {
    size_t b = 0, e = item.size();
    while (b < e && std::isspace(static_cast<unsigned char>(item[b])))
      ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(item[e - 1])))
      --e;
    if (e > b)
      out.push_back(item.substr(b, e - b));
    item.clear();
  };
  for (char c : text) {
    if (c == ',' || c == '[' || c == ']')
      flush();
    else
      item.push_back(c);
  }
  flush();
  return out;
}

caf::expected<std::vector<uint32_t>> parse_xid_list(std::string_view text) {
  std::vector<uint32_t> out;
  std::string item;
  auto flush = [&]() -> caf::error {
    size_t b = 0, e = item.size();
    while (b < e && std::isspace(static_cast<unsigned char>(item[b])))
      ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(item[e - 1])))
      --e;
    auto word = item.substr(b, e - b);
    item.clear();
    if (word.empty())
      return caf::none;
    char* end = nullptr;
    auto v = std::strtoul(word.c_str(), &end, 10);
    if (*end != '\0' || word[0] == '-' || v == 0 || v > 100000)
      return caf::make_error(ec::invalid_config,
                             "'" + word + "' is not an Xid number");
    out.push_back(static_cast<uint32_t>(v));
    return caf::none;
  };
  for (char c : text) {
    if (c == ',' || c == '[' || c == ']') {
      if (auto err = flush())
        return err;
    } else {
      item.push_back(c);
    }
  }
  if (auto err = flush())
    return err;
  return out;
}

} // namespace astraeus
