#pragma once
/// @file
/// The RDMA ports a worker's NCCL_IB_HCA leaves out (issue 12;
/// shared/seeds/bring-up-a-gpu-cluster.md, step 4: "until then NCCL_IB_HCA
/// can leave the port out"): worked out by the validations from the
/// topology findings and the pairs' latest results, and told to the
/// scheduler, which gives each GPU worker its machine's list.

#include <map>
#include <string>

#include "actors/validation/cluster_report.hpp"
#include "messages/astraeus.pb.h"

namespace astraeus::validation {

/// Every machine's degraded RDMA ports, sorted by machine then port:
///
/// - a port trained below its rail's peers' rate, or not Active while they
///   are (degraded_ports over every machine: a rail's peers are its whole
///   fabric, whatever their pool), with the finding's words;
/// - a device most of whose pairs on that rail fail (pair_results of the
///   latest pair steps among `machines`, machine_pairs_verdict over the
///   machine's pairs on that device: "fail"), as "mlx5_3" (every port of
///   the device): "gpu-03 mlx5_3: 2 of its 3 pairs on that rail fail".
///
/// A machine whose pool's policy sets `exclude_degraded_ports` false gets
/// none (unset: on). When every port the machine has Active (its InfiniBand
/// ones where it has any, as NCCL_IB_HCA takes them) is degraded, those are
/// `kept`: a worker had better use them than sockets. Never fails.
v1::DegradedIbPortList
ib_port_exclusions(const v1::MachineList& machines, const latest_map& latest,
                   const std::map<std::string, v1::ValidationPolicy>& policies);

} // namespace astraeus::validation
