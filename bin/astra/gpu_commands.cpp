// astra's GPU commands: list GPUs, clear a latched fault, print the Xid
// policy.

#include "bin/astra/commands.hpp"
#include "bin/astra/usage.hpp"
#include "bin/cli_format.hpp"

namespace astraeus::cli {

const v1::GpuView* find_gpu(const v1::GpuList& list, const std::string& id) {
  for (const auto& g : list.gpus())
    if (g.gpu().id() == id || g.gpu().pci_address() == id
        || (g.gpu().has_index() && std::to_string(g.gpu().index()) == id))
      return &g;
  return nullptr;
}

std::optional<v1::GpuView> ask_gpu(invocation& inv, const std::string& machine,
                                   const std::string& id) {
  v1::Request list;
  list.mutable_list_gpus()->set_machine(machine);
  auto listed = ask_controller(inv.opts, list, inv.rc);
  if (!listed)
    return std::nullopt;
  const auto* view = find_gpu(listed->gpus(), id);
  if (view == nullptr) {
    const std::string message = "machine " + machine + " has no GPU " + id
                                + " (see astra gpus --machine " + machine + ")";
    // -o json: the API's answer to the same question (404 NOT_FOUND).
    if (inv.opts.output == "json") {
      v1::Error e;
      e.set_code("NOT_FOUND");
      e.set_message(message);
      std::fputs((to_json(e) + "\n").c_str(), stdout);
    }
    std::fprintf(stderr, "astra: %s\n", message.c_str());
    inv.rc = 1;
    return std::nullopt;
  }
  return *view;
}

namespace {

/// `astra gpu clear-fault MACHINE --all`: every GPU of `machine` with a
/// latch, cleared one request each (the controller's rule per GPU: the
/// machine connected, the caller an admin). A shared node's hand-over
/// failure (/dev/nvidiactl missing) fences every GPU of the machine; once
/// the host is fixed this lifts them in one command. Exit 0 when each
/// clear succeeded (none latched included); the first refusal ends it with
/// its exit code (-o json: its error object alone).
void clear_every_latched_gpu(invocation& inv, const std::string& machine) {
  v1::Request list;
  list.mutable_list_gpus()->set_machine(machine);
  auto listed = ask_controller(inv.opts, list, inv.rc);
  if (!listed)
    return;
  std::vector<std::string> latched;
  for (const auto& g : listed->gpus().gpus())
    if (g.machine() == machine && g.gpu().latches_size() > 0)
      latched.push_back(g.gpu().id());
  const bool json = inv.opts.output == "json";
  if (latched.empty()) {
    if (json)
      std::fputs("[]\n", stdout);
    else
      std::printf("No GPU of %s has a latched fault; nothing to clear.\n", machine.c_str());
    inv.rc = 0;
    return;
  }
  std::string docs;
  for (const auto& id : latched) {
    v1::Request req;
    req.mutable_clear_fault()->set_machine(machine);
    req.mutable_clear_fault()->set_gpu(id);
    int one = 0;
    auto resp = ask_controller(inv.opts, req, one);
    if (!resp) {
      // The first refusal ends it, as one clear's would (a machine not
      // connected refuses them all): with -o json its error object alone
      // is the output (a ninth trial read an error followed by "[]").
      inv.rc = one;
      return;
    }
    const auto& c = resp->cleared();
    if (json)
      docs += (docs.empty() ? "" : ",") + to_json_compact(c);
    else
      std::printf("GPU %s on %s: %s\n", c.uuid().c_str(), machine.c_str(),
                  c.cleared() ? "fault cleared; new work may land on it again."
                              : "nothing was latched; nothing to clear.");
  }
  if (json)
    std::fputs(("[" + docs + "]\n").c_str(), stdout);
  inv.rc = 0;
}

} // namespace

void add_gpu_commands(CLI::App& app, invocation& inv) {
  auto* gpus = app.add_subcommand("gpus", "list the GPUs of every machine");
  auto& only = inv.keep<std::string>();
  gpus->add_option("--machine", only, "only this machine's GPUs");
  gpus->callback([&inv, &only] {
    v1::Request req;
    req.mutable_list_gpus()->set_machine(only);
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return format_gpu_list(r.gpus(), now_ms());
    });
  });
  auto* gpu_cmd = app.add_subcommand("gpu", "act on one GPU");
  gpu_cmd->require_subcommand(1);
  auto* clear = gpu_cmd->add_subcommand(
    "clear-fault",
    "clear a GPU's latched fault (after the GPU was reset or replaced); the "
    "machine must be connected");
  auto& machine = inv.keep<std::string>();
  auto& gpu = inv.keep<std::string>();
  auto& all = inv.keep<bool>();
  clear->add_option("MACHINE", machine, "machine name")->required()->check(machine_name_check());
  auto* gpu_opt =
    clear->add_option("GPU-ID", gpu, "GPU id (UUID, or the AMD id), PCI address or index");
  auto* all_flag = clear->add_flag(
    "--all", all,
    "clear every latched GPU of the machine (after a fix that mended them all: a "
    "driver reload that brought back /dev/nvidiactl, a node reboot)");
  gpu_opt->excludes(all_flag);
  clear->callback([&inv, &machine, &gpu, &all] {
    if (all) {
      clear_every_latched_gpu(inv, machine);
      return;
    }
    if (gpu.empty()) {
      std::fprintf(stderr, "astra: gpu clear-fault: give the GPU (GPU-ID: its UUID, PCI "
                           "address or index) or --all for every latched GPU of %s\n",
                   machine.c_str());
      inv.rc = 2;
      return;
    }
    // An index, as `astra gpu show` takes it (a new-user trial): the GPU
    // of that index on the machine, by its id.
    std::string target = gpu;
    if (!gpu.empty() && gpu.size() <= 3
        && gpu.find_first_not_of("0123456789") == std::string::npos) {
      auto view = ask_gpu(inv, machine, gpu);
      if (!view)
        return;
      target = view->gpu().id();
    }
    v1::Request req;
    req.mutable_clear_fault()->set_machine(machine);
    req.mutable_clear_fault()->set_gpu(target);
    // A sentence for people; the API's JSON with -o json.
    inv.rc = call(inv.opts, req, [&machine](const v1::Response& r) {
      const auto& c = r.cleared();
      if (c.cleared())
        return "GPU " + c.uuid() + " on " + machine
               + ": fault cleared; new work may land on it again.\n";
      return "GPU " + c.uuid() + " on " + machine + ": nothing was latched; nothing to clear.\n";
    });
  });
  auto* xids = app.add_subcommand("xids", "print the Xid policy in force: which "
                                          "Xids fence, mark at-risk or are recorded");
  xids->callback([&inv] {
    v1::Request req;
    req.mutable_xid_policy();
    inv.rc = call(inv.opts, req, [](const v1::Response& r) {
      return format_xid_policy(r.xids());
    });
  });
}

} // namespace astraeus::cli
