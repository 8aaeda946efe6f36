#include "bin/cli_format.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>

#include "messages/labels.hpp"
#include "messages/json.hpp"

#include "actors/controller/machine_pressure.hpp"
#include "messages/gpu_health_state.hpp"
#include "messages/gpu_read.hpp"
#include "messages/run_state.hpp"
#include "messages/typed_twins.hpp"
#include "runtime/process/duration_text.hpp"
#include "runtime/workers/run_spec.hpp"
#include "runtime/host/sysfs_text.hpp"
#include "runtime/process/wall_clock.hpp"

namespace astraeus::cli {

namespace {

std::string yes_no(bool x) {
  return x ? "yes" : "no";
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%%", x);
  return buf;
}

std::string format_time(int64_t unix_ms) {
  if (unix_ms <= 0)
    return "never";
  std::time_t t = unix_ms / 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string format_pressure(const v1::Pressure& p) {
  if (!p.present())
    return "not reported";
  return "some " + percent(p.some_avg10()) + " / " + percent(p.some_avg60())
         + " / " + percent(p.some_avg300()) + ", full " + percent(p.full_avg10())
         + " / " + percent(p.full_avg60()) + " / " + percent(p.full_avg300())
         + " (10s / 60s / 300s)";
}

std::string pressure_cell(const v1::MachineView& m) {
  std::string out;
  if (m.memory_pressure())
    out = "memory";
  if (m.disk_pressure())
    out += out.empty() ? "disk" : ",disk";
  return out.empty() ? "-" : out;
}

std::string memory_cell(const v1::Memory& mem) {
  if (mem.total_bytes() == 0)
    return "?";
  return format_bytes(mem.available_bytes()) + " free of "
         + format_bytes(mem.total_bytes());
}

std::string indent(const std::string& text, const std::string& pad) {
  std::stringstream in{text};
  std::string line, out;
  while (std::getline(in, line))
    out += pad + line + "\n";
  return out;
}

} // namespace

namespace {
/// Characters a cell shows (UTF-8 code points, so "—" counts one).
size_t shown_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}
} // namespace

std::string control_escaped(std::string_view text) {
  return one_line_text(text);
}

std::string render_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& raw_rows) {
  // A cell is one line of text: a newline or a terminal escape in a name
  // someone sent (an audit record's target) is shown, not acted on.
  std::vector<std::vector<std::string>> rows;
  rows.reserve(raw_rows.size());
  for (const auto& raw : raw_rows) {
    auto& row = rows.emplace_back();
    row.reserve(raw.size());
    for (const auto& cell : raw)
      row.push_back(control_escaped(cell));
  }
  std::vector<size_t> width(header.size(), 0);
  for (size_t i = 0; i < header.size(); ++i)
    width[i] = shown_width(header[i]);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], shown_width(row[i]));
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < cells.size() && i < width.size(); ++i) {
      out += cells[i];
      if (i + 1 < cells.size())
        out += std::string(width[i] - shown_width(cells[i]) + 2, ' ');
    }
    return out + "\n";
  };
  std::string out = line(header);
  for (const auto& row : rows)
    out += line(row);
  return out;
}

std::string format_age(int64_t then_unix_ms, int64_t now_unix_ms) {
  if (then_unix_ms <= 0)
    return "never";
  auto s = std::max<int64_t>(0, (now_unix_ms - then_unix_ms) / 1000);
  char buf[32];
  if (s < 120)
    std::snprintf(buf, sizeof(buf), "%llds ago", static_cast<long long>(s));
  else if (s < 7200)
    std::snprintf(buf, sizeof(buf), "%lldm ago", static_cast<long long>(s / 60));
  else if (s < 172800)
    std::snprintf(buf, sizeof(buf), "%lldh ago", static_cast<long long>(s / 3600));
  else
    std::snprintf(buf, sizeof(buf), "%lldd ago", static_cast<long long>(s / 86400));
  return buf;
}

std::string loopback_warning(const std::string& command) {
  bool loopback = false;
  for (const char* host : {"127.0.0.1", "localhost", "[::1]"})
    loopback = loopback || command.find(std::string{"://"} + host) != std::string::npos
               || command.find(std::string{" "} + host + ":") != std::string::npos;
  if (!loopback)
    return {};
  return "\nwarning: 127.0.0.1 is this machine's own (loopback) address: other machines "
         "cannot reach it, so this command works on this machine only. To add another "
         "machine, advertise addresses it reaches: run the controller with --set "
         "gate.advertise_address=HOST:7450 --set api.advertise_url=https://HOST:7451 (or "
         "ASTRAEUS_GATE_ADVERTISE_ADDRESS and ASTRAEUS_API_ADVERTISE_URL) and the API "
         "listening there over HTTPS (api.listen=0.0.0.0:7451; `astraeus dev` serves plain "
         "HTTP on loopback only).\n";
}

v1::JoinToken join_token_for(v1::JoinToken token, const std::string& addr) {
  auto gates = token.controller_address().empty() ? addr : token.controller_address();
  if (token.install().empty())
    token.set_install(install_command(token, gates));
  else if (token.controller_address().empty() && addr.find(',') != std::string::npos)
    token.set_install(install_command_naming(token.install(), addr));
  // The gate the install command names, so `-o json` never says "" where
  // the controller has no advertise address.
  if (token.controller_address().empty()) {
    // As the command says it (a ninth trial: --addr localhost:7450 beside
    // a command naming 127.0.0.1:7450).
    auto named = gate_named_in(token.install());
    token.set_controller_address(named.empty() ? gates : named);
  }
  return token;
}

