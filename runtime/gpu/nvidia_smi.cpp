#include "runtime/gpu/nvidia_smi.hpp"
#include "runtime/gpu/nvidia_smi_query.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>


#include "messages/gpu_read.hpp"
#include "runtime/host/host_facts.hpp"
#include "runtime/gpu/nvml.hpp"
#include "runtime/process/program_run.hpp"
#include "runtime/host/sysfs_text.hpp"


namespace astraeus {

namespace {

using clock_type = std::chrono::steady_clock;

// Output of one run is capped: nvidia-smi prints a few hundred bytes per
// GPU; anything near this is not nvidia-smi.
constexpr size_t max_output_bytes = 4u << 20;

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// A short, printable excerpt of program output for a detail line.
std::string excerpt(std::string_view text, size_t max = 200) {
  text = trim(text);
  std::string out;
  for (char c : text.substr(0, max))
    out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  if (text.size() > max)
    out += "...";
  return to_valid_utf8(out);
}


std::string describe_failure(const std::string& what, const run_outcome& run,
                             std::chrono::milliseconds budget) {
  if (!run.started)
    return what + ": " + run.error;
  if (run.timed_out)
    return what + " did not finish within " + std::to_string(budget.count())
           + " ms; killed it";
  if (run.overflow)
    return what + " printed more than " + std::to_string(max_output_bytes) + " bytes; killed it";
  std::string text = what + " ";
  if (run.signal != 0)
    text += "was killed by signal " + std::to_string(run.signal);
  else
    text += "exited with status " + std::to_string(run.exit_code);
  auto said = excerpt(run.out.empty() ? run.err : run.out);
  if (said.empty())
    said = excerpt(run.err);
  if (!said.empty())
    text += ": " + said;
  return text;
}

// ---------------------------------------------------------------------------
// Parsing.
// ---------------------------------------------------------------------------

enum class value_kind { value, absent, error, lost };

struct classified {
  value_kind kind = value_kind::value;
  std::string why;  // for error / lost
};

// nvidia-smi's placeholders. "[N/A]" and "[Not Supported]" mean the GPU
// lacks the value; "[GPU is lost]" that the GPU stopped answering; other
// bracketed texts and "ERR!" that reading it failed.
classified classify(std::string_view value) {
  if (value.empty() || value == "[N/A]" || value == "N/A" || value == "[Not Supported]"
      || value == "Not Supported" || starts_with(value, "[Requested functionality has been deprecated"))
    return {value_kind::absent, {}};
  if (value == "[GPU is lost]" || value == "GPU is lost")
    return {value_kind::lost, "GPU is lost"};
  if (value == "ERR!")
    return {value_kind::error, "ERR!"};
  if (value.size() >= 2 && value.front() == '[' && value.back() == ']')
    return {value_kind::error, std::string{value.substr(1, value.size() - 2)}};
  if (value == "Unknown Error" || value == "Insufficient Permissions")
    return {value_kind::error, std::string{value}};
  return {value_kind::value, {}};
}

std::optional<bool> yes_no(std::string_view value) {
  auto v = ascii_lower(value);
  if (v == "yes" || v == "1" || v == "true" || v == "active")
    return true;
  if (v == "no" || v == "0" || v == "false" || v == "not active")
    return false;
  return std::nullopt;
}

struct row_reader {
  v1::Gpu& gpu;
  bool lost = false;

  // The value, or nullopt (and a note in unknown_fields where it is not
  // simply unsupported).
  std::optional<std::string_view> get(const std::string& field, std::string_view value) {
    auto c = classify(value);
    switch (c.kind) {
    case value_kind::value:
      return value;
    case value_kind::absent:
      return std::nullopt;
    case value_kind::lost:
      lost = true;
      [[fallthrough]];
    case value_kind::error:
      gpu.add_unknown_fields(field + ": " + to_valid_utf8(c.why));
      return std::nullopt;
    }
    return std::nullopt;
  }

