// astra: the Astraeus command line. Talks to the controller's gate.

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "bin/cli_format.hpp"
#include "messages/error.hpp"
#include "runtime/process/config.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/gate_client.hpp"
#include "runtime/process/private_file.hpp"
#include "runtime/workers/run_spec.hpp"
#include "runtime/gate/secure_channel.hpp"

using namespace astraeus;

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

struct options {
  std::string addr;
  bool addr_given = false;      ///< --addr or ASTRAEUS_ADDR
  std::string output = "table";
  double timeout_s = 10;
  std::string token_file;       ///< --token-file
  std::string controller_key;   ///< --controller-key
};

/// Where `astra login` keeps its credentials:
/// $XDG_CONFIG_HOME/astraeus/credentials, else ~/.config/astraeus/credentials.
std::string credentials_path() {
  if (auto xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && xdg[0] == '/')
    return std::string{xdg} + "/astraeus/credentials";
  auto home = std::getenv("HOME");
  return std::string{home != nullptr ? home : "."} + "/.config/astraeus/credentials";
}

/// The credentials file's "key=value" lines.
std::map<std::string, std::string> read_credentials(const std::string& path) {
  std::map<std::string, std::string> out;
  auto text = read_trimmed_file(path);
  if (!text)
    return out;
  std::stringstream in{*text};
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos)
      out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

/// Whom astra authenticates as, and which gate key it insists on. In
/// order: --token-file; ASTRAEUS_TOKEN; `astra login`'s credentials; the
/// first owner token a local controller wrote (`astraeus dev`'s, then a
/// controller's at the default data folder), pinning that controller's key.
/// --controller-key pins in every case.
gate_credentials resolve_credentials(options& opts) {
  gate_credentials out;
  std::string pin = opts.controller_key;
  if (!opts.token_file.empty()) {
    auto token = read_trimmed_file(opts.token_file);
    if (!token)
      std::fprintf(stderr, "astra: --token-file: %s\n",
                   render_error(token.error()).c_str());
    else
      out.api_token = *token;
  } else if (auto env = std::getenv("ASTRAEUS_TOKEN"); env != nullptr && *env != '\0') {
    out.api_token = env;
  } else if (auto saved = read_credentials(credentials_path());
             !saved["token"].empty()) {
    out.api_token = saved["token"];
    if (pin.empty())
      pin = saved["controller_key"];
    if (!opts.addr_given && !saved["addr"].empty())
      opts.addr = saved["addr"];
  } else {
    for (auto keys : {default_data_dir("dev") + "/controller-keys",
                      default_data_dir("controller") + "-keys"}) {
      auto token = read_trimmed_file(keys + "/owner-token");
      if (!token)
        continue;
      out.api_token = *token;
      if (pin.empty())
        if (auto key = read_trimmed_file(keys + "/gate.pub"))
          pin = *key;
      break;
    }
  }
  if (!pin.empty()) {
    auto key = parse_public_key(pin, "--controller-key");
    if (key)
      out.pinned = *key;
    else
      std::fprintf(stderr, "astra: %s\n", render_error(key.error()).c_str());
  }
  return out;
}