std::string format_join_token(const v1::JoinToken& token,
                              const std::string& address, int64_t now_unix_ms) {
  std::string labels;
  for (const auto& [k, v] : std::map<std::string, std::string>(
         token.labels().begin(), token.labels().end()))
    labels += (labels.empty() ? "" : ", ") + k + "=" + v;
  auto left = (token.expires_unix_ms() - now_unix_ms + 500) / 1000;
  std::ostringstream out;
  out << "token    " << token.token() << "\n"
      << "id       " << token.id() << "\n"
      << "expires  " << format_utc(token.expires_unix_ms()) << " (in "
      << (left >= 3600 ? std::to_string(left / 3600) + "h"
                       : std::to_string(left / 60) + "m")
      << "; single use)\n"
      << "labels   " << (labels.empty() ? "(none)" : labels) << "\n";
  // What a manual `astraeus-agent --controller-key` pins (the README).
  if (!token.controller_key().empty())
    out << "key      " << token.controller_key() << " (the controller's; --controller-key)\n";
  out << "\nRun on the new machine, as root (the agent enrols once; then the "
         "token file can go):\n";
  auto command = token.install().empty() ? install_command(token, address) : token.install();
  out << command << "\n" << loopback_warning(command);
  return out.str();
}

std::string format_audit(const v1::AuditList& list) {
  if (list.records().empty())
    return "No audit records yet.\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : list.records())
    rows.push_back({format_utc(r.unix_ms()), r.who(), r.action(), r.target(),
                    r.result()});
  return render_table({"WHEN", "WHO", "ACTION", "TARGET", "RESULT"}, rows);
}

std::string format_machine_list(const v1::MachineList& list,
                                int64_t now_unix_ms, const v1::GpuList* gpus) {
  if (list.machines().empty())
    return "No machines yet. Start an agent: astraeus-agent --controller "
           "HOST:PORT\n";
  // GPUs held by work, by machine (the GPU list's holders).
  std::map<std::string, int> held;
  if (gpus)
    for (const auto& g : gpus->gpus())
      held[g.machine()] += g.holder().empty() ? 0 : 1;
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : list.machines()) {
    const auto& f = m.facts();
    auto h = held.find(m.name());
    // "8 (nvml), 3 held": the free ones are the rest (less those set aside).
    std::string held_text =
      h == held.end() || h->second == 0 ? std::string{} : ", " + std::to_string(h->second) + " held";
    rows.push_back({m.name(), v1::Machine::State_Name(m.state()),
                    m.quick().empty() ? "\xE2\x80\x94" : m.quick(),
                    yes_no(m.cordoned()), pressure_cell(m),
                    f.cpu().logical_cpus() ? std::to_string(f.cpu().logical_cpus())
                                           : "?",
                    memory_cell(f.memory()),
                    f.gpus().gpus().empty()
                      ? (f.gpus().read_as().empty() ? "?" : f.gpus().read_as())
                      : std::to_string(f.gpus().gpus_size()) + " (" + f.gpus().read_as() + ")"
                          + (m.set_aside_gpus().empty()
                               ? std::string{}
                               : ", " + std::to_string(m.set_aside_gpus_size()) + " set aside")
                          + held_text,
                    format_age(m.last_report_unix_ms(), now_unix_ms)});
  }
  return render_table({"NAME", "STATE", "QUICK", "CORDONED", "PRESSURE", "CPUS",
                       "MEMORY", "GPUS", "LAST REPORT"},
                      rows);
}