  void unparseable(const std::string& field, std::string_view value) {
    gpu.add_unknown_fields(field + ": unexpected value '" + excerpt(value, 60) + "'");
  }

  std::optional<uint64_t> u64(const std::string& field, std::string_view value) {
    auto v = get(field, value);
    if (!v)
      return std::nullopt;
    if (auto n = parse_u64(*v))
      return n;
    // Some drivers print integral values with decimals ("81559.00").
    if (auto d = parse_double(*v); d && *d >= 0 && *d < 1.8e19)
      return static_cast<uint64_t>(std::llround(*d));
    unparseable(field, *v);
    return std::nullopt;
  }

  std::optional<double> number(const std::string& field, std::string_view value) {
    auto v = get(field, value);
    if (!v)
      return std::nullopt;
    if (auto d = parse_double(*v))
      return d;
    unparseable(field, *v);
    return std::nullopt;
  }

  std::optional<bool> flag(const std::string& field, std::string_view value) {
    auto v = get(field, value);
    if (!v)
      return std::nullopt;
    if (auto b = yes_no(*v))
      return b;
    unparseable(field, *v);
    return std::nullopt;
  }

  std::optional<std::string> text(const std::string& field, std::string_view value) {
    auto v = get(field, value);
    if (!v)
      return std::nullopt;
    return to_valid_utf8(*v);
  }
};

constexpr uint64_t mib = 1024ull * 1024ull;

std::optional<v1::Gpu> parse_row(const std::vector<std::string_view>& columns,
                                 const std::vector<std::string>& fields) {
  v1::Gpu gpu;
  gpu.set_vendor("nvidia");
  row_reader r{gpu};
  std::optional<bool> hw_thermal, sw_thermal;
  bool hw_known = false, sw_known = false;
  std::string uuid;
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto& f = fields[i];
    auto value = trim(columns[i]);
    if (f == "index") {
      if (auto v = r.u64(f, value); v && *v <= UINT32_MAX)
        gpu.set_index(static_cast<uint32_t>(*v));
    } else if (f == "uuid") {
      if (auto v = r.text(f, value))
        uuid = *v;
    } else if (f == "name") {
      if (auto v = r.text(f, value))
        gpu.set_model(*v);
    } else if (f == "pci.bus_id") {
      if (auto v = r.get(f, value)) {
        if (auto bus = normalize_pci_bus_id(*v))
          gpu.set_pci_address(*bus);
        else
          r.unparseable(f, *v);
      }
    } else if (f == "driver_version") {
      if (auto v = r.text(f, value))
        gpu.set_driver_version(*v);
    } else if (f == "memory.total") {
      if (auto v = r.u64(f, value))
        gpu.set_memory_total_bytes(*v * mib);
    } else if (f == "memory.used") {
      if (auto v = r.u64(f, value))
        gpu.set_memory_used_bytes(*v * mib);
    } else if (f == "utilization.gpu") {
      if (auto v = r.number(f, value))
        gpu.set_utilization_percent(*v);
    } else if (f == "temperature.gpu") {
      if (auto v = r.number(f, value))
        gpu.set_temperature_c(*v);
    } else if (f == "power.draw") {
      if (auto v = r.number(f, value))
        gpu.set_power_watts(*v);
    } else if (f == "power.limit") {
      if (auto v = r.number(f, value))
        gpu.set_power_limit_watts(*v);
    } else if (f == "clocks.sm") {
      if (auto v = r.u64(f, value); v && *v <= UINT32_MAX)
        gpu.set_sm_clock_mhz(static_cast<uint32_t>(*v));
    } else if (f == "clocks.mem") {
      if (auto v = r.u64(f, value); v && *v <= UINT32_MAX)
        gpu.set_memory_clock_mhz(static_cast<uint32_t>(*v));
    } else if (f == "fan.speed") {
      if (auto v = r.number(f, value))
        gpu.set_fan_percent(*v);
    } else if (f == "ecc.errors.corrected.volatile.total") {
      if (auto v = r.u64(f, value))
        gpu.mutable_ecc()->set_volatile_correctable(*v);
    } else if (f == "ecc.errors.uncorrected.volatile.total") {
      if (auto v = r.u64(f, value))
        gpu.mutable_ecc()->set_volatile_uncorrectable(*v);
    } else if (f == "ecc.errors.corrected.aggregate.total") {
      if (auto v = r.u64(f, value))
        gpu.mutable_ecc()->set_aggregate_correctable(*v);
    } else if (f == "ecc.errors.uncorrected.aggregate.total") {
      if (auto v = r.u64(f, value))
        gpu.mutable_ecc()->set_aggregate_uncorrectable(*v);
    } else if (f == "retired_pages.single_bit_ecc.count" || f == "retired_pages.sbe") {
      if (auto v = r.u64(f, value))
        gpu.mutable_retired_pages()->set_single_bit(*v);
    } else if (f == "retired_pages.double_bit.count" || f == "retired_pages.dbe") {
      if (auto v = r.u64(f, value))
        gpu.mutable_retired_pages()->set_double_bit(*v);
    } else if (f == "retired_pages.pending") {
      if (auto v = r.flag(f, value))
        gpu.mutable_retired_pages()->set_pending(*v);
    } else if (f == "serial") {
      if (auto v = r.text(f, value))
        gpu.set_serial(*v);
    } else if (f == "vbios_version") {
      if (auto v = r.text(f, value))
        gpu.set_vbios_version(*v);
    } else if (f == "compute_cap") {
      if (auto v = r.get(f, value)) {
        auto arch = nvidia_architecture(*v);
        if (!arch.empty() || parse_double(*v)) {
          gpu.set_compute_capability(std::string{*v});
          gpu.set_architecture(arch);
        } else {
          r.unparseable(f, *v);
        }
      }
    } else if (f == "clocks_throttle_reasons.hw_thermal_slowdown"
               || f == "clocks_event_reasons.hw_thermal_slowdown") {
      hw_thermal = r.flag(f, value);
      hw_known = true;
    } else if (f == "clocks_throttle_reasons.sw_thermal_slowdown"
               || f == "clocks_event_reasons.sw_thermal_slowdown") {
      sw_thermal = r.flag(f, value);
      sw_known = true;
    }
  }
  // Active when either reason is; inactive only when every reason asked
  // for is known to be inactive.
  if ((hw_thermal && *hw_thermal) || (sw_thermal && *sw_thermal))
    gpu.set_thermal_slowdown(true);
  else if ((hw_known || sw_known) && (!hw_known || hw_thermal) && (!sw_known || sw_thermal))
    gpu.set_thermal_slowdown(false);

