// astra's machine commands: list and show machines; label, cordon,
// maintenance and the data location.

#include <algorithm>
#include <cstdio>
#include <functional>

#include "actors/controller/machine_actor.hpp"
#include "bin/astra/commands.hpp"
#include "bin/astra/usage.hpp"
#include "bin/cli_format.hpp"
#include "messages/labels.hpp"

namespace astraeus::cli {

namespace {

/// Adds `cmd NAME`, a request about one machine that answers its view.
void add_machine_flag(CLI::App& app, invocation& inv, const char* cmd, const char* help,
                      std::function<void(v1::Request&, const std::string&)> fill,
                      std::function<std::string(const v1::MachineView&)> said) {
  auto* sub = app.add_subcommand(cmd, help);
  auto& target = inv.keep<std::string>();
  sub->add_option("NAME", target, "machine name")->required()->check(machine_name_check());
  sub->callback([&inv, &target, fill, said] {
    v1::Request req;
    fill(req, target);
    inv.rc = call(inv.opts, req, [said](const v1::Response& r) {
      return said(r.machine());
    });
  });
}

/// `astra label NAME KEY=VALUE... KEY-...`.
void add_label(CLI::App& app, invocation& inv) {
  // Labels: pools (pool=h100) and topology, like `kubectl label`.
  auto* label = app.add_subcommand("label", "set (KEY=VALUE) or remove (KEY-) labels of a "
                                            "machine, e.g. astra label gpu-01 pool=h100");
  auto& machine = inv.keep<std::string>();
  auto& args = inv.keep<std::vector<std::string>>();
  label->add_option("NAME", machine, "machine name")->required()->check(machine_name_check());
  label->add_option("LABELS", args, "KEY=VALUE to set, KEY- to remove")->required();
  label->callback([&inv, &machine, &args] {
    v1::Request req;
    auto* sl = req.mutable_set_labels();
    sl->set_name(machine);
    for (const auto& a : args) {
      auto eq = a.find('=');
      if (eq != std::string::npos && eq > 0) {
        // The controller's rule, here too: a bad label is the command line's fault.
        if (auto err = check_label(a.substr(0, eq), a.substr(eq + 1))) {
          std::fprintf(stderr, "astra: %s\n", render_error(err).c_str());
          inv.rc = exit_usage;
          return;
        }
        (*sl->mutable_set())[a.substr(0, eq)] = a.substr(eq + 1);
      } else if (a.size() > 1 && a.back() == '-' && eq == std::string::npos)
        sl->add_remove(a.substr(0, a.size() - 1));
      else {
        std::fprintf(stderr, "astra: label %s: give KEY=VALUE to set or KEY- to remove\n",
                     a.c_str());
        inv.rc = 2;
        return;
      }
    }
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      std::string out = "machine " + r.machine().name() + " labels:";
      std::vector<std::string> all;
      for (const auto& [k, v] : r.machine().labels())
        all.push_back(k + "=" + v);
      std::sort(all.begin(), all.end());
      for (const auto& l : all)
        out += " " + l;
      return out + (all.empty() ? " none\n" : "\n");
    });
  });
}

/// `astra maintenance NAME on|off`.
void add_maintenance(CLI::App& app, invocation& inv) {
  auto* maint = app.add_subcommand(
    "maintenance", "take a machine out of service (on) or return it (off)");
  auto& name = inv.keep<std::string>();
  auto& mode = inv.keep<std::string>();
  maint->add_option("NAME", name, "machine name")->required()->check(machine_name_check());
  maint->add_option("MODE", mode, "on or off")
    ->required()
    ->check(CLI::IsMember({"on", "off"}));
  maint->callback([&inv, &name, &mode] {
    v1::Request req;
    req.mutable_set_maintenance()->set_name(name);
    req.mutable_set_maintenance()->set_maintenance(mode == "on");
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return "machine " + r.machine().name() + " is "
             + v1::Machine::State_Name(r.machine().state()) + "\n";
    });
  });
}

/// `astra machine data-location NAME PATH` (issue 20; machines.md, "Where a
/// machine keeps data"): an admin chooses where the machine keeps data.
void add_data_location(CLI::App& machine, invocation& inv) {
  auto* sub = machine.add_subcommand(
    "data-location", "choose where a machine keeps data (an absolute path, e.g. "
                     "/mnt/nvme0/astraeus; wins over the installer's --data-dir; admins)");
  auto& name = inv.keep<std::string>();
  auto& path = inv.keep<std::string>();
  sub->add_option("NAME", name, "machine name")->required()->check(machine_name_check());
  sub->add_option("PATH", path, "the folder, an absolute path")->required();
  sub->callback([&inv, &name, &path] {
    // The controller's rule, checked here too: a relative path is a usage
    // error (exit 2) before anything is sent, as for `astra validate --data-dir`.
    if (auto why = data_location_problem(path)) {
      std::fprintf(stderr, "astra: data location '%s' %s\n", path.c_str(), why->c_str());
      inv.rc = exit_usage;
      return;
    }
    v1::Request req;
    req.mutable_set_data_location()->set_name(name);
    req.mutable_set_data_location()->set_path(path);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return "machine " + r.machine().name() + " keeps data in " + r.machine().data_location()
             + "\n";
    });
  });
}

} // namespace

void add_machine_views(CLI::App& app, invocation& inv) {
  auto* machines = app.add_subcommand("machines", "list machines");
  machines->callback([&inv] {
    v1::Request req;
    req.mutable_list_machines();
    inv.rc = call(inv.opts, req, [&inv](const v1::Response& r) {
      // Which GPUs are held (drove-gpu-scheduling.md: "free and used GPU
      // counts"): the GPU list's holders; without it, the counts alone.
      v1::Request gpus;
      gpus.mutable_list_gpus();
      int rc = 0;
      auto listed = ask_controller(inv.opts, gpus, rc);
      return format_machine_list(r.machines(), now_ms(), listed ? &listed->gpus() : nullptr);
    });
  });
  auto* machine = app.add_subcommand("machine", "show one machine in full");
  auto& name = inv.keep<std::string>();
  // Not required: `astra machine remove NAME` is a subcommand of it.
  machine->add_option("NAME", name, "machine name")->check(machine_name_check());
  add_data_location(*machine, inv);
  machine->callback([&inv, &name, machine] {
    if (!machine->get_subcommands().empty())
      return;
    if (name.empty()) {
      std::fprintf(stderr, "astra: machine: give a machine name (astra machine NAME), or "
                           "astra machine remove NAME\n");
      inv.rc = 2;
      return;
    }
    v1::Request req;
    req.mutable_get_machine()->set_name(name);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return format_machine(r.machine(), now_ms());
    });
  });
}

void add_machine_actions(CLI::App& app, invocation& inv) {
  add_label(app, inv);
  add_machine_flag(
    app, inv, "cordon", "stop new work landing on a machine; what runs there continues",
    [](v1::Request& r, const std::string& n) {
      r.mutable_set_cordon()->set_name(n);
      r.mutable_set_cordon()->set_cordoned(true);
    },
    [](const v1::MachineView& m) { return "machine " + m.name() + " cordoned\n"; });
  add_machine_flag(
    app, inv, "uncordon", "let new work land on a machine again",
    [](v1::Request& r, const std::string& n) {
      r.mutable_set_cordon()->set_name(n);
      r.mutable_set_cordon()->set_cordoned(false);
    },
    [](const v1::MachineView& m) { return "machine " + m.name() + " uncordoned\n"; });
  add_maintenance(app, inv);
}

} // namespace astraeus::cli
