// astraeus-controller: hosts the cluster's actors, the store and the gate.

#include <cstdio>
#include <optional>

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <spdlog/spdlog.h>

#include "actors/controller/api_bridge.hpp"
#include "actors/controller/controller.hpp"
#include "bin/controller_ha.hpp"
#include "bin/process.hpp"
#include "messages/error.hpp"
#include "runtime/process/config.hpp"
#include "runtime/process/logging.hpp"
#include "runtime/gate/secure_channel.hpp"
#include "runtime/process/system_setup.hpp"
#include "store/store.hpp"

using namespace astraeus;

int main(int argc, char** argv) {
  auto signals = bin::block_stop_signals();
  CLI::App app{"astraeus-controller: the Astraeus control plane's controller"};
  std::string config_file;
  std::vector<std::string> sets;
  bin::overrides flags;
  bool print_config = false;
  bool help_config = false;
  app.add_option("-c,--config", config_file, "YAML config file (see config/controller.yaml)");
  auto flag = [&](const char* name, const char* key, const char* help) {
    app.add_option_function<std::string>(
      name, [&flags, key](const std::string& v) { flags.emplace_back(key, v); },
      help);
  };
  flag("--listen", "listen.address", "address the gate listens on (default 0.0.0.0)");
  flag("--port", "listen.port", "gate port (default 7450)");
  flag("--data-dir", "store.path", "store folder");
  flag("--heartbeat-lapse", "heartbeat.lapse", "a machine is Down after this long without a report (default 60s)");
  flag("--log-level", "log.level", "trace|debug|info|warn|error|off");
  app.add_option("--set", sets, "any config key: --set gate.frame_cap=2MiB");
  app.add_flag("--print-config", print_config, "print the effective config and exit");
  app.add_flag("--help-config", help_config, "list every config key and exit");
  if (auto rc = bin::parse_command_line(app, argc, argv, "astraeus-controller"))
    return *rc;
  if (help_config) {
    std::fputs(describe_controller_keys().c_str(), stdout);
    return 0;
  }
  bin::add_set_overrides(flags, sets);
  std::optional<std::string> file;
  if (!config_file.empty())
    file = config_file;
  auto cfg = load_controller_config(file, environment_map(), flags);
  if (!cfg) {
    std::fprintf(stderr, "astraeus-controller: %s\n", render_error(cfg.error()).c_str());
    return 2;
  }
  if (print_config) {
    std::fputs(render_config(*cfg).c_str(), stdout);
    return 0;
  }
  if (auto err = setup_logging("controller", cfg->log_level, cfg->log_file)) {
    std::fprintf(stderr, "astraeus-controller: %s\n", render_error(err).c_str());
    return 2;
  }
  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg);
  caf::actor_system sys{sys_cfg};
  if (cfg->store_backend == "etcd")
    return bin::run_ha_controller(sys, *cfg, signals);
  auto ctl = start_controller(sys, *cfg);
  if (!ctl) {
    spdlog::error("controller: cannot start: {}", render_error(ctl.error()));
    // A bad setting (the fault policy's xid.* / amd.* lists) is a usage
    // error, as every other config error: 2.
    return ctl.error() == ec::invalid_config ? 2 : 1;
  }
  spdlog::info("controller: cluster '{}' serving on {}:{}, store {}, keys {} "
               "(gate key {})",
               cfg->cluster_name, cfg->listen_address, ctl->port,
               ctl->store->path(), ctl->keys_dir, ctl->identity->public_hex());
  auto api = start_api(sys, *ctl, *cfg);
  if (!api) {
    spdlog::error("controller: cannot start the HTTP API: {}", render_error(api.error()));
    bin::bound_shutdown("controller", std::chrono::milliseconds{4000}, 1);
    stop_controller(sys, *ctl);
    return 1;
  }
  if (api->server)
    spdlog::info("controller: HTTP API on {} (api.listen{}{})", api->address,
                 api->fingerprint.empty() ? "" : "; certificate SHA-256 ",
                 api->fingerprint);
  auto sig = bin::wait_for_stop_signal(signals);
  spdlog::info("controller: signal {}, stopping", sig);
  bin::bound_shutdown("controller", std::chrono::milliseconds{4000});
  if (api->server)
    api->server->stop();
  stop_controller(sys, *ctl);
  return 0;
}