std::string format_machine(const v1::MachineView& m, int64_t now_unix_ms) {
  const auto& f = m.facts();
  std::ostringstream out;
  auto row = [&](const char* key, const std::string& value) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%-13s", key);
    // A key as long as the column ("Data location:") keeps one space.
    out << buf << (std::string_view{key}.size() >= 13 ? " " : "") << value << "\n";
  };
  row("Machine:", m.name());
  row("State:", v1::Machine::State_Name(m.state()) + " since "
                  + format_time(m.state_since_unix_ms()) + " ("
                  + format_age(m.state_since_unix_ms(), now_unix_ms) + ")");
  // `astra drain` (README, "Day two"): draining until its workers ended.
  row("Cordoned:", yes_no(m.cordoned())
                     + (m.drained() ? " (drained)"
                        : m.drain_deadline_unix_ms() != 0
                          ? " (draining: its runs stop at " + format_time(m.drain_deadline_unix_ms())
                              + ")"
                          : ""));
  // Issue 21: a pool that requires acceptance (its policy).
  if (!m.accepted_reason().empty())
    // Accepted by an admin without passing (`astra astraeus accept`).
    row("Acceptance:", "accepted as-is without passing: " + m.accepted_reason());
  else if (m.accepted())
    row("Acceptance:", "accepted (its pool requires acceptance)");
  else if (m.state() == v1::Machine::Accepting && !m.acceptance_ended().empty())
    // As the waiting runs say it (a new-user trial saw "not yet" here after
    // the acceptance had failed); a cancelled one has nothing to read.
    row("Acceptance:", "acceptance " + m.acceptance_validation() + " " + m.acceptance_ended()
                         + (m.acceptance_ended().rfind("was cancelled", 0) == 0
                              ? ": `astra astraeus validate --suite acceptance --machine "
                                  + m.name() + "` runs another"
                              : ": see `astra astraeus validation " + m.acceptance_validation()
                                  + "`")
                         + "; it takes no work but its checks until one passes, or until "
                           "`astra astraeus accept " + m.name() + " --reason …`");
  else if (m.acceptance_requested() && m.state() != v1::Machine::Accepting)
    // Installed with --accept in a pool that does not require acceptance:
    // it takes work while its acceptance runs (a new-user trial saw no
    // word of it here; the JSON had it).
    row("Acceptance:",
        m.acceptance_validation().empty()
          ? std::string{"asked for at install (--accept): it starts once the machines joining "
                        "with it are in"}
          : "acceptance " + m.acceptance_validation() + " (asked for at install, --accept) "
              + (m.acceptance_ended().empty() ? std::string{"runs"} : m.acceptance_ended())
              + ": see `astra astraeus validation " + m.acceptance_validation()
              + "`; it takes work meanwhile (its pool does not require acceptance)");
  else if (m.state() == v1::Machine::Accepting)
    row("Acceptance:", std::string{"not yet"}
                         + (m.acceptance_validation().empty()
                              ? ""
                              : " (acceptance " + m.acceptance_validation() + " runs)")
                         + ": it takes no work but its checks until it passes, or until "
                           "`astra astraeus accept " + m.name() + " --reason …`");
  std::string work = m.schedulable() ? "yes" : "no";
  if (!m.schedulable()) {
    std::vector<std::string> why;
    if (m.state() == v1::Machine::Accepting)
      why.push_back("Accepting: only its acceptance checks run until it passes");
    else if (m.state() != v1::Machine::Up)
      why.push_back("not Up");
    if (m.cordoned())
      why.push_back("cordoned");
    if (m.memory_pressure())
      why.push_back("memory pressure");
    if (m.disk_pressure())
      why.push_back("disk pressure");
    std::string joined;
    for (const auto& w : why)
      joined += (joined.empty() ? "" : ", ") + w;
    work += " (" + joined + ")";
  }
  // A fault at the NVLink fabric (issue 17, rule 6) is said here too: the
  // GPUs that use it are fenced or at risk.
  for (const auto& c : m.facts().gpus().conditions())
    if (c.type() == "NVLink fabric healthy" && !c.status())
      work += " (NVLink fabric unhealthy: " + c.message() + ")";
  row("New work:", work);
  if (m.pressure_reasons().empty()) {
    row("Pressure:", "none");
  } else {
    std::string first = m.pressure_reasons(0);
    row("Pressure:", first);
    for (int i = 1; i < m.pressure_reasons_size(); ++i)
      row("", m.pressure_reasons(i));
  }
  row("Agent:", (m.agent_version().empty() ? std::string{"?"} : m.agent_version())
                  + (m.connected() ? ", connected" : ", not connected")
                  + "; last report " + format_age(m.last_report_unix_ms(), now_unix_ms));
  row("Identity:", m.machine_id());
  row("Registered:", format_time(m.registered_unix_ms()));
  std::string labels;
  for (const auto& [k, v] : m.labels())
    labels += (labels.empty() ? "" : ", ") + k + "=" + v;
  row("Labels:", labels.empty() ? "none" : labels);
  // Issue 20 (machines.md, "Where a machine keeps data").
  row("Data location:", m.data_location().empty()
                          ? "none chosen: astra machine data-location " + m.name() + " PATH"
                          : m.data_location() + " (" + m.data_location_source() + ")");
  row("Flaps:", std::to_string(m.flaps()) + " (Down and back Up since the controller started)");

  out << "\nSystem\n";
  row("  Hostname:", f.hostname());
  row("  OS:", f.os());
  row("  Kernel:", f.kernel());
  row("  Uptime:", f.uptime_seconds() ? format_duration(f.uptime_seconds()) : "?");
  out << "\nCPU\n";
  row("  Model:", f.cpu().model().empty() ? "?" : f.cpu().model());
  row("  Arch:", f.cpu().architecture());
  row("  CPUs:", std::to_string(f.cpu().logical_cpus()) + " logical, "
                   + std::to_string(f.cpu().physical_cores()) + " physical cores, "
                   + std::to_string(f.cpu().sockets()) + " socket(s), "
                   + std::to_string(f.cpu().numa_nodes()) + " NUMA node(s)");
  if (f.cpu().has_use_percent()) {
    char use[64];
    std::snprintf(use, sizeof use, "%.1f%% (over the last report interval)", f.cpu().use_percent());
    row("  Use:", use);
  }
  for (const auto& n : f.cpu().nodes()) {  // issue 22
    auto label = "  NUMA " + std::to_string(n.id()) + ":";
    row(label.c_str(),
        (n.cpulist().empty() ? std::string{"no CPUs"} : "CPUs " + n.cpulist()) + ", "
          + format_bytes(n.memory_free_bytes()) + " free of "
          + format_bytes(n.memory_total_bytes()));
  }
  row("  Pressure:", format_pressure(f.cpu_pressure()));
  out << "\nMemory\n";
  row("  Total:", format_bytes(f.memory().total_bytes()));
  row("  Available:", format_bytes(f.memory().available_bytes()));
  row("  Swap:", format_bytes(f.memory().swap_free_bytes()) + " free of "
                   + format_bytes(f.memory().swap_total_bytes()));
  row("  Pressure:", format_pressure(f.memory().pressure()));
  out << "\nI/O\n";
  row("  Pressure:", format_pressure(f.io_pressure()));

  out << "\nDisks\n";
  if (f.disks().empty()) {
    out << "  none\n";
  } else {
    std::vector<std::vector<std::string>> rows;
    for (const auto& d : f.disks()) {
      std::string raid = d.raid_level().empty()
                           ? "-"
                           : d.raid_level() + " " + d.raid_state();
      rows.push_back({d.name(), d.kind(), format_bytes(d.size_bytes()),
                      d.model().empty() ? "-" : d.model(), raid});
    }
    out << indent(render_table({"NAME", "KIND", "SIZE", "MODEL", "RAID"}, rows), "  ");
  }
  out << "\nFilesystems\n";
  if (f.filesystems().empty()) {
    out << "  none\n";
  } else {
    std::vector<std::vector<std::string>> rows;
    for (const auto& fs : f.filesystems()) {
      char used[16] = "-";
      if (fs.size_bytes() > 0)
        std::snprintf(used, sizeof(used), "%.0f%%",
                      100.0 - 100.0 * static_cast<double>(fs.free_bytes())
                                / static_cast<double>(fs.size_bytes()));
      std::string flags = fs.shared() ? "shared" : "local";
      if (fs.read_only())
        flags += ",ro";
      rows.push_back({fs.mount_point(), fs.type(), format_bytes(fs.size_bytes()),
                      format_bytes(fs.free_bytes()), used, flags, fs.device()});
    }
    out << indent(render_table({"MOUNT", "TYPE", "SIZE", "FREE", "USED", "KIND",
                                "DEVICE"},
                               rows),
                  "  ");
  }
  out << "\nNetwork\n";
  if (f.interfaces().empty()) {
    out << "  none\n";
  } else {
    std::vector<std::vector<std::string>> rows;
    for (const auto& n : f.interfaces())
      rows.push_back({n.name(), n.kind(), n.operstate(),
                      n.speed_mbps() > 0 ? std::to_string(n.speed_mbps()) + " Mb/s"
                                         : "-",
                      std::to_string(n.mtu()), n.mac_address(),
                      n.virtual_() ? "virtual" : "device"});
    out << indent(render_table({"NAME", "KIND", "STATE", "SPEED", "MTU", "MAC",
                                "BACKED BY"},
                               rows),
                  "  ");
  }
  out << "\nInfiniBand / RoCE\n";
  if (f.rdma_ports().empty()) {
    out << "  none\n";
  } else {
    std::vector<std::vector<std::string>> rows;
    for (const auto& p : f.rdma_ports())
      rows.push_back({p.device() + "/" + std::to_string(p.port()), p.link_layer(),
                      p.state(), p.phys_state(), p.rate(),
                      p.netdev().empty() ? "-" : p.netdev()});
    out << indent(render_table({"PORT", "LINK LAYER", "STATE", "PHYS", "RATE",
                                "NETDEV"},
                               rows),
                  "  ");
  }
  out << "\n" << format_gpu_section(f.gpus());
  if (!m.set_aside_gpus().empty()) {
    out << "\nGPUs the scheduler set aside (not placed onto)\n";
    for (const auto& a : m.set_aside_gpus())
      out << "  " << a.id() << ": " << a.reason() << "\n";
  }
  if (!m.inventory_warnings().empty()) {
    out << "\nGPU list warnings\n";
    for (const auto& w : m.inventory_warnings())
      out << "  " << w << "\n";
  }
  if (!f.store_problem().empty())
    out << "\nAgent store: " << f.store_problem()
        << " (new fault latches are held in memory, not durable yet)\n";
  if (!f.warnings().empty()) {
    out << "\nWarnings (host files the agent could not read)\n";
    for (const auto& w : f.warnings())
      out << "  " << w << "\n";
  }
  return out.str();
}

