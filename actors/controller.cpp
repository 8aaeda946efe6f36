#include "actors/controller.hpp"

#include <filesystem>

#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>

#include "actors/agent.hpp"
#include "actors/cluster_actor.hpp"
#include "actors/gate.hpp"
#include "actors/scheduler_actor.hpp"
#include "messages/error.hpp"
#include "runtime/xid_policy.hpp"
#include "store/store.hpp"

namespace astraeus {

std::string local_hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0')
    return "localhost";
  return buf;
}

caf::expected<controller_handles> start_controller(caf::actor_system& sys,
                                                   const ControllerConfig& cfg) {
  controller_handles out;
  auto store = Store::open(cfg.data_dir);
  if (!store)
    return store.error();
  out.store = std::shared_ptr<Store>{std::move(*store)};
  cluster_config cc;
  cc.store = out.store;
  cc.heartbeat_lapse = cfg.heartbeat_lapse;
  cc.request_timeout = cfg.request_timeout;
  cc.cluster_name = cfg.cluster_name;
  cc.pressure.memory_available_min_bytes = cfg.memory_available_min_bytes;
  cc.pressure.memory_available_min_percent = cfg.memory_available_min_percent;
  cc.pressure.memory_psi_full_avg10_max = cfg.memory_psi_full_avg10_max;
  cc.pressure.disk_free_min_percent = cfg.disk_free_min_percent;
  xid_policy policy;
  auto fence = parse_xid_list(cfg.xid_fence);
  auto at_risk = parse_xid_list(cfg.xid_at_risk);
  auto record = parse_xid_list(cfg.xid_record);
  for (auto [key, list] : {std::pair{"xid.fence", &fence},
                           std::pair{"xid.at_risk", &at_risk},
                           std::pair{"xid.record", &record}})
    if (!*list)
      return caf::make_error(ec::invalid_config,
                             std::string{key} + ": " + render_error(list->error()));
  if (auto err = policy.override_with(*fence, *at_risk, *record))
    return err;
  cc.xid_policy = policy.table();
  scheduler_config sc;
  sc.store = out.store;
  if (auto err = sc.validate())
    return err;
  out.scheduler = sys.spawn(scheduler, std::move(sc));
  cc.scheduler = out.scheduler;
  if (auto err = cc.validate())
    return err;
  out.cluster = sys.spawn(cluster, std::move(cc));
  gate_config gc;
  gc.listen_address = cfg.listen_address;
  gc.port = cfg.listen_port;
  gc.frame_cap_bytes = cfg.frame_cap_bytes;
  gc.hello_timeout = cfg.hello_timeout;
  gc.request_timeout = cfg.request_timeout;
  gc.cluster_name = cfg.cluster_name;
  gc.cluster = out.cluster;
  gc.xid_policy = policy.table();
  auto gate = spawn_gate(sys, std::move(gc));
  if (!gate) {
    caf::anon_send_exit(out.cluster, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(out.scheduler, caf::exit_reason::user_shutdown);
    return gate.error();
  }
  out.gate = gate->first;
  out.port = gate->second;
  return out;
}

void stop_controller(caf::actor_system&, const controller_handles& h) {
  if (h.gate)
    caf::anon_send_exit(h.gate, caf::exit_reason::user_shutdown);
  if (h.cluster)
    caf::anon_send_exit(h.cluster, caf::exit_reason::user_shutdown);
  if (h.scheduler)
    caf::anon_send_exit(h.scheduler, caf::exit_reason::user_shutdown);
}

caf::expected<caf::actor> start_agent(caf::actor_system& sys,
                                      const AgentConfig& cfg) {
  auto identity = load_or_create_identity(cfg.data_dir, cfg.name,
                                          local_hostname());
  if (!identity)
    return identity.error();
  // The controller refuses such a name for good: say so now, not by
  // retrying forever.
  if (!valid_machine_name(identity->name))
    return caf::make_error(ec::invalid_config,
                           "machine.name: '" + identity->name
                             + "' is not a valid machine name (1-63 letters, "
                               "digits, '-', '_', '.', starting with a letter "
                               "or digit)");
  auto store = Store::open((std::filesystem::path{cfg.data_dir} / "store").string());
  if (!store)
    return store.error();
  agent_config ac;
  ac.store = std::shared_ptr<Store>{std::move(*store)};
  ac.kmsg_path = cfg.kmsg_path;
  ac.controller_host = cfg.controller_address;
  ac.advertise_address = cfg.advertise_address;
  ac.controller_port = cfg.controller_port;
  ac.identity = std::move(*identity);
  ac.report_interval = cfg.report_interval;
  ac.reconnect_min = cfg.reconnect_min;
  ac.reconnect_max = cfg.reconnect_max;
  ac.frame_cap_bytes = cfg.frame_cap_bytes;
  ac.host.root = cfg.host_root;
  ac.gpu.root = cfg.host_root;
  ac.gpu.nvml.library = cfg.nvml_library;
  ac.gpu.nvml.call_deadline = cfg.nvml_call_deadline;
  ac.gpu.nvidia_smi = cfg.nvidia_smi;
  return spawn_agent(sys, std::move(ac));
}

} // namespace astraeus
