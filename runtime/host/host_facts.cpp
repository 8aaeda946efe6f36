#include "messages/gpu_read.hpp"
#include "runtime/host/host_facts.hpp"
#include "runtime/host/rdma_fabric.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <sys/statvfs.h>
#include <sys/utsname.h>

#include "runtime/host/numa_facts.hpp"
#include "runtime/host/sysfs_text.hpp"

namespace astraeus {

namespace {

namespace fs = std::filesystem;

// procfs and sysfs files are small; the cap only guards against a fixture
// or a broken file that never ends. /proc/cpuinfo of a 512-CPU machine is
// well under 1 MiB.
constexpr size_t max_file_bytes = 16u << 20;

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t pos = 0;
  while (true) {
    pos = line.find_first_not_of(" \t", pos);
    if (pos == std::string_view::npos)
      break;
    auto end = line.find_first_of(" \t", pos);
    fields.push_back(line.substr(pos, end == std::string_view::npos ? end : end - pos));
    if (end == std::string_view::npos)
      break;
    pos = end;
  }
  return fields;
}

// Orders names as people expect: nvme2n1 before nvme10n1, mlx5_2 before
// mlx5_10.
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    bool da = a[i] >= '0' && a[i] <= '9';
    bool db = b[j] >= '0' && b[j] <= '9';
    if (da && db) {
      size_t ei = i, ej = j;
      while (ei < a.size() && a[ei] >= '0' && a[ei] <= '9')
        ++ei;
      while (ej < b.size() && b[ej] >= '0' && b[ej] <= '9')
        ++ej;
      // Compare digit runs by value without converting: strip leading zeros,
      // then the longer run is larger.
      auto ra = std::string_view{a}.substr(i, ei - i);
      auto rb = std::string_view{b}.substr(j, ej - j);
      auto za = std::min(ra.find_first_not_of('0'), ra.size());
      auto zb = std::min(rb.find_first_not_of('0'), rb.size());
      ra.remove_prefix(za);
      rb.remove_prefix(zb);
      if (ra.size() != rb.size())
        return ra.size() < rb.size();
      if (ra != rb)
        return ra < rb;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j])
        return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::optional<FilesystemUsage> default_statfs(const std::string& path) {
  struct statvfs st{};
  if (::statvfs(path.c_str(), &st) != 0)
    return std::nullopt;
  FilesystemUsage usage;
  uint64_t frsize = st.f_frsize != 0 ? st.f_frsize : st.f_bsize;
  if (__builtin_mul_overflow(static_cast<uint64_t>(st.f_blocks), frsize, &usage.size_bytes)
      || __builtin_mul_overflow(static_cast<uint64_t>(st.f_bavail), frsize, &usage.free_bytes))
    return std::nullopt;
  return usage;
}

// A file's text for a warning: trimmed, at most 40 bytes, quoted, control
// characters shown as '?' so a binary file cannot garble logs.
std::string quote(std::string_view text) {
  auto shown = trim(text).substr(0, 40);
  std::string out = "\"";
  for (char c : shown)
    out.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
  return out + "\"";
}

std::string describe_error(int error) {
  if (error == ENOENT)
    return "missing";
  return std::string{"cannot read: "} + std::strerror(error);
}

// One reading pass over a root. Every path below is relative to the root
// and starts with '/', which is also how warnings name it.
class HostReader {
public:
  HostReader(const HostReaderOptions& opts, v1::HostFacts& facts)
      : opts_(opts), facts_(facts), prefix_(root_prefix(opts.root)) {}

  std::string full(std::string_view rel) const {
    return prefix_ + std::string{rel};
  }

  void warn(std::string_view rel, std::string_view what) {
    facts_.add_warnings(std::string{rel} + ": " + std::string{what});
  }

  /// A file every Linux has: absent or unreadable is a warning.
  std::optional<std::string> read_required(std::string_view rel) {
    auto file = read_small_file(full(rel), max_file_bytes);
    if (file.error != 0) {
      warn(rel, describe_error(file.error));
      return std::nullopt;
    }
    return std::move(file.text);
  }

  /// A file the kernel may lack (a feature not built, not supported by
  /// this device): absent is no warning, other read errors are.
  std::optional<std::string> read_optional(std::string_view rel) {
    auto file = read_small_file(full(rel), max_file_bytes);
    if (file.error == ENOENT || file.error == ENOTDIR || file.error == EOPNOTSUPP)
      return std::nullopt;
    if (file.error != 0) {
      warn(rel, describe_error(file.error));
      return std::nullopt;
    }
    return std::move(file.text);
  }

