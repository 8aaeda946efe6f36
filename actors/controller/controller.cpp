#include "actors/controller/controller.hpp"
#include "actors/validation/validations_actor.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>

#include "actors/agent/agent.hpp"
#include "actors/controller/cluster_actor.hpp"
#include "actors/controller/gate.hpp"
#include "actors/controller/gpu_history_actor.hpp"
#include "actors/scheduler/scheduler_actor.hpp"
#include "messages/error.hpp"
#include "runtime/process/private_file.hpp"
#include "runtime/gate/gate_client.hpp"
#include "runtime/gate/secure_channel.hpp"
#include "runtime/gate/tokens.hpp"
#include "runtime/process/wall_clock.hpp"
#include "runtime/faults/xid_policy.hpp"
#include "store/store.hpp"

namespace astraeus {

std::string local_hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0')
    return "localhost";
  return buf;
}

std::string owner_token_path(const std::string& keys_dir) {
  return (std::filesystem::path{keys_dir} / "owner-token").string();
}

namespace {

/// Whether, and why, the controller writes an owner token at start.
struct owner_token_need {
  /// A new controller: the store has no API token yet.
  bool first = false;
  /// An operator locked out: why (empty: nothing to do).
  std::string lockout;
};

/// Whether the controller must write an owner token into `path` now: a new
/// controller (no API token yet), or an operator locked out (the file's
/// token no longer works, or the file is gone and no owner token works).
/// Nothing when the file's token works or another owner token still does.
caf::expected<owner_token_need> owner_token_missing(token_registry& tokens, const std::string& path,
                                               int64_t now_ms) {
  auto any = tokens.has_api_tokens();
  if (!any)
    return any.error();
  if (!*any)
    return owner_token_need{true, {}};
  if (auto held = read_trimmed_file(path); held && !held->empty()) {
    auto who = tokens.authenticate(*held, now_ms);
    if (who)
      return owner_token_need{};
    if (who.error() != ec::unauthenticated)
      return who.error();
    return owner_token_need{false, "the token in " + path + " no longer works ("
                                     + render_error(who.error()) + ")"};
  }
  auto owners = tokens.count_working_owners(now_ms);
  if (!owners)
    return owners.error();
  if (*owners > 0)
    return owner_token_need{};
  return owner_token_need{false, "no owner token works any more and " + path + " holds none"};
}

/// Writes an owner API token into `<keys_dir>/owner-token` (mode 0600)
/// when `owner_token_missing` says so: a new controller's first, or a fresh
/// one for the operator on this host when every admin is locked out (README,
/// "API tokens and roles"). A fresh one that cannot be written (a full disk)
/// is logged and the controller starts anyway; the first one's failure is
/// returned.
caf::error provide_owner_token(token_registry& tokens, const std::string& keys_dir,
                               int64_t now_ms) {
  auto path = owner_token_path(keys_dir);
  auto need = owner_token_missing(tokens, path, now_ms);
  if (!need)
    return need.error();
  bool first = need->first;
  const auto& why = need->lockout;
  if (!first && why.empty())
    return {};
  auto minted = tokens.mint_api("owner", role::owner, 0, "controller", now_ms);
  caf::error err = minted ? write_private_file(path, minted->first) : minted.error();
  if (err && first)
    return err;
  if (err) {
    spdlog::warn("controller: {}; a fresh owner API token could not be made: {}", why,
                 render_error(err));
    return {};
  }
  if (first) {
    // astra looks for an owner token only in the two default key folders
    // (bin/astra/invocation.cpp); anywhere else it must be told the file.
    namespace fs = std::filesystem;
    std::error_code ec;
    bool found_by_astra = false;
    for (const auto& dir : {default_data_dir("dev") + "/controller-keys",
                            default_data_dir("controller") + "-keys"})
      found_by_astra = found_by_astra || fs::equivalent(dir, keys_dir, ec);
    spdlog::info("controller: created the first owner API token (id {}) in {} "
                 "(mode 0600): {}",
                 minted->second.id(), path,
                 found_by_astra
                   ? "the local astra finds it there; elsewhere, `astra login` with it"
                   : "give it to astra with `--token-file " + path
                       + "` (this keys folder is not one astra looks in), or `astra login` with it");
  }
  else
    spdlog::warn("controller: {}: wrote a fresh owner API token (id {}) to {} (mode 0600); "
                 "revoke the old ones you no longer need",
                 why, minted->second.id(), path);
  return {};
}

} // namespace

