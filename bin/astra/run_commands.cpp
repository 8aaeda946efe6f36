// astra's run commands: submit a run (flags or a spec file), show and list
// runs, print a worker's output, delete a run.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "bin/astra/commands.hpp"
#include "bin/cli_format.hpp"
#include "messages/error.hpp"
#include "messages/run_key.hpp"
#include "messages/run_state.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/process/config.hpp"
#include "runtime/workers/run_spec.hpp"

namespace astraeus::cli {

namespace {

/// What `astra run` parses.
struct run_flags {
  std::string name, image, file, mem, pool, workspace, runtime, user, code, on_gpu_fault;
  uint32_t gpus = 0, workers = 1, array = 0;
  double cpus = 0;
  uint64_t time_limit = 0;
  bool healthy_only = false, outputs = false, wait = false, rdma = false;
  bool one_per_machine = false;
  std::vector<std::string> command, env;
};

/// Declares `astra run`'s options on `run`, stored in `f`.
void add_run_options(CLI::App* run, run_flags& f) {
  run->add_option("--name", f.name, "run name");
  run->add_option("--image", f.image, "OCI image or root filesystem");
  run->add_option("-f,--file", f.file, "run spec file (JSON or YAML; - reads the standard input)");
  run->add_option("--gpus", f.gpus, "whole GPUs per worker");
  run->add_option("--workers", f.workers, "number of workers (a gang)");
  run->add_option("--cpus", f.cpus, "CPU cores per worker");
  run->add_option("--mem", f.mem, "memory per worker, e.g. 256M, 16G");
  run->add_option("--pool", f.pool, "pool the machines must be in");
  run->add_option("--workspace", f.workspace,
                  "workspace to run in (default: default); its grants are "
                  "labels the machines must carry");
  run->add_option("--array-size", f.array,
                  "run N copies, each placed on its own (array.size)");
  // One value per --env, so `--env K=V CMD` never takes CMD as a value.
  run->add_option("--env", f.env, "KEY=VALUE (or KEY: its value here), repeatable")->allow_extra_args(false);
  run->add_option("--runtime", f.runtime,
                  "how the workers run: runc (OCI containers) or process (host "
                  "processes); default: the machine's choice");
  run->add_option("--user", f.user,
                  "user the workers run as (task_template.user): a name, uid or uid:gid "
                  "of the image");
  run->add_option("--code", f.code,
                  "pack this folder (at most 512 KiB packed; .git and .gitignore'd files "
                  "left out) and unpack it at /workspace, the working directory");
  run->add_flag("--healthy-only", f.healthy_only, "never AtRisk GPUs: wait instead");
  run->add_option("--on-gpu-fault", f.on_gpu_fault,
                  "when a GPU of a worker becomes Faulty: stop (its gang is stopped, the run "
                  "Fails and can be resubmitted) or report (default: keeps running, the run "
                  "shows the fault)")
    ->check(CLI::IsMember({"stop", "report"}));
  run->add_flag("--wait", f.wait,
                "after submitting, show its progress until it runs or ends (exit 1 if it "
                "fails)");
  run->add_flag("--outputs", f.outputs,
                "give each worker $ASTRAEUS_OUTPUTS: key=value lines written there "
                "are shown by astra run show once it ends");
  run->add_flag("--rdma", f.rdma,
                "give each worker the machine's RDMA devices (/dev/infiniband) and "
                "memlock unlimited; waits for machines with an RDMA port up");
  run->add_flag("--one-per-machine", f.one_per_machine,
                "put every worker on a machine of its own (as sbatch --nodes=N does)");
  run->add_option("--time-limit-seconds", f.time_limit, "stop after this long")
    ->check(CLI::Range(uint64_t{0}, uint64_t{max_run_time_limit_seconds}));
  run->add_option("command", f.command, "command and arguments (after --)");
}

/// Reads the spec file `path` into `spec`; false (and a message on stderr)
/// when it cannot be read or does not parse.
bool read_spec_file(const std::string& path, v1::RunSpec& spec) {
  // "-" is the standard input, as kubectl's `-f -` (a spec from a pipe).
  const bool from_stdin = path == "-";
  std::ifstream file;
  if (!from_stdin)
    file.open(path);
  std::istream& in = from_stdin ? std::cin : file;
  if (!in) {
    std::fprintf(stderr, "astra: cannot read %s\n", path.c_str());
    return false;
  }
  // At most one byte over the cap is read: a spec file that never ends
  // (/dev/zero, a pipe) is refused, not read forever.
  std::string text(max_run_spec_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  auto parsed = parse_run_spec(text, from_stdin ? "<stdin>" : path);
  if (!parsed) {
    std::fprintf(stderr, "astra: %s\n", render_error(parsed.error()).c_str());
    return false;
  }
  spec = std::move(*parsed);
  return true;
}

/// Packs the folder `dir` into `spec.code_tgz` (a gzip'd tar of its
/// contents, without version-control folders and what their ignore files
/// name); false (and a message on stderr) when it cannot or it is too big.
bool pack_code(const std::string& dir, v1::RunSpec& spec) {
  std::error_code err;
  if (!std::filesystem::is_directory(dir, err)) {
    std::fprintf(stderr, "astra: --code: %s is not a folder\n", dir.c_str());
    return false;
  }
  std::string quoted = "'";
  for (char c : dir)
    quoted += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  quoted += "'";
  auto cmd = "tar -czf - -C " + quoted + " --exclude-vcs --exclude-vcs-ignores . 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    std::fprintf(stderr, "astra: --code: cannot run tar\n");
    return false;
  }
  std::string packed;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0 && packed.size() <= max_run_code_bytes)
    packed.append(buf, n);
  int status = ::pclose(p);
  if (packed.size() > max_run_code_bytes) {
    std::fprintf(stderr,
                 "astra: --code: %s packs to more than %zu KiB (put data on a drive or "
                 "a Bind volume, or list it in .gitignore)\n",
                 dir.c_str(), max_run_code_bytes >> 10);
    return false;
  }
  if (status != 0 || packed.empty()) {
    std::fprintf(stderr, "astra: --code: tar could not pack %s\n", dir.c_str());
    return false;
  }
  spec.set_code_tgz(std::move(packed));
  return true;
}

/// The spec `astra run` submits: the file's, then each flag given over it;
/// false (and a message on stderr) on bad input.
bool build_spec(const CLI::App& run, const run_flags& f, v1::RunSpec& spec) {
  if (!f.file.empty() && !read_spec_file(f.file, spec))
    return false;
  if (!f.name.empty())
    spec.set_name(f.name);
  if (!f.image.empty())
    spec.set_image(f.image);
  if (run.count("--gpus") > 0)
    spec.set_gpus_per_worker(f.gpus);
  if (run.count("--workers") > 0 || (f.file.empty() && spec.task_groups().empty()))
    spec.set_workers(f.workers);
  if (run.count("--cpus") > 0)
    spec.set_cpus_per_worker(f.cpus);  // validated below: finite, >= 0
  if (!f.mem.empty()) {
    auto bytes = parse_memory_size(f.mem);
    if (!bytes) {
      std::fprintf(stderr, "astra: --mem: %s\n", render_error(bytes.error()).c_str());
      return false;
    }
    spec.set_memory_bytes_per_worker(*bytes);
  }
  if (!f.pool.empty())
    spec.set_pool(f.pool);
  if (!f.workspace.empty())
    spec.set_workspace(f.workspace);
  if (!f.runtime.empty())
    spec.set_runtime(f.runtime);
  if (run.count("--array-size") > 0) {
    // 0 would be a run without copies, not an array of none (a sixth
    // new-user trial saw it accepted and run once as a plain run).
    if (f.array == 0) {
      std::fprintf(stderr, "astra: --array-size: give 1 or more copies (0 is no array; "
                           "leave it out for a plain run)\n");
      return false;
    }
    spec.set_array_size(f.array);
  }
  if (f.healthy_only)
    spec.set_healthy_only(true);
  if (!f.on_gpu_fault.empty())
    spec.set_on_gpu_fault(f.on_gpu_fault);
  if (f.outputs)
    spec.set_outputs(true);
  if (f.rdma)
    spec.set_rdma(true);
  if (f.one_per_machine)
    spec.set_one_worker_per_machine(true);
  if (!f.user.empty())
    spec.set_user(f.user);
  if (!f.code.empty() && !pack_code(f.code, spec))
    return false;
  if (f.time_limit > 0)
    spec.set_time_limit_seconds(f.time_limit);
  for (const auto& kv : f.env) {
    auto eq = kv.find('=');
    if (eq != std::string::npos) {
      (*spec.mutable_env())[kv.substr(0, eq)] = kv.substr(eq + 1);
      continue;
    }
    // `--env NAME` passes NAME's value here on, as `docker run -e NAME` does.
    const char* here = kv.empty() ? nullptr : std::getenv(kv.c_str());
    if (here == nullptr) {
      std::fprintf(stderr, "astra: --env %s: give NAME=VALUE (%s is not set here to pass "
                           "on)\n", kv.c_str(), kv.empty() ? "an empty name" : kv.c_str());
      return false;
    }
    (*spec.mutable_env())[kv] = here;
  }
  if (!f.command.empty()) {
    spec.clear_command();
    for (const auto& c : f.command)
      spec.add_command(c);
  }
  if (auto err = validate_run_spec(spec)) {
    std::fprintf(stderr, "astra: %s\n", render_error(err).c_str());
    return false;
  }
  return true;
}

/// What `astra logs` parses.
struct logs_flags {
  std::string run;
  int worker = 0;
  int copy = -1;  ///< an array run's copy; -1: the lowest
  bool follow = false;
  std::string workspace;
};

/// Adds `--workspace` to a command that names a run (issue 13 item 6).
void add_workspace_option(CLI::App* cmd, std::string& workspace) {
  cmd->add_option("--workspace", workspace,
                  "the run's workspace (run names are per workspace; default: the "
                  "default workspace's run, else the only workspace's that has one)");
}

/// `astra logs RUN`: prints the worker's output from offset 0, and with
/// --follow keeps polling until it ends. Returns the exit code.
int print_logs(const options& opts, const logs_flags& f) {
  int rc = 0;
  auto client = connect_gate(opts, rc);
  if (!client)
    return rc;
  auto timeout = std::chrono::milliseconds{static_cast<int64_t>(opts.timeout_s * 1000)};
  uint64_t offset = 0;
  bool said_waiting = false;
  for (;;) {
    v1::Request req;
    auto* q = req.mutable_get_logs();
    q->set_run(f.run);
    q->set_workspace(f.workspace);
    q->set_worker(f.worker);
    if (f.copy >= 0)
      q->set_copy(f.copy);
    q->set_offset(offset);
    auto resp = client->call(req, timeout);
    if (!resp) {
      std::fprintf(stderr, "astra: %s\n", render_error(resp.error()).c_str());
      return 3;
    }
    if (resp->has_error()) {
      // --follow on a run not placed yet waits for its worker, as `run`
      // then `logs -f` is the seed's first look (an eighth-trial refusal).
      const auto& m = resp->error().message();
      if (f.follow && m.size() >= 15 && m.compare(m.size() - 15, 15, "not placed yet)") == 0) {
        if (!said_waiting)
          std::fprintf(stderr, "astra: %s; following once it starts (Ctrl-C stops)\n",
                       m.c_str());
        said_waiting = true;
        std::this_thread::sleep_for(std::chrono::milliseconds{500});
        continue;
      }
      std::fprintf(stderr, "astra: %s\n", m.c_str());
      return 1;
    }
    const auto& chunk = resp->logs();
    std::fwrite(chunk.data().data(), 1, chunk.data().size(), stdout);
    std::fflush(stdout);
    offset = chunk.next_offset();
    if (!chunk.data().empty())
      continue;  // more may be there already
    // Nothing at all yet from a worker still going (`run` then `logs` at
    // once, the seed's first look): said, not an empty success.
    if (!f.follow && offset == 0 && !chunk.finished())
      std::fprintf(stderr, "astra: %s has written nothing yet (%s on %s; astra logs %s -f "
                           "follows it)\n",
                   chunk.worker().c_str(),
                   chunk.state().empty() ? "starting" : chunk.state().c_str(),
                   chunk.machine().c_str(), f.run.c_str());
    if (!f.follow || chunk.finished())
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds{500});
  }
  return 0;
}