namespace {

template <class Opt>
std::string or_unknown(bool has, Opt value, const char* unit, int precision = 0) {
  if (!has)
    return "-";
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f%s", precision, static_cast<double>(value), unit);
  return buf;
}

std::string gpu_memory_cell(const v1::Gpu& g) {
  if (!g.has_memory_total_bytes())
    return "-";
  std::string used = g.has_memory_used_bytes() ? format_bytes(g.memory_used_bytes()) : "?";
  return used + " / " + format_bytes(g.memory_total_bytes());
}

std::string numa_cell(const v1::Gpu& g) {
  return g.has_numa_node() ? std::to_string(g.numa_node()) : "-";
}

std::string health_cell(const v1::GpuView& v) {
  std::string out = to_string(health_of(v));
  if (!v.health_reasons().empty())
    out += ": " + v.health_reasons(0);
  // The status is named unless the reason already starts with it.
  if (auto status = read_status(v.gpu()); !answers(status)
      && (v.health_reasons().empty() || v.health_reasons(0).rfind(to_string(status), 0) != 0))
    out += std::string{" ("} + to_string(status) + ")";
  return out;
}

} // namespace

std::string format_gpu_list(const v1::GpuList& list, int64_t now_unix_ms) {
  if (list.gpus().empty())
    return "No GPUs reported.\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& v : list.gpus()) {
    const auto& g = v.gpu();
    rows.push_back({v.machine(), g.id(), g.model().empty() ? "-" : g.model(),
                    gpu_memory_cell(g),
                    or_unknown(g.has_utilization_percent(), g.utilization_percent(), "%"),
                    or_unknown(g.has_temperature_c(), g.temperature_c(), " C"),
                    or_unknown(g.has_power_watts(), g.power_watts(), " W"),
                    numa_cell(g), health_cell(v),
                    v.holder().empty() ? "-" : v.holder(),
                    v.machine_up() ? "now" : "last seen " + format_age(v.last_seen_unix_ms(), now_unix_ms)});
  }
  return render_table({"MACHINE", "ID", "MODEL", "MEMORY", "UTIL", "TEMP",
                       "POWER", "NUMA", "HEALTH", "HOLDER", "SEEN"},
                      rows);
}

namespace {

/// The STATUS cell of `astra machine`'s GPU table: "Faulty" for a GPU with
/// a latched fault (it is fenced whatever NVML says), else how it read
/// (ok, unresponsive, lost, …). Issue 13 item 7.
std::string gpu_status_cell(const v1::Gpu& g) {
  if (g.latches_size() > 0)
    return "Faulty";
  return to_string(read_status(g));
}

} // namespace

namespace {

/// ", seen in process 4242 (train.py)": the process an Xid line named
/// (issue 17, rule 9: shown, never blamed as the cause); "" when none.
std::string process_note(int32_t pid, const std::string& name) {
  if (pid == 0 && name.empty())
    return {};
  std::string out = ", seen in process ";
  out += pid != 0 ? std::to_string(pid) + (name.empty() ? "" : " (" + name + ")") : name;
  return out;
}

} // namespace