  gpu.set_id(!uuid.empty() ? uuid : gpu.pci_address());
  gpu.set_data_centre(nvidia_data_centre_model(gpu.model()));
  if (r.lost) {
    set_read_status(gpu, gpu_read_status::lost);
    gpu.set_status_detail("nvidia-smi: GPU is lost");
  } else {
    set_read_status(gpu, gpu_read_status::ok);
  }
  return gpu;
}

// "Unable to determine the device handle for GPU3: 0000:04:00.0: Unknown
// Error", "... for GPU 0000:04:00.0: ...", "... for GPU0000:25:00.0: ...".
std::optional<v1::Gpu> parse_handle_failure(std::string_view line) {
  constexpr std::string_view marker = "Unable to determine the device handle for";
  auto at = line.find(marker);
  if (at == std::string_view::npos)
    return std::nullopt;
  v1::Gpu gpu;
  gpu.set_vendor("nvidia");
  auto rest = line.substr(at + marker.size());
  rest = trim(rest);
  if (starts_with(ascii_lower(rest.substr(0, 3)), "gpu"))
    rest.remove_prefix(3);
  // "<index>:" when the text after "GPU" is digits then ':' then a PCI id.
  size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9')
    ++digits;
  if (digits > 0 && digits < rest.size() && rest[digits] == ':' && digits <= 3) {
    if (auto n = parse_u64(rest.substr(0, digits)))
      gpu.set_index(static_cast<uint32_t>(*n));
  }
  // The PCI address: the first "<hex>:<hex>:<hex>.<digit>" at a word start.
  for (size_t i = 0; i < rest.size(); ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(rest[i]))
        || (i > 0 && std::isxdigit(static_cast<unsigned char>(rest[i - 1]))))
      continue;
    auto dot = rest.find('.', i);
    if (dot == std::string_view::npos || dot + 1 >= rest.size())
      break;
    if (auto bus = normalize_pci_bus_id(rest.substr(i, dot + 2 - i))) {
      gpu.set_pci_address(*bus);
      break;
    }
  }
  gpu.set_id(gpu.pci_address());
  set_read_status(gpu, gpu_read_status::lost);
  gpu.set_status_detail(excerpt(line, 300));
  return gpu;
}