  small_file raw(std::string_view rel) const {
    return read_small_file(full(rel), max_file_bytes);
  }

  bool is_dir(std::string_view rel) const {
    std::error_code ec;
    return fs::is_directory(full(rel), ec);  // follows sysfs symlinks
  }

  bool entry_exists(std::string_view rel) const {
    std::error_code ec;
    // symlink_status: a sysfs `device` link counts even if it dangles.
    return fs::exists(fs::symlink_status(full(rel), ec));
  }

  /// Names in a directory, naturally sorted; empty when it is absent.
  std::vector<std::string> list(std::string_view rel) const {
    std::vector<std::string> names;
    std::error_code ec;
    fs::directory_iterator it{full(rel), ec};
    for (; !ec && it != fs::directory_iterator{}; it.increment(ec))
      names.push_back(it->path().filename().string());
    std::sort(names.begin(), names.end(), natural_less);
    return names;
  }

  void read_identity();
  void read_cpu();
  void read_memory();
  void read_pressure(std::string_view rel, v1::Pressure& out);
  void read_disks();
  void read_filesystems();
  void read_interfaces();
  void read_rdma();

private:
  const HostReaderOptions& opts_;
  v1::HostFacts& facts_;
  std::string prefix_;
};

void HostReader::read_identity() {
  if (auto text = read_required("/proc/sys/kernel/hostname")) {
    auto name = trim(*text);
    if (name.empty())
      warn("/proc/sys/kernel/hostname", "empty");
    else
      facts_.set_hostname(std::string{name});
  }
  if (auto text = read_required("/proc/sys/kernel/osrelease")) {
    auto release = trim(*text);
    if (release.empty())
      warn("/proc/sys/kernel/osrelease", "empty");
    else
      facts_.set_kernel(std::string{release});
  }
  // os-release may live only in /usr/lib (the spec's fallback); /etc is
  // normally a symlink to it.
  std::string_view os_path = "/etc/os-release";
  auto os_text = read_optional(os_path);
  if (!os_text) {
    os_path = "/usr/lib/os-release";
    os_text = read_optional(os_path);
  }
  if (!os_text)
    warn("/etc/os-release", "missing");
  else if (auto pretty = parse_os_release_pretty_name(*os_text))
    facts_.set_os(*pretty);
  else
    warn(os_path, "no PRETTY_NAME");
  if (auto text = read_required("/proc/uptime")) {
    if (auto seconds = parse_uptime(*text))
      facts_.set_uptime_seconds(*seconds);
    else
      warn("/proc/uptime", "not a number of seconds: " + quote(*text));
  }
}

void HostReader::read_cpu() {
  auto& cpu = *facts_.mutable_cpu();
  if (!opts_.architecture.empty()) {
    cpu.set_architecture(opts_.architecture);
  } else {
    struct utsname names{};
    if (::uname(&names) == 0)
      cpu.set_architecture(names.machine);
  }

  std::optional<CpuInfo> info;
  if (auto text = read_required("/proc/cpuinfo")) {
    info = parse_cpuinfo(*text);
    if (!info)
      warn("/proc/cpuinfo", "malformed");
  }
  if (info)
    cpu.set_model(info->model);

  // Online CPUs are what can run work; cpuinfo lists the same set but is
  // the fallback because it is large and arch-specific.
  bool have_online = false;
  if (auto text = read_optional("/sys/devices/system/cpu/online")) {
    auto count = parse_cpu_list(*text);
    if (count && *count > 0) {
      cpu.set_logical_cpus(*count);
      have_online = true;
    } else {
      warn("/sys/devices/system/cpu/online",
           "not a CPU list: " + quote(*text));
    }
  }
  if (!have_online && info)
    cpu.set_logical_cpus(info->processors);

  if (info && info->physical_cores > 0) {
    cpu.set_physical_cores(info->physical_cores);
    cpu.set_sockets(info->sockets);
  } else {
    // ARM and some VMs do not say in cpuinfo; sysfs topology does.
    std::set<std::pair<int64_t, int64_t>> cores;
    std::set<int64_t> packages;
    bool complete = false;
    for (const auto& name : list("/sys/devices/system/cpu")) {
      if (!starts_with(name, "cpu") || !all_digits(std::string_view{name}.substr(3)))
        continue;
      std::string topo = "/sys/devices/system/cpu/" + name + "/topology";
      if (!is_dir(topo))
        continue;  // offline CPUs have no topology
      auto package_text = read_optional(topo + "/physical_package_id");
      auto core_text = read_optional(topo + "/core_id");
      auto package = package_text ? parse_i64(*package_text) : std::nullopt;
      auto core = core_text ? parse_i64(*core_text) : std::nullopt;
      if (package_text && !package)
        warn(topo + "/physical_package_id", "not a number");
      if (core_text && !core)
        warn(topo + "/core_id", "not a number");
      if (!package || !core) {
        complete = false;
        break;
      }
      packages.insert(*package);
      cores.emplace(*package, *core);
      complete = true;
    }
    if (complete) {
      cpu.set_physical_cores(static_cast<uint32_t>(cores.size()));
      cpu.set_sockets(static_cast<uint32_t>(packages.size()));
    }
  }

  uint32_t nodes = 0;
  for (const auto& name : list("/sys/devices/system/node"))
    if (starts_with(name, "node") && all_digits(std::string_view{name}.substr(4))
        && is_dir("/sys/devices/system/node/" + name))
      ++nodes;
  cpu.set_numa_nodes(nodes);
}