/// `astra run --wait`: polls the run `name` and prints each change of
/// its state (and why it waits) until it is Running or has ended. Returns
/// the exit code: 0 Running or Stopped, 1 Failed, 3 the controller went away.
int wait_for_run(const options& opts, const std::string& name) {
  int rc = 0;
  auto client = connect_gate(opts, rc);
  if (!client)
    return rc;
  auto timeout = std::chrono::milliseconds{static_cast<int64_t>(opts.timeout_s * 1000)};
  std::string last;
  for (;;) {
    v1::Request req;
    req.mutable_get_run()->set_name(name);
    auto resp = client->call(req, timeout);
    if (!resp || resp->has_error()) {
      std::fprintf(stderr, "astra: %s\n",
                   !resp ? render_error(resp.error()).c_str()
                         : resp->error().message().c_str());
      return !resp ? 3 : 1;
    }
    const auto& r = resp->run();
    auto state = state_of(r);
    std::string line = name + ": " + to_string(state);
    if (!r.waiting_reason().empty())
      line += " (" + r.waiting_reason() + ")";
    else if (!r.leader_machine().empty())
      line += " (leader on " + r.leader_machine() + ")";
    if (line != last) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
      last = line;
    }
    if (state == run_state::running || has_ended(state))
      return state == run_state::failed ? 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds{250});
  }
}

