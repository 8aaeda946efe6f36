#pragma once
/// @file
/// The cluster's fabrics and what looks miswired or degraded in them (issue
/// 12; shared/seeds/bring-up-a-gpu-cluster.md, step 5: "Discovery works out
/// the cluster's fabrics, leaf and spine groups from what each machine
/// reports, and flags what looks miswired or degraded — a cable on the
/// wrong rail's leaf, a port trained below its rate, a PCIe link narrower
/// than it should be"). Worked out from the RDMA ports each machine reports
/// (runtime/host/rdma_fabric.hpp); no machine is asked anything.

#include <cstdint>
#include <string>
#include <vector>

#include "messages/astraeus.pb.h"

namespace astraeus::validation {

/// The label that names a machine's fabric; it wins over the subnet prefix
/// its ports report (shared/seeds/machines.md, "Pools and topology").
inline constexpr const char* fabric_label = "topology.astraeus.io/fabric";

/// The topology of `machines` (only those of `pool` unless empty), as
/// `astra astraeus topology` and GET /topology show it:
///
/// - **Fabrics**: machines grouped by the label `topology.astraeus.io/fabric`
///   or else the subnet prefix of their InfiniBand ports ("fe80:0000:0000:0000");
///   each fabric's leaf switches are those its ports are cabled to
///   (iblinkinfo, where the agent could run it). Spine switches are not
///   worked out (said in `not_checked`).
/// - **Findings** (check "topology", each `what` starting with the machine's
///   name and with a `fix`), over each rail (the same device and port on
///   every machine of a fabric; "rail 5" is mlx5_5):
///   - a port trained below its peers' rate (the most common rate of the
///     rail's other Active ports; on a machine alone, of its other ports of
///     the fabric) — severity warn, the seed's words;
///   - a port not Active while its rail's peers are, or whose cable is in
///     Polling — warn;
///   - a NIC's PCIe link narrower or slower than its maximum — warn;
///   - a port cabled to the leaf switch that most of another rail's ports go
///     to ("a cable on the wrong rail's leaf") — warn.
/// - **Not checked**: what could not be judged and why ("leaf switches:
///   infiniband-diags not installed on gpu-02").
///
/// Findings are sorted by machine, then device. Never fails; machines
/// without RDMA ports add nothing.
v1::TopologyReport analyse_topology(const v1::MachineList& machines, const std::string& pool,
                                    int64_t now_unix_ms);

/// A port the findings mark degraded (issue 12): trained below its peers'
/// rate, or not Active while its rail's peers are (or in Polling).
struct degraded_port {
  std::string machine;
  std::string port;   ///< "mlx5_5:1"
  std::string what;   ///< the finding's words, starting with the machine's name
};

/// The ports of `machines` (only those of `pool` unless empty) that
/// analyse_topology's rate and state findings name, sorted by machine, then
/// port. Never fails.
std::vector<degraded_port> degraded_ports(const v1::MachineList& machines,
                                          const std::string& pool);

} // namespace astraeus::validation