void HostReader::read_pressure(std::string_view rel, v1::Pressure& out) {
  out.set_present(false);
  // Absent (kernel without PSI) or EOPNOTSUPP (booted with psi=0): no PSI,
  // not a fault.
  auto text = read_optional(rel);
  if (!text)
    return;
  if (!parse_pressure(*text, out))
    warn(rel, trim(*text).empty() ? "empty" : "malformed pressure text");
}

void HostReader::read_memory() {
  auto& memory = *facts_.mutable_memory();
  if (auto text = read_required("/proc/meminfo")) {
    if (!parse_meminfo(*text, memory))
      warn("/proc/meminfo", trim(*text).empty() ? "empty" : "malformed or truncated");
  }
  read_pressure("/proc/pressure/memory", *memory.mutable_pressure());
  read_pressure("/proc/pressure/io", *facts_.mutable_io_pressure());
  read_pressure("/proc/pressure/cpu", *facts_.mutable_cpu_pressure());
}

void HostReader::read_disks() {
  for (const auto& name : list("/sys/block")) {
    // Loop, RAM and compressed-RAM devices and optical drives hold no data
    // the scheduler could place by.
    if (starts_with(name, "loop") || starts_with(name, "ram") || starts_with(name, "zram")
        || starts_with(name, "sr"))
      continue;
    std::string dir = "/sys/block/" + name;
    if (!is_dir(dir))
      continue;
    v1::Disk disk;
    disk.set_name(name);

    if (auto text = read_required(dir + "/size")) {
      auto sectors = parse_u64(*text);
      uint64_t bytes = 0;
      // `size` is in 512-byte sectors whatever the device's block size.
      if (!sectors || __builtin_mul_overflow(*sectors, uint64_t{512}, &bytes))
        warn(dir + "/size", "not a sector count: " + quote(*text));
      else
        disk.set_size_bytes(bytes);
    }
    auto read_flag = [&](const std::string& rel) -> bool {
      auto text = read_optional(rel);
      if (!text)
        return false;
      auto value = parse_u64(*text);
      if (!value || *value > 1) {
        warn(rel, "not 0 or 1");
        return false;
      }
      return *value == 1;
    };
    disk.set_rotational(read_flag(dir + "/queue/rotational"));
    disk.set_removable(read_flag(dir + "/removable"));
    if (auto text = read_optional(dir + "/device/model"))
      disk.set_model(std::string{trim(*text)});

    if (starts_with(name, "nvme")) {
      disk.set_kind("nvme");
    } else if (starts_with(name, "md")) {
      disk.set_kind("raid");
      if (auto text = read_required(dir + "/md/level"))
        disk.set_raid_level(std::string{trim(*text)});
      if (auto text = read_required(dir + "/md/array_state"))
        disk.set_raid_state(std::string{trim(*text)});
      // array_state says "clean" for an array that lost a member; md/degraded
      // (absent for raid0) counts the missing ones, which is what a user
      // needs to see.
      if (auto text = read_optional(dir + "/md/degraded")) {
        auto missing = parse_u64(*text);
        if (!missing)
          warn(dir + "/md/degraded", "not a number");
        else if (*missing > 0)
          disk.set_raid_state("degraded");
      }
    } else if (starts_with(name, "vd") || starts_with(name, "xvd") || starts_with(name, "dm-")) {
      disk.set_kind("virtual");
    } else {
      disk.set_kind(disk.rotational() ? "hdd" : "ssd");
    }
    *facts_.add_disks() = std::move(disk);
  }
}

