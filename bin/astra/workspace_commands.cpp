// astra's workspace commands: where runs go, and the pools (labels)
// granted to them.

#include <cstdio>

#include "bin/astra/commands.hpp"
#include "bin/cli_format.hpp"

namespace astraeus::cli {

namespace {

/// What `astra workspace create` parses.
struct workspace_flags {
  std::string name;
  std::string organisation;
  std::vector<std::string> grants;
};

/// Fills `ws` from `flags`; false (and a message on stderr) on a bad grant.
bool fill_workspace(const workspace_flags& flags, v1::Workspace& ws) {
  ws.set_name(flags.name);
  ws.set_organisation(flags.organisation);
  for (const auto& g : flags.grants) {
    auto eq = g.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == g.size()) {
      std::fprintf(stderr, "astra: --grant %s: give KEY=VALUE, e.g. pool=h100\n", g.c_str());
      return false;
    }
    auto key = g.substr(0, eq);
    if (ws.grants().count(key)) {
      std::fprintf(stderr, "astra: --grant %s: %s is granted twice; a machine carries "
                           "one value per label\n",
                   g.c_str(), key.c_str());
      return false;
    }
    (*ws.mutable_grants())[key] = g.substr(eq + 1);
  }
  return true;
}

} // namespace

void add_workspace_commands(CLI::App& app, invocation& inv) {
  auto* workspace = app.add_subcommand("workspace", "create a workspace: astra workspace "
                                                    "create NAME --grant pool=h100");
  workspace->require_subcommand(1);
  auto* create = workspace->add_subcommand("create", "create a workspace granted labels");
  auto& flags = inv.keep<workspace_flags>();
  create->add_option("NAME", flags.name, "workspace name")->required();
  create->add_option("--grant", flags.grants,
                     "KEY=VALUE label its machines must carry, e.g. pool=h100; "
                     "repeatable");
  create->add_option("--organisation", flags.organisation,
                     "organisation (default: default)");
  create->callback([&inv, &flags] {
    v1::Request req;
    if (!fill_workspace(flags, *req.mutable_create_workspace()->mutable_workspace())) {
      inv.rc = 2;
      return;
    }
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return "workspace " + r.workspace().name() + " created (namespace "
             + r.workspace().namespace_() + ")\n";
    });
  });
  auto* workspaces = app.add_subcommand("workspaces", "list workspaces and their grants");
  workspaces->callback([&inv] {
    v1::Request req;
    req.mutable_list_workspaces();
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return format_workspaces(r.workspaces());
    });
  });
}

} // namespace astraeus::cli
