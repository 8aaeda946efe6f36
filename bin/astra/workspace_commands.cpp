// astra's workspace commands: where runs go, and the pools (labels)
// granted to them.

#include <cstdio>

#include "bin/astra/commands.hpp"
#include "bin/astra/usage.hpp"
#include "bin/cli_format.hpp"
#include "messages/error.hpp"
#include "messages/labels.hpp"

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

/// What `astra workspace grant` parses.
struct grant_flags {
  std::string name;
  std::vector<std::string> add, remove;
  bool privileged = false, no_privileged = false;
};

/// "workspace vision: machine paths /data, /scratch; privileged work: no".
std::string grants_line(const v1::Workspace& ws) {
  std::string paths;
  for (const auto& p : ws.bind_grants())
    paths += (paths.empty() ? "" : ", ") + p;
  return "workspace " + ws.name() + ": machine paths " + (paths.empty() ? "none" : paths)
         + "; privileged work: " + (ws.allow_privileged() ? "yes" : "no") + "\n";
}

/// Issue 16: `astra workspace grant NAME --path /data [--remove-path P]
/// [--privileged | --no-privileged]` (admins).
void add_workspace_grant(CLI::App& workspace, invocation& inv) {
  auto* grant = workspace.add_subcommand(
    "grant", "grant a workspace machine paths its runs' Bind volumes may mount, and "
             "privileged work (security_context.ipc_mode: host); admins");
  auto& f = inv.keep<grant_flags>();
  grant->add_option("NAME", f.name, "workspace name")->required();
  grant->add_option("--path", f.add, "machine path (and what is under it) a Bind volume may "
                                     "mount, e.g. /data/imagenet; repeatable");
  grant->add_option("--remove-path", f.remove, "take a granted path back; repeatable");
  auto* on = grant->add_flag("--privileged", f.privileged, "allow privileged work");
  grant->add_flag("--no-privileged", f.no_privileged, "take privileged work back")->excludes(on);
  grant->callback([&inv, &f] {
    // The controller's rules, checked first: a bad path is a usage error.
    for (const auto* list : {&f.add, &f.remove})
      for (const auto& p : *list)
        if (normal_grant_path(p).empty()) {
          std::fprintf(stderr,
                       "astra: %s '%s': give an absolute machine path without '..', other "
                       "than / (e.g. /data/imagenet)\n",
                       list == &f.add ? "--path" : "--remove-path", p.c_str());
          inv.rc = exit_usage;
          return;
        }
    v1::Request req;
    auto* g = req.mutable_set_workspace_grants();
    g->set_name(f.name);
    for (const auto& p : f.add)
      g->add_add_bind_paths(p);
    for (const auto& p : f.remove)
      g->add_remove_bind_paths(p);
    if (f.privileged || f.no_privileged)
      g->set_allow_privileged(f.privileged);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) { return grants_line(r.workspace()); });
  });
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
    if (auto err = check_workspace_name(flags.name)) {
      std::fprintf(stderr, "astra: %s\n", render_error(err).c_str());
      inv.rc = exit_usage;
      return;
    }
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
  add_workspace_grant(*workspace, inv);
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