void HostReader::read_filesystems() {
  std::string_view path = "/proc/self/mounts";
  auto file = raw(path);
  if (file.error != 0) {
    path = "/proc/mounts";
    file = raw(path);
  }
  if (file.error != 0) {
    warn(path, describe_error(file.error));
    return;
  }
  size_t malformed = 0;
  auto mounts = parse_mounts(file.text, &malformed);
  if (malformed > 0)
    warn(path, std::to_string(malformed) + " malformed line(s) skipped");
  auto statfs = opts_.statfs ? opts_.statfs : default_statfs;
  for (const auto& mount : mounts) {
    auto kind = classify_filesystem(mount.type);
    if (kind == FilesystemClass::pseudo)
      continue;
    v1::Filesystem filesystem;
    filesystem.set_mount_point(mount.mount_point);
    filesystem.set_device(mount.device);
    filesystem.set_type(mount.type);
    filesystem.set_shared(kind == FilesystemClass::shared);
    bool read_only = false;
    std::string_view options = mount.options;
    while (!options.empty()) {
      auto comma = options.find(',');
      if (options.substr(0, comma) == "ro")
        read_only = true;
      if (comma == std::string_view::npos)
        break;
      options.remove_prefix(comma + 1);
    }
    filesystem.set_read_only(read_only);
    std::optional<FilesystemUsage> usage;
    try {
      auto point = mount.mount_point;
      if (point.empty() || point.front() != '/')
        point.insert(point.begin(), '/');  // never let garbage escape the root
      usage = statfs(full(point));
    } catch (const std::exception&) {
      usage = std::nullopt;  // an injected statfs must not take the report down
    }
    if (usage) {
      filesystem.set_size_bytes(usage->size_bytes);
      filesystem.set_free_bytes(usage->free_bytes);
    } else {
      warn(mount.mount_point, "statfs failed; size unknown");
    }
    *facts_.add_filesystems() = std::move(filesystem);
  }
}

void HostReader::read_interfaces() {
  for (const auto& name : list("/sys/class/net")) {
    std::string dir = "/sys/class/net/" + name;
    if (!is_dir(dir))
      continue;  // bonding_masters is a file here
    v1::NetworkInterface interface;
    interface.set_name(name);
    if (auto text = read_required(dir + "/address"))
      interface.set_mac_address(std::string{trim(*text)});
    if (auto text = read_required(dir + "/operstate"))
      interface.set_operstate(std::string{trim(*text)});
    if (auto text = read_required(dir + "/mtu")) {
      auto mtu = parse_u64(*text);
      if (!mtu || *mtu > UINT32_MAX)
        warn(dir + "/mtu", "not an MTU: " + quote(*text));
      else
        interface.set_mtu(static_cast<uint32_t>(*mtu));
    }
    interface.set_speed_mbps(-1);
    auto speed_file = raw(dir + "/speed");
    // A down or virtual link answers EINVAL (or the file is absent): speed
    // unknown, which is normal, not a fault.
    if (speed_file.error == 0) {
      auto speed = parse_i64(speed_file.text);
      if (!speed)
        warn(dir + "/speed", "not a number: " + quote(speed_file.text));
      // Some drivers report unknown as 65535 or (u32)-1 rather than -1.
      else if (*speed > 0 && *speed != 65535 && *speed != 4294967295)
        interface.set_speed_mbps(*speed);
    } else if (speed_file.error != EINVAL && speed_file.error != ENOENT
               && speed_file.error != EOPNOTSUPP && speed_file.error != ENODEV) {
      warn(dir + "/speed", describe_error(speed_file.error));
    }
    if (auto text = read_required(dir + "/type")) {
      auto type = parse_u64(*text);
      if (!type)
        warn(dir + "/type", "not a number");
      else if (*type == 1)
        interface.set_kind("ether");
      else if (*type == 772)
        interface.set_kind("loopback");
      else if (*type == 32)
        interface.set_kind("infiniband");
      else
        interface.set_kind("other");
    }
    // Physical interfaces link to their bus device; veth, bridges, bonds and
    // lo have none.
    interface.set_virtual_(!entry_exists(dir + "/device"));
    *facts_.add_interfaces() = std::move(interface);
  }
}