std::string format_gpu_section(const v1::GpuSection& s) {
  std::ostringstream out;
  out << "GPUs\n";
  // One GPU's section (astra gpu show) carries no machine-wide read.
  if (!s.read_as().empty())
    out << "  Read as:   " << s.read_as() << "\n";
  if (!s.detail().empty())
    out << "  Detail:    " << s.detail() << "\n";
  if (!s.gpus().empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& g : s.gpus()) {
      int active = 0;
      for (const auto& l : g.nvlinks())
        active += l.active() ? 1 : 0;
      rows.push_back({g.has_index() ? std::to_string(g.index()) : "-", g.id(),
                      g.model(), g.pci_address(), numa_cell(g),
                      gpu_memory_cell(g), g.architecture().empty() ? "-" : g.architecture(),
                      g.nvlinks().empty() ? "-" : std::to_string(active) + "/" + std::to_string(g.nvlinks_size()),
                      gpu_status_cell(g)});
    }
    out << indent(render_table({"INDEX", "ID", "MODEL", "PCI", "NUMA", "MEMORY",
                                "ARCH", "NVLINK", "STATUS"},
                               rows),
                  "  ");
    for (const auto& g : s.gpus()) {
      if (!g.status_detail().empty())
        out << "  " << g.id() << ": " << g.status_detail() << "\n";
      if (!g.partition_mode().empty())
        out << "  " << g.id() << ": partition mode " << g.partition_mode() << ", "
            << g.partitions() << " partition(s)\n";
      if (g.temperatures_size() > 1) {
        out << "  " << g.id() << ": temperatures";
        for (const auto& t : g.temperatures())
          out << " " << t.label() << " " << static_cast<int>(t.celsius()) << " °C";
        out << "\n";
      }
      for (const auto& f : g.latches())
        out << "  " << g.id() << ": FAULT " << f.reason() << " (" << f.source()
            << ", " << f.count() << "x, last " << format_time(f.last_seen_unix_ms())
            << process_note(f.pid(), f.process_name())
            << (f.not_durable() ? ", not durable yet: the agent's store is full" : "")
            << ")"
            << (f.evidence().empty() || f.reason().find(f.evidence()) != std::string::npos
                  ? std::string{}
                  : ": " + f.evidence())
            << "\n";
      for (const auto& inc : g.incidents())
        out << "  " << g.id() << ": " << inc.action() << " "
            << (inc.has_xid() ? "Xid " + std::to_string(inc.xid()) : inc.kind())
            << " (" << inc.count() << "x" << process_note(inc.pid(), inc.process_name())
            << "): " << inc.text() << "\n";
    }
  }
  const auto& c = s.capabilities();
  if (c.count() > 0) {
    // Every model with its count where there are several ("1x V100, 1x RTX
    // 2080 Ti"), else the one model.
    bool mixed = c.summary().find(',') != std::string::npos;
    out << "  Summary:   " << (mixed ? c.summary() : std::to_string(c.count()) + "x " + c.model())
        << " (" << c.vendor();
    if (!c.architecture().empty())
      out << ", " << c.architecture();
    out << ")";
    if (!c.driver_version().empty())
      out << ", driver " << c.driver_version();
    if (!c.cuda_version().empty())
      out << ", CUDA " << c.cuda_version();
    if (!c.rocm_version().empty())
      out << ", ROCm " << c.rocm_version();
    out << "\n";
    out << "             data-centre " << yes_no(c.data_centre()) << ", NVLink "
        << yes_no(c.nvlink()) << ", NVSwitch fabric " << yes_no(c.nvswitch_fabric())
        << ", IMEX channels " << c.imex_channels() << ", RDMA " << yes_no(c.rdma());
    if (!c.nvlink_domain().empty())
      out << ", NVLink domain " << c.nvlink_domain();
    out << "\n";
  }
  if (!s.unmapped_incidents().empty()) {
    out << "\nKernel events that map to no GPU\n";
    for (const auto& inc : s.unmapped_incidents())
      out << "  " << (inc.pci_address().empty() ? "?" : inc.pci_address()) << " "
          << (inc.kind() == "nvswitch-sxid" && inc.has_xid() ? "SXid " + std::to_string(inc.xid())
              : inc.has_xid()                                ? "Xid " + std::to_string(inc.xid())
                                                             : inc.kind())
          << " (" << inc.count() << "x, " << inc.action() << "): " << inc.text() << "\n";
  }
  if (!s.bus().empty()) {
    out << "\nGPUs on the bus\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& b : s.bus())
      rows.push_back({b.pci_address(), b.vendor(), b.name().empty() ? b.device_id() : b.name(),
                      b.driver().empty() ? "none" : b.driver(),
                      b.missing().empty() ? "-" : b.missing()});
    out << indent(render_table({"PCI", "VENDOR", "DEVICE", "DRIVER", "MISSING"}, rows), "  ");
  }
  if (!s.conditions().empty()) {
    out << "\nConditions\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& cond : s.conditions())
      rows.push_back({cond.type(), cond.status() ? "True" : "False", cond.reason(),
                      cond.message()});
    out << indent(render_table({"CONDITION", "STATUS", "REASON", "MESSAGE"}, rows), "  ");
  }
  if (!s.tried().empty() && s.gpus().empty()) {
    out << "\nDiscovery tried\n";
    for (const auto& t : s.tried())
      out << "  " << t << "\n";
  }
  return out.str();
}

namespace {

uint32_t worker_count(const v1::RunSpec& spec) {
  if (spec.task_groups().empty())
    return spec.workers() == 0 ? 1 : spec.workers();
  uint32_t n = 0;
  for (const auto& g : spec.task_groups())
    n += g.size();
  return n;
}

/// The WHY column of `astra runs`: the waiting or end reason, and a GPU
/// that failed under a run still going on (issue 17, rule 8).
std::string run_why(const v1::Run& r) {
  std::string why = r.waiting_reason();
  if (!r.gpu_fault().empty() && why.find(r.gpu_fault()) == std::string::npos)
    why += (why.empty() ? "" : "; ") + r.gpu_fault();
  return why.empty() ? "-" : why;
}

} // namespace