// Field "compute_cap" is not a valid field to query. -> compute_cap
std::string rejected_field(std::string_view output) {
  constexpr std::string_view tail = "is not a valid field to query";
  auto at = output.find(tail);
  if (at == std::string_view::npos)
    return {};
  auto head = output.substr(0, at);
  auto close = head.rfind('"');
  if (close == std::string_view::npos)
    return {};
  auto open = head.substr(0, close).rfind('"');
  if (open == std::string_view::npos)
    return {};
  return std::string{head.substr(open + 1, close - open - 1)};
}

std::string join(const std::vector<std::string>& items, char sep) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty())
      out += sep;
    out += item;
  }
  return out;
}

void append_detail(std::string& detail, const std::string& more) {
  if (more.empty())
    return;
  if (!detail.empty())
    detail += "; ";
  detail += more;
}

} // namespace

const std::vector<std::string>& nvidia_smi_gpu_fields() {
  static const std::vector<std::string> fields = {
      "index",
      "uuid",
      "name",
      "pci.bus_id",
      "driver_version",
      "memory.total",
      "memory.used",
      "utilization.gpu",
      "temperature.gpu",
      "power.draw",
      "power.limit",
      "clocks.sm",
      "clocks.mem",
      "fan.speed",
      "ecc.errors.corrected.volatile.total",
      "ecc.errors.uncorrected.volatile.total",
      "ecc.errors.corrected.aggregate.total",
      "ecc.errors.uncorrected.aggregate.total",
      "retired_pages.single_bit_ecc.count",
      "retired_pages.double_bit.count",
      "retired_pages.pending",
      "serial",
      "vbios_version",
      "compute_cap",
      "clocks_throttle_reasons.hw_thermal_slowdown",
      "clocks_throttle_reasons.sw_thermal_slowdown",
  };
  return fields;
}

std::optional<std::string> normalize_pci_bus_id(std::string_view bus_id) {
  // nvml::normalise_pci_address also takes "3b:00.0" (no domain); here the
  // domain is required, as nvidia-smi always prints it.
  bus_id = trim(bus_id);
  if (std::count(bus_id.begin(), bus_id.end(), ':') != 2 || starts_with(bus_id, ":"))
    return std::nullopt;
  auto address = nvml::normalise_pci_address(bus_id);
  if (address.empty())
    return std::nullopt;
  return address;
}

std::string nvidia_architecture(std::string_view compute_capability) {
  auto cc = trim(compute_capability);
  auto dot = cc.find('.');
  if (dot == std::string_view::npos)
    return {};
  auto major_text = cc.substr(0, dot);
  auto minor_text = cc.substr(dot + 1);
  if (!all_digits(major_text) || !all_digits(minor_text))
    return {};
  auto major = parse_u64(major_text);
  auto minor = parse_u64(minor_text);
  if (!major || !minor || *major > 1000)
    return {};
  // The table names no minor past 9: a larger one stays larger in an int.
  return nvml::architecture_from_compute_capability(
      static_cast<int>(*major), static_cast<int>(std::min<uint64_t>(*minor, 1000)));
}

