// astraeus: `astraeus dev` runs a one-machine cluster in one process: the
// controller (store in a local folder) and an agent for this machine.

#include <cstdio>
#include <filesystem>
#include <optional>

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "actors/agent/agent.hpp"
#include "actors/controller/api_bridge.hpp"
#include "actors/controller/cluster_actor.hpp"
#include "actors/controller/controller.hpp"
#include "bin/process.hpp"
#include "messages/error.hpp"
#include "runtime/process/config.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/process/logging.hpp"
#include "runtime/gate/secure_channel.hpp"
#include "runtime/process/system_setup.hpp"
#include "runtime/gate/tokens.hpp"
#include "runtime/process/wall_clock.hpp"
#include "store/store.hpp"

using namespace astraeus;
namespace fs = std::filesystem;

namespace {

std::string astra_command() {
  std::error_code err;
  auto self = fs::read_symlink("/proc/self/exe", err);
  if (!err) {
    auto sibling = self.parent_path() / "astra";
    if (fs::exists(sibling) && self.parent_path() != "/usr/local/bin"
        && self.parent_path() != "/usr/bin")
      return sibling.string();
  }
  return "astra";
}

int run_dev(const std::string& data_dir, const std::optional<std::string>& ctl_file,
            const std::optional<std::string>& agent_file, const bin::overrides& ctl_flags,
            const bin::overrides& agent_flags, const std::string& log_level,
            const sigset_t& signals) {
  auto env = environment_map();
  // A laptop's dev cluster stays local unless --listen says otherwise.
  // Its HTTP API is plain HTTP on 127.0.0.1 (the only place plain HTTP is
  // allowed), /metrics open there.
  bin::overrides cf{{"listen.address", "127.0.0.1"},
                    {"api.listen", "127.0.0.1:7451"},
                    {"api.plain_http", "true"}};
  // The dev agent's --report-interval is the interval the controller
  // expects of its agents too: its lapse is checked against it (a new-user
  // trial's `--report-interval 2s --heartbeat-lapse 10s` was refused against
  // the controller's default 10 s).
  for (const auto& [key, value] : agent_flags)
    if (key == "report.interval")
      cf.emplace_back("heartbeat.report_interval", value);
  cf.insert(cf.end(), ctl_flags.begin(), ctl_flags.end());
  cf.emplace_back("store.path", (fs::path{data_dir} / "controller").string());
  if (!log_level.empty())
    cf.emplace_back("log.level", log_level);
  auto ccfg = load_controller_config(ctl_file, env, cf);
  if (!ccfg) {
    std::fprintf(stderr, "astraeus dev: %s\n", render_error(ccfg.error()).c_str());
    return 2;
  }
  bin::overrides af = agent_flags;
  af.emplace_back("data.path", (fs::path{data_dir} / "agent").string());
  af.emplace_back("controller.address", ccfg->listen_address == "0.0.0.0"
                                          ? "127.0.0.1"
                                          : ccfg->listen_address);
  if (!log_level.empty())
    af.emplace_back("log.level", log_level);
  auto acfg = load_agent_config(agent_file, env, af);
  if (!acfg) {
    std::fprintf(stderr, "astraeus dev: %s\n", render_error(acfg.error()).c_str());
    return 2;
  }
  // The agent's own interval against the controller's lapse (issue 18).
  if (auto err = check_heartbeat(ccfg->heartbeat_lapse, "the controller's settings",
                                 acfg->report_interval, "report.interval",
                                 "the agent's settings")) {
    std::fprintf(stderr, "astraeus dev: %s\n", render_error(err).c_str());
    return 2;
  }
  if (auto err = setup_logging("dev", ccfg->log_level, ccfg->log_file)) {
    std::fprintf(stderr, "astraeus dev: %s\n", render_error(err).c_str());
    return 2;
  }
  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg);
  caf::actor_system sys{sys_cfg};
  auto ctl = start_controller(sys, *ccfg);
  if (!ctl) {
    std::fprintf(stderr, "astraeus dev: cannot start the controller: %s\n",
                 render_error(ctl.error()).c_str());
    return ctl.error() == ec::invalid_config ? 2 : 1;
  }
  acfg->controller_port = ctl->port;
  // The dev agent enrols itself: it pins this controller's key, and on its
  // first start, or after `astra machine remove` took its identity, gets a
  // join token handed over in memory.
  acfg->controller_key = ctl->identity->public_hex();
  std::string join_token;
  std::error_code ignored;
  bool enrolled_here = fs::exists(fs::path{acfg->data_dir} / "controller.pub", ignored);
  bool known = false;
  if (enrolled_here)
    if (auto me = load_or_create_identity(acfg->data_dir, acfg->name, local_hostname()))
      if (auto bound = ctl->store->get_raw(family::tokens, machine_identity_key(me->name)))
        known = bound->has_value();
  if (!enrolled_here || !known) {
    auto minted = ctl->tokens->mint_join({}, 600, "astraeus dev", unix_ms_now());
    if (!minted) {
      std::fprintf(stderr, "astraeus dev: cannot mint the agent's join token: %s\n",
                   render_error(minted.error()).c_str());
      stop_controller(sys, *ctl);
      return 1;
    }
    join_token = std::move(minted->first);
  }
  auto agent = start_agent(sys, *acfg, join_token);
  if (!agent) {
    std::fprintf(stderr, "astraeus dev: cannot start the agent: %s\n",
                 render_error(agent.error()).c_str());
    stop_controller(sys, *ctl);
    return 1;
  }
  auto api = start_api(sys, *ctl, *ccfg);
  if (!api) {
    std::fprintf(stderr, "astraeus dev: cannot start the HTTP API: %s\n",
                 render_error(api.error()).c_str());
    // The agent is running by now: it must stop too, or the actor system's
    // destructor waits for it for ever (and SIGTERM is blocked).
    bin::bound_shutdown("dev", std::chrono::milliseconds{4000}, 1);
    caf::anon_send_exit(*agent, caf::exit_reason::user_shutdown);
    stop_controller(sys, *ctl);
    return 1;
  }
  auto name = acfg->name.empty() ? local_hostname() : acfg->name;
  auto addr = ccfg->listen_address + ":" + std::to_string(ctl->port);
  auto astra = astra_command();
  auto flag = ctl->port == 7450 ? std::string{}
                                : " --addr " + addr;
  auto reach = ctl->port == 7450
                 ? std::string{"astra reaches it with no flags"}
                 : "astra: --addr " + addr + " or ASTRAEUS_ADDR=" + addr;
  // astra looks for the owner token under the default data folder only;
  // elsewhere the commands shown name the file.
  auto token_path = owner_token_path(ctl->keys_dir);
  bool default_keys = fs::path{data_dir} == fs::path{default_data_dir("dev")};
  auto token_note = default_keys ? std::string{"astra finds it there"}
                                 : "not the default folder: give astra --token-file " + token_path;
  if (!default_keys)
    flag += " --token-file " + token_path;
  std::printf("Astraeus dev cluster '%s' is running: a controller and an agent "
              "for this machine, in one process.\n"
              "  gate    %s  (%s)\n"
              "  api     %s  (curl -H \"Authorization: Bearer $(cat %s)\" "
              "%s/api/v1/orgs/%s/clusters/%s/nodes)\n"
              "  store   %s\n"
              "  agent   machine '%s', identity in %s\n"
              "  owner   API token in %s (%s)\n"
              "Try:     %s%s machines\n"
              "         %s%s machine %s\n"
              "Stop with Ctrl-C.\n",
              ccfg->cluster_name.c_str(), addr.c_str(), reach.c_str(),
              api->address.empty() ? "off" : api->address.c_str(),
              owner_token_path(ctl->keys_dir).c_str(), api->address.c_str(),
              ccfg->api_organization.c_str(), ccfg->cluster_name.c_str(),
              ctl->store->path().c_str(),
              name.c_str(), acfg->data_dir.c_str(),
              token_path.c_str(), token_note.c_str(), astra.c_str(), flag.c_str(),
              astra.c_str(), flag.c_str(), name.c_str());
  std::fflush(stdout);
  auto sig = bin::wait_for_stop_signal(signals);
  spdlog::info("dev: signal {}, stopping", sig);
  bin::bound_shutdown("dev", std::chrono::milliseconds{4000});
  if (api->server)
    api->server->stop();
  caf::anon_send_exit(*agent, caf::exit_reason::user_shutdown);
  stop_controller(sys, *ctl);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  auto signals = bin::block_stop_signals();
  CLI::App app{"astraeus: Astraeus in one process"};
  app.require_subcommand(1);
  auto* dev = app.add_subcommand(
    "dev", "run a one-machine cluster: controller and agent in one process, "
           "store in a local folder");
  std::string data_dir = default_data_dir("dev");
  std::string log_level;
  bin::overrides ctl_flags;
  bin::overrides agent_flags;
  dev->add_option("--data-dir", data_dir,
                  "folder for the store and the agent's identity")
    ->capture_default_str();
  auto ctl = [&](const char* name, const char* key, const char* help) {
    dev->add_option_function<std::string>(
      name, [&ctl_flags, key](const std::string& v) { ctl_flags.emplace_back(key, v); },
      help);
  };
  auto agt = [&](const char* name, const char* key, const char* help) {
    dev->add_option_function<std::string>(
      name, [&agent_flags, key](const std::string& v) { agent_flags.emplace_back(key, v); },
      help);
  };
  ctl("--listen", "listen.address", "gate address (default 127.0.0.1 in dev mode)");
  ctl("--port", "listen.port", "gate port (default 7450; 0 picks a free one)");
  ctl("--heartbeat-lapse", "heartbeat.lapse", "Down after this long without a report (default 60s)");
  ctl("--api-listen", "api.listen",
      "HTTP API and console address (default 127.0.0.1:7451; port 0 picks a free one)");
  agt("--name", "machine.name", "this machine's name (default: the hostname)");
  agt("--report-interval", "report.interval", "how often the agent reports (default 10s)");
  agt("--host-root", "host.root", "read /proc and /sys under this root");
  dev->add_option("--log-level", log_level, "trace|debug|info|warn|error|off");
  std::optional<std::string> ctl_file, agent_file;
  dev->add_option("--controller-config", ctl_file,
                  "the controller's config file (config/controller.yaml's keys); "
                  "the dev flags and the data folder win over it");
  dev->add_option("--agent-config", agent_file,
                  "the agent's config file (config/agent.yaml's keys); the dev "
                  "flags and the data folder win over it");
  auto* version = app.add_subcommand("version", "print the version");
  app.set_version_flag("--version", std::string{"astraeus "} + ASTRAEUS_VERSION + " (protocol "
                                      + std::to_string(astraeus::protocol_version) + ")");
  if (auto rc = bin::parse_command_line(app, argc, argv, "astraeus"))
    return *rc;
  if (version->parsed()) {
    std::printf("astraeus %s (protocol %u)\n", ASTRAEUS_VERSION, astraeus::protocol_version);
    return 0;
  }
  return run_dev(data_dir, ctl_file, agent_file, ctl_flags, agent_flags, log_level, signals);
}
