#include "runtime/http/prometheus_metrics.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "runtime/http/api_view.hpp"

namespace astraeus {

std::string prometheus_escape(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\' || c == '"')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string dcgm_pci_bus_id(const std::string& pci_address) {
  auto colon = pci_address.find(':');
  if (colon == std::string::npos)
    return pci_address;
  std::string domain = pci_address.substr(0, colon);
  std::string out = domain.size() < 8 ? std::string(8 - domain.size(), '0') : std::string{};
  out += domain + pci_address.substr(colon);
  for (auto& c : out)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

namespace {

/// Appends a number in the text format's shortest form (whole numbers,
/// most readings, take the integer path: a third of the time).
void append_number(std::string& out, double x) {
  char buf[32];
  auto whole = static_cast<int64_t>(x);
  auto r = (static_cast<double>(whole) == x && x > -1e15 && x < 1e15)
             ? std::to_chars(buf, buf + sizeof(buf), whole)
             : std::to_chars(buf, buf + sizeof(buf), x);
  out.append(buf, r.ptr);
}

/// One GPU series: its value for a GPU, unset when unknown.
struct gpu_series {
  const char* name;
  const char* help;
  const char* type;
  std::optional<double> (*value)(const v1::GpuView&);
};

std::optional<double> mib(uint64_t bytes) {
  return static_cast<double>(bytes / (1024 * 1024));
}

/// The Xid of the GPU's latest latch or incident; 0 when it has none.
std::optional<double> last_xid(const v1::GpuView& v) {
  int64_t when = -1;
  uint32_t xid = 0;
  for (const auto& l : v.gpu().latches())
    if (l.has_xid() && l.last_seen_unix_ms() > when)
      when = l.last_seen_unix_ms(), xid = l.xid();
  for (const auto& i : v.gpu().incidents())
    if (i.has_xid() && i.last_seen_unix_ms() > when)
      when = i.last_seen_unix_ms(), xid = i.xid();
  return static_cast<double>(xid);
}

const std::vector<gpu_series>& dcgm_series() {
  using V = const v1::GpuView&;
  using O = std::optional<double>;
  static const std::vector<gpu_series> all{
    {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gauge",
     [](V v) -> O { return v.gpu().has_utilization_percent() ? O{v.gpu().utilization_percent()} : O{}; }},
    {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "gauge",
     [](V v) -> O { return v.gpu().has_memory_used_bytes() ? mib(v.gpu().memory_used_bytes()) : O{}; }},
    {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "gauge",
     [](V v) -> O {
       const auto& g = v.gpu();
       if (!g.has_memory_total_bytes() || !g.has_memory_used_bytes())
         return O{};
       return mib(g.memory_total_bytes() - std::min(g.memory_used_bytes(), g.memory_total_bytes()));
     }},
    {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge",
     [](V v) -> O { return v.gpu().has_temperature_c() ? O{v.gpu().temperature_c()} : O{}; }},
    {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "gauge",
     [](V v) -> O { return v.gpu().has_power_watts() ? O{v.gpu().power_watts()} : O{}; }},
    {"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "gauge",
     [](V v) -> O { return v.gpu().has_sm_clock_mhz() ? O{double(v.gpu().sm_clock_mhz())} : O{}; }},
    {"DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "gauge",
     [](V v) -> O { return v.gpu().has_memory_clock_mhz() ? O{double(v.gpu().memory_clock_mhz())} : O{}; }},
    {"DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "gauge", last_xid},
    {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", "counter",
     [](V v) -> O { return v.gpu().has_pcie_replays() ? O{double(v.gpu().pcie_replays())} : O{}; }},
    {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", "counter",
     [](V v) -> O {
       const auto& e = v.gpu().ecc();
       return e.has_volatile_correctable() ? O{double(e.volatile_correctable())} : O{};
     }},
    {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", "counter",
     [](V v) -> O {
       const auto& e = v.gpu().ecc();
       return e.has_volatile_uncorrectable() ? O{double(e.volatile_uncorrectable())} : O{};
     }},
    {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors.", "counter",
     [](V v) -> O {
       const auto& r = v.gpu().row_remapping();
       return r.has_correctable_rows() ? O{double(r.correctable_rows())} : O{};
     }},
    {"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors.", "counter",
     [](V v) -> O {
       const auto& r = v.gpu().row_remapping();
       return r.has_uncorrectable_rows() ? O{double(r.uncorrectable_rows())} : O{};
     }},
    {"DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed.", "gauge",
     [](V v) -> O {
       const auto& r = v.gpu().row_remapping();
       return r.has_failed() ? O{r.failed() ? 1.0 : 0.0} : O{};
     }},
    {"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "Total number of NVLink flow-control CRC errors.", "counter",
     [](V v) -> O {
       double sum = 0;
       bool any = false;
       for (const auto& l : v.gpu().nvlinks())
         if (l.has_crc_errors())
           sum += double(l.crc_errors()), any = true;
       return any ? O{sum} : O{};
     }},
    {"astraeus_gpu_latched_faults", "Faults latched for the GPU on its machine.", "gauge",
     [](V v) -> O { return double(v.gpu().latches_size()); }},
  };
  return all;
}

void header(std::string& out, const char* name, const char* help, const char* type) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

/// Appends `value` escaped for the text format; most values need no escape.
void append_escaped(std::string& out, const std::string& value) {
  if (value.find_first_of("\\\"\n") == std::string::npos)
    out += value;
  else
    out += prometheus_escape(value);
}

/// Appends the dcgm-exporter labels of `v`, without braces.
void append_gpu_labels(std::string& out, const v1::GpuView& v) {
  const auto& g = v.gpu();
  char index[16];
  auto index_end = g.has_index() ? std::to_chars(index, index + sizeof(index), g.index()).ptr
                                 : index;
  const std::string_view idx{index, static_cast<size_t>(index_end - index)};
  out += "gpu=\"";
  out.append(idx);
  out += "\",UUID=\"";
  append_escaped(out, g.id());
  out += "\",pci_bus_id=\"";
  out += dcgm_pci_bus_id(g.pci_address());
  out += "\",device=\"";
  if (g.vendor() != "amd")
    out.append("nvidia").append(idx);
  else if (g.card().empty())
    out.append("card").append(idx);
  else
    out += g.card();
  out += "\",modelName=\"";
  append_escaped(out, g.model());
  out += "\",Hostname=\"";
  append_escaped(out, v.machine());
  out += '"';
}

void machine_series(std::string& out, const api_view& view, const std::string& only) {
  header(out, "astraeus_machine_state", "1 for the machine's state.", "gauge");
  for (const auto& m : view.machines) {
    if (!only.empty() && m.key != only)
      continue;
    auto state = v1::Machine::State_Name(m.message.state());
    out += "astraeus_machine_state{machine=\"" + prometheus_escape(m.key) + "\",state=\"" + state
           + "\"} 1\n";
  }
  header(out, "astraeus_machine_cordoned", "1 when the machine is cordoned.", "gauge");
  for (const auto& m : view.machines)
    if (only.empty() || m.key == only)
      out += "astraeus_machine_cordoned{machine=\"" + prometheus_escape(m.key) + "\"} "
           + (m.message.cordoned() ? "1\n" : "0\n");
  header(out, "astraeus_machine_connected",
         "1 when the machine's agent holds a gate session.", "gauge");
  for (const auto& m : view.machines)
    if (only.empty() || m.key == only)
      out += "astraeus_machine_connected{machine=\"" + prometheus_escape(m.key) + "\"} "
           + (m.message.connected() ? "1\n" : "0\n");
}

void scheduler_series(std::string& out, const api_view& view) {
  std::map<std::string, int> by_state{{"Waiting", 0}, {"Placed", 0}, {"Running", 0},
                                      {"Stopped", 0}, {"Failed", 0}};
  for (const auto& r : view.runs.runs())
    ++by_state[r.state()];
  header(out, "astraeus_scheduler_runs", "Runs the scheduler keeps, by state.", "gauge");
  for (const auto& [state, n] : by_state)
    out += "astraeus_scheduler_runs{state=\"" + prometheus_escape(state) + "\"} "
           + std::to_string(n) + "\n";
  header(out, "astraeus_scheduler_waiting_runs", "Runs waiting to be placed (the queue).",
         "gauge");
  out += "astraeus_scheduler_waiting_runs " + std::to_string(by_state["Waiting"]) + "\n";
  header(out, "astraeus_api_view_index", "Index of the API's view of the cluster.", "counter");
  out += "astraeus_api_view_index " + std::to_string(view.index) + "\n";
}

} // namespace

void render_prometheus_metrics(std::string& out, const api_view& view,
                               const std::string& machine) {
  // One pass over the GPUs reads every value into a dense table and every
  // GPU's labels into one string; the output pass then only appends (a
  // family's samples must be together).
  const auto& series = dcgm_series();
  size_t first = 0, last = view.gpus.size();
  if (!machine.empty())
    std::tie(first, last) = view.gpus_of(machine);
  const size_t n = last - first, k = series.size();
  std::string labels;
  std::vector<size_t> label_end(n);
  std::vector<double> values(n * k);
  std::vector<char> known(n * k);
  // A machine that is Down serves no readings, as dcgm-exporter on a dead
  // host serves nothing: its last ones would look live on a dashboard (a
  // new-user trial saw 97 % use and 512 W for a machine gone a minute).
  // What the controller itself knows (health, latches, holders) stays.
  std::vector<std::string_view> down;
  for (const auto& m : view.machines)
    if (m.message.state() == v1::Machine::Down)
      down.push_back(m.key);
  std::sort(down.begin(), down.end());
  std::vector<char> reading(k);
  for (size_t j = 0; j < k; ++j)
    reading[j] = std::string_view{series[j].name}.rfind("DCGM_", 0) == 0;
  for (size_t i = 0; i < n; ++i) {
    const auto& g = view.gpus[first + i].message;
    append_gpu_labels(labels, g);
    label_end[i] = labels.size();
    const bool gone = !down.empty()
                      && std::binary_search(down.begin(), down.end(), std::string_view{g.machine()});
    for (size_t j = 0; j < k; ++j)
      if (gone && reading[j])
        continue;
      else if (auto x = series[j].value(g)) {
        values[i * k + j] = *x;
        known[i * k + j] = 1;
      }
  }
  auto label = [&](size_t i) {
    size_t begin = i == 0 ? 0 : label_end[i - 1];
    return std::string_view{labels.data() + begin, label_end[i] - begin};
  };
  out.reserve(out.size() + labels.size() * (k + 3) + n * (k + 3) * 64
              + view.machines.size() * 200 + 65536);
  for (size_t j = 0; j < k; ++j) {
    const auto& s = series[j];
    header(out, s.name, s.help, s.type);
    const std::string_view name{s.name};
    for (size_t i = 0; i < n; ++i) {
      if (!known[i * k + j])
        continue;
      out.append(name);
      out += '{';
      out.append(label(i));
      out.append("} ", 2);
      append_number(out, values[i * k + j]);
      out += '\n';
    }
  }
  header(out, "astraeus_gpu_health",
         "1 for the GPU's health: Healthy, AtRisk, Faulty or Foreign.", "gauge");
  for (size_t i = 0; i < n; ++i) {
    out += "astraeus_gpu_health{";
    out.append(label(i));
    out += ",health=\"";
    append_escaped(out, view.gpus[first + i].message.health());
    out += "\"} 1\n";
  }
  header(out, "astraeus_gpu_held", "1 for a GPU held by a worker, labelled with it.", "gauge");
  for (size_t i = 0; i < n; ++i) {
    const auto& holder = view.gpus[first + i].message.holder();
    if (holder.empty())
      continue;
    out += "astraeus_gpu_held{";
    out.append(label(i));
    out += ",holder=\"";
    append_escaped(out, holder);
    out += "\"} 1\n";
  }
  machine_series(out, view, machine);
  scheduler_series(out, view);
}

std::string render_prometheus_metrics(const api_view& view, const std::string& machine) {
  std::string out;
  render_prometheus_metrics(out, view, machine);
  return out;
}

} // namespace astraeus
