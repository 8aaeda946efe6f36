#pragma once
/// @file
/// Machines with InfiniBand ports, as the fabric's tests (issue 12) need them.

#include <string>

#include "messages/astraeus.pb.h"

namespace astraeus::test {

/// The rails of a DGX H100: its eight InfiniBand devices.
inline const char* const ib_rail_devices[] = {"mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5",
                                              "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"};

/// A machine of pool h100, Up, with 8 Active 400 Gb/s InfiniBand ports on
/// one subnet; `slow` names one trained at 200 Gb/s (the seed's gpu-06
/// mlx5_5).
inline v1::MachineView ib_machine(const std::string& name, const std::string& slow = {}) {
  v1::MachineView m;
  m.set_name(name);
  m.set_state(v1::Machine::Up);
  (*m.mutable_labels())["pool"] = "h100";
  for (const auto* d : ib_rail_devices) {
    auto* p = m.mutable_facts()->add_rdma_ports();
    p->set_device(d);
    p->set_port(1);
    p->set_state("ACTIVE");
    p->set_phys_state("LinkUp");
    p->set_link_layer("InfiniBand");
    p->set_subnet_prefix("fe80:0000:0000:0000");
    p->set_rate_gbps(d == slow ? 200 : 400);
    p->set_rate(d == slow ? "200 Gb/sec (4X HDR)" : "400 Gb/sec (4X NDR)");
  }
  return m;
}

} // namespace astraeus::test