std::string format_run_list(const v1::RunList& list, int64_t now_unix_ms) {
  if (list.runs().empty())
    return "No runs.\n";
  // Runs of several workspaces may share a name: then each row says its
  // workspace, first (as `kubectl get pods -A` says each pod's namespace).
  auto workspace_of = [](const v1::Run& r) {
    return r.spec().workspace().empty() ? std::string{"default"} : r.spec().workspace();
  };
  bool several = false;
  for (const auto& r : list.runs())
    several = several || workspace_of(r) != workspace_of(list.runs(0));
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : list.runs()) {
    rows.push_back({r.spec().name(), r.state(), std::to_string(worker_count(r.spec())),
                    std::to_string(r.spec().gpus_per_worker()),
                    r.leader_machine().empty() ? "-" : r.leader_machine(),
                    format_age(r.submitted_unix_ms(), now_unix_ms),
                    run_why(r)});
    if (several)
      rows.back().insert(rows.back().begin(), workspace_of(r));
  }
  std::vector<std::string> header{"NAME", "STATE", "WORKERS", "GPUS/WORKER", "LEADER",
                                  "SUBMITTED", "WHY"};
  if (several)
    header.insert(header.begin(), "WORKSPACE");
  return render_table(header, rows);
}

std::string format_user_runs(const v1::RunList& list, int64_t now_unix_ms, bool all) {
  if (all)
    return format_run_list(list, now_unix_ms);
  // A validation's checks are runs too; they would crowd the user's own.
  v1::RunList mine;
  size_t checks = 0;
  for (const auto& run : list.runs()) {
    if (run.spec().validation().empty())
      *mine.add_runs() = run;
    else
      ++checks;
  }
  auto out = format_run_list(mine, now_unix_ms);
  if (checks > 0)
    out += "(" + std::to_string(checks) + " validation check run" + (checks == 1 ? "" : "s")
           + " not shown: astra runs --all)\n";
  return out;
}

std::string format_run(const v1::Run& r, int64_t now_unix_ms) {
  std::ostringstream out;
  out << "Run:         " << r.spec().name() << "\n";
  out << "State:       " << r.state() << "\n";
  if (!r.waiting_reason().empty()) {
    const bool ended = has_ended(state_of(r));
    std::string why = r.waiting_reason();
    if (!ended && why.rfind("waiting: ", 0) == 0)
      why = why.substr(9);
    out << (ended ? "Reason:      " : "Waiting:     ") << why << "\n";
  }
  if (!r.gpu_fault().empty())
    out << "GPU fault:   " << r.gpu_fault() << "\n";
  if (!r.spec().workspace().empty())
    out << "Workspace:   " << r.spec().workspace() << "\n";
  if (r.spec().time_limit_seconds() > 0)
    out << "Time limit:  " << r.spec().time_limit_seconds() << " s\n";
  out << "Submitted:   " << format_time(r.submitted_unix_ms()) << " ("
      << format_age(r.submitted_unix_ms(), now_unix_ms) << ")\n";
  if (r.placed_unix_ms() > 0)
    out << "Placed:      " << format_time(r.placed_unix_ms()) << "\n";
  out << "Leader:      " << (r.leader_machine().empty() ? "-" : r.leader_machine()) << "\n";
  if (!r.master_addr().empty())
    out << "MASTER_ADDR: " << r.master_addr() << ":" << master_port << "\n";
  if (r.spec().array_size() > 0) {
    // How the copies that have ended ended: each fails or completes on its
    // own, as Slurm's array tasks do; those that did not complete are named.
    size_t completed = 0, failed = 0, stopped = 0;
    for (const auto& e : r.copy_ends()) {
      if (e.state() == "Failed")
        ++failed;
      else if (e.reason().rfind("completed", 0) == 0)
        ++completed;
      else
        ++stopped;
    }
    out << "Array:       " << r.copies_placed() << " of " << r.spec().array_size()
        << " copies placed";
    if (r.copy_ends_size() > 0) {
      out << ", " << r.copy_ends_size() << " ended (" << completed << " completed";
      if (failed > 0)
        out << ", " << failed << " failed";
      if (stopped > 0)
        out << ", " << stopped << " stopped";
      out << ")";
    }
    out << "\n";
    size_t shown = 0;
    for (const auto& e : r.copy_ends()) {
      if (e.state() != "Failed" && e.reason().rfind("completed", 0) == 0)
        continue;
      if (++shown > 10) {
        out << "             and " << (failed + stopped - 10) << " more\n";
        break;
      }
      out << "  " << r.spec().name() << "[" << e.copy() << "]: " << e.state() << ": "
          << e.reason() << "\n";
    }
  }
  out << "Image:       " << (r.spec().image().empty() ? "-" : r.spec().image()) << "\n";
  std::string cmd;
  for (const auto& c : r.spec().command())
    cmd += (cmd.empty() ? "" : " ") + c;
  out << "Command:     " << (cmd.empty() ? "-" : cmd) << "\n";
  if (r.spec().gpus_per_worker() == 0)
    out << "Per worker:  CPU only";
  else
    out << "Per worker:  " << r.spec().gpus_per_worker() << " GPU(s)";
  if (r.spec().cpus_per_worker() > 0)
    out << ", " << show_number(r.spec().cpus_per_worker()) << " CPU core(s)";
  if (r.spec().memory_bytes_per_worker() > 0)
    out << ", " << (r.spec().memory_bytes_per_worker() >> 20) << " MiB";
  if (r.spec().healthy_only())
    out << ", healthy GPUs only";
  if (r.spec().on_gpu_fault() == "stop")
    out << ", stopped on a GPU fault";
  if (!r.spec().pool().empty())
    out << ", pool " << r.spec().pool();
  if (r.spec().rdma())
    out << ", RDMA devices";
  if (r.spec().one_worker_per_machine())
    out << ", one per machine";
  out << "\n";
  if (!r.workers().empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& w : r.workers()) {
      std::string gpus;
      for (const auto& g : w.gpu_ids())
        gpus += (gpus.empty() ? "" : ",") + g;
      rows.push_back({w.name().empty() ? "-" : w.name(), std::to_string(w.rank()),
                      w.group(), w.machine(), gpus.empty() ? "-" : gpus,
                      w.numa_node() >= 0 ? std::to_string(w.numa_node()) : "-",
                      w.state().empty() ? "-" : w.state(),
                      w.pid() > 0 ? std::to_string(w.pid()) : "-",
                      w.acknowledged() ? "yes" : "not yet"});
    }
    out << "\nWorkers\n"
        << indent(render_table({"WORKER", "RANK", "GROUP", "MACHINE", "GPUS", "NUMA",
                                "STATE", "PID", "AGENT HAS IT"},
                               rows),
                  "  ");
    // How workers ended, in their agents' words (issue 23 item 6): a
    // deleted run's show Stopping until then.
    std::vector<std::vector<std::string>> ends;
    for (const auto& w : r.workers())
      if (w.exit_code() != 0 || !w.detail().empty())
        // An exit code only where there is one: a worker stopped with no
        // word from its agent (kill -9 of the agent) read "Stopped 0".
        ends.push_back({w.name(), w.state(),
                        w.exit_code() != 0 || w.state() == "Exited" || w.state() == "Failed"
                          ? std::to_string(w.exit_code())
                          : "-",
                        w.detail().empty() ? "-" : w.detail()});
    if (!ends.empty())
      out << "\nHow they ended\n"
          << indent(render_table({"WORKER", "STATE", "EXIT CODE", "DETAIL"}, ends), "  ");
    // The cores, NUMA nodes and RDMA devices their agents gave them (issue 22).
    std::vector<std::vector<std::string>> given;
    for (const auto& w : r.workers()) {
      std::string rdma;
      for (const auto& d : w.rdma_devices())
        rdma += (rdma.empty() ? "" : ",") + d;
      if (!w.cpus().empty() || !w.mems().empty() || !rdma.empty())
        given.push_back({w.name(), w.cpus().empty() ? "-" : w.cpus(),
                         w.mems().empty() ? "-" : w.mems(), rdma.empty() ? "-" : rdma});
    }
    if (!given.empty())
      out << "\nCores and devices\n"
          << indent(render_table({"WORKER", "CPUS", "MEMORY NODES", "RDMA DEVICES"}, given),
                    "  ");
    // Issue 12: the degraded RDMA ports their NCCL_IB_HCA leaves out.
    std::vector<std::vector<std::string>> degraded;
    for (const auto& w : r.workers())
      for (const auto& d : w.degraded_ib_ports())
        degraded.push_back({w.name(), w.machine(), d.port(),
                            d.kept() ? "kept: leaving it out would leave no port" : "left out",
                            d.why()});
    if (!degraded.empty())
      out << "\nDegraded RDMA ports (NCCL_IB_HCA)\n"
          << indent(render_table({"WORKER", "MACHINE", "PORT", "NCCL_IB_HCA", "WHY"}, degraded),
                    "  ");
    // What the workers wrote to $ASTRAEUS_OUTPUTS, sorted by key.
    std::vector<std::vector<std::string>> outputs;
    for (const auto& w : r.workers()) {
      std::map<std::string, std::string> sorted{w.outputs().begin(), w.outputs().end()};
      for (const auto& [k, v] : sorted)
        outputs.push_back({w.name(), k, v});
    }
    // GPUs that became Faulty under the workers (issue 17, rule 8).
    std::vector<std::vector<std::string>> faults;
    for (const auto& w : r.workers())
      for (const auto& f : w.gpu_faults())
        faults.push_back({w.name(), f.machine(), f.gpu_id(), f.reason(),
                          format_time(f.unix_ms()), f.action()});
    if (!faults.empty())
      out << "\nGPU faults\n"
          << indent(render_table({"WORKER", "MACHINE", "GPU", "REASON", "SEEN", "RUN"},
                                 faults),
                    "  ");
    if (!outputs.empty())
      out << "\nOutputs\n" << indent(render_table({"WORKER", "KEY", "VALUE"}, outputs), "  ");
    else if (r.spec().outputs())
      out << "\nOutputs:     none yet (collected from $ASTRAEUS_OUTPUTS when a worker ends)\n";
  }
  return out.str();
}

