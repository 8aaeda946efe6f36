#pragma once
/// @file
/// Helpers shared by the machine-actor benchmarks: a realistic report
/// payload, spawning N machine actors in a real actor system, a fan-out
/// barrier that waits until every actor has worked through its mailbox, and
/// an orderly shutdown (the actor system waits for all actors on exit).

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include "actors/controller/machine_actor.hpp"
#include "messages/astraeus.pb.h"
#include "messages/type_ids.hpp"

namespace astraeus::bench {

inline std::string machine_name(size_t i) {
  return "gpu-" + std::to_string(i);
}

/// Facts as an 8-GPU node's agent reports them: CPU model, memory with PSI,
/// 4 disks, 3 filesystems, 4 interfaces, 8 RDMA ports. Not under pressure.
inline v1::HostFacts make_facts(size_t i) {
  v1::HostFacts f;
  f.set_hostname(machine_name(i) + ".cluster.example.net");
  f.set_kernel("6.1.0-18-amd64");
  f.set_os("Debian GNU/Linux 12 (bookworm)");
  auto* cpu = f.mutable_cpu();
  cpu->set_model("AMD EPYC 9654 96-Core Processor");
  cpu->set_logical_cpus(384);
  cpu->set_physical_cores(192);
  cpu->set_sockets(2);
  cpu->set_architecture("x86_64");
  cpu->set_numa_nodes(8);
  auto* mem = f.mutable_memory();
  mem->set_total_bytes(1584ull << 30);
  mem->set_available_bytes(1400ull << 30);
  mem->set_swap_total_bytes(0);
  mem->set_swap_free_bytes(0);
  auto fill_psi = [](v1::Pressure* p) {
    p->set_present(true);
    p->set_some_avg10(0.12);
    p->set_some_avg60(0.08);
    p->set_some_avg300(0.05);
    p->set_full_avg10(0.01);
    p->set_full_avg60(0.0);
    p->set_full_avg300(0.0);
  };
  fill_psi(mem->mutable_pressure());
  fill_psi(f.mutable_io_pressure());
  fill_psi(f.mutable_cpu_pressure());
  for (int d = 0; d < 4; ++d) {
    auto* disk = f.add_disks();
    disk->set_name("nvme" + std::to_string(d) + "n1");
    disk->set_size_bytes(3840ull * 1000 * 1000 * 1000);
    disk->set_rotational(false);
    disk->set_model("SAMSUNG MZQL23T8HCLS-00A07");
    disk->set_kind("nvme");
  }
  struct fs_spec {
    const char* mount;
    const char* dev;
    const char* type;
    bool shared;
  };
  const fs_spec fss[] = {{"/", "/dev/md0", "ext4", false},
                         {"/var/lib/astraeus", "/dev/md1", "xfs", false},
                         {"/shared", "nfs01:/export/shared", "nfs4", true}};
  for (const auto& s : fss) {
    auto* fs = f.add_filesystems();
    fs->set_mount_point(s.mount);
    fs->set_device(s.dev);
    fs->set_type(s.type);
    fs->set_size_bytes(1ull << 40);
    fs->set_free_bytes(600ull << 30);
    fs->set_shared(s.shared);
  }
  const char* ifnames[] = {"lo", "eno1", "eno2", "bond0"};
  for (int n = 0; n < 4; ++n) {
    auto* nic = f.add_interfaces();
    nic->set_name(ifnames[n]);
    nic->set_mac_address(n == 0 ? "00:00:00:00:00:00" : "b8:3f:d2:4a:10:0" + std::to_string(n));
    nic->set_operstate(n == 0 ? "unknown" : "up");
    nic->set_mtu(n == 0 ? 65536 : 9000);
    nic->set_speed_mbps(n == 0 ? -1 : 100000);
    nic->set_kind(n == 0 ? "loopback" : "ether");
    nic->set_virtual_(n == 0 || n == 3);
  }
  for (int p = 0; p < 8; ++p) {
    auto* port = f.add_rdma_ports();
    port->set_device("mlx5_" + std::to_string(p));
    port->set_port(1);
    port->set_state("ACTIVE");
    port->set_phys_state("LinkUp");
    port->set_rate("400 Gb/sec (4X NDR)");
    port->set_rate_gbps(400);
    port->set_link_layer("InfiniBand");
    port->set_netdev("ibp" + std::to_string(p) + "s0");
  }
  f.mutable_gpus()->set_read_as("no-gpu");
  f.mutable_gpus()->set_detail("GPU discovery not implemented yet");
  f.set_uptime_seconds(1234567);
  return f;
}

inline v1::MachineReport make_report(size_t i, uint64_t seq) {
  v1::MachineReport r;
  r.set_machine(machine_name(i));
  r.set_sequence(seq);
  r.set_sent_unix_ms(0);
  *r.mutable_facts() = make_facts(i);
  r.set_agent_version("0.1.0");
  return r;
}

/// Spawns `n` machine actors without a store.
inline std::vector<machine_actor>
spawn_machines(caf::actor_system& sys, size_t n, caf::timespan lapse,
               size_t first_index = 0) {
  std::vector<machine_actor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    machine_config cfg;
    cfg.record.set_name(machine_name(first_index + i));
    cfg.record.set_machine_id("id-" + std::to_string(first_index + i));
    cfg.heartbeat_lapse = lapse;
    cfg.store = nullptr;
    out.push_back(sys.spawn(machine, std::move(cfg)));
  }
  return out;
}

/// Asks every actor for its view at once (one fan-out actor, all requests in
/// flight together) and returns the views in actor order once all answered.
/// Each actor answers after everything already in its mailbox.
inline std::vector<v1::MachineView>
collect_views(caf::actor_system& sys, const std::vector<machine_actor>& ms,
              bool keep_views = true) {
  auto views = std::make_shared<std::vector<v1::MachineView>>(
    keep_views ? ms.size() : 0);
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  sys.spawn([&ms, views, done, keep_views](caf::event_based_actor* self) {
    auto remaining = std::make_shared<size_t>(ms.size());
    for (size_t i = 0; i < ms.size(); ++i)
      self->request(ms[i], caf::infinite, atom::get_v)
        .then([self, i, views, done, remaining,
               keep_views](v1::MachineView& view) {
          if (keep_views)
            (*views)[i] = std::move(view);
          if (--*remaining == 0) {
            done->set_value();
            self->quit();
          }
        });
  });
  fut.wait();
  return std::move(*views);
}

/// Waits until every actor processed all it was sent before this call.
inline void barrier(caf::actor_system& sys,
                    const std::vector<machine_actor>& ms) {
  collect_views(sys, ms, false);
}

/// Ends the actors so that the actor system's destructor can return.
inline void shutdown(std::vector<machine_actor>& ms) {
  for (auto& m : ms)
    caf::anon_send_exit(m, caf::exit_reason::user_shutdown);
  ms.clear();
}

} // namespace astraeus::bench