void HostReader::read_rdma() {
  for (const auto& device : list("/sys/class/infiniband")) {
    std::string dir = "/sys/class/infiniband/" + device;
    if (!is_dir(dir))
      continue;
    auto netdevs = list(dir + "/device/net");
    std::vector<std::pair<uint32_t, std::string>> ports;
    for (const auto& name : list(dir + "/ports")) {
      auto number = parse_u64(name);
      if (!number || *number == 0 || *number > UINT32_MAX)
        continue;
      ports.emplace_back(static_cast<uint32_t>(*number), name);
    }
    std::sort(ports.begin(), ports.end());
    for (const auto& [number, name] : ports) {
      std::string port_dir = dir + "/ports/" + name;
      v1::RdmaPort port;
      port.set_device(device);
      port.set_port(number);
      if (auto text = read_required(port_dir + "/state")) {
        if (auto state = parse_ib_state(*text))
          port.set_state(*state);
        else
          warn(port_dir + "/state", "not \"<n>: <STATE>\": " + quote(*text));
      }
      if (auto text = read_required(port_dir + "/phys_state")) {
        if (auto state = parse_ib_state(*text))
          port.set_phys_state(*state);
        else
          warn(port_dir + "/phys_state",
               "not \"<n>: <State>\": " + quote(*text));
      }
      if (auto text = read_required(port_dir + "/rate")) {
        port.set_rate(std::string{trim(*text)});
        if (auto rate = parse_ib_rate(*text))
          port.set_rate_gbps(*rate);
        else
          warn(port_dir + "/rate", "not \"<n> Gb/sec ...\": " + quote(*text));
      }
      if (auto text = read_required(port_dir + "/link_layer"))
        port.set_link_layer(std::string{trim(*text)});
      if (!netdevs.empty()) {
        // One PCI function per port is the norm (mlx5); where a function
        // has several netdevs, dev_port (0-based) says which is this port.
        std::string chosen = netdevs.front();
        if (netdevs.size() > 1) {
          for (const auto& netdev : netdevs) {
            auto text = read_optional(dir + "/device/net/" + netdev + "/dev_port");
            auto dev_port = text ? parse_u64(*text) : std::nullopt;
            if (dev_port && *dev_port + 1 == number) {
              chosen = netdev;
              break;
            }
          }
        }
        port.set_netdev(chosen);
      }
      std::vector<std::string> fabric_warnings;  // issue 12: GID, LID, NIC link
      read_rdma_port_fabric(prefix_, dir, port_dir, port, fabric_warnings);
      for (auto& w : fabric_warnings)
        facts_.add_warnings(std::move(w));
      read_rdma_port_device(opts_.root, device, port, facts_);
      *facts_.add_rdma_ports() = std::move(port);
    }
  }
}

// A pressure line's averages: "avg10=1.00 avg60=2.00 avg300=3.00 total=4".
bool parse_pressure_line(const std::vector<std::string_view>& fields, double (&avg)[3]) {
  bool seen[3] = {false, false, false};
  for (size_t i = 1; i < fields.size(); ++i) {
    auto eq = fields[i].find('=');
    if (eq == std::string_view::npos)
      return false;
    auto key = fields[i].substr(0, eq);
    auto value = fields[i].substr(eq + 1);
    int slot = key == "avg10" ? 0 : key == "avg60" ? 1 : key == "avg300" ? 2 : -1;
    if (slot >= 0) {
      auto number = parse_double(value);
      if (!number || *number < 0 || *number > 100)
        return false;
      avg[slot] = *number;
      seen[slot] = true;
    } else if (key == "total") {
      if (!parse_u64(value))
        return false;
    }
    // Other keys: a newer kernel's addition, harmless.
  }
  return seen[0] && seen[1] && seen[2];
}

} // namespace

bool parse_pressure(std::string_view text, v1::Pressure& out) {
  double some[3] = {0, 0, 0};
  double full[3] = {0, 0, 0};
  bool have_some = false;
  for (auto line : split_lines(text)) {
    auto fields = split_fields(line);
    if (fields.empty())
      continue;
    if (fields[0] == "some" && !have_some) {
      if (!parse_pressure_line(fields, some))
        return false;
      have_some = true;
    } else if (fields[0] == "full") {
      if (!parse_pressure_line(fields, full))
        return false;
    } else {
      return false;
    }
  }
  if (!have_some)
    return false;
  out.set_present(true);
  out.set_some_avg10(some[0]);
  out.set_some_avg60(some[1]);
  out.set_some_avg300(some[2]);
  out.set_full_avg10(full[0]);
  out.set_full_avg60(full[1]);
  out.set_full_avg300(full[2]);
  return true;
}

