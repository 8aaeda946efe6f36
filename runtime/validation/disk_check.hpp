#pragma once
/// @file
/// The disk check (issue 21): the machine's data location tested with fio
/// where it is installed (Debian's `fio`, its JSON output parsed), else a
/// built-in O_DIRECT test; sequential write, sequential read (1 MiB
/// blocks) and 4 KiB random read, judged against the device class (NVMe,
/// SSD, HDD, read from sysfs) and against peer machines' results where
/// given (`--peers FILE`, JSON lines of earlier disk results).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/validation/check_options.hpp"
#include "runtime/validation/check_result.hpp"

namespace astraeus::validation {

/// The kind of block device under a directory. `virtual_disk` is a
/// paravirtual disk (virtio `vd*`, Xen `xvd*`) whose speed says nothing about
/// the storage behind it (virtio reports queue/rotational 1 whatever backs
/// it), so it has no class floor: it is judged against its peers only.
enum class disk_class { nvme, ssd, hdd, virtual_disk, unknown };

/// "NVMe", "SSD", "HDD", "virtual", "unknown".
const char* to_string(disk_class c);

/// The device under the data directory, as sysfs tells it.
struct disk_device {
  std::string name;  ///< "nvme0n1" (the whole disk, not the partition); empty: unknown
  disk_class kind = disk_class::unknown;
};

/// The whole disk of block device `major:minor` under `root`: follows
/// <root>/sys/dev/block/M:m to the disk (a partition's parent, a
/// device-mapper device's first slave); NVMe by name, virtual by name (vd*,
/// xvd*, as the host facts name them), HDD when queue/rotational is 1, else
/// SSD. Unknown when sysfs does not say.
disk_device classify_block_device(const std::string& root, unsigned major, unsigned minor);

/// The three figures (MB/s = 10^6 bytes per second).
struct disk_figures {
  std::optional<double> seq_read_mbs, seq_write_mbs, rand_read_iops;
  std::string tool;  ///< "fio 3.33" or "built-in O_DIRECT"
};

/// Parses fio's --output-format=json for jobs named seq_write, seq_read
/// and rand_read. Errors: ec::invalid_request when the text is not fio JSON
/// or a job reports an error (naming it).
caf::expected<disk_figures> parse_fio_json(std::string_view text);

/// Judges the figures against the class floors and the peers' best
/// (`peers`: earlier disk check results). No I/O.
void judge_disk(const disk_figures& f, const disk_device& dev, const std::vector<check_result>& peers,
                const thresholds& t, check_result& out);

/// Runs the disk check in `o.data_dir` (fio if `o.fio` is found, else
/// built in). The test file is removed afterwards.
check_result run_disk(const check_options& o);

}  // namespace astraeus::validation
