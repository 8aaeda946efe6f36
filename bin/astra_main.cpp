// astra: the Astraeus command line. Talks to the controller's gate. The
// commands are in bin/astra/ (one file per command group).

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <CLI/CLI.hpp>

#include "bin/astra/commands.hpp"
#include "bin/astra/usage.hpp"
#include "bin/process.hpp"
#include "runtime/gate/gate_client.hpp"

using namespace astraeus;

namespace {

/// astra's global options, before the command.
void add_global_options(CLI::App& app, cli::options& opts) {
  if (auto env = std::getenv("ASTRAEUS_ADDR"); env != nullptr && *env != '\0') {
    opts.addr = env;
    opts.addr_given = true;
  } else {
    opts.addr = default_gate_address;
  }
  app.add_option_function<std::string>(
    "--addr",
    [&opts](const std::string& v) {
      opts.addr = v;
      opts.addr_given = true;
    },
    "controller gate HOST:PORT, or an HA group's gates comma-separated in any "
    "order (the leader is found) (env ASTRAEUS_ADDR; default 127.0.0.1:7450, or "
    "the one `astra login` kept)");
  app.add_option("--token-file", opts.token_file,
                 "file holding the API token (else ASTRAEUS_TOKEN, `astra "
                 "login`'s, or a local controller's first owner token)");
  app.add_option("--controller-key", opts.controller_key,
                 "the controller's public key to insist on (64 hex digits)");
  app.add_option("-o,--output", opts.output, "table or json")
    ->check(CLI::IsMember({"table", "json"}));
  app.add_option("--timeout", opts.timeout_s,
                 "how long to wait for the controller: seconds (0.1 to 3600), or with a "
                 "unit: 500ms, 5s, 2m")
    ->transform(cli::wait_time_check());
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"astra: the Astraeus command line"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string{"astra "} + ASTRAEUS_VERSION);
  cli::invocation inv;
  add_global_options(app, inv.opts);
  app.fallthrough();
  cli::add_commands(app, inv);
  // The seeds write `astra astraeus <command>`: accept that spelling too,
  // built from the same command groups (with option storage of its own).
  auto* prefixed = app.add_subcommand("astraeus", "the same commands, as the docs spell them");
  prefixed->require_subcommand(1);
  prefixed->fallthrough();
  cli::add_commands(*prefixed, inv);
  // Everything after the first `--` is a run's command, never options
  // (`astra run --env K=V -- sh -c '…'`): CLI11 parses only what is before it.
  auto line = cli::split_at_double_dash(argc, argv);
  // Only `astra run` takes a command after `--`: refuse any other before
  // it does anything.
  if (line.has_double_dash
      && std::find(line.head.begin(), line.head.end(), "run") == line.head.end()) {
    std::fprintf(stderr, "astra: only `astra run` takes a command after --\n");
    return cli::exit_usage;
  }
  inv.trailing = line.trailing;
  inv.has_trailing = line.has_double_dash;
  std::vector<const char*> head;
  for (const auto& a : line.head)
    head.push_back(a.c_str());
  if (auto rc = bin::parse_or_exit(
        app, [&] { app.parse(static_cast<int>(head.size()), head.data()); },
        [&](const CLI::ParseError& e) {
          std::fprintf(stderr, "astra: %s\n",
                       cli::explain_usage_error(app, line.head, e).c_str());
          return cli::exit_usage;
        }))
    return *rc;
  if (inv.has_trailing && !inv.trailing_used) {
    std::fprintf(stderr, "astra: only `astra run` takes a command after --\n");
    return cli::exit_usage;
  }
  return inv.rc;
}