bool parse_meminfo(std::string_view text, v1::Memory& out) {
  std::optional<uint64_t> total, available, swap_total, swap_free;
  for (auto line : split_lines(text)) {
    if (trim(line).empty())
      continue;
    auto colon = line.find(':');
    if (colon == std::string_view::npos)
      return false;  // a line cut short
    auto key = line.substr(0, colon);
    std::optional<uint64_t>* slot = key == "MemTotal"       ? &total
                                    : key == "MemAvailable" ? &available
                                    : key == "SwapTotal"    ? &swap_total
                                    : key == "SwapFree"     ? &swap_free
                                                            : nullptr;
    if (slot == nullptr)
      continue;
    auto fields = split_fields(line.substr(colon + 1));
    if (fields.size() != 2 || fields[1] != "kB")
      return false;
    auto kb = parse_u64(fields[0]);
    uint64_t bytes = 0;
    if (!kb || __builtin_mul_overflow(*kb, uint64_t{1024}, &bytes))
      return false;
    *slot = bytes;
  }
  // MemAvailable exists since Linux 3.14; without it the file was cut off.
  if (!total || !available)
    return false;
  out.set_total_bytes(*total);
  out.set_available_bytes(*available);
  out.set_swap_total_bytes(swap_total.value_or(0));
  out.set_swap_free_bytes(swap_free.value_or(0));
  return true;
}

std::optional<uint32_t> parse_cpu_list(std::string_view text) {
  constexpr uint64_t max_cpu = uint64_t{1} << 31;
  text = trim(text);
  if (text.empty())
    return 0;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  while (true) {
    auto comma = text.find(',');
    auto item = text.substr(0, comma);
    auto dash = item.find('-');
    auto first = parse_u64(item.substr(0, dash));
    auto last = dash == std::string_view::npos ? first : parse_u64(item.substr(dash + 1));
    // parse_u64 trims, so reject inner spaces here: "0 -3" is not cpulist.
    if (!first || !last || *last < *first || *last >= max_cpu
        || item.find_first_of(text_whitespace) != std::string_view::npos)
      return std::nullopt;
    ranges.emplace_back(*first, *last);
    if (comma == std::string_view::npos)
      break;
    text.remove_prefix(comma + 1);
  }
  // Count distinct CPUs even if ranges overlap or come out of order.
  std::sort(ranges.begin(), ranges.end());
  uint64_t count = 0;
  uint64_t next = 0;  // first CPU not yet counted
  for (auto [first, last] : ranges) {
    first = std::max(first, next);
    if (last >= first)
      count += last - first + 1;
    next = std::max(next, last + 1);
  }
  return static_cast<uint32_t>(count);  // <= 2^31
}

std::optional<double> parse_ib_rate(std::string_view text) {
  auto fields = split_fields(trim(text));
  if (fields.size() < 2 || fields[1] != "Gb/sec")
    return std::nullopt;
  auto rate = parse_double(fields[0]);
  if (!rate || *rate < 0)
    return std::nullopt;
  return rate;
}

std::optional<std::string> parse_ib_state(std::string_view text) {
  text = trim(text);
  auto colon = text.find(':');
  if (colon == std::string_view::npos || !all_digits(text.substr(0, colon)))
    return std::nullopt;
  auto name = trim(text.substr(colon + 1));
  if (name.empty() || name.find_first_of(text_whitespace) != std::string_view::npos)
    return std::nullopt;
  return std::string{name};
}

std::optional<std::string> parse_os_release_pretty_name(std::string_view text) {
  std::optional<std::string> result;
  for (auto line : split_lines(text)) {
    line = trim(line);
    if (!starts_with(line, "PRETTY_NAME="))
      continue;
    auto value = line.substr(std::string_view{"PRETTY_NAME="}.size());
    std::string name;
    // Shell-style quoting: strip one pair of matching quotes; inside double
    // quotes a backslash escapes the next character.
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'')
        && value.back() == value.front()) {
      char quote = value.front();
      value = value.substr(1, value.size() - 2);
      for (size_t i = 0; i < value.size(); ++i) {
        if (quote == '"' && value[i] == '\\' && i + 1 < value.size())
          ++i;
        name.push_back(value[i]);
      }
    } else {
      name = std::string{value};
    }
    if (!trim(name).empty())
      result = std::string{trim(name)};  // last assignment wins, as in a shell
  }
  return result;
}

std::optional<uint64_t> parse_uptime(std::string_view text) {
  auto fields = split_fields(trim(text));
  if (fields.empty())
    return std::nullopt;
  auto seconds = parse_double(fields[0]);
  // 1.8e19 is the largest double under 2^64.
  if (!seconds || *seconds < 0 || *seconds >= 18446744073709549568.0)
    return std::nullopt;
  return static_cast<uint64_t>(*seconds);
}

