// astra's day-two commands (issue 13, item 6): `machine remove`, `drain`,
// `tokens list|revoke`, `api-tokens list`, `workspace delete`, and
// `gpu show` (a GPU's facts and its last hour as sparklines).
// They join the groups the other files made (machine, tokens, api-tokens,
// workspace, gpu), so this group comes after those in command_groups().

#include <cstdio>
#include <sstream>

#include "bin/astra/commands.hpp"
#include "bin/astra/usage.hpp"
#include "bin/cli_format.hpp"
#include "messages/labels.hpp"
#include "runtime/process/duration_limits.hpp"
#include "runtime/process/duration_text.hpp"
#include "runtime/process/wall_clock.hpp"
#include "runtime/workers/run_spec.hpp"

namespace astraeus::cli {

namespace {

/// When `unix_ms` is, for a token table: "-" for 0 (never).
std::string when(int64_t unix_ms) {
  return unix_ms == 0 ? std::string{"never"} : format_utc(unix_ms);
}

void add_machine_remove(CLI::App& app, invocation& inv) {
  auto* machine = app.get_subcommand("machine");
  auto* remove = machine->add_subcommand(
    "remove", "remove a Down or drained machine: its GPUs, records and identity go "
              "(its agent must enrol again with a new join token; owners and admins)");
  auto& name = inv.keep<std::string>();
  remove->add_option("NAME", name, "machine name")->required()->check(machine_name_check());
  remove->callback([&inv, &name] {
    v1::Request req;
    req.mutable_remove_machine()->set_name(name);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return "machine " + r.machine().name() +
             " removed: its GPUs, records and identity are gone; its agent is refused "
             "until it enrols again with a new join token\n";
    });
  });
}

void add_drain(CLI::App& app, invocation& inv) {
  auto* drain = app.add_subcommand(
    "drain", "cordon a machine, then stop its workers gracefully at the deadline "
             "(astra drain NAME --deadline 1h; owners and admins)");
  auto& name = inv.keep<std::string>();
  auto& deadline = inv.keep<std::string>("0");
  drain->add_option("NAME", name, "machine name")->required()->check(machine_name_check());
  drain->add_option("--deadline", deadline,
                    "how long its workers may go on: 1h, 30m, 2d (at most 30d); 0 (default): stop them "
                    "now")
    ->capture_default_str();
  drain->callback([&inv, &name, &deadline] {
    auto secs = parse_bounded_seconds(deadline, "--deadline", max_drain_deadline_seconds);
    if (!secs) {
      std::fprintf(stderr, "astra: %s\n", render_error(secs.error()).c_str());
      inv.rc = 2;
      return;
    }
    v1::Request req;
    req.mutable_drain_machine()->set_name(name);
    req.mutable_drain_machine()->set_deadline_seconds(*secs);
    inv.rc = call(inv.opts, req, [secs](const v1::Response& r) {
      const auto& m = r.machine();
      if (*secs == 0)
        return "machine " + m.name() +
               " draining: cordoned; its workers are being stopped now\n";
      return "machine " + m.name() + " draining: cordoned; its workers stop at " +
             format_utc(m.drain_deadline_unix_ms()) + " (in " + format_duration(static_cast<int64_t>(*secs)) +
             "); then `astra machine remove " + m.name() + "` removes it\n";
    });
  });
}

std::string join_token_state(const v1::JoinTokenRecord& t, int64_t now) {
  if (t.revoked())
    return "revoked";
  if (!t.used_by().empty())
    return "used by " + t.used_by();
  return now >= t.expires_unix_ms() ? "expired" : "unused";
}

