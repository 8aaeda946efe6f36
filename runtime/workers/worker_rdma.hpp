#pragma once
/// @file
/// The RDMA devices a worker is given (issue 22; shared/seeds/inside-a-worker.md,
/// "GPUs and the network", "Limits": workers given RDMA devices get
/// `memlock` unlimited). A worker gets them when its run asked (`rdma: true`,
/// `astra run --rdma`) or when its copy of the run spans machines and its
/// environment names RDMA ports in NCCL_IB_HCA: then NCCL inside a container
/// can open the ports it was told to use. The devices are the verbs node
/// (/dev/infiniband/uverbsN) of each port in NCCL_IB_HCA, matched to the
/// port through sysfs (RdmaPort.uverbs), and /dev/infiniband/rdma_cm.

#include <map>
#include <string>
#include <vector>

#include "messages/astraeus.pb.h"
#include "runtime/workers/oci_bundle.hpp"

namespace astraeus {

/// Whether a worker of `order`, whose environment is `env`, gets the
/// machine's RDMA devices: its run or order asked (RunSpec.rdma,
/// WorkerOrder.rdma), or it spans machines (machine_count > 1) and `env`
/// sets NCCL_IB_HCA to ports (not an exclusion list only).
bool worker_gets_rdma(const v1::WorkerOrder& order,
                      const std::map<std::string, std::string>& env);

/// The HCA names an NCCL_IB_HCA value selects among `ports`' devices
/// (NCCL's syntax: a leading '^' excludes the list; a leading '=' after it
/// makes every item an exact name, else "mlx5" matches as a prefix; an
/// item's own "=mlx5_0" is taken as exact too; ":<port>" suffixes are
/// ignored).
/// Only ACTIVE ports count. An empty value selects every ACTIVE port.
/// Returns device names ("mlx5_0") in the order of `ports`, without repeats.
std::vector<std::string> hcas_in(const std::string& nccl_ib_hca,
                                 const std::vector<v1::RdmaPort>& ports);

/// What a worker is handed: device nodes with their numbers, and their
/// paths for its status ("/dev/infiniband/uverbs0").
struct rdma_grant {
  std::vector<oci_device> devices;   ///< for config.json and its device cgroup
  std::vector<std::string> paths;    ///< WorkerStatus.rdma_devices
  std::vector<std::string> problems; ///< a node left out and why (logged)
};

/// The RDMA device nodes for the HCAs `hcas`: each one's verbs node (its
/// port's `uverbs`) and rdma_cm, where `existing` (HostFacts.rdma_device_nodes)
/// lists them. Their major:minor are read from sysfs under `host_root`
/// (/sys/class/infiniband/<hca>/device/infiniband_verbs/<uverbs>/dev and
/// /sys/class/misc/rdma_cm/dev, "231:192"); a node whose number cannot be
/// read is left out with a problem naming the file. Empty when `hcas` is.
rdma_grant rdma_devices_for(const std::vector<std::string>& hcas,
                            const std::vector<v1::RdmaPort>& ports,
                            const std::vector<std::string>& existing,
                            const std::string& host_root);

} // namespace astraeus