std::optional<CpuInfo> parse_cpuinfo(std::string_view text) {
  CpuInfo info;
  std::string model_name, hardware, implementer, part;
  std::set<std::pair<uint64_t, uint64_t>> cores;
  std::set<uint64_t> packages;
  bool topology_complete = true;
  // Per processor block: physical id and core id seen so far.
  bool in_block = false;
  std::optional<uint64_t> package, core;
  auto close_block = [&] {
    if (!in_block)
      return;
    if (package && core) {
      packages.insert(*package);
      cores.emplace(*package, *core);
    } else {
      topology_complete = false;
    }
    in_block = false;
    package.reset();
    core.reset();
  };
  for (auto line : split_lines(text)) {
    if (trim(line).empty())
      continue;
    auto colon = line.find(':');
    if (colon == std::string_view::npos)
      return std::nullopt;
    auto key = trim(line.substr(0, colon));
    auto value = trim(line.substr(colon + 1));
    if (key == "processor") {
      // 32-bit ARM also has "Processor : ARMv7 ..." (capital P), which is
      // not an entry; lower-case "processor" always carries a number.
      if (!parse_u64(value))
        return std::nullopt;
      close_block();
      in_block = true;
      ++info.processors;
    } else if (key == "physical id") {
      package = parse_u64(value);
      if (!package)
        return std::nullopt;
    } else if (key == "core id") {
      core = parse_u64(value);
      if (!core)
        return std::nullopt;
    } else if (key == "model name" && model_name.empty()) {
      model_name = std::string{value};
    } else if (key == "Hardware" && hardware.empty()) {
      hardware = std::string{value};
    } else if (key == "CPU implementer" && implementer.empty()) {
      implementer = std::string{value};
    } else if (key == "CPU part" && part.empty()) {
      part = std::string{value};
    }
  }
  close_block();
  if (info.processors == 0)
    return std::nullopt;
  if (topology_complete) {
    info.physical_cores = static_cast<uint32_t>(cores.size());
    info.sockets = static_cast<uint32_t>(packages.size());
  }
  if (!model_name.empty()) {
    info.model = model_name;
  } else if (!hardware.empty()) {
    info.model = hardware;
  } else if (!part.empty()) {
    // Arm Ltd. (0x41) cores seen in GPU servers: Grace is Neoverse-V2,
    // Ampere Altra is Neoverse-N1.
    static const std::map<std::string, std::string> arm_parts = {
      {"0xd03", "Cortex-A53"},  {"0xd08", "Cortex-A72"},  {"0xd0b", "Cortex-A76"},
      {"0xd0c", "Neoverse-N1"}, {"0xd40", "Neoverse-V1"}, {"0xd49", "Neoverse-N2"},
      {"0xd4f", "Neoverse-V2"}, {"0xd84", "Neoverse-V3"}, {"0xd8e", "Neoverse-N3"},
    };
    auto known = arm_parts.find(part);
    if (implementer == "0x41" && known != arm_parts.end())
      info.model = "ARM " + known->second;
    else
      info.model = "CPU part " + part;
  }
  return info;
}