bool nvidia_data_centre_model(std::string_view name) {
  return nvml::is_data_centre_model(name);
}

nvidia_smi_result parse_nvidia_smi_csv(std::string_view text,
                                       const std::vector<std::string>& fields) {
  nvidia_smi_result result;
  size_t skipped = 0;
  std::string first_skipped;
  size_t widest = 0;  // the most columns of a line used with extra ones
  bool no_devices = false;
  auto pci_column = std::find(fields.begin(), fields.end(), "pci.bus_id") - fields.begin();
  for (auto line : nonblank_lines(text)) {
    if (auto lost = parse_handle_failure(line)) {
      result.gpus.push_back(std::move(*lost));
      continue;
    }
    if (contains(line, "No devices were found")) {
      no_devices = true;
      continue;
    }
    auto columns = split(line, ',');
    // A newer driver may print more than was asked for: the fields asked
    // for come first. Only a line that has a PCI address where one belongs
    // is taken for a GPU line.
    if (columns.size() > fields.size() && static_cast<size_t>(pci_column) < fields.size()
        && normalize_pci_bus_id(columns[static_cast<size_t>(pci_column)])) {
      widest = std::max(widest, columns.size());
      columns.resize(fields.size());
    }
    if (columns.size() != fields.size()) {
      if (skipped++ == 0)
        first_skipped = excerpt(line, 120);
      continue;
    }
    if (auto gpu = parse_row(columns, fields))
      result.gpus.push_back(std::move(*gpu));
  }
  for (const auto& gpu : result.gpus) {
    if (!gpu.driver_version().empty()) {
      result.driver_version = gpu.driver_version();
      break;
    }
  }
  result.ok = !result.gpus.empty() || no_devices;
  const auto expected = std::to_string(fields.size());
  if (widest > 0)
    result.warnings.push_back("nvidia-smi --query-gpu printed up to " + std::to_string(widest)
                              + " fields per GPU line where " + expected
                              + " were asked for (a newer driver?); the first " + expected
                              + " are used, the rest ignored");
  if (skipped > 0) {
    append_detail(result.detail, std::to_string(skipped) + " line(s) without the " + expected
                                     + " expected comma-separated fields, e.g. '" + first_skipped
                                     + "'");
    result.warnings.push_back("nvidia-smi --query-gpu printed lines without the " + expected
                              + " expected comma-separated fields; they were skipped");
  }
  if (!result.ok && result.detail.empty())
    result.detail = trim(text).empty() ? "no output" : "no GPU line in the output";
  if (no_devices && result.gpus.empty())
    append_detail(result.detail, "No devices were found");
  return result;
}

size_t apply_nvidia_smi_remapped_rows(std::string_view text, std::vector<v1::Gpu>& gpus) {
  size_t updated = 0;
  for (auto line : nonblank_lines(text)) {
    auto columns = split(line, ',');
    if (columns.size() != 5)
      continue;
    auto uuid = trim(columns[0]);
    auto it = std::find_if(gpus.begin(), gpus.end(),
                           [&](const v1::Gpu& g) { return !uuid.empty() && g.id() == uuid; });
    if (it == gpus.end())
      continue;
    row_reader r{*it};
    auto* rows = it->mutable_row_remapping();
    if (auto v = r.u64("remapped_rows.correctable", trim(columns[1])))
      rows->set_correctable_rows(*v);
    if (auto v = r.u64("remapped_rows.uncorrectable", trim(columns[2])))
      rows->set_uncorrectable_rows(*v);
    if (auto v = r.flag("remapped_rows.pending", trim(columns[3])))
      rows->set_pending(*v);
    if (auto v = r.flag("remapped_rows.failure", trim(columns[4])))
      rows->set_failed(*v);
    ++updated;
  }
  return updated;
}

