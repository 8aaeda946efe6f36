// astraeus-agent: runs on each machine, reports its facts to the controller.

#include <atomic>
#include <csignal>
#include <cstdio>
#include <optional>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "actors/controller/controller.hpp"
#include "bin/process.hpp"
#include "messages/error.hpp"
#include "runtime/process/config.hpp"
#include "runtime/gate/gate_client.hpp"
#include "runtime/process/logging.hpp"
#include "runtime/process/system_setup.hpp"

using namespace astraeus;

int main(int argc, char** argv) {
  auto signals = bin::block_stop_signals();
  CLI::App app{"astraeus-agent: the Astraeus machine agent"};
  std::string config_file;
  std::vector<std::string> sets;
  bin::overrides flags;
  bool print_config = false;
  bool help_config = false;
  app.add_option("-c,--config", config_file, "YAML config file (see config/agent.yaml)");
  app.add_option_function<std::string>(
    "--controller",
    [&flags](const std::string& v) {
      // HA mode: several gates, "HOST:PORT,HOST:PORT,..."; the agent
      // follows whichever leads.
      auto first = v.substr(0, v.find(','));
      auto addr = parse_gate_address(first);
      if (!addr)
        throw CLI::ValidationError("--controller", render_error(addr.error()));
      flags.emplace_back("controller.address",
                         v.find(',') == std::string::npos ? addr->host : v);
      flags.emplace_back("controller.port", std::to_string(addr->port));
    },
    "controller gate HOST:PORT (default 127.0.0.1:7450); in HA mode every "
    "controller's, comma-separated");
  auto flag = [&](const char* name, const char* key, const char* help) {
    app.add_option_function<std::string>(
      name, [&flags, key](const std::string& v) { flags.emplace_back(key, v); },
      help);
  };
  flag("--name", "machine.name", "machine name (default: the hostname, kept in the data folder)");
  flag("--data-dir", "data.path", "agent data folder (identity)");
  flag("--token-file", "enrol.token_file",
       "file holding a join token (astra tokens create), used once on first start");
  flag("--controller-key", "controller.public_key",
       "the controller's public key to pin (64 hex digits, from the install command)");
  flag("--report-interval", "report.interval", "how often to report (default 10s)");
  flag("--host-root", "host.root", "read /proc and /sys under this root (tests)");
  flag("--log-level", "log.level", "trace|debug|info|warn|error|off");
  app.add_option("--set", sets, "any config key: --set reconnect.max_backoff=10s");
  app.add_flag("--print-config", print_config, "print the effective config and exit");
  app.add_flag("--help-config", help_config, "list every config key and exit");
  if (auto rc = bin::parse_command_line(app, argc, argv, "astraeus-agent"))
    return *rc;
  if (help_config) {
    std::fputs(describe_agent_keys().c_str(), stdout);
    return 0;
  }
  bin::add_set_overrides(flags, sets);
  std::optional<std::string> file;
  if (!config_file.empty())
    file = config_file;
  auto cfg = load_agent_config(file, environment_map(), flags);
  if (!cfg) {
    std::fprintf(stderr, "astraeus-agent: %s\n", render_error(cfg.error()).c_str());
    return 2;
  }
  if (print_config) {
    std::fputs(render_config(*cfg).c_str(), stdout);
    return 0;
  }
  if (auto err = setup_logging("agent", cfg->log_level, cfg->log_file)) {
    std::fprintf(stderr, "astraeus-agent: %s\n", render_error(err).c_str());
    return 2;
  }
  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg);
  caf::actor_system sys{sys_cfg};
  // A refusal retrying cannot fix (a spent token, another machine's name)
  // stops the program with exit code 1 and the reason (issue 23 item 6):
  // the agent calls back, the callback raises SIGTERM, main wakes up.
  static std::atomic<bool> refused{false};
  auto agent = start_agent(sys, *cfg, {}, [](const std::string& reason) {
    if (refused.exchange(true))
      return;
    spdlog::error("agent: stopping: the controller refused this agent for good: {}", reason);
    ::kill(::getpid(), SIGTERM);
  });
  if (!agent) {
    spdlog::error("agent: cannot start: {}", render_error(agent.error()));
    return 1;
  }
  // HA mode names several gates ("A:P,B:P"): printed as given, no port added.
  const bool gate_list = cfg->controller_address.find(',') != std::string::npos;
  spdlog::info("agent: reporting to {} every {} ms, data in {}",
               gate_list ? cfg->controller_address
                         : cfg->controller_address + ":" + std::to_string(cfg->controller_port),
               cfg->report_interval.count(), cfg->data_dir);
  auto sig = bin::wait_for_stop_signal(signals);
  int code = refused ? 1 : 0;
  if (refused)
    spdlog::error("agent: stopped: retrying cannot fix the controller's refusal (see above)");
  else
    spdlog::info("agent: signal {}, stopping", sig);
  bin::bound_shutdown("agent", std::chrono::milliseconds{4000}, code);
  caf::anon_send_exit(*agent, caf::exit_reason::user_shutdown);
  return code;
}
