// astra's validation commands (issue 21; shared/seeds/bring-up-a-gpu-cluster.md):
// validate, validations, validation ID, report, policy set|list|delete, accept.

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "actors/controller/machine_actor.hpp"
#include "bin/astra/commands.hpp"
#include "bin/astra/usage.hpp"
#include "bin/cli_format.hpp"
#include "bin/validation_format.hpp"
#include "messages/json.hpp"
#include "messages/labels.hpp"
#include "runtime/gate/gate_client.hpp"
#include "runtime/process/duration_limits.hpp"
#include "runtime/process/duration_text.hpp"

namespace astraeus::cli {

namespace {

/// A --burn-in value in seconds (at most 7 days, at least 1 s); nullopt
/// after saying why on stderr.
std::optional<uint64_t> burn_in_seconds(const std::string& text) {
  auto secs = parse_bounded_seconds(text, "--burn-in", max_burn_in_seconds);
  // It is a duration, only too short (a new-user trial read "'0s' is not a
  // duration").
  if (secs && *secs == 0) {
    std::fprintf(stderr,
                 "astra: --burn-in: '%s' is too short: at least 1s (leave --burn-in out for "
                 "the default, 10m)\n",
                 text.c_str());
    return std::nullopt;
  }
  if (!secs)
    std::fprintf(stderr, "astra: %s\n", render_error(secs.error()).c_str());
  return secs ? std::optional<uint64_t>{*secs} : std::nullopt;
}

struct validate_flags {
  std::string suite = "acceptance";
  std::string pool;
  std::string machine;
  std::string note;
  std::string burn_in;
  uint32_t dcgm_level = 0;
  std::string data_dir;
  bool wait = false;
  bool explain = false;
};

/// How long `validate --wait` tries to reach a controller that went away
/// (restarted, upgraded) before it gives up: the validation goes on there.
constexpr auto wait_reconnect_for = std::chrono::minutes{5};

/// `validate --wait`: polls the validation until it ends, printing a line
/// of progress whenever it changes. A controller that goes away (a restart,
/// an upgrade) is connected to again for up to wait_reconnect_for, saying
/// so once: a long acceptance is not lost track of. Exit code 0 Passed, 1
/// Failed or Skipped (nothing was measured), 3 the controller did not come
/// back.
int wait_for_validation(const options& opts, std::optional<gate_client>& client,
                        const std::string& id) {
  auto timeout = std::chrono::milliseconds{static_cast<int64_t>(opts.timeout_s * 1000)};
  std::string last;
  bool lost = false;  // the controller went away; since `lost_since`
  auto lost_since = std::chrono::steady_clock::now();
  for (;;) {
    v1::Request req;
    req.mutable_get_validation()->set_id(id);
    auto resp = client ? client->call(req, timeout)
                       : caf::expected<v1::Response>{caf::make_error(ec::unreachable)};
    if (!resp) {
      auto now = std::chrono::steady_clock::now();
      if (!lost) {
        lost = true;
        lost_since = now;
        std::fprintf(stderr,
                     "astra: lost the controller (%s); validation %s goes on there: "
                     "connecting again for up to %s\n",
                     render_error(resp.error()).c_str(), id.c_str(),
                     format_duration(std::chrono::duration_cast<std::chrono::seconds>(
                                       wait_reconnect_for)
                                       .count())
                       .c_str());
      } else if (now - lost_since > wait_reconnect_for) {
        std::fprintf(stderr,
                     "astra: the controller did not come back; follow the validation with "
                     "`astra astraeus validation %s`\n",
                     id.c_str());
        return 3;
      }
      std::this_thread::sleep_for(std::chrono::seconds{2});
      int rc = 0;
      client = connect_gate(opts, rc, true);
      continue;
    }
    if (lost) {
      std::fprintf(stderr, "astra: connected to the controller again\n");
      lost = false;
    }
    if (resp->has_error()) {
      std::fprintf(stderr, "astra: %s\n", resp->error().message().c_str());
      return 1;
    }
    const auto& v = resp->validation();
    if (v.state() != "Running") {
      if (opts.output == "json")
        std::fputs((to_json(v) + "\n").c_str(), stdout);
      else
        std::fputs(format_validation_outcome(v).c_str(), stdout);
      // Warned is a pass with findings (as astraeus-check exits 0 on warn).
      return v.state() == "Passed" || v.state() == "Warned" ? 0 : 1;
    }
    auto line = format_validation_progress(v);
    if (line != last && opts.output != "json") {
      std::fputs(line.c_str(), stdout);
      std::fflush(stdout);
      last = line;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{500});
  }
}

/// `validate --explain`: the checks' table, as `astraeus-check explain`
/// prints it (the program beside astra, else on PATH).
int explain(const options& opts) {
  std::error_code err;
  auto self = std::filesystem::read_symlink("/proc/self/exe", err);
  auto beside = (self.parent_path() / "astraeus-check").string();
  std::vector<std::string> args{"astraeus-check", "explain"};
  if (opts.output == "json")
    args.push_back("--json");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  if (!err && ::access(beside.c_str(), X_OK) == 0)
    ::execv(beside.c_str(), argv.data());
  ::execvp("astraeus-check", argv.data());
  std::fprintf(stderr, "astra: validate --explain: cannot run astraeus-check (%s): install it "
                       "beside astra or on PATH\n", std::strerror(errno));
  return 2;
}

int run_validate(const options& opts, const validate_flags& f) {
  if (f.explain)
    return explain(opts);
  // The rule `astra machine data-location` follows.
  if (!f.data_dir.empty())
    if (auto why = data_location_problem(f.data_dir)) {
      std::fprintf(stderr, "astra: --data-dir '%s' %s\n", f.data_dir.c_str(), why->c_str());
      return exit_usage;
    }
  v1::Request req;
  auto* s = req.mutable_start_validation();
  s->set_suite(f.suite);
  s->set_pool(f.pool);
  s->set_machine(f.machine);
  s->set_note(f.note);
  s->set_dcgm_level(f.dcgm_level);
  s->set_data_dir(f.data_dir);
  if (!f.burn_in.empty()) {
    auto secs = burn_in_seconds(f.burn_in);
    if (!secs)
      return 2;
    s->set_burn_in_seconds(*secs);
  }
  int rc = 0;
  auto client = connect_gate(opts, rc);
  if (!client)
    return rc;
  auto timeout = std::chrono::milliseconds{static_cast<int64_t>(opts.timeout_s * 1000)};
  auto resp = client->call(req, timeout);
  if (!resp) {
    std::fprintf(stderr, "astra: %s\n", render_error(resp.error()).c_str());
    std::fprintf(stderr, "astra: the request was sent but no answer came back; check with "
                         "`astra astraeus validations`\n");
    return 3;
  }
  if (resp->has_error()) {
    std::fprintf(stderr, "astra: %s\n", resp->error().message().c_str());
    return 1;
  }
  const auto& v = resp->validation();
  if (opts.output == "json" && !f.wait)
    std::fputs((to_json(v) + "\n").c_str(), stdout);
  else if (opts.output != "json")
    std::fputs(format_validation_started(v).c_str(), stdout);
  std::fflush(stdout);
  return f.wait ? wait_for_validation(opts, client, v.id()) : 0;
}

void add_validate(CLI::App& app, invocation& inv) {
  auto* cmd = app.add_subcommand("validate", "run checks on machines: the quick check, "
                                             "GPU diagnostics, burn-in, copies, the data disk, "
                                             "the fabric between every pair");
  auto& f = inv.keep<validate_flags>();
  cmd->add_option("--suite", f.suite,
                  "acceptance (the default: every check with a 10m burn-in, or its pool's "
                  "policy, then the pairs), quick, dcgm, burn, copies, disk, network (the "
                  "pairs alone)")
    ->check(CLI::IsMember({"acceptance", "quick", "dcgm", "burn", "copies", "disk", "network"}));
  cmd->add_option("--pool", f.pool, "every machine of this pool");
  cmd->add_option("--machine", f.machine, "one machine");
  cmd->add_option("--note", f.note, "a note kept with the validation");
  cmd->add_option("--burn-in", f.burn_in, "burn-in duration (default 10m, at most 7d)");
  cmd->add_option("--dcgm-level", f.dcgm_level, "dcgmi diag level 1-4 (default 2)")
    ->check(CLI::Range(1, 4));
  cmd->add_option("--data-dir", f.data_dir, "the data location the disk check measures");
  cmd->add_flag("--wait", f.wait, "wait for the verdict, showing progress; exit 1 if it fails or "
                                        "was skipped (nothing measured)");
  cmd->add_flag("--explain", f.explain, "print every threshold and verdict rule");
  cmd->callback([&inv, &f] {
    if (!f.explain && f.pool.empty() == f.machine.empty()) {
      std::fprintf(stderr, f.pool.empty()
                             ? "astra: validate: give --pool POOL or --machine NAME\n"
                             : "astra: validate: give --pool POOL or --machine NAME, not both\n");
      inv.rc = 2;
      return;
    }
    // A pool is a label value: one that cannot be is a usage error, as for
    // `astra policy set` (it was "no machine in pool bad pool!", exit 1).
    if (!f.pool.empty())
      if (auto err = check_label("pool", f.pool)) {
        std::fprintf(stderr, "astra: validate: --pool: %s\n", render_error(err).c_str());
        inv.rc = 2;
        return;
      }
    inv.rc = run_validate(inv.opts, f);
  });
}

void add_report(CLI::App& app, invocation& inv) {
  auto* cmd = app.add_subcommand("report", "the Cluster Report: every machine against every "
                                           "check's latest result, and what to fix");
  auto& pool = inv.keep<std::string>();
  auto& html = inv.keep<std::string>();
  cmd->add_option("--pool", pool, "only the machines of this pool");
  cmd->add_option("--html", html, "also save the report as a printable page to FILE");
  cmd->callback([&inv, &pool, &html] {
    // A pool that cannot be a label's value matches no machine: a typo, said
    // as validate says it, not an empty report.
    if (!pool.empty())
      if (auto err = check_label("pool", pool)) {
        std::fprintf(stderr, "astra: report: --pool: %s\n", render_error(err).c_str());
        inv.rc = exit_usage;
        return;
      }
    // The page's folder is checked first: a report printed and then lost
    // to a path typo is a wasted call.
    if (!html.empty()) {
      auto folder = std::filesystem::path{html}.parent_path();
      if (folder.empty())
        folder = ".";
      std::error_code err;
      if (std::filesystem::is_directory(html, err)) {
        std::fprintf(stderr, "astra: report --html %s: is a folder (give a file's path, "
                             "e.g. %s/cluster-report.html)\n",
                     html.c_str(), html.c_str());
        inv.rc = exit_usage;
        return;
      }
      if (!std::filesystem::is_directory(folder, err) || ::access(folder.c_str(), W_OK) != 0) {
        std::fprintf(stderr, "astra: report --html %s: cannot write there (%s is not a folder "
                             "you can write to)\n",
                     html.c_str(), folder.c_str());
        inv.rc = exit_usage;
        return;
      }
    }
    v1::Request req;
    req.mutable_get_report()->set_pool(pool);
    inv.rc = call(inv.opts, req, [&html](const v1::Response& r) {
      return format_report(r.report());
    });
    if (inv.rc != 0 || html.empty())
      return;
    // A second read for the page (the first printed already).
    int rc = 0;
    auto client = connect_gate(inv.opts, rc);
    if (!client) {
      inv.rc = rc;
      return;
    }
    auto resp = client->call(req, std::chrono::milliseconds{
                                    static_cast<int64_t>(inv.opts.timeout_s * 1000)});
    if (!resp || resp->has_error()) {
      std::fprintf(stderr, "astra: report --html: no report\n");
      inv.rc = 1;
      return;
    }
    std::ofstream out{html};
    out << format_report_html(resp->report(), "Cluster Report");
    if (!out) {
      std::fprintf(stderr, "astra: report --html %s: cannot write the file\n", html.c_str());
      inv.rc = 2;
      return;
    }
    if (inv.opts.output != "json")
      std::fprintf(stdout, "saved the printable page to %s\n", html.c_str());
  });
}

/// Issue 12: `astra astraeus topology [--pool P]` (bring-up-a-gpu-cluster.md,
/// step 5): the findings with their fixes, the fabrics, what was not checked.
void add_topology(CLI::App& app, invocation& inv) {
  auto* cmd = app.add_subcommand("topology", "the cluster's fabrics and what looks miswired "
                                             "or degraded in them, with the fixes");
  auto& pool = inv.keep<std::string>();
  cmd->add_option("--pool", pool, "only the machines of this pool");
  cmd->callback([&inv, &pool] {
    if (!pool.empty())
      if (auto err = check_label("pool", pool)) {
        std::fprintf(stderr, "astra: topology: --pool: %s\n", render_error(err).c_str());
        inv.rc = exit_usage;
        return;
      }
    v1::Request req;
    req.mutable_get_topology()->set_pool(pool);
    inv.rc = call(inv.opts, req,
                  [](const v1::Response& r) { return format_topology(r.topology()); });
  });
}

void add_policy(CLI::App& app, invocation& inv) {
  auto* policy = app.add_subcommand("policy", "a pool's validation policy");
  policy->require_subcommand(1);
  auto* set = policy->add_subcommand("set", "set a pool's policy, e.g. "
                                            "policy set h100 --require-acceptance --burn-in 10m");
  auto& pool = inv.keep<std::string>();
  auto& require = inv.keep<bool>(false);
  auto& burn = inv.keep<std::string>();
  auto& level = inv.keep<uint32_t>(0);
  set->add_option("POOL", pool, "the pool")->required();
  auto* require_flag =
    set->add_flag("--require-acceptance,!--no-require-acceptance", require,
                  "machines joining the pool wait as Accepting until they pass acceptance");
  set->add_option("--burn-in", burn, "burn-in duration of its acceptance (default 10m, at most 7d)");
  auto* level_option = set->add_option("--dcgm-level", level, "dcgmi diag level 1-4 (default 2)")
                         ->check(CLI::Range(1, 4));
  auto& exclude = inv.keep<bool>(true);
  auto* exclude_flag = set->add_flag(
    "--exclude-degraded-ports,!--keep-degraded-ports", exclude,
    "leave RDMA ports the topology or the pairs mark degraded out of NCCL_IB_HCA (the default)");
  set->callback([&inv, &pool, &require, &burn, &level, &exclude, require_flag, level_option,
                 exclude_flag] {
    // A pool is a label's value (`astra label NAME pool=…` refuses the same).
    if (auto err = check_label("pool", pool)) {
      std::fprintf(stderr, "astra: %s\n", render_error(err).c_str());
      inv.rc = exit_usage;
      return;
    }
    uint64_t burn_seconds = 0;
    if (!burn.empty()) {
      auto secs = burn_in_seconds(burn);
      if (!secs) {
        inv.rc = 2;
        return;
      }
      burn_seconds = *secs;
    }
    // A set changes only the options given: the pool's policy as it stands
    // is the start (`policy set h100 --burn-in 2m` keeps its acceptance).
    v1::Request ask;
    ask.mutable_list_validation_policies();
    auto listed = ask_controller(inv.opts, ask, inv.rc);
    if (!listed)
      return;
    v1::Request req;
    auto* p = req.mutable_set_validation_policy()->mutable_policy();
    for (const auto& current : listed->validation_policies().policies())
      if (current.pool() == pool)
        *p = current;
    p->set_pool(pool);
    if (require_flag->count() > 0)
      p->set_require_acceptance(require);
    if (level_option->count() > 0)
      p->set_dcgm_level(level);
    if (exclude_flag->count() > 0)
      p->set_exclude_degraded_ports(exclude);
    if (burn_seconds != 0)
      p->set_burn_in_seconds(burn_seconds);
    inv.rc = call(inv.opts, req,
                  [](const v1::Response& r) { return format_policy(r.validation_policy()); });
  });
  auto* del = policy->add_subcommand("delete", "delete a pool's policy: its machines no longer "
                                                "wait for acceptance (admins)");
  auto& gone = inv.keep<std::string>();
  del->add_option("POOL", gone, "the pool")->required();
  del->callback([&inv, &gone] {
    v1::Request req;
    req.mutable_delete_validation_policy()->set_pool(gone);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return "pool " + r.validation_policy().pool() + ": policy deleted\n";
    });
  });
  auto* list = policy->add_subcommand("list", "every pool's policy");
  list->callback([&inv] {
    v1::Request req;
    req.mutable_list_validation_policies();
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      std::string out;
      for (const auto& p : r.validation_policies().policies())
        out += format_policy(p);
      return out.empty() ? std::string{"No pool policies.\n"} : out;
    });
  });
}