/// Under `astra run`, a word after the run's name comes back to `run` as its
/// command (`extra`): refused before anything is done, as `astra delete A B`
/// is (`astra run delete A B` deleted A and said nothing of B). Returns
/// whether it refused (rc 2).
bool refuse_extra_words(const char* command, const std::vector<std::string>* extra,
                        invocation& inv) {
  if (extra == nullptr || extra->empty())
    return false;
  std::fprintf(stderr, "astra: run %s: takes one run name; '%s' is one too many\n", command,
               extra->front().c_str());
  inv.rc = 2;
  return true;
}

/// `logs RUN[N] [--worker N] [--copy N] [-f]` under `parent` (`astra logs`, `astra run logs`).
void add_logs_command(CLI::App& parent, invocation& inv,
                      const std::vector<std::string>* extra = nullptr) {
  // A worker's output, read from its machine.
  auto* logs = parent.add_subcommand(
    "logs", "print a worker's output: astra logs RUN[N] [--worker N] [-f]");
  auto& flags = inv.keep<logs_flags>();
  logs->add_option("RUN", flags.run, "run name")->required();
  logs->add_option("--worker", flags.worker, "the worker's rank (default 0, the leader)")
    ->check(CLI::Range(0, static_cast<int>(max_run_workers) - 1));
  logs->add_option("--copy", flags.copy,
                   "an array run's copy (as RUN[N]; default: the lowest placed)")
    ->check(CLI::NonNegativeNumber);
  logs->add_flag("-f,--follow", flags.follow, "keep printing new output until the "
                                             "worker ends (a run not placed yet: from "
                                             "when it starts)");
  add_workspace_option(logs, flags.workspace);
  logs->callback([&inv, &flags, extra] {
    if (refuse_extra_words("logs", extra, inv))
      return;
    // "arr[2]", as `astra run show` names an array run's copy: run arr,
    // copy 2 (a run's name has no '[').
    auto open = flags.run.find('[');
    if (open != std::string::npos && open > 0 && flags.run.back() == ']') {
      auto digits = flags.run.substr(open + 1, flags.run.size() - open - 2);
      int copy = -1;
      if (!digits.empty() && digits.size() <= 9
          && digits.find_first_not_of("0123456789") == std::string::npos)
        copy = std::stoi(digits);
      if (copy < 0 || (flags.copy >= 0 && flags.copy != copy)) {
        std::fprintf(stderr, "astra: logs %s: %s\n", flags.run.c_str(),
                     copy < 0 ? "give an array run's copy as RUN[N], N a whole number"
                              : "names another copy than --copy");
        inv.rc = 2;
        return;
      }
      flags.copy = copy;
      flags.run.resize(open);
    }
    inv.rc = print_logs(inv.opts, flags);
  });
}

