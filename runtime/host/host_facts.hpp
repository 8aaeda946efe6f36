#pragma once
/// @file
/// The agent's host-facts reader: CPU, memory, pressure, disks,
/// filesystems, network interfaces and RDMA ports, read from procfs, sysfs
/// and /etc under a configurable root so tests run the same code on fixture
/// trees (see DESIGN.md, "Host access, and how tests reach it").
///
/// Nothing here throws or fails as a whole: a file that cannot be read or
/// parsed leaves its fields unknown and adds a line to `warnings`.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "messages/astraeus.pb.h"
#include "runtime/host/sysfs_text.hpp"

namespace astraeus {

/// Result of statvfs for one mount point, in bytes.
struct FilesystemUsage {
  uint64_t size_bytes = 0;  // f_blocks * f_frsize
  uint64_t free_bytes = 0;  // f_bavail * f_frsize: free to an unprivileged user
};

/// Options of the host reader.
struct HostReaderOptions {
  /// Prefix for every /proc, /sys and /etc path; "/" reads this machine.
  std::string root = "/";
  /// statvfs of a mount point; the path given is root-prefixed. Returns
  /// nullopt when the mount point cannot be queried. Empty: ::statvfs.
  /// Tests inject a fake. Note that ::statvfs blocks while an NFS server
  /// does not answer.
  std::function<std::optional<FilesystemUsage>(const std::string& path)> statfs;
  /// uname machine, e.g. "x86_64"; empty: from uname(2).
  std::string architecture;
};

/// Reads every host fact the agent reports. Never throws, never fails as a
/// whole: a missing, truncated or garbage file leaves its fields unknown
/// (0 / empty / -1 as the proto says) and adds one line
/// "<path relative to root, e.g. /proc/meminfo>: <what was wrong>" to
/// facts.warnings(). A file that is simply absent because the kernel lacks
/// the feature (no /proc/pressure, no /sys/class/infiniband, a disk without
/// device/model) is not a warning. GPUs are not read here: `gpus` is always
/// read_as "pending" with the detail "GPUs are read by GPU discovery, not
/// with the host facts"; the agent replaces it with gpu_discovery's section
/// (runtime/gpu/gpu_discovery.hpp).
v1::HostFacts read_host_facts(const HostReaderOptions& opts);

/// Parses one /proc/pressure/<resource> file's text:
/// "some avg10=0.12 avg60=0.05 avg300=0.01 total=123\nfull avg10=...".
/// The "full" line is optional (cpu lacks it on older kernels; its fields
/// are then 0). Averages are percent, 0..100. On success sets present=true
/// and returns true; returns false and leaves `out` untouched on malformed
/// text (no "some" line, an unknown line, a non-numeric or out-of-range
/// value).
bool parse_pressure(std::string_view text, v1::Pressure& out);

/// Parses "/proc/meminfo" text into out: total_bytes (MemTotal),
/// available_bytes (MemAvailable), swap_total_bytes, swap_free_bytes
/// (kB in the file, bytes in `out`; absent swap lines leave 0). Does not
/// touch `out.pressure`. Returns false and leaves `out` untouched on
/// malformed text: MemTotal or MemAvailable missing, a line without ':', a
/// non-numeric or overflowing value of those four fields.
bool parse_meminfo(std::string_view text, v1::Memory& out);

/// Parses a CPU list like "0-3,8-11" (sysfs cpulist format, trailing
/// whitespace allowed) and returns the count of distinct CPUs (8 here);
/// an empty list counts 0. nullopt when malformed: a non-number, a
/// descending range "5-3", an empty element "0,,2", a number over 2^31.
std::optional<uint32_t> parse_cpu_list(std::string_view text);

/// Parses an InfiniBand rate text "400 Gb/sec (4X NDR)" -> 400.0,
/// "2.5 Gb/sec (1X SDR)" -> 2.5, in Gb/s. nullopt if malformed: no leading
/// non-negative finite number, or a unit other than "Gb/sec".
std::optional<double> parse_ib_rate(std::string_view text);

/// Parses an InfiniBand port state text "4: ACTIVE" -> "ACTIVE" (also
/// phys_state "5: LinkUp" -> "LinkUp"). nullopt unless it is
/// "<number>: <name>".
std::optional<std::string> parse_ib_state(std::string_view text);

/// /etc/os-release PRETTY_NAME with its quotes and escapes removed
/// ("Debian GNU/Linux 12 (bookworm)"); nullopt when there is none or it is
/// empty.
std::optional<std::string> parse_os_release_pretty_name(std::string_view text);

/// /proc/uptime "306.80 561.67" -> 306 whole seconds; nullopt when the
/// first field is not a non-negative number that fits in 64 bits.
std::optional<uint64_t> parse_uptime(std::string_view text);

/// What /proc/cpuinfo says about the CPUs.
struct CpuInfo {
  /// "model name" (x86, some ARM), else "Hardware" (32-bit ARM), else the
  /// ARM "CPU part", named when known ("ARM Neoverse-V2") or raw
  /// ("CPU part 0xd4f").
  std::string model;
  /// Count of "processor" entries.
  uint32_t processors = 0;
  /// Distinct ("physical id", "core id") pairs; 0 when any processor lacks
  /// either (ARM, some VMs): then sysfs topology is the source.
  uint32_t physical_cores = 0;
  /// Distinct "physical id" values; 0 when any processor lacks it.
  uint32_t sockets = 0;
};

/// Parses /proc/cpuinfo text. nullopt when malformed: no "processor"
/// entry, a non-empty line without ':', or a non-numeric processor,
/// physical id or core id.
std::optional<CpuInfo> parse_cpuinfo(std::string_view text);

/// Decodes the octal escapes the kernel writes in /proc/*/mounts
/// ("\040" space, "\011" tab, "\012" newline, "\134" backslash); text that
/// is not a valid escape is kept as it is.
std::string decode_mount_escapes(std::string_view text);

/// One line of /proc/self/mounts, escapes decoded.
struct MountEntry {
  std::string device;       // "/dev/md0", "nas01:/home"
  std::string mount_point;  // "/raid"
  std::string type;         // "ext4", "nfs4"
  std::string options;      // "rw,relatime"
};

/// Parses /proc/self/mounts text: one entry per mount point, where a later
/// mount over the same point replaces the earlier (only the last is
/// visible), in the order the surviving mounts appear. Lines with fewer
/// than four fields are skipped and counted in `*malformed_lines` when
/// given.
std::vector<MountEntry> parse_mounts(std::string_view text, size_t* malformed_lines = nullptr);

/// How the reader treats a filesystem type.
enum class FilesystemClass {
  pseudo,  // not storage (proc, tmpfs, cgroup2, overlay, squashfs, ...): skipped
  local,   // on this machine's disks (ext4, xfs, btrfs, zfs, vfat, ...)
  shared,  // a network filesystem (nfs4, cifs, lustre, gpfs, fuse.glusterfs, ...)
};

/// Classifies a /proc/self/mounts type. Unknown types, including FUSE
/// filesystems not known to be network ones, are `pseudo`.
FilesystemClass classify_filesystem(std::string_view type);

} // namespace astraeus
