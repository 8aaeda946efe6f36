#include "runtime/host/numa_facts.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "runtime/host/host_facts.hpp"
#include "runtime/host/sysfs_text.hpp"

namespace astraeus {

namespace {

namespace fs = std::filesystem;

// sysfs and /proc/stat files are small; the cap guards against a fixture
// that never ends.
constexpr size_t max_file_bytes = 1u << 20;

void warn(v1::HostFacts& facts, const std::string& rel, const std::string& what) {
  facts.add_warnings(rel + ": " + what);
}

// At most 40 characters of a file's text, control characters as '?', for a
// warning that names what was found.
std::string shown(std::string_view text) {
  std::string out = "\"";
  for (char c : trim(text).substr(0, 40))
    out.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
  return out + "\"";
}

/// A file that may be absent: nullopt without a warning when it is, with
/// one for another read error.
std::optional<std::string> read_optional(const std::string& prefix, const std::string& rel,
                                         v1::HostFacts& facts) {
  auto file = read_small_file(prefix + rel, max_file_bytes);
  if (file.error == ENOENT || file.error == ENOTDIR || file.error == EOPNOTSUPP)
    return std::nullopt;
  if (file.error != 0) {
    warn(facts, rel, std::string{"cannot read: "} + std::strerror(file.error));
    return std::nullopt;
  }
  return std::move(file.text);
}

/// Entries of a folder named `<stem><number>`, by ascending number.
std::vector<std::pair<uint64_t, std::string>> numbered(const std::string& dir,
                                                       std::string_view stem) {
  std::vector<std::pair<uint64_t, std::string>> out;
  std::error_code ec;
  fs::directory_iterator it{dir, ec};
  for (; !ec && it != fs::directory_iterator{}; it.increment(ec)) {
    auto name = it->path().filename().string();
    if (!starts_with(name, stem))
      continue;
    if (auto n = parse_u64(std::string_view{name}.substr(stem.size()));
        n && all_digits(std::string_view{name}.substr(stem.size())))
      out.emplace_back(*n, name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool looks_like_pci_address(std::string_view text) {
  // 0000:18:00.0
  return text.size() == 12 && text[4] == ':' && text[7] == ':' && text[10] == '.';
}

} // namespace

std::optional<node_memory> parse_node_meminfo(std::string_view text) {
  std::optional<uint64_t> total, free;
  for (auto line : nonblank_lines(text)) {
    auto colon = line.find(':');
    if (colon == std::string_view::npos)
      continue;
    auto key = line.substr(0, colon);
    auto value = trim(line.substr(colon + 1));
    bool is_total = key.size() >= 8 && key.substr(key.size() - 8) == "MemTotal";
    bool is_free = key.size() >= 7 && key.substr(key.size() - 7) == "MemFree";
    if (!is_total && !is_free)
      continue;
    if (value.size() < 3 || value.substr(value.size() - 2) != "kB")
      return std::nullopt;
    auto kb = parse_u64(value.substr(0, value.size() - 2));
    if (!kb || *kb > std::numeric_limits<uint64_t>::max() / 1024)
      return std::nullopt;
    (is_total ? total : free) = *kb * 1024;
  }
  if (!total || !free)
    return std::nullopt;
  return node_memory{*total, *free};
}

std::optional<std::vector<uint32_t>> cpu_list_members(std::string_view text) {
  if (!parse_cpu_list(text))
    return std::nullopt;
  std::vector<uint32_t> out;
  auto list = trim(text);
  if (list.empty())
    return out;
  for (auto piece : split(list, ',')) {
    auto dash = piece.find('-');
    auto first = parse_u64(piece.substr(0, dash));
    auto last = dash == std::string_view::npos ? first : parse_u64(piece.substr(dash + 1));
    for (uint64_t c = *first; c <= *last; ++c)
      out.push_back(static_cast<uint32_t>(c));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string format_cpu_list(std::vector<uint32_t> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1)
      ++j;
    if (!out.empty())
      out += ",";
    out += std::to_string(cpus[i]);
    if (j > i)
      out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

void read_numa_nodes(const std::string& root, v1::HostFacts& facts) {
  auto prefix = root_prefix(root);
  auto& cpu = *facts.mutable_cpu();
  cpu.clear_nodes();
  for (const auto& [id, name] : numbered(prefix + "/sys/devices/system/node", "node")) {
    std::string dir = "/sys/devices/system/node/" + name;
    std::error_code ec;
    if (!fs::is_directory(prefix + dir, ec) || id > UINT32_MAX)
      continue;
    auto* node = cpu.add_nodes();
    node->set_id(static_cast<uint32_t>(id));
    if (auto text = read_optional(prefix, dir + "/cpulist", facts)) {
      if (auto count = parse_cpu_list(*text)) {
        node->set_cpulist(std::string{trim(*text)});
        node->set_cpus(*count);
      } else {
        warn(facts, dir + "/cpulist", "not a CPU list: " + shown(*text));
      }
    } else {
      warn(facts, dir + "/cpulist", "missing");
    }
    if (auto text = read_optional(prefix, dir + "/meminfo", facts)) {
      if (auto memory = parse_node_meminfo(*text)) {
        node->set_memory_total_bytes(memory->total_bytes);
        node->set_memory_free_bytes(memory->free_bytes);
      } else {
        warn(facts, dir + "/meminfo",
             trim(*text).empty() ? "empty" : "no MemTotal and MemFree in kB (truncated?)");
      }
    } else {
      warn(facts, dir + "/meminfo", "missing");
    }
  }
}

void read_rdma_port_device(const std::string& root, const std::string& device,
                           v1::RdmaPort& port, v1::HostFacts& facts) {
  auto prefix = root_prefix(root);
  std::string dir = "/sys/class/infiniband/" + device + "/device";
  auto verbs = numbered(prefix + dir + "/infiniband_verbs", "uverbs");
  if (!verbs.empty())
    port.set_uverbs(verbs.front().second);
  port.set_numa_node(-1);
  if (auto text = read_optional(prefix, dir + "/numa_node", facts)) {
    auto node = parse_i64(*text);
    if (node && *node >= -1 && *node <= INT32_MAX)
      port.set_numa_node(static_cast<int32_t>(*node));
    else
      warn(facts, dir + "/numa_node", "not a NUMA node number: " + shown(*text));
  }
  if (auto text = read_optional(prefix, dir + "/uevent", facts)) {
    bool found = false;
    for (auto line : nonblank_lines(*text)) {
      if (starts_with(line, "PCI_SLOT_NAME=")) {
        auto address = line.substr(14);
        if (looks_like_pci_address(address)) {
          port.set_pci_address(std::string{address});
          found = true;
        }
      }
    }
    if (!found && text->find("PCI_SLOT_NAME=") != std::string::npos)
      warn(facts, dir + "/uevent", "PCI_SLOT_NAME is not a PCI address");
  }
  if (port.pci_address().empty()) {
    std::error_code ec;
    auto target = fs::canonical(prefix + dir, ec).filename().string();
    if (!ec && looks_like_pci_address(target))
      port.set_pci_address(target);
  }
}

void read_rdma_device_nodes(const std::string& root, v1::HostFacts& facts) {
  auto prefix = root_prefix(root);
  facts.clear_rdma_device_nodes();
  std::vector<std::string> names;
  for (const char* stem : {"uverbs", "umad", "issm"})
    for (const auto& entry : numbered(prefix + "/dev/infiniband", stem))
      names.push_back(entry.second);
  std::error_code ec;
  if (fs::exists(fs::symlink_status(prefix + "/dev/infiniband/rdma_cm", ec)))
    names.push_back("rdma_cm");
  for (const auto& name : names)
    facts.add_rdma_device_nodes("/dev/infiniband/" + name);
}

std::optional<cpu_times> parse_proc_stat(std::string_view text) {
  for (auto line : nonblank_lines(text)) {
    if (!starts_with(line, "cpu "))
      continue;
    std::vector<uint64_t> v;
    for (auto field : split(trim(line.substr(4)), ' ')) {
      if (field.empty())
        continue;
      auto n = parse_u64(field);
      if (!n)
        return std::nullopt;
      v.push_back(*n);
    }
    if (v.size() < 4)
      return std::nullopt;
    v.resize(std::max<size_t>(v.size(), 8), 0);
    // user nice system idle iowait irq softirq steal (guest is in user)
    cpu_times t;
    t.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    t.total = t.busy + v[3] + v[4];
    return t;
  }
  return std::nullopt;
}

std::optional<double> cpu_use_percent(const cpu_times& before, const cpu_times& after) {
  if (after.total <= before.total || after.busy < before.busy)
    return std::nullopt;
  double busy = static_cast<double>(after.busy - before.busy);
  double total = static_cast<double>(after.total - before.total);
  return std::clamp(100.0 * busy / total, 0.0, 100.0);
}

void cpu_use_meter::sample(const std::string& root, v1::HostFacts& facts) {
  auto prefix = root_prefix(root);
  auto file = read_small_file(prefix + "/proc/stat", max_file_bytes);
  std::optional<cpu_times> now;
  if (file.error != 0)
    warn(facts, "/proc/stat", file.error == ENOENT ? "missing"
                                                   : std::string{"cannot read: "} + std::strerror(file.error));
  else if (!(now = parse_proc_stat(file.text)))
    warn(facts, "/proc/stat", "no \"cpu \" line of tick counters (truncated?)");
  if (now && last_)
    if (auto use = cpu_use_percent(*last_, *now))
      facts.mutable_cpu()->set_use_percent(*use);
  last_ = now;
}

void place_gpus_on_the_only_numa_node(v1::HostFacts& facts) {
  if (facts.cpu().nodes_size() != 1)
    return;
  const int32_t only = static_cast<int32_t>(facts.cpu().nodes(0).id());
  for (auto& gpu : *facts.mutable_gpus()->mutable_gpus())
    if (!gpu.has_numa_node())
      gpu.set_numa_node(only);
}

} // namespace astraeus