caf::expected<controller_handles>
start_controller(caf::actor_system& sys, const ControllerConfig& cfg,
                 std::shared_ptr<const wall_clock> clock, std::shared_ptr<Store> given,
                 std::shared_ptr<Store> history_store, int gate_socket) {
  if (!clock)
    return caf::make_error(ec::invalid_config, "controller: no wall clock");
  // The fault policy first: a bad xid.* or amd.* setting is refused before
  // anything is created (store, keys, the first owner token).
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
  if (auto err = policy.set_application_processes(cfg.xid_application_processes))
    return err;
  if (auto err = policy.override_amd(parse_name_list(cfg.amd_fence),
                                     parse_name_list(cfg.amd_at_risk),
                                     parse_name_list(cfg.amd_record)))
    return err;
  controller_handles out;
  if (given) {
    out.store = std::move(given);
  } else {
    auto store = Store::open(cfg.data_dir);
    if (!store)
      return store.error();
    out.store = std::shared_ptr<Store>{std::move(*store)};
  }
  out.history_store = history_store ? std::move(history_store) : out.store;
  // The gate's identity and the token key live beside the store, never in it.
  namespace fs = std::filesystem;
  auto keys_dir = cfg.keys_dir.empty() ? cfg.data_dir + "-keys" : cfg.keys_dir;
  auto identity = load_or_create_keypair((fs::path{keys_dir} / "gate.key").string());
  if (!identity)
    return identity.error();
  out.identity = std::make_shared<const identity_keypair>(std::move(*identity));
  out.keys_dir = keys_dir;
  // Written only when it changed: a controller must start on a full disk
  // (issue 23: no crash loop), with its store read-only.
  auto pub_path = (fs::path{keys_dir} / "gate.pub").string();
  auto pub_now = read_trimmed_file(pub_path);
  if (!pub_now || *pub_now != out.identity->public_hex())
    if (auto err = write_private_file(pub_path, out.identity->public_hex()))
      return err;
  auto token_key = load_or_create_token_key((fs::path{keys_dir} / "token.key").string());
  if (!token_key)
    return token_key.error();
  out.tokens = std::make_shared<token_registry>(out.store, *token_key);
  if (auto err = provide_owner_token(*out.tokens, keys_dir, clock->now_unix_ms()))
    return err;
  cluster_config cc;
  cc.store = out.store;
  cc.heartbeat_lapse = cfg.heartbeat_lapse;
  cc.request_timeout = cfg.request_timeout;
  cc.cluster_name = cfg.cluster_name;
  cc.pressure.memory_available_min_bytes = cfg.memory_available_min_bytes;
  cc.pressure.memory_available_min_percent = cfg.memory_available_min_percent;
  cc.pressure.memory_psi_full_avg10_max = cfg.memory_psi_full_avg10_max;
  cc.pressure.disk_free_min_percent = cfg.disk_free_min_percent;
  cc.xid_policy = policy.table();
  scheduler_config sc;
  sc.store = out.store;
  sc.clock = clock;
  sc.background_sync = true;  // issue 14: the group commit's fsync off the actor's thread
  if (auto err = sc.validate())
    return err;
  out.scheduler = sys.spawn(scheduler, std::move(sc));
  cc.scheduler = out.scheduler;
  validations_config vc;
  vc.store = out.store;
  vc.scheduler = out.scheduler;
  vc.clock = clock;
  vc.check_program = cfg.validation_check_program;
  vc.quick_on_up = cfg.validation_quick_on_up;
  vc.poll_interval = cfg.validation_poll_interval;
  vc.machine_poll = cfg.validation_poll_interval * 2;
  vc.console_url = cfg.validation_console_url.empty() ? cfg.api_advertise_url
                                                      : cfg.validation_console_url;
  vc.installer_delay = cfg.validation_installer_batch_delay;
  vc.organization = cfg.api_organization;
  vc.cluster_name = cfg.cluster_name;
  // Filled once the API runs: join tokens' install command, console links.
  out.install = std::make_shared<install_site>();
  vc.install = out.install;
  out.validations = sys.spawn(validations, std::move(vc));
  cc.validations = out.validations;
  gpu_history_config hc;
  hc.store = out.history_store;
  hc.clock = clock;
  if (auto err = hc.validate())
    return err;
  out.history = sys.spawn(gpu_history, std::move(hc));
  cc.history = out.history;
  cc.tokens = out.tokens;
  cc.controller_key = out.identity->public_hex();
  cc.advertise_address = cfg.advertise_address;
  // A run's console page: the console's configured address, else the API's
  // advertised one (the API serves the console).
  cc.console_url = cfg.validation_console_url.empty() ? cfg.api_advertise_url
                                                      : cfg.validation_console_url;
  cc.organization = cfg.api_organization;
  cc.install = out.install;
  cc.clock = clock;
  if (auto err = cc.validate())
    return err;
  out.cluster = sys.spawn(cluster, std::move(cc));
  caf::anon_send(out.validations, atom::attach_v, out.cluster);
  gate_config gc;
  gc.listen_address = cfg.listen_address;
  gc.port = cfg.listen_port;
  gc.listen_socket = gate_socket;
  gc.frame_cap_bytes = cfg.frame_cap_bytes;
  gc.hello_timeout = cfg.hello_timeout;
  gc.request_timeout = cfg.request_timeout;
  gc.cluster_name = cfg.cluster_name;
  gc.heartbeat_lapse = cfg.heartbeat_lapse;
  gc.report_interval = cfg.heartbeat_report_interval;
  // Keepalives only where an agent has another controller to go to.
  if (cfg.store_backend == "etcd")
    gc.keepalive_interval = cfg.keepalive_interval;
  gc.report_interval_seconds = static_cast<uint32_t>(
    std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::seconds>(
                           cfg.heartbeat_report_interval).count()));
  gc.cluster = out.cluster;
  gc.xid_policy = policy.table();
  gc.identity = out.identity;
  gc.max_unauthenticated_per_address = cfg.max_unauthenticated_per_address;
  auto gate = spawn_gate(sys, std::move(gc));
  if (!gate) {
    caf::anon_send_exit(out.cluster, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(out.scheduler, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(out.validations, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(out.history, caf::exit_reason::user_shutdown);
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
  if (h.validations)
    caf::anon_send_exit(h.validations, caf::exit_reason::user_shutdown);
  if (h.history)
    caf::anon_send_exit(h.history, caf::exit_reason::user_shutdown);
}

caf::expected<agent_actor>
start_agent(caf::actor_system& sys, const AgentConfig& cfg, const std::string& join_token,
            std::function<void(const std::string&)> on_final_refusal) {
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
  namespace fs = std::filesystem;
  auto key = load_or_create_keypair((fs::path{cfg.data_dir} / "identity.key").string());
  if (!key)
    return key.error();
  agent_config ac;
  ac.key = std::make_shared<const identity_keypair>(std::move(*key));
  ac.pin_file = (fs::path{cfg.data_dir} / "controller.pub").string();
  std::error_code err;
  ac.enrolled = fs::exists(ac.pin_file, err);
  if (!cfg.controller_key.empty()) {
    auto pinned = parse_public_key(cfg.controller_key, "controller.public_key");
    if (!pinned)
      return pinned.error();
    ac.pinned = *pinned;
  } else if (ac.enrolled) {
    auto text = read_trimmed_file(ac.pin_file);
    if (!text)
      return text.error();
    auto pinned = parse_public_key(*text, ac.pin_file);
    if (!pinned)
      return pinned.error();
    ac.pinned = *pinned;
  }
  // A machine that enrolled before presents a token it is given too: after
  // `astra machine remove` that is how it enrols again (agent_config). Its
  // token file may have been deleted since it enrolled: that is fine.
  if (!join_token.empty()) {
    ac.join_token = join_token;
  } else if (!cfg.token_file.empty()) {
    auto token = read_trimmed_file(cfg.token_file);
    if (token && token->empty() && !ac.enrolled)
      return caf::make_error(ec::invalid_config,
                             "enrol.token_file: " + cfg.token_file
                               + " is empty: put the join token `astra tokens create` "
                                 "printed in it");
    if (token)
      ac.join_token = std::move(*token);
    else if (!ac.enrolled)
      return caf::make_error(ec::invalid_config,
                             "enrol.token_file: " + render_error(token.error()));
  }
  auto store = Store::open((fs::path{cfg.data_dir} / "store").string());
  if (!store)
    return store.error();
  ac.store = std::shared_ptr<Store>{std::move(*store)};
  ac.kmsg_path = cfg.kmsg_path;
  ac.controller_host = cfg.controller_address;
  if (cfg.controller_address.find(',') != std::string::npos) {
    // HA mode: every controller's gate, "HOST[:PORT],..." (controller.port
    // where no port is given); the first is tried first.
    size_t start = 0;
    while (start <= cfg.controller_address.size()) {
      auto end = cfg.controller_address.find(',', start);
      if (end == std::string::npos)
        end = cfg.controller_address.size();
      auto entry = cfg.controller_address.substr(start, end - start);
      start = end + 1;
      if (entry.empty())
        continue;
      if (entry.find(':') == std::string::npos) {
        ac.controllers.emplace_back(entry, cfg.controller_port);
        continue;
      }
      auto addr = parse_gate_address(entry);
      if (!addr)
        return caf::make_error(ec::invalid_config,
                               "controller.address: '" + entry
                                 + "': " + render_error(addr.error()));
      ac.controllers.emplace_back(addr->host, addr->port);
    }
    if (ac.controllers.empty())
      return caf::make_error(ec::invalid_config, "controller.address: no address in '"
                                                   + cfg.controller_address + "'");
    ac.controller_host = ac.controllers.front().first;
  }
  ac.advertise_address = cfg.advertise_address;
  ac.data_location = cfg.data_location;
  ac.request_acceptance = cfg.request_acceptance;
  ac.controller_port = ac.controllers.empty() ? cfg.controller_port
                                              : ac.controllers.front().second;
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
  auto& w = ac.workers;
  w.data_dir = cfg.data_dir;
  w.runtime = cfg.workers_runtime;
  w.runc = cfg.runc;
  w.umoci = cfg.umoci;
  w.skopeo = cfg.skopeo;
  w.images_dir = cfg.images_dir.empty()
                   ? (std::filesystem::path{cfg.data_dir} / "images").string()
                   : cfg.images_dir;
  w.stop_grace = cfg.stop_grace;
  // Workers are this agent's own descendants: their /proc is ours, even
  // when host facts are read under another root.
  w.proc_root = "/";
  // Issue 23 item 8: a cgroup per host-process worker where the host's
  // cgroup v2 hierarchy is writable; else the shims' subreaping alone.
  if (auto place = prepare_worker_cgroups(); place)
    w.cgroups = *place;
  else
    spdlog::info("agent: host-process workers get no cgroups of their own ({}); their "
                 "shims end every descendant",
                 render_error(place.error()));
  w.rdma_min_gbps = cfg.rdma_min_gbps;
  w.log_max_bytes = cfg.worker_log_max_bytes;
  w.cdi.static_dir = cfg.cdi_static_dir;
  w.cdi.dynamic_dir = cfg.cdi_dynamic_dir;
  w.cdi.nvidia_ctk = cfg.nvidia_ctk;
  // Device nodes are checked under the host root too (issue 18, rule 3).
  w.cdi.host_root = cfg.host_root;
  // A validation's check is given the agent's settings (issue: the quick
  // check looked in /etc/cdi while the agent wrote elsewhere).
  w.nvml_library = cfg.nvml_library;
  ac.worker_poll = cfg.worker_poll;
  ac.on_final_refusal = std::move(on_final_refusal);
  return spawn_agent(sys, std::move(ac));
}

} // namespace astraeus
