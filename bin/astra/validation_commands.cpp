// astra's validation commands (issue 21; shared/seeds/bring-up-a-gpu-cluster.md):
// validate, validations, validation ID, report, policy set|list, accept.

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "bin/astra/commands.hpp"
#include "bin/cli_format.hpp"
#include "bin/validation_format.hpp"
#include "messages/json.hpp"
#include "runtime/gate/gate_client.hpp"

namespace astraeus::cli {

namespace {

/// "10m", "90s", "1h", "600" (seconds) -> seconds; nullopt when malformed.
std::optional<uint64_t> parse_seconds(const std::string& text) {
  if (text.empty())
    return std::nullopt;
  size_t used = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(text, &used);
  } catch (...) {
    return std::nullopt;
  }
  auto unit = text.substr(used);
  if (unit.empty() || unit == "s")
    return n;
  if (unit == "m")
    return n * 60;
  if (unit == "h")
    return n * 3600;
  return std::nullopt;
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

/// `validate --wait`: polls the validation until it ends, printing a line
/// of progress whenever it changes. Exit code 0 Passed, 1 Failed, 3 gone.
int wait_for_validation(const options& opts, gate_client& client, const std::string& id) {
  auto timeout = std::chrono::milliseconds{static_cast<int64_t>(opts.timeout_s * 1000)};
  std::string last;
  for (;;) {
    v1::Request req;
    req.mutable_get_validation()->set_id(id);
    auto resp = client.call(req, timeout);
    if (!resp || resp->has_error()) {
      std::fprintf(stderr, "astra: %s\n",
                   !resp ? render_error(resp.error()).c_str() : resp->error().message().c_str());
      return !resp ? 3 : 1;
    }
    const auto& v = resp->validation();
    if (v.state() != "Running") {
      if (opts.output == "json")
        std::fputs((to_json(v) + "\n").c_str(), stdout);
      else
        std::fputs(format_validation_outcome(v).c_str(), stdout);
      return v.state() == "Passed" ? 0 : 1;
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
  v1::Request req;
  auto* s = req.mutable_start_validation();
  s->set_suite(f.suite);
  s->set_pool(f.pool);
  s->set_machine(f.machine);
  s->set_note(f.note);
  s->set_dcgm_level(f.dcgm_level);
  s->set_data_dir(f.data_dir);
  if (!f.burn_in.empty()) {
    auto secs = parse_seconds(f.burn_in);
    if (!secs || *secs == 0) {
      std::fprintf(stderr, "astra: --burn-in %s: give a duration such as 10m or 90s\n",
                   f.burn_in.c_str());
      return 2;
    }
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
  return f.wait ? wait_for_validation(opts, *client, v.id()) : 0;
}

void add_validate(CLI::App& app, invocation& inv) {
  auto* cmd = app.add_subcommand("validate", "run checks on machines: the quick check, "
                                             "GPU diagnostics, burn-in, copies, the data disk, "
                                             "the fabric between every pair");
  auto& f = inv.keep<validate_flags>();
  cmd->add_option("--suite", f.suite,
                  "acceptance (every check, then the pairs), quick, dcgm, burn, copies, disk, "
                  "network (the pairs alone)")
    ->check(CLI::IsMember({"acceptance", "quick", "dcgm", "burn", "copies", "disk", "network"}));
  cmd->add_option("--pool", f.pool, "every machine of this pool");
  cmd->add_option("--machine", f.machine, "one machine");
  cmd->add_option("--note", f.note, "a note kept with the validation");
  cmd->add_option("--burn-in", f.burn_in, "burn-in duration (default 10m)");
  cmd->add_option("--dcgm-level", f.dcgm_level, "dcgmi diag level 1-4 (default 2)")
    ->check(CLI::Range(1, 4));
  cmd->add_option("--data-dir", f.data_dir, "the data location the disk check measures");
  cmd->add_flag("--wait", f.wait, "wait for the verdict, showing progress; exit 1 if it fails");
  cmd->add_flag("--explain", f.explain, "print every threshold and verdict rule");
  cmd->callback([&inv, &f] {
    if (!f.explain && f.pool.empty() == f.machine.empty()) {
      std::fprintf(stderr, "astra: validate: give --pool POOL or --machine NAME\n");
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
  set->add_option("--burn-in", burn, "burn-in duration of its acceptance (default 10m)");
  auto* level_option = set->add_option("--dcgm-level", level, "dcgmi diag level 1-4 (default 2)")
                         ->check(CLI::Range(1, 4));
  auto& exclude = inv.keep<bool>(true);
  auto* exclude_flag = set->add_flag(
    "--exclude-degraded-ports,!--keep-degraded-ports", exclude,
    "leave RDMA ports the topology or the pairs mark degraded out of NCCL_IB_HCA (the default)");
  set->callback([&inv, &pool, &require, &burn, &level, &exclude, require_flag, level_option,
                 exclude_flag] {
    uint64_t burn_seconds = 0;
    if (!burn.empty()) {
      auto secs = parse_seconds(burn);
      if (!secs || *secs == 0) {
        std::fprintf(stderr, "astra: --burn-in %s: give a duration such as 10m\n", burn.c_str());
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
  cmd->add_option("NAME", name, "machine name")->required();
  cmd->add_option("--reason", reason, "why (kept in the audit log)")->required();
  cmd->callback([&inv, &name, &reason] {
    v1::Request req;
    req.mutable_accept_machine()->set_machine(name);
    req.mutable_accept_machine()->set_reason(reason);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return "machine " + r.machine().name() + " accepted; it is "
             + v1::Machine::State_Name(r.machine().state()) + "\n";
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
}

} // namespace astraeus::cli