size_t apply_nvidia_smi_nvlink_status(std::string_view text, std::vector<v1::Gpu>& gpus,
                                      const std::string& unlisted) {
  std::vector<bool> named(gpus.size(), false);
  v1::Gpu* gpu = nullptr;
  size_t count = 0;
  for (auto line : nonblank_lines(text)) {
    if (starts_with(line, "GPU ")) {
      // "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)"
      gpu = nullptr;
      auto colon = line.find(':');
      auto index = colon == std::string_view::npos ? std::nullopt
                                                   : parse_u64(line.substr(4, colon - 4));
      std::string_view uuid;
      if (auto at = line.find("(UUID: "); at != std::string_view::npos) {
        uuid = line.substr(at + 7);
        uuid = trim(uuid.substr(0, uuid.find(')')));
      }
      for (size_t i = 0; i < gpus.size() && !gpu; ++i) {
        if (named[i])
          continue;
        if (!uuid.empty() ? gpus[i].id() == uuid
                          : (index && gpus[i].has_index() && gpus[i].index() == *index))
          gpu = &gpus[i];
      }
      if (gpu) {
        named[static_cast<size_t>(gpu - gpus.data())] = true;
        gpu->clear_nvlinks();
        ++count;
      }
      continue;
    }
    if (!gpu || !starts_with(line, "Link "))
      continue;
    // "Link 0: 26.562 GB/s" or "Link 1: <inactive>"
    auto colon = line.find(':');
    auto link = colon == std::string_view::npos ? std::nullopt
                                                : parse_u64(line.substr(5, colon - 5));
    if (!link || *link > UINT32_MAX)
      continue;
    auto state = trim(line.substr(colon + 1));
    std::optional<bool> active;
    if (ascii_lower(state) == "<inactive>")
      active = false;
    else if (auto space = state.find(' '); space != std::string_view::npos
             && parse_double(state.substr(0, space)) && contains(state, "B/s"))
      active = true;
    if (!active) {
      gpu->add_unknown_fields("nvlinks[" + std::to_string(*link) + "]: unexpected state '"
                              + excerpt(state, 60) + "'");
      continue;
    }
    auto* l = gpu->add_nvlinks();
    l->set_link(static_cast<uint32_t>(*link));
    l->set_active(*active);
    l->set_remote_kind("unknown");
  }
  for (size_t i = 0; i < gpus.size(); ++i)
    if (!named[i] && read_status(gpus[i]) != gpu_read_status::lost)
      gpus[i].add_unknown_fields("nvlinks: " + unlisted);
  return count;
}

std::string parse_nvidia_smi_cuda_version(std::string_view text) {
  for (auto line : nonblank_lines(text)) {
    if (!starts_with(line, "CUDA Version"))
      continue;
    auto colon = line.find(':');
    if (colon == std::string_view::npos)
      continue;
    auto value = trim(line.substr(colon + 1));
    if (value.empty() || classify(value).kind != value_kind::value)
      return {};
    return to_valid_utf8(value);
  }
  return {};
}

