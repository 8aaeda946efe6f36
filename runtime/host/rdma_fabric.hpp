#pragma once
/// @file
/// What an RDMA port says of its fabric (issue 12): the subnet prefix and
/// port GUID of its GID 0, its LID, and its NIC's PCIe link, read from sysfs
/// under a configurable root (DESIGN.md, "Host access"):
/// <root>/sys/class/infiniband/<dev>/ports/<n>/{gids/0,lid} and
/// <root>/sys/class/infiniband/<dev>/device/{current,max}_link_{width,speed}.
/// And the switch side of the ports from infiniband-diags' `iblinkinfo`
/// output, where it is installed.

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus {

/// Fills `port`'s subnet_prefix ("fe80:0000:0000:0000"), port_guid
/// ("0c42:a103:0012:3456"), lid and NIC PCIe link fields from the files
/// under `prefix` (root_prefix of the host root), `device_dir` being
/// "/sys/class/infiniband/mlx5_0" and `port_dir` its "ports/1" folder.
/// Absent files leave fields empty; a file present but unreadable or
/// malformed adds "<path>: <what was wrong>" to `warnings` and leaves its
/// field empty. An all-zero GID (a port not yet given one by the subnet
/// manager) sets neither prefix nor GUID. Never throws for I/O.
void read_rdma_port_fabric(const std::string& prefix, const std::string& device_dir,
                           const std::string& port_dir, v1::RdmaPort& port,
                           std::vector<std::string>& warnings);

/// Splits a GID as sysfs prints it ("fe80:0000:0000:0000:0c42:a103:0012:3456")
/// into its subnet prefix (first 64 bits) and interface id (last 64 bits, the
/// port GUID on InfiniBand), each as four groups of four lower-case hex
/// digits. Empty pair for text that is not eight groups of 1-4 hex digits.
std::pair<std::string, std::string> split_gid(std::string_view text);

/// Where one HCA port is cabled, from `iblinkinfo`: the switch's GUID
/// ("0x0c42a10300aabbcc"), its name as the subnet manager knows it
/// ("QM9700 leaf-01") and the switch port.
struct ib_switch_link {
  std::string switch_guid;
  std::string switch_name;
  uint32_t switch_port = 0;
};

/// Parses `iblinkinfo --switches-only` output (infiniband-diags), in its
/// default form (a "Switch: 0x<guid> <name>:" header, then one line per
/// port: "<lid> <port>[..] ==( <width> <speed> <state>/ <phys>)==> <peer
/// lid> <peer port>[..] \"<peer description>\" ( <comment> )") or its
/// `--line` form (each line starting "0x<guid> \"<name>\""), into the
/// peer's LID -> the switch and switch port cabled to it. The caller looks
/// its own HCA ports' LIDs up (LIDs are unique within a subnet). Ports
/// that are down (no peer) and lines that are not links are skipped;
/// garbage never throws.
std::map<uint32_t, ib_switch_link> parse_iblinkinfo(std::string_view text);

/// Sets switch_guid, switch_name and switch_port of every port in `facts`
/// whose LID `links` knows, and `facts.fabric_discovery` to `how`
/// ("iblinkinfo", or why not: "infiniband-diags not installed"); leaves
/// facts without InfiniBand ports (no port with link layer InfiniBand)
/// with an empty fabric_discovery.
void apply_switch_links(v1::HostFacts& facts, const std::map<uint32_t, ib_switch_link>& links,
                        const std::string& how);

}  // namespace astraeus