/// `delete NAME` under `parent` (`astra delete`, `astra run delete`).
void add_delete_command(CLI::App& parent, invocation& inv,
                        const std::vector<std::string>* extra = nullptr) {
  auto* del = parent.add_subcommand("delete", "stop a run and free its GPUs");
  auto& name = inv.keep<std::string>();
  auto& del_workspace = inv.keep<std::string>();
  del->add_option("NAME", name, "run name")->required();
  add_workspace_option(del, del_workspace);
  del->callback([&inv, &name, &del_workspace, extra] {
    if (refuse_extra_words("delete", extra, inv))
      return;
    v1::Request req;
    req.mutable_delete_run()->set_name(name);
    req.mutable_delete_run()->set_workspace(del_workspace);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      // Issue 23 item 6: its workers stop; `run show` says how they end.
      const auto& spec = r.run().spec();
      // A validation's check runs again when its run goes (a new-user
      // trial deleted one and saw attempt 2 start): the command that stops
      // the validation is named.
      const std::string check =
        spec.validation().empty()
          ? std::string{}
          : "note: it was a check of validation " + spec.validation()
              + ", which runs it again; `astra astraeus cancel " + spec.validation()
              + "` stops the validation\n";
      if (!r.run().deleted())
        return "run " + spec.name() + " deleted\n" + check;
      return "run " + spec.name() + " deleted; its workers are stopping (astra run show "
             + spec.name()
             + (spec.workspace().empty() || spec.workspace() == default_workspace
                  ? std::string{}
                  : " --workspace " + spec.workspace())
             + ")\n" + check;
    });
  });
}

} // namespace