std::string format_workspaces(const v1::WorkspaceList& list) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& w : list.workspaces()) {
    std::vector<std::string> grants;
    for (const auto& [k, v] : w.grants())
      grants.push_back(k + "=" + v);
    std::sort(grants.begin(), grants.end());
    std::string g;
    for (const auto& x : grants)
      g += (g.empty() ? "" : ",") + x;
    // Issue 16: the machine paths its Bind volumes may mount, and
    // privileged work; the default workspace is the cluster's own.
    bool is_default = w.name() == "default";
    std::string paths;
    for (const auto& p : w.bind_grants())
      paths += (paths.empty() ? "" : ",") + p;
    rows.push_back({w.name(), w.organisation(), w.namespace_().empty() ? "-" : w.namespace_(),
                    g.empty() ? "(all machines)" : g,
                    is_default ? "(any)" : paths.empty() ? "-" : paths,
                    is_default || w.allow_privileged() ? "yes" : "no"});
  }
  return render_table({"NAME", "ORGANISATION", "NAMESPACE", "GRANTS", "PATHS", "PRIVILEGED"},
                      rows);
}

std::string format_submitted(const v1::Run& r, const std::string& cluster) {
  std::string out = r.spec().name() + " submitted" + (cluster.empty() ? "" : " to " + cluster);
  if (!r.console_url().empty())
    out += ": " + r.console_url();
  out += "\n";
  // A run that cannot start at once says why (issue 13 item 5).
  if (!r.waiting_reason().empty())
    out += r.state() + " (" + r.waiting_reason() + ")\n";
  return out;
}