nvidia_smi_result read_nvidia_smi(const std::string& program, std::chrono::milliseconds deadline) {
  nvidia_smi_result result;
  auto until = clock_type::now() + deadline;
  const std::vector<std::string> format = {"--format=csv,noheader,nounits"};

  // The GPU query; an older driver that does not know a field is asked
  // again without it. index, uuid, name and pci.bus_id are not optional.
  std::vector<std::string> fields = nvidia_smi_gpu_fields();
  run_outcome run;
  std::vector<std::string> dropped;
  while (true) {
    run = run_program(program, {"--query-gpu=" + join(fields, ','), format[0]}, until);
    if (!run.started || run.timed_out || run.overflow) {
      result.detail = describe_failure(program + " --query-gpu", run, deadline);
      return result;
    }
    auto rejected = rejected_field(run.out + run.err);
    auto at = std::find(fields.begin(), fields.end(), rejected);
    if (rejected.empty() || at == fields.end() || at - fields.begin() < 4)
      break;
    dropped.push_back(rejected);
    fields.erase(at);
  }

  // "Unable to determine the device handle ..." goes to stderr on some
  // drivers; it names a lost GPU either way.
  std::string text = run.out;
  for (auto line : nonblank_lines(run.err))
    if (contains(line, "Unable to determine the device handle for"))
      text += "\n" + std::string{line};
  auto parsed = parse_nvidia_smi_csv(text, fields);
  result.gpus = std::move(parsed.gpus);
  result.driver_version = parsed.driver_version;
  result.warnings = std::move(parsed.warnings);
  result.ok = parsed.ok;
  if (!result.ok) {
    if (run.exited && run.exit_code == 0)
      result.detail = program + " --query-gpu: " + parsed.detail;
    else
      result.detail = describe_failure(program + " --query-gpu", run, deadline);
    return result;
  }
  result.detail = parsed.detail;
  if (!(run.exited && run.exit_code == 0) && !result.gpus.empty())
    append_detail(result.detail, describe_failure(program + " --query-gpu", run, deadline));
  if (!dropped.empty())
    append_detail(result.detail, "the driver does not know " + join(dropped, ','));
  if (result.gpus.empty())
    return result;

  // Row remapping (Ampere and newer; older GPUs answer [N/A]).
  {
    auto remap = run_program(program,
                             {"--query-remapped-rows=gpu_uuid,remapped_rows.correctable,"
                              "remapped_rows.uncorrectable,remapped_rows.pending,"
                              "remapped_rows.failure",
                              format[0]},
                             until);
    if (remap.started && !remap.timed_out && !remap.overflow) {
      apply_nvidia_smi_remapped_rows(remap.out, result.gpus);
    } else {
      append_detail(result.detail, describe_failure(program + " --query-remapped-rows", remap,
                                                    deadline));
      if (remap.timed_out)
        for (auto& gpu : result.gpus)
          gpu.add_unknown_fields("row_remapping: nvidia-smi --query-remapped-rows timed out");
    }
  }

  // The CUDA version is only in the -q header.
  {
    auto query = run_program(program, {"-q", "-d", "COMPUTE"}, until);
    if (query.started && !query.timed_out && !query.overflow)
      result.cuda_version = parse_nvidia_smi_cuda_version(query.out);
    else
      append_detail(result.detail, describe_failure(program + " -q", query, deadline));
  }

  // The recovery action (issue 18, rule 6): only `-q` prints it
  // (runtime/gpu/nvidia_smi_query.hpp). A driver before r550 has no such
  // line: nothing is set, nothing is said.
  {
    auto query = run_program(program, {"-q"}, until);
    if (query.started && !query.timed_out && !query.overflow)
      apply_nvidia_smi_query(query.out, result.gpus);
    else if (query.timed_out)
      for (auto& gpu : result.gpus)
        gpu.add_unknown_fields("recovery_action: nvidia-smi -q timed out");
  }

  // NVLink link state; without it the links are unknown, never "down".
  // A clean answer with nothing in it is what a driver gives when no GPU
  // has NVLink (recorded: 580.159.04 on an H200 VM): no links, nothing
  // unknown.
  {
    auto links = run_program(program, {"nvlink", "-s"}, until);
    bool answered = links.started && !links.timed_out && !links.overflow;
    bool clean = answered && links.exited && links.exit_code == 0;
    bool no_nvlink = clean && nonblank_lines(links.out).empty();
    if (!no_nvlink)
      apply_nvidia_smi_nvlink_status(
          answered ? std::string_view{links.out} : std::string_view{}, result.gpus,
          clean ? "not listed by nvidia-smi nvlink -s"
                : describe_failure(program + " nvlink -s", links, deadline));
  }
  return result;
}

} // namespace astraeus