void add_token_lists(CLI::App& app, invocation& inv) {
  auto* tokens = app.get_subcommand("tokens");
  auto* list = tokens->add_subcommand("list", "list join tokens: id, labels, state "
                                              "(never the token itself)");
  list->callback([&inv] {
    v1::Request req;
    req.mutable_list_join_tokens();
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      if (r.join_tokens().tokens().empty())
        return std::string{"No join tokens. Mint one with: astra tokens create --pool NAME\n"};
      std::vector<std::vector<std::string>> rows;
      auto now = now_ms();
      for (const auto& t : r.join_tokens().tokens()) {
        std::string labels;
        for (const auto& [k, v] : t.labels())
          labels += (labels.empty() ? "" : ",") + k + "=" + v;
        rows.push_back({t.id(), labels.empty() ? "-" : labels, join_token_state(t, now),
                        format_utc(t.created_unix_ms()), when(t.expires_unix_ms()),
                        t.created_by().empty() ? "-" : t.created_by()});
      }
      return render_table({"ID", "LABELS", "STATE", "CREATED", "EXPIRES", "BY"}, rows);
    });
  });
  auto* revoke = tokens->add_subcommand("revoke", "revoke an unused join token by its id");
  auto& id = inv.keep<std::string>();
  revoke->add_option("ID", id, "the token's id (astra tokens list)")->required();
  revoke->callback([&inv, &id] {
    v1::Request req;
    req.mutable_revoke_join_token()->set_id(id);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      auto tid = r.join_tokens().tokens().empty() ? std::string{}
                                                  : r.join_tokens().tokens(0).id();
      return "join token " + tid + " revoked: no machine may enrol with it\n";
    });
  });
  auto* api = app.get_subcommand("api-tokens");
  auto* api_list = api->add_subcommand("list", "list API tokens: id, name, role, state "
                                               "(never the token itself)");
  api_list->callback([&inv] {
    v1::Request req;
    req.mutable_list_api_tokens();
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      std::vector<std::vector<std::string>> rows;
      auto now = now_ms();
      for (const auto& t : r.api_tokens().tokens()) {
        std::string state = t.revoked() ? "revoked"
                            : t.expires_unix_ms() != 0 && now >= t.expires_unix_ms()
                              ? "expired"
                              : "valid";
        rows.push_back({t.id(), t.name(), t.role(), state, format_utc(t.created_unix_ms()),
                        when(t.expires_unix_ms())});
      }
      return render_table({"ID", "NAME", "ROLE", "STATE", "CREATED", "EXPIRES"}, rows);
    });
  });
}

void add_workspace_delete(CLI::App& app, invocation& inv) {
  auto* ws = app.get_subcommand("workspace");
  auto* del = ws->add_subcommand("delete", "delete a workspace that has no live runs "
                                           "(owners and admins)");
  auto& name = inv.keep<std::string>();
  del->add_option("NAME", name, "workspace name")
    ->required()
    ->check(value_check(check_workspace_name));
  del->callback([&inv, &name] {
    v1::Request req;
    req.mutable_delete_workspace()->set_name(name);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return "workspace " + r.workspace().name() + " deleted\n";
    });
  });
}

void add_gpu_show(CLI::App& app, invocation& inv) {
  auto* gpu = app.get_subcommand("gpu");
  auto* show = gpu->add_subcommand("show", "show one GPU: its health, holder, last "
                                           "reported facts and its last hour as sparklines "
                                           "(utilisation, memory, temperature, power, "
                                           "clock, errors)");
  auto& machine = inv.keep<std::string>();
  auto& id = inv.keep<std::string>();
  show->add_option("MACHINE", machine, "machine name")->required()->check(machine_name_check());
  show->add_option("GPU", id, "GPU id (UUID, AMD id), PCI address or index")->required();
  show->callback([&inv, &machine, &id] {
    auto view = ask_gpu(inv, machine, id);
    if (!view)
      return;
    v1::Request ask;
    ask.mutable_get_gpu_history()->set_machine(machine);
    ask.mutable_get_gpu_history()->set_gpu(view->gpu().id());
    int history_rc = 0;
    auto history = ask_controller(inv.opts, ask, history_rc);
    if (inv.opts.output == "json") {
      std::string doc = "{\"gpu\":" + to_json_compact(*view);
      if (history)
        doc += ",\"history\":" + to_json_compact(history->gpu_history());
      std::fputs((doc + "}\n").c_str(), stdout);
    } else {
      v1::GpuList one;
      *one.add_gpus() = *view;
      v1::GpuSection section;
      *section.add_gpus() = view->gpu();
      std::string out = format_gpu_list(one, now_ms()) + format_gpu_section(section);
      if (history)
        out += format_gpu_history(history->gpu_history(), now_ms());
      std::fputs(out.c_str(), stdout);
    }
    inv.rc = history_rc;
  });
}

} // namespace

void add_day2_commands(CLI::App& app, invocation& inv) {
  add_machine_remove(app, inv);
  add_drain(app, inv);
  add_token_lists(app, inv);
  add_workspace_delete(app, inv);
  add_gpu_show(app, inv);
}

} // namespace astraeus::cli