std::string format_xid_policy(const v1::XidPolicyTable& table) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : table.entries())
    rows.push_back({std::to_string(e.xid()), e.action(),
                    e.overridden() ? "config" : "built-in", e.meaning()});
  for (int i = 0; i < table.entries_size(); ++i)
    if (table.entries(i).fence_when_confirmed())
      rows[static_cast<size_t>(i)][1] = "fence if confirmed";
  auto n = table.application_processes() == 0 ? 3u : table.application_processes();
  std::string out = render_table({"XID", "ACTION", "FROM", "MEANING"}, rows)
    + "Any other Xid: " + table.default_action()
    + ", unless the driver confirms it as a fault (NVML recovery action: reset "
      "or reboot), which fences.\n"
      "\"fence if confirmed\": fences when the line says Fatal or the recovery action asks "
      "for a reset or reboot; otherwise it counts toward the NVLink-errors sign (> 10 in 24 h).\n"
      "Application Xids (13, 31, 43, 45, 69): at risk once "
    + std::to_string(n) + " different processes report them within 24 h.\n"
      "Override in the controller's config: xid.fence, xid.at_risk, xid.record, "
      "xid.application_processes.\n";
  if (table.amd_entries_size() > 0) {
    std::vector<std::vector<std::string>> amd;
    for (const auto& e : table.amd_entries())
      amd.push_back({e.event(), e.action(), e.overridden() ? "config" : "built-in", e.meaning()});
    out += "\nAMD (amdgpu kernel-log events)\n"
           + render_table({"EVENT", "ACTION", "FROM", "MEANING"}, amd)
           + "Override in the controller's config: amd.fence, amd.at_risk, amd.record.\n";
  }
  return out;
}


std::string to_json_compact(const google::protobuf::Message& msg) {
  return message_to_json(msg, false);
}

std::string to_json(const google::protobuf::Message& msg) {
  return message_to_json(msg, true);
}

namespace {

/// One series of a GPU's history: its name, unit and how a sample gives it.
struct history_series {
  const char* name;
  const char* unit;
  std::optional<double> (*value)(const v1::GpuSample&);
  /// Fixed scale (utilisation: 0-100); else from the lowest to the highest.
  bool percent;
};

const std::vector<history_series>& gpu_history_series() {
  static const std::vector<history_series> rows{
    {"utilisation", "%",
     [](const v1::GpuSample& s) {
       return s.has_utilization_percent() ? std::optional{s.utilization_percent()}
                                          : std::nullopt;
     },
     true},
    {"memory used", "GiB",
     [](const v1::GpuSample& s) {
       return s.has_memory_used_bytes()
                ? std::optional{static_cast<double>(s.memory_used_bytes()) / (1ull << 30)}
                : std::nullopt;
     },
     false},
    {"temperature", "°C",
     [](const v1::GpuSample& s) {
       return s.has_temperature_c() ? std::optional{s.temperature_c()} : std::nullopt;
     },
     false},
    {"power", "W",
     [](const v1::GpuSample& s) {
       return s.has_power_watts() ? std::optional{s.power_watts()} : std::nullopt;
     },
     false},
    {"SM clock", "MHz",
     [](const v1::GpuSample& s) {
       return s.has_sm_clock_mhz() ? std::optional{static_cast<double>(s.sm_clock_mhz())}
                                   : std::nullopt;
     },
     false},
    {"errors", "",
     [](const v1::GpuSample& s) {
       return std::optional{static_cast<double>(s.xid_events() + s.ecc_uncorrectable())};
     },
     false},
  };
  return rows;
}

std::string history_number(double x, const char* unit) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), x < 10 && x != static_cast<int64_t>(x) ? "%.1f" : "%.0f", x);
  return std::string{buf} + (*unit != '\0' ? " " : "") + unit;
}

/// The sparkline of `cols` (a blank for a minute without a value).
std::string sparkline(const std::vector<std::optional<double>>& cols, double lo, double hi) {
  static const char* const bars[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  std::string out;
  for (const auto& c : cols) {
    if (!c) {
      out += ' ';
      continue;
    }
    int level = 3;
    if (hi > lo)
      level = static_cast<int>((std::clamp(*c, lo, hi) - lo) / (hi - lo) * 7.0 + 0.5);
    out += bars[std::clamp(level, 0, 7)];
  }
  return out;
}

} // namespace

std::string format_gpu_history(const v1::GpuHistory& history, int64_t now_unix_ms) {
  constexpr int64_t minutes = 60;
  constexpr int64_t minute_ms = 60'000;
  auto from = now_unix_ms - minutes * minute_ms;
  auto kept_hours = history.retention_seconds() / 3600;
  std::string out = "History: the last hour, one column a minute (" + std::to_string(kept_hours)
                    + " h kept: astra -o json gpu show, or the console's GPU page)\n";
  bool any = false;
  for (const auto& s : history.samples())
    any = any || (s.unix_ms() >= from && s.unix_ms() <= now_unix_ms);
  if (!any)
    return "History: no report of this GPU in the last hour ("
           + std::to_string(history.samples_size()) + " point(s) kept over "
           + std::to_string(kept_hours) + " h)\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& series : gpu_history_series()) {
    std::vector<double> sum(minutes, 0);
    std::vector<int> count(minutes, 0);
    std::optional<double> latest;
    for (const auto& s : history.samples()) {
      auto v = series.value(s);
      if (!v || s.unix_ms() < from || s.unix_ms() > now_unix_ms)
        continue;
      auto col = std::min<int64_t>(minutes - 1, (s.unix_ms() - from) / minute_ms);
      sum[static_cast<size_t>(col)] += *v;
      ++count[static_cast<size_t>(col)];
      latest = v;
    }
    if (!latest)
      continue;
    std::vector<std::optional<double>> cols(minutes);
    double lo = 0, hi = 0;
    bool first = true;
    for (size_t i = 0; i < cols.size(); ++i) {
      if (count[i] == 0)
        continue;
      cols[i] = sum[i] / count[i];
      lo = first ? *cols[i] : std::min(lo, *cols[i]);
      hi = first ? *cols[i] : std::max(hi, *cols[i]);
      first = false;
    }
    auto line = series.percent ? sparkline(cols, 0, 100) : sparkline(cols, lo, hi);
    rows.push_back({series.name, line, history_number(lo, series.unit),
                    history_number(hi, series.unit), history_number(*latest, series.unit)});
  }
  return out + render_table({"SERIES", "LAST HOUR", "LOW", "HIGH", "NOW"}, rows);
}

} // namespace astraeus::cli