void add_accept(CLI::App& app, invocation& inv) {
  auto* cmd = app.add_subcommand("accept", "accept a machine in its pool without passing "
                                           "acceptance (audited)");
  auto& name = inv.keep<std::string>();
  auto& reason = inv.keep<std::string>();
  cmd->add_option("NAME", name, "machine name")->required()->check(machine_name_check());
  cmd->add_option("--reason", reason, "why (kept in the audit log)")->required();
  cmd->callback([&inv, &name, &reason] {
    // A reason of nothing but blanks says nothing in the audit log.
    if (reason.find_first_not_of(" \t\r\n") == std::string::npos) {
      std::fprintf(stderr, "astra: accept: --reason is empty: say why (it is audited)\n");
      inv.rc = exit_usage;
      return;
    }
    v1::Request req;
    req.mutable_accept_machine()->set_machine(name);
    req.mutable_accept_machine()->set_reason(reason);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return "machine " + r.machine().name() + " accepted; it is "
             + v1::Machine::State_Name(r.machine().state()) + "\n";
    });
  });
}

/// `astra astraeus cancel ID [--reason TEXT]` (admins): a mistaken
/// validation (a `--burn-in 7d` on the wrong pool) ends now, Cancelled: its
/// check runs are removed and the machines' GPUs freed; checks that ended
/// keep their results. Exit 0, printing how it ended; 1 when it has ended
/// already or is not known.
void add_cancel(CLI::App& app, invocation& inv) {
  auto* cmd = app.add_subcommand("cancel", "cancel a running validation: its checks stop and "
                                           "their GPUs are freed (admins; audited)");
  auto& id = inv.keep<std::string>();
  auto& reason = inv.keep<std::string>();
  cmd->add_option("ID", id, "val-YYYYMMDD-xxxxxx")->required();
  cmd->add_option("--reason", reason, "why (kept with the validation and in the audit log)");
  cmd->callback([&inv, &id, &reason] {
    // `astra cancel train` reads as Slurm's scancel: a run is stopped with
    // `astra delete`, and this is said before anything is sent.
    if (id.rfind("val-", 0) != 0) {
      std::fprintf(stderr,
                   "astra: cancel: '%s' is not a validation (val-YYYYMMDD-xxxxxx; `astra "
                   "astraeus validations` lists them); a run is stopped with `astra delete "
                   "%s`\n",
                   id.c_str(), id.c_str());
      inv.rc = exit_usage;
      return;
    }
    v1::Request req;
    req.mutable_cancel_validation()->set_id(id);
    req.mutable_cancel_validation()->set_reason(reason);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return format_validation_outcome(r.validation());
    });
  });
}

} // namespace

void add_validation_commands(CLI::App& app, invocation& inv) {
  add_validate(app, inv);
  auto* list = app.add_subcommand("validations", "list validations, newest first");
  list->callback([&inv] {
    v1::Request req;
    req.mutable_list_validations();
    inv.rc = call(inv.opts, req,
                  [](const v1::Response& r) { return format_validation_list(r.validations()); });
  });
  auto* one = app.add_subcommand("validation", "show one validation and its steps");
  auto& id = inv.keep<std::string>();
  one->add_option("ID", id, "val-YYYYMMDD-xxxxxx")->required();
  one->callback([&inv, &id] {
    v1::Request req;
    req.mutable_get_validation()->set_id(id);
    inv.rc = call(inv.opts, req,
                  [](const v1::Response& r) { return format_validation(r.validation()); });
  });
  add_report(app, inv);
  add_topology(app, inv);
  add_policy(app, inv);
  add_accept(app, inv);
  add_cancel(app, inv);
}

} // namespace astraeus::cli
