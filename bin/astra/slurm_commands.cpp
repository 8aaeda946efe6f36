// `astra slurm sbatch|squeue|scancel` (issue 13, item 8): a Slurm batch
// script runs as a run (its #SBATCH directives read by bin/astra/sbatch.hpp,
// the script mounted read-only at /astra/job.sbatch); squeue and scancel
// are thin aliases of `astra runs` and `astra delete`.

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "bin/astra/commands.hpp"
#include "bin/astra/sbatch.hpp"
#include "bin/cli_format.hpp"

namespace astraeus::cli {

namespace {

/// The most script `astra slurm sbatch` reads (it travels in the run spec).
constexpr size_t max_script_bytes = 256u << 10;

/// What `astra slurm sbatch` parses.
struct sbatch_flags {
  std::string script, image, pool, workspace, runtime, name;
  std::vector<std::string> args;
};

/// A run name from a job name or a script's file name: letters, digits and
/// '-' (others become '-'), at most 63.
std::string run_name_of(const std::string& text) {
  std::string out;
  for (char c : text)
    out.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
  while (!out.empty() && out.front() == '-')
    out.erase(out.begin());
  if (out.size() > 63)
    out.resize(63);
  return out;
}

/// The run spec of script `text` (read from `f.script`); false and a message
/// on stderr when a directive does not map.
bool spec_of_script(const sbatch_flags& f, const std::string& text, v1::RunSpec& spec) {
  auto parsed = parse_sbatch(text);
  if (!parsed.script) {
    std::fprintf(stderr, "astra: slurm sbatch: %s: %s\n", f.script.c_str(),
                 parsed.error.c_str());
    return false;
  }
  const auto& s = *parsed.script;
  std::string name = !f.name.empty()       ? f.name
                     : !s.job_name.empty() ? s.job_name
                                           : std::filesystem::path{f.script}.stem().string();
  spec.set_name(run_name_of(name));
  spec.set_image(f.image);
  spec.set_pool(f.pool);
  spec.set_workspace(f.workspace);
  spec.set_runtime(f.runtime);
  spec.set_workers(s.nodes);
  // --nodes=N is N machines, one task each (--ntasks-per-node=1), as Slurm
  // allocates them: never two workers on one machine.
  spec.set_one_worker_per_machine(s.nodes > 1);
  spec.set_gpus_per_worker(s.gpus_per_node);
  spec.set_cpus_per_worker(s.cpus_per_task);
  spec.set_memory_bytes_per_worker(s.memory_bytes);
  spec.set_time_limit_seconds(s.time_limit_seconds);
  spec.set_array_size(s.array_size);
  for (auto& word : sbatch_command(s, f.args))
    spec.add_command(std::move(word));
  if (!s.output.empty())
    std::fprintf(stderr, "astra: slurm sbatch: note: --output=%s is not written: a file "
                         "would be inside the container and lost with it; the output is in "
                         "`astra logs %s`\n",
                 s.output.c_str(), spec.name().c_str());
  auto* config = spec.add_configs();
  config->set_name("sbatch");
  auto* mount = config->add_mounts();
  mount->set_mount_path(sbatch_mount_path);
  mount->set_content(text);
  return true;
}

void add_sbatch(CLI::App* slurm, invocation& inv) {
  auto* sbatch = slurm->add_subcommand(
    "sbatch", "run a Slurm batch script: its #SBATCH directives that map become the run's "
              "shape, the script is mounted read-only at /astra/job.sbatch and run");
  auto& f = inv.keep<sbatch_flags>();
  sbatch->add_option("--image", f.image, "OCI image or root filesystem the script runs in");
  sbatch->add_option("--pool", f.pool, "pool the machines must be in (Slurm's partition)");
  sbatch->add_option("--workspace", f.workspace, "workspace to run in");
  sbatch->add_option("--runtime", f.runtime, "runc or process; default: the machine's choice");
  sbatch->add_option("--name", f.name, "run name (default: --job-name, else the file's)");
  sbatch->add_option("SCRIPT", f.script, "the batch script")->required();
  sbatch->add_option("ARGS", f.args, "arguments passed to the script");
  sbatch->callback([&inv, &f] {
    std::ifstream in{f.script, std::ios::binary};
    if (!in) {
      std::fprintf(stderr, "astra: slurm sbatch: cannot read %s\n", f.script.c_str());
      inv.rc = 2;
      return;
    }
    std::string text;
    text.resize(max_script_bytes + 1);
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    if (text.size() > max_script_bytes) {
      std::fprintf(stderr, "astra: slurm sbatch: %s is over 256 KiB; keep the script short "
                           "and ship code with the image or --code\n",
                   f.script.c_str());
      inv.rc = 2;
      return;
    }
    v1::Request req;
    if (!spec_of_script(f, text, *req.mutable_submit_run()->mutable_spec())) {
      inv.rc = 2;
      return;
    }
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return format_submitted(r.run(), last_cluster_name());
    });
  });
}

} // namespace

void add_slurm_commands(CLI::App& app, invocation& inv) {
  auto* slurm = app.add_subcommand("slurm", "Slurm's commands for Slurm users: sbatch, "
                                            "squeue, scancel");
  slurm->require_subcommand(1);
  add_sbatch(slurm, inv);
  auto* squeue = slurm->add_subcommand("squeue", "list runs (astra runs)");
  squeue->callback([&inv] {
    v1::Request req;
    req.mutable_list_runs();
    // As `astra runs`: the validations' check runs left out (a new-user
    // trial saw all 18 listed).
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return format_user_runs(r.runs(), now_ms(), false);
    });
  });
  auto* scancel = slurm->add_subcommand("scancel", "stop runs and free their GPUs "
                                                   "(astra delete)");
  auto& names = inv.keep<std::vector<std::string>>();
  scancel->add_option("NAME", names, "run names")->required();
  scancel->callback([&inv, &names] {
    for (const auto& name : names) {
      v1::Request req;
      req.mutable_delete_run()->set_name(name);
      int rc = call(inv.opts, req, [](const v1::Response& r) {
        return "run " + r.run().spec().name() + " cancelled\n";
      });
      if (rc != 0 && inv.rc == 0)
        inv.rc = rc;
    }
  });
}

} // namespace astraeus::cli