/// Sends one request and prints its answer; returns the exit code:
/// 0 ok, 1 the controller answered with an error, 3 unreachable.
int call(options opts, v1::Request req,
         const std::function<std::string(const v1::Response&)>& table) {
  auto creds = resolve_credentials(opts);
  auto addr = parse_gate_address(opts.addr);
  if (!addr) {
    std::fprintf(stderr, "astra: %s\n", render_error(addr.error()).c_str());
    return 2;
  }
  auto timeout = std::chrono::milliseconds{
    static_cast<int64_t>(opts.timeout_s * 1000)};
  auto client = gate_client::connect_cli(*addr, timeout, creds);
  if (!client) {
    std::fprintf(stderr, "astra: %s\n", render_error(client.error()).c_str());
    if (client.error() == ec::unreachable)
      std::fprintf(stderr, "astra: is the controller running? Start one with "
                           "`astraeus dev`, or point astra at yours with "
                           "--addr or ASTRAEUS_ADDR.\n");
    if (client.error() == ec::protocol_violation && creds.api_token.empty())
      std::fprintf(stderr, "astra: no API token: run `astra login`, set "
                           "ASTRAEUS_TOKEN, or pass --token-file.\n");
    return 3;
  }
  auto resp = client->call(std::move(req), timeout);
  if (!resp) {
    std::fprintf(stderr, "astra: %s\n", render_error(resp.error()).c_str());
    return 3;
  }
  if (resp->has_error()) {
    if (opts.output == "json")
      std::fputs((cli::to_json(resp->error()) + "\n").c_str(), stdout);
    std::fprintf(stderr, "astra: %s\n", resp->error().message().c_str());
    return 1;
  }
  if (opts.output == "json") {
    if (resp->has_machines())
      std::fputs((cli::to_json(resp->machines()) + "\n").c_str(), stdout);
    else if (resp->has_machine())
      std::fputs((cli::to_json(resp->machine()) + "\n").c_str(), stdout);
    else if (resp->has_gpus())
      std::fputs((cli::to_json(resp->gpus()) + "\n").c_str(), stdout);
    else if (resp->has_cleared())
      std::fputs((cli::to_json_compact(resp->cleared()) + "\n").c_str(), stdout);
    else if (resp->has_xids())
      std::fputs((cli::to_json(resp->xids()) + "\n").c_str(), stdout);
    else if (resp->has_run())
      std::fputs((cli::to_json(resp->run()) + "\n").c_str(), stdout);
    else if (resp->has_runs())
      std::fputs((cli::to_json(resp->runs()) + "\n").c_str(), stdout);
    else if (resp->has_workspace())
      std::fputs((cli::to_json(resp->workspace()) + "\n").c_str(), stdout);
    else if (resp->has_workspaces())
      std::fputs((cli::to_json(resp->workspaces()) + "\n").c_str(), stdout);
    else if (resp->has_join_token()) {
      auto doc = cli::to_json_compact(resp->join_token());
      // The seed's API answer carries the install command too.
      auto install = cli::install_command(
        resp->join_token(), resp->join_token().controller_address().empty()
                              ? opts.addr
                              : resp->join_token().controller_address());
      std::string quoted;
      for (auto c : install)
        quoted += c == '"' || c == '\\' ? std::string{"\\"} + c : std::string{c};
      doc.insert(doc.size() - 1, ",\"install\":\"" + quoted + "\"");
      std::fputs((doc + "\n").c_str(), stdout);
    } else if (resp->has_api_token())
      std::fputs((cli::to_json(resp->api_token()) + "\n").c_str(), stdout);
    else if (resp->has_principal())
      std::fputs((cli::to_json(resp->principal()) + "\n").c_str(), stdout);
    else if (resp->has_audit())
      std::fputs((cli::to_json(resp->audit()) + "\n").c_str(), stdout);
  } else {
    std::fputs(table(*resp).c_str(), stdout);
  }
  return 0;
}