void add_run_commands(CLI::App& app, invocation& inv) {
  auto* run = app.add_subcommand(
    "run", "submit a run: astra run --name NAME --gpus 8 --workers 2 --image IMG "
           "-- CMD ARGS..., or astra run -f spec.yaml; astra run show|delete|logs NAME");
  run->require_subcommand(0, 1);
  auto& flags = inv.keep<run_flags>();
  add_run_options(run, flags);
  auto* show = run->add_subcommand("show", "show one run: state, and per worker "
                                           "rank, group, machine, GPUs, NUMA node");
  auto& show_name = inv.keep<std::string>();
  auto& show_workspace = inv.keep<std::string>();
  show->add_option("NAME", show_name, "run name")->required();
  add_workspace_option(show, show_workspace);
  show->callback([&inv, &show_name, &show_workspace, &flags] {
    if (refuse_extra_words("show", &flags.command, inv))
      return;
    v1::Request req;
    req.mutable_get_run()->set_name(show_name);
    req.mutable_get_run()->set_workspace(show_workspace);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return format_run(r.run(), now_ms());
    });
  });
  // README: `astra run show|delete|logs NAME`, as `astra delete|logs NAME`.
  add_delete_command(*run, inv, &flags.command);
  add_logs_command(*run, inv, &flags.command);
  run->callback([&inv, &flags, run] {
    if (!run->get_subcommands().empty())
      return;  // show, delete or logs: their own callbacks answered
    if (inv.has_trailing) {
      if (!flags.command.empty()) {
        std::fprintf(stderr, "astra: give the run's command after -- only (got '%s' "
                             "before it)\n", flags.command.front().c_str());
        inv.rc = 2;
        return;
      }
      flags.command = inv.trailing;
      inv.trailing_used = true;
    }
    v1::RunSpec spec;
    if (!build_spec(*run, flags, spec)) {
      inv.rc = 2;
      return;
    }
    v1::Request req;
    *req.mutable_submit_run()->mutable_spec() = spec;
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return format_submitted(r.run(), last_cluster_name());
    });
    if (inv.rc == 0 && flags.wait)
      inv.rc = wait_for_run(inv.opts, spec.name());
  });
  auto* runs = app.add_subcommand("runs", "list runs");
  auto& runs_workspace = inv.keep<std::string>();
  auto& runs_all = inv.keep<bool>();
  runs->add_option("--workspace", runs_workspace, "only this workspace's runs");
  runs->add_flag("--all", runs_all, "also the validations' check runs (astra astraeus "
                                    "validations lists the validations themselves)");
  runs->callback([&inv, &runs_workspace, &runs_all] {
    v1::Request req;
    req.mutable_list_runs()->set_workspace(runs_workspace);
    inv.rc = call(inv.opts, req, [&runs_all](const v1::Response& r) {
      return format_user_runs(r.runs(), now_ms(), runs_all);
    });
  });
}

void add_run_control_commands(CLI::App& app, invocation& inv) {
  add_logs_command(app, inv);
  add_delete_command(app, inv);
}

} // namespace astraeus::cli