std::string decode_mount_escapes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size()) {
      auto digits = text.substr(i + 1, 3);
      bool octal = std::all_of(digits.begin(), digits.end(),
                                  [](char c) { return c >= '0' && c <= '7'; });
      if (octal) {
        int value = (digits[0] - '0') * 64 + (digits[1] - '0') * 8 + (digits[2] - '0');
        if (value <= 0xff) {
          out.push_back(static_cast<char>(value));
          i += 3;
          continue;
        }
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

std::vector<MountEntry> parse_mounts(std::string_view text, size_t* malformed_lines) {
  std::vector<MountEntry> mounts;
  std::unordered_map<std::string, size_t> index;  // mount point -> position
  size_t malformed = 0;
  for (auto line : split_lines(text)) {
    auto fields = split_fields(line);
    if (fields.empty())
      continue;
    if (fields.size() < 4) {
      ++malformed;
      continue;
    }
    MountEntry entry{decode_mount_escapes(fields[0]), decode_mount_escapes(fields[1]),
                     decode_mount_escapes(fields[2]), decode_mount_escapes(fields[3])};
    auto found = index.find(entry.mount_point);
    if (found != index.end()) {
      // Mounted over: the earlier one is hidden. Drop it and keep order.
      mounts.erase(mounts.begin() + static_cast<std::ptrdiff_t>(found->second));
      for (auto& [point, position] : index)
        if (position > found->second)
          --position;
    }
    index[entry.mount_point] = mounts.size();
    mounts.push_back(std::move(entry));
  }
  if (malformed_lines != nullptr)
    *malformed_lines = malformed;
  return mounts;
}

FilesystemClass classify_filesystem(std::string_view type) {
  static const std::set<std::string_view> local = {
    "ext2", "ext3",  "ext4",  "xfs",      "btrfs",    "zfs", "f2fs",     "vfat",
    "exfat", "ntfs", "ntfs3", "jfs",      "reiserfs", "bcachefs", "msdos", "hfsplus",
    // A VM's share from its host: storage on this machine as far as the
    // scheduler can tell.
    "virtiofs", "9p",
  };
  static const std::set<std::string_view> shared = {
    "nfs",    "nfs4",   "cifs",    "smb3",      "smbfs",      "lustre", "gpfs",
    "beegfs", "ceph",   "cephfs",  "glusterfs", "wekafs",     "orangefs", "pvfs2",
    "afs",    "ocfs2",  "gfs2",    "panfs",     "quobyte",    "vast",
    // FUSE clients of network storage; other FUSE mounts (gvfs, lxcfs,
    // portal, snapfuse) are not storage to place data on.
    "fuse.glusterfs", "fuse.sshfs", "fuse.ceph-fuse", "fuse.ceph", "fuse.juicefs",
    "fuse.s3fs", "fuse.gcsfuse", "fuse.rclone", "fuse.mfs", "fuse.lizardfs",
    "fuse.blobfuse", "fuse.blobfuse2", "fuse.goofys", "fuse.mountpoint-s3",
    "fuse.weka", "fuse.quobyte", "fuse.beegfs", "fuse.cvmfs2", "fuse.alluxio-fuse",
    "fuse.geesefs", "fuse.seaweedfs",
  };
  if (local.count(type) > 0)
    return FilesystemClass::local;
  if (shared.count(type) > 0)
    return FilesystemClass::shared;
  return FilesystemClass::pseudo;
}


namespace {

// Every string field, however deep, made valid UTF-8: one pass here rather
// than a call at each of the many places a file's text becomes a field.
void make_strings_valid_utf8(google::protobuf::Message& message) {
  using google::protobuf::FieldDescriptor;
  const auto* descriptor = message.GetDescriptor();
  const auto* reflection = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      if (field->type() == FieldDescriptor::TYPE_BYTES)
        continue;
      if (field->is_repeated()) {
        for (int k = 0; k < reflection->FieldSize(message, field); ++k)
          reflection->SetRepeatedString(&message, field, k,
                                        to_valid_utf8(reflection->GetRepeatedString(message, field, k)));
      } else {
        reflection->SetString(&message, field, to_valid_utf8(reflection->GetString(message, field)));
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (field->is_repeated()) {
        for (int k = 0; k < reflection->FieldSize(message, field); ++k)
          make_strings_valid_utf8(*reflection->MutableRepeatedMessage(&message, field, k));
      } else if (reflection->HasField(message, field)) {
        make_strings_valid_utf8(*reflection->MutableMessage(&message, field));
      }
    }
  }
}

} // namespace

v1::HostFacts read_host_facts(const HostReaderOptions& opts) {
  v1::HostFacts facts;
  HostReader reader{opts, facts};
  // Each part stands alone: an unexpected exception (out of memory, a bug)
  // in one costs only that part, never the whole report.
  auto guarded = [&](std::string_view part, auto&& read) {
    try {
      read();
    } catch (const std::exception& e) {
      facts.add_warnings(std::string{part} + ": reader failed: " + e.what());
    } catch (...) {
      facts.add_warnings(std::string{part} + ": reader failed");
    }
  };
  guarded("identity", [&] { reader.read_identity(); });
  guarded("/proc/cpuinfo", [&] { reader.read_cpu(); });
  guarded("/sys/devices/system/node", [&] { read_numa_nodes(opts.root, facts); });
  guarded("/proc/meminfo", [&] { reader.read_memory(); });
  guarded("/sys/block", [&] { reader.read_disks(); });
  guarded("/proc/self/mounts", [&] { reader.read_filesystems(); });
  guarded("/sys/class/net", [&] { reader.read_interfaces(); });
  guarded("/sys/class/infiniband", [&] { reader.read_rdma(); });
  guarded("/dev/infiniband", [&] { read_rdma_device_nodes(opts.root, facts); });
  // GPUs are not host facts: the agent puts GPU discovery's section here
  // (runtime/gpu/gpu_discovery.hpp). Until it does, this is no read at all.
  set_read_as(*facts.mutable_gpus(), gpu_read_as::pending);
  facts.mutable_gpus()->set_detail("GPUs are read by GPU discovery, not with the host facts");
  make_strings_valid_utf8(facts);
  return facts;
}

} // namespace astraeus