/// Adds every command to `app` (also used under `astra astraeus ...`).
void add_commands(CLI::App& app, options& opts, int& rc) {
  auto* machines = app.add_subcommand("machines", "list machines");
  machines->callback([&] {
    v1::Request req;
    req.mutable_list_machines();
    rc = call(opts, req, [](const v1::Response& r) {
      return cli::format_machine_list(r.machines(), now_ms());
    });
  });
  auto* machine = app.add_subcommand("machine", "show one machine in full");
  static std::string name;
  machine->add_option("NAME", name, "machine name")->required();
  machine->callback([&] {
    v1::Request req;
    req.mutable_get_machine()->set_name(name);
    rc = call(opts, req, [](const v1::Response& r) {
      return cli::format_machine(r.machine(), now_ms());
    });
  });
  auto* gpus = app.add_subcommand("gpus", "list the GPUs of every machine");
  static std::string gpus_machine;
  gpus->add_option("--machine", gpus_machine, "only this machine's GPUs");
  gpus->callback([&] {
    v1::Request req;
    req.mutable_list_gpus()->set_machine(gpus_machine);
    rc = call(opts, req, [](const v1::Response& r) {
      return cli::format_gpu_list(r.gpus(), now_ms());
    });
  });
  auto* gpu_cmd = app.add_subcommand("gpu", "act on one GPU");
  gpu_cmd->require_subcommand(1);
  auto* clear = gpu_cmd->add_subcommand(
    "clear-fault",
    "clear a GPU's latched fault (after the GPU was reset or replaced); the "
    "machine must be connected");
  static std::string clear_machine, clear_gpu;
  clear->add_option("MACHINE", clear_machine, "machine name")->required();
  clear->add_option("GPU-ID", clear_gpu, "GPU id (UUID, or the AMD id)")->required();
  clear->callback([&] {
    v1::Request req;
    req.mutable_clear_fault()->set_machine(clear_machine);
    req.mutable_clear_fault()->set_gpu(clear_gpu);
    // The answer is JSON either way, as the API returns it.
    auto json_opts = opts;
    json_opts.output = "json";
    rc = call(json_opts, req, [](const v1::Response&) { return std::string{}; });
  });
  auto* xids = app.add_subcommand("xids", "print the Xid policy in force: which "
                                          "Xids fence, mark at-risk or are recorded");
  xids->callback([&] {
    v1::Request req;
    req.mutable_xid_policy();
    rc = call(opts, req, [](const v1::Response& r) {
      return cli::format_xid_policy(r.xids());
    });
  });
  // Runs (the scheduler).
  auto* run = app.add_subcommand(
    "run", "submit a run: astra run --name NAME --gpus 8 --workers 2 --image IMG "
           "-- CMD ARGS..., or astra run -f spec.yaml; astra run show NAME");
  run->require_subcommand(0, 1);
  static std::string run_name, run_image, run_file, run_mem, run_pool;
  static uint32_t run_gpus = 0, run_workers = 1, run_array = 0;
  static std::string run_workspace, run_runtime;
  static double run_cpus = 0;
  static uint64_t run_time_limit = 0;
  static bool run_healthy_only = false, run_outputs = false;
  static std::vector<std::string> run_command, run_env;
  run->add_option("--name", run_name, "run name");
  run->add_option("--image", run_image, "OCI image or root filesystem");
  run->add_option("-f,--file", run_file, "run spec file (JSON or YAML)");
  run->add_option("--gpus", run_gpus, "whole GPUs per worker");
  run->add_option("--workers", run_workers, "number of workers (a gang)");
  run->add_option("--cpus", run_cpus, "CPU cores per worker");
  run->add_option("--mem", run_mem, "memory per worker, e.g. 256M, 16G");
  run->add_option("--pool", run_pool, "pool the machines must be in");
  run->add_option("--workspace", run_workspace,
                  "workspace to run in (default: default); its grants are "
                  "labels the machines must carry");
  run->add_option("--array-size", run_array,
                  "run N copies, each placed on its own (array.size)");
  run->add_option("--env", run_env, "KEY=VALUE, repeatable");
  run->add_option("--runtime", run_runtime,
                  "how the workers run: runc (OCI containers) or process (host "
                  "processes); default: the machine's choice");
  run->add_flag("--healthy-only", run_healthy_only, "never AtRisk GPUs: wait instead");
  run->add_flag("--outputs", run_outputs,
                "give each worker $ASTRAEUS_OUTPUTS: key=value lines written there "
                "are shown by astra run show once it ends");
  run->add_option("--time-limit-seconds", run_time_limit, "stop after this long")
    ->check(CLI::Range(uint64_t{0}, uint64_t{max_run_time_limit_seconds}));
  run->add_option("command", run_command, "command and arguments (after --)");
  auto* show = run->add_subcommand("show", "show one run: state, and per worker "
                                           "rank, group, machine, GPUs, NUMA node");
  static std::string show_name;
  show->add_option("NAME", show_name, "run name")->required();
  show->callback([&] {
    v1::Request req;
    req.mutable_get_run()->set_name(show_name);
    rc = call(opts, req, [](const v1::Response& r) {
      return cli::format_run(r.run(), now_ms());
    });
  });
  run->callback([&, run, show] {
    if (show->parsed())
      return;
    v1::RunSpec spec;
    if (!run_file.empty()) {
      std::ifstream in{run_file};
      if (!in) {
        std::fprintf(stderr, "astra: cannot read %s\n", run_file.c_str());
        rc = 2;
        return;
      }
      // At most one byte over the cap is read: a spec file that never ends
      // (/dev/zero, a pipe) is refused, not read forever.
      std::string text(max_run_spec_bytes + 1, '\0');
      in.read(text.data(), static_cast<std::streamsize>(text.size()));
      text.resize(static_cast<size_t>(in.gcount()));
      auto parsed = parse_run_spec(text, run_file);
      if (!parsed) {
        std::fprintf(stderr, "astra: %s\n", render_error(parsed.error()).c_str());
        rc = 2;
        return;
      }
      spec = std::move(*parsed);
    }
    if (!run_name.empty())
      spec.set_name(run_name);
    if (!run_image.empty())
      spec.set_image(run_image);
    if (run->count("--gpus") > 0)
      spec.set_gpus_per_worker(run_gpus);
    if (run->count("--workers") > 0 || (run_file.empty() && spec.task_groups().empty()))
      spec.set_workers(run_workers);
    if (run->count("--cpus") > 0)
      spec.set_cpus_per_worker(run_cpus);  // validated below: finite, >= 0
    if (!run_mem.empty()) {
      auto bytes = parse_memory_size(run_mem);
      if (!bytes) {
        std::fprintf(stderr, "astra: --mem: %s\n", render_error(bytes.error()).c_str());
        rc = 2;
        return;
      }
      spec.set_memory_bytes_per_worker(*bytes);
    }
    if (!run_pool.empty())
      spec.set_pool(run_pool);
    if (!run_workspace.empty())
      spec.set_workspace(run_workspace);
    if (!run_runtime.empty())
      spec.set_runtime(run_runtime);
    if (run->count("--array-size") > 0)
      spec.set_array_size(run_array);
    if (run_healthy_only)
      spec.set_healthy_only(true);
    if (run_outputs)
      spec.set_outputs(true);
    if (run_time_limit > 0)
      spec.set_time_limit_seconds(run_time_limit);
    for (const auto& kv : run_env) {
      auto eq = kv.find('=');
      (*spec.mutable_env())[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
    }
    if (!run_command.empty()) {
      spec.clear_command();
      for (const auto& c : run_command)
        spec.add_command(c);
    }
    if (auto err = validate_run_spec(spec)) {
      std::fprintf(stderr, "astra: %s\n", render_error(err).c_str());
      rc = 2;
      return;
    }
    v1::Request req;
    *req.mutable_submit_run()->mutable_spec() = spec;
    rc = call(opts, req, [](const v1::Response& r) {
      return cli::format_submitted(r.run());
    });
  });
  auto* runs = app.add_subcommand("runs", "list runs");
  runs->callback([&] {
    v1::Request req;
    req.mutable_list_runs();
    rc = call(opts, req, [](const v1::Response& r) {
      return cli::format_run_list(r.runs(), now_ms());
    });
  });
  // Workspaces: where runs go, and the pools (labels) granted to them.
  auto* workspace = app.add_subcommand("workspace", "create a workspace: astra workspace "
                                                    "create NAME --grant pool=h100");
  workspace->require_subcommand(1);
  auto* ws_create = workspace->add_subcommand("create", "create a workspace granted labels");
  static std::string ws_name, ws_org;
  static std::vector<std::string> ws_grants;
  ws_create->add_option("NAME", ws_name, "workspace name")->required();
  ws_create->add_option("--grant", ws_grants,
                        "KEY=VALUE label its machines must carry, e.g. pool=h100; "
                        "repeatable");
  ws_create->add_option("--organisation", ws_org, "organisation (default: default)");
  ws_create->callback([&] {
    v1::Request req;
    auto* ws = req.mutable_create_workspace()->mutable_workspace();
    ws->set_name(ws_name);
    ws->set_organisation(ws_org);
    for (const auto& g : ws_grants) {
      auto eq = g.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == g.size()) {
        std::fprintf(stderr, "astra: --grant %s: give KEY=VALUE, e.g. pool=h100\n",
                     g.c_str());
        rc = 2;
        return;
      }
      auto key = g.substr(0, eq);
      if (ws->grants().count(key)) {
        std::fprintf(stderr, "astra: --grant %s: %s is granted twice; a machine carries "
                             "one value per label\n",
                     g.c_str(), key.c_str());
        rc = 2;
        return;
      }
      (*ws->mutable_grants())[key] = g.substr(eq + 1);
    }
    rc = call(opts, req, [](const v1::Response& r) {
      return "workspace " + r.workspace().name() + " created (namespace "
             + r.workspace().namespace_() + ")\n";
    });
  });
  auto* workspaces = app.add_subcommand("workspaces", "list workspaces and their grants");
  workspaces->callback([&] {
    v1::Request req;
    req.mutable_list_workspaces();
    rc = call(opts, req, [](const v1::Response& r) {
      return cli::format_workspaces(r.workspaces());
    });
  });
  // A worker's output, read from its machine.
  auto* logs = app.add_subcommand(
    "logs", "print a worker's output: astra logs RUN [--worker N] [-f]");
  static std::string logs_run;
  static int logs_worker = 0;
  static bool logs_follow = false;
  logs->add_option("RUN", logs_run, "run name")->required();
  logs->add_option("--worker", logs_worker, "the worker's rank (default 0, the leader)")
    ->check(CLI::Range(0, static_cast<int>(max_run_workers) - 1));
  logs->add_flag("-f,--follow", logs_follow, "keep printing new output until the "
                                            "worker ends");
  logs->callback([&] {
    auto addr = parse_gate_address(opts.addr);
    if (!addr) {
      std::fprintf(stderr, "astra: %s\n", render_error(addr.error()).c_str());
      rc = 2;
      return;
    }
    auto timeout = std::chrono::milliseconds{static_cast<int64_t>(opts.timeout_s * 1000)};
    auto creds = resolve_credentials(opts);
    auto client = gate_client::connect_cli(*addr, timeout, creds);
    if (!client) {
      std::fprintf(stderr, "astra: %s\n", render_error(client.error()).c_str());
      rc = 3;
      return;
    }
    uint64_t offset = 0;
    for (;;) {
      v1::Request req;
      auto* q = req.mutable_get_logs();
      q->set_run(logs_run);
      q->set_worker(logs_worker);
      q->set_offset(offset);
      auto resp = client->call(req, timeout);
      if (!resp) {
        std::fprintf(stderr, "astra: %s\n", render_error(resp.error()).c_str());
        rc = 3;
        return;
      }
      if (resp->has_error()) {
        std::fprintf(stderr, "astra: %s\n", resp->error().message().c_str());
        rc = 1;
        return;
      }
      const auto& chunk = resp->logs();
      std::fwrite(chunk.data().data(), 1, chunk.data().size(), stdout);
      std::fflush(stdout);
      offset = chunk.next_offset();
      if (!chunk.data().empty())
        continue;  // more may be there already
      if (!logs_follow || chunk.finished())
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds{500});
    }
    rc = 0;
  });
  auto* del = app.add_subcommand("delete", "stop a run and free its GPUs");
  static std::string del_name;
  del->add_option("NAME", del_name, "run name")->required();
  del->callback([&] {
    v1::Request req;
    req.mutable_delete_run()->set_name(del_name);
    rc = call(opts, req, [](const v1::Response& r) {
      return "run " + r.run().spec().name() + " deleted\n";
    });
  });
  auto flag_command = [&](const char* cmd, const char* help,
                          std::function<void(v1::Request&, const std::string&)> fill,
                          std::function<std::string(const v1::MachineView&)> said) {
    auto* sub = app.add_subcommand(cmd, help);
    auto target = std::make_shared<std::string>();
    sub->add_option("NAME", *target, "machine name")->required();
    sub->callback([&opts, &rc, fill, said, target] {
      v1::Request req;
      fill(req, *target);
      rc = call(opts, req, [said](const v1::Response& r) {
        return said(r.machine());
      });
    });
  };
  // Labels: pools (pool=h100) and topology, like `kubectl label`.
  auto* label = app.add_subcommand("label", "set (KEY=VALUE) or remove (KEY-) labels of a "
                                            "machine, e.g. astra label gpu-01 pool=h100");
  static std::string label_machine;
  static std::vector<std::string> label_args;
  label->add_option("NAME", label_machine, "machine name")->required();
  label->add_option("LABELS", label_args, "KEY=VALUE to set, KEY- to remove")->required();
  label->callback([&] {
    v1::Request req;
    auto* sl = req.mutable_set_labels();
    sl->set_name(label_machine);
    for (const auto& a : label_args) {
      auto eq = a.find('=');
      if (eq != std::string::npos && eq > 0)
        (*sl->mutable_set())[a.substr(0, eq)] = a.substr(eq + 1);
      else if (a.size() > 1 && a.back() == '-' && eq == std::string::npos)
        sl->add_remove(a.substr(0, a.size() - 1));
      else {
        std::fprintf(stderr, "astra: label %s: give KEY=VALUE to set or KEY- to remove\n",
                     a.c_str());
        rc = 2;
        return;
      }
    }
    rc = call(opts, req, [](const v1::Response& r) {
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
  flag_command(
    "cordon", "stop new work landing on a machine; what runs there continues",
    [](v1::Request& r, const std::string& n) {
      r.mutable_set_cordon()->set_name(n);
      r.mutable_set_cordon()->set_cordoned(true);
    },
    [](const v1::MachineView& m) { return "machine " + m.name() + " cordoned\n"; });
  flag_command(
    "uncordon", "let new work land on a machine again",
    [](v1::Request& r, const std::string& n) {
      r.mutable_set_cordon()->set_name(n);
      r.mutable_set_cordon()->set_cordoned(false);
    },
    [](const v1::MachineView& m) { return "machine " + m.name() + " uncordoned\n"; });
  auto* maint = app.add_subcommand(
    "maintenance", "take a machine out of service (on) or return it (off)");
  static std::string maint_name, maint_mode;
  maint->add_option("NAME", maint_name, "machine name")->required();
  maint->add_option("MODE", maint_mode, "on or off")
    ->required()
    ->check(CLI::IsMember({"on", "off"}));
  maint->callback([&] {
    v1::Request req;
    req.mutable_set_maintenance()->set_name(maint_name);
    req.mutable_set_maintenance()->set_maintenance(maint_mode == "on");
    rc = call(opts, req, [](const v1::Response& r) {
      return "machine " + r.machine().name() + " is "
             + v1::Machine::State_Name(r.machine().state()) + "\n";
    });
  });
  // Enrolment and API tokens (issue 7).
  auto* tokens = app.add_subcommand("tokens", "join tokens for new machines");
  tokens->require_subcommand(1);
  auto* tcreate = tokens->add_subcommand(
    "create", "mint a single-use join token and print the install command "
              "that uses it (owners and admins)");
  static std::string tok_pool, tok_ttl = "1h";
  static std::vector<std::string> tok_labels;
  tcreate->add_option("--pool", tok_pool, "the machine's pool (label pool=NAME)");
  tcreate->add_option("--ttl", tok_ttl, "how long the unused token stays valid: 1h "
                                        "(default), 30m, 24h, 7d")
    ->capture_default_str();
  tcreate->add_option("--label", tok_labels, "KEY=VALUE, a label the machine gets; "
                                             "repeatable");
  tcreate->callback([&] {
    auto ttl = parse_seconds(tok_ttl);
    if (!ttl || *ttl == 0) {
      std::fprintf(stderr, "astra: --ttl: '%s' is not a duration (use 1h, 30m, "
                           "24h, 7d)\n", tok_ttl.c_str());
      rc = 2;
      return;
    }
    v1::Request req;
    auto* body = req.mutable_create_join_token();
    body->set_ttl_seconds(*ttl);
    if (!tok_pool.empty())
      (*body->mutable_labels())["pool"] = tok_pool;
    for (const auto& kv : tok_labels) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::fprintf(stderr, "astra: --label: '%s' is not KEY=VALUE\n", kv.c_str());
        rc = 2;
        return;
      }
      (*body->mutable_labels())[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    rc = call(opts, req, [&opts](const v1::Response& r) {
      const auto& t = r.join_token();
      return cli::format_join_token(
        t, t.controller_address().empty() ? opts.addr : t.controller_address(),
        now_ms());
    });
  });
  auto* api = app.add_subcommand("api-tokens", "API tokens for people and scripts");
  api->require_subcommand(1);
  auto* acreate = api->add_subcommand(
    "create", "mint an API token for NAME with a role (owners and admins; an "
              "owner token only by an owner)");
  static std::string api_name, api_role = "member", api_ttl;
  acreate->add_option("--name", api_name, "who holds it, e.g. alice")->required();
  acreate->add_option("--role", api_role, "owner, admin or member")
    ->check(CLI::IsMember({"owner", "admin", "member"}))
    ->capture_default_str();
  acreate->add_option("--ttl", api_ttl, "how long it is valid (e.g. 30d); "
                                        "default: until revoked");
  acreate->callback([&] {
    v1::Request req;
    auto* body = req.mutable_create_api_token();
    body->set_name(api_name);
    body->set_role(api_role);
    if (!api_ttl.empty()) {
      auto ttl = parse_seconds(api_ttl);
      if (!ttl) {
        std::fprintf(stderr, "astra: --ttl: '%s' is not a duration\n",
                     api_ttl.c_str());
        rc = 2;
        return;
      }
      body->set_ttl_seconds(*ttl);
    }
    rc = call(opts, req, [](const v1::Response& r) {
      const auto& t = r.api_token();
      return "token  " + t.token() + "\nid     " + t.id() + "\nname   "
             + t.name() + "\nrole   " + t.role()
             + "\n(shown once; `astra login` with it, or set ASTRAEUS_TOKEN)\n";
    });
  });
  auto* arevoke = api->add_subcommand("revoke", "revoke an API token by its id");
  static std::string revoke_id;
  arevoke->add_option("ID", revoke_id, "the token's id (12 hex digits)")->required();
  arevoke->callback([&] {
    v1::Request req;
    req.mutable_revoke_api_token()->set_id(revoke_id);
    rc = call(opts, req, [](const v1::Response& r) {
      return "API token " + r.api_token().id() + " (" + r.api_token().name()
             + ") revoked\n";
    });
  });
  auto* whoami = app.add_subcommand("whoami", "who astra authenticates as");
  whoami->callback([&] {
    v1::Request req;
    req.mutable_whoami();
    rc = call(opts, req, [](const v1::Response& r) {
      return r.principal().name() + " (" + r.principal().role() + ", token "
             + r.principal().token_id() + ")\n";
    });
  });
  auto* audit = app.add_subcommand("audit", "the audit log of admin actions, "
                                            "newest first (owners and admins)");
  static uint32_t audit_limit = 100;
  audit->add_option("--limit", audit_limit, "at most this many records");
  audit->callback([&] {
    v1::Request req;
    req.mutable_list_audit()->set_limit(audit_limit);
    rc = call(opts, req, [](const v1::Response& r) {
      return cli::format_audit(r.audit());
    });
  });
  auto* login = app.add_subcommand(
    "login", "check an API token with the controller and keep it (mode 0600) "
             "for later commands, with the controller's address and key");
  static std::string login_file;
  login->add_option("--token-file", login_file,
                    "file holding the token; default: read it from stdin");
  login->callback([&] {
    std::string token;
    if (!login_file.empty()) {
      auto t = read_trimmed_file(login_file);
      if (!t) {
        std::fprintf(stderr, "astra: %s\n", render_error(t.error()).c_str());
        rc = 2;
        return;
      }
      token = *t;
    } else {
      if (::isatty(0))
        std::fprintf(stderr, "API token: ");
      std::getline(std::cin, token);
      while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back())))
        token.pop_back();
    }
    auto addr = parse_gate_address(opts.addr);
    if (!addr) {
      std::fprintf(stderr, "astra: %s\n", render_error(addr.error()).c_str());
      rc = 2;
      return;
    }
    gate_credentials creds;
    creds.api_token = token;
    if (!opts.controller_key.empty()) {
      auto key = parse_public_key(opts.controller_key, "--controller-key");
      if (!key) {
        std::fprintf(stderr, "astra: %s\n", render_error(key.error()).c_str());
        rc = 2;
        return;
      }
      creds.pinned = *key;
    }
    auto timeout = std::chrono::milliseconds{
      static_cast<int64_t>(opts.timeout_s * 1000)};
    auto client = gate_client::connect_cli(*addr, timeout, creds);
    if (!client) {
      std::fprintf(stderr, "astra: %s\n", render_error(client.error()).c_str());
      rc = 3;
      return;
    }
    const auto& who = client->welcome().principal();
    auto path = credentials_path();
    if (auto err = write_private_file(
          path, "token=" + token + "\naddr=" + opts.addr
                  + "\ncontroller_key=" + to_hex(client->server_key()))) {
      std::fprintf(stderr, "astra: %s\n", render_error(err).c_str());
      rc = 1;
      return;
    }
    std::printf("Logged in to %s as %s (%s); credentials in %s (mode 0600), "
                "controller key %s pinned.\n",
                opts.addr.c_str(), who.name().c_str(), who.role().c_str(),
                path.c_str(), fingerprint(client->server_key()).c_str());
    rc = 0;
  });
  auto* version = app.add_subcommand("version", "print astra's version");
  version->callback([&] {
    std::printf("astra %s (protocol %u)\n", ASTRAEUS_VERSION, astraeus::protocol_version);
    rc = 0;
  });
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"astra: the Astraeus command line"};
  app.require_subcommand(1);
  options opts;
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
    "controller gate HOST:PORT (env ASTRAEUS_ADDR; default "
    "127.0.0.1:7450, or the one `astra login` kept)");
  app.add_option("--token-file", opts.token_file,
                 "file holding the API token (else ASTRAEUS_TOKEN, `astra "
                 "login`'s, or a local controller's first owner token)");
  app.add_option("--controller-key", opts.controller_key,
                 "the controller's public key to insist on (64 hex digits)");
  app.add_option("-o,--output", opts.output, "table or json")
    ->check(CLI::IsMember({"table", "json"}));
  app.add_option("--timeout", opts.timeout_s, "seconds to wait for the controller");
  app.fallthrough();
  int rc = 0;
  add_commands(app, opts, rc);
  // The seeds write `astra astraeus <command>`: accept that spelling too.
  auto* prefixed = app.add_subcommand("astraeus", "the same commands, as the docs spell them");
  prefixed->require_subcommand(1);
  prefixed->fallthrough();
  options& popts = opts;
  (void) popts;
  int rc2 = 0;
  add_commands(*prefixed, opts, rc2);
  CLI11_PARSE(app, argc, argv);
  return prefixed->parsed() ? rc2 : rc;
}
