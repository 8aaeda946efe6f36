#include "runtime/workers/worker_supervisor.hpp"
#include "runtime/process/kill_point.hpp"

#include "runtime/workers/cdi_host.hpp"

#include <cstdlib>
#include <algorithm>
#include <utility>
#include <atomic>
#include <csignal>
#include <cstring>
#include <fstream>
#include <system_error>

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "messages/error.hpp"
#include "messages/gpu_read.hpp"
#include "messages/worker_state.hpp"
#include "runtime/workers/oci_bundle.hpp"
#include "runtime/workers/worker_env.hpp"
#include "runtime/workers/worker_cpuset.hpp"
#include "runtime/workers/worker_rdma.hpp"
#include "runtime/host/numa_facts.hpp"
#include "runtime/workers/worker_ledger.hpp"
#include "runtime/workers/worker_mounts.hpp"
#include "runtime/workers/run_spec.hpp"
#include "runtime/workers/worker_outputs.hpp"
#include "runtime/workers/worker_process.hpp"
#include "runtime/workers/worker_start.hpp"
#include "runtime/validation/check_options.hpp"

namespace astraeus {

namespace fs = std::filesystem;

namespace {

bool live(const v1::WorkerProcess& p) {
  auto s = state_of(p);
  return s && process_runs(*s);
}

/// runc container ids allow letters, digits, '_', '+', '-', '.'.
std::string container_id(const std::string& worker) {
  std::string out = "astraeus-";
  for (char c : worker)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.'
            || c == '_' || c == '+')
             ? c
             : '_';
  return out;
}

std::vector<std::string> as_env_list(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env)
    out.push_back(k + "=" + v);
  return out;
}

void append_log(const std::string& dir, const std::string& line) {
  std::error_code err;
  fs::create_directories(dir, err);
  std::ofstream out{dir + "/log", std::ios::app};
  out << "astraeus: " << line << '\n';
}

/// Issue 21: a worker whose spec asks for its result line (RunSpec
/// result_line, a validation's check) gets a marker file in its folder; when
/// it ends, the last non-empty line of its log (read from the last 64 KiB)
/// becomes outputs["astraeus.result"].
void mark_result_line(const std::string& dir, const v1::RunSpec& spec) {
  if (!spec.result_line())
    return;
  std::error_code err;
  fs::create_directories(dir, err);
  std::ofstream{dir + "/result_line"} << "1\n";
}

void read_result_line(v1::WorkerProcess& rec) {
  std::error_code err;
  if (!fs::exists(rec.dir() + "/result_line", err))
    return;
  std::ifstream in{rec.dir() + "/log", std::ios::binary};
  if (!in)
    return;
  in.seekg(0, std::ios::end);
  auto size = static_cast<long long>(in.tellg());
  const long long keep = 64 * 1024;
  in.seekg(size > keep ? size - keep : 0);
  std::string tail((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string last;
  size_t end = tail.size();
  while (end > 0) {
    size_t start = tail.rfind('\n', end - 1);
    size_t from = start == std::string::npos ? 0 : start + 1;
    std::string line = tail.substr(from, end - from);
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) {
      last = line;
      break;
    }
    if (start == std::string::npos)
      break;
    end = start;
  }
  (*rec.mutable_outputs())["astraeus.result"] = last;
}

std::string signal_name(int sig) {
  const char* d = ::sigabbrev_np(sig);
  return d ? std::string{"SIG"} + d : std::to_string(sig);
}

/// Stores `rec` (sync); a failure is logged, and the record is written
/// again at the next check.
void keep_record(worker_ledger& ledger, const v1::WorkerProcess& rec) {
  if (auto err = ledger.put_process(rec))
    spdlog::error("agent: cannot store worker {}: {}", rec.worker(), render_error(err));
}

/// Whether the clamped-limit warnings were given (once per agent).
std::atomic<bool> nofile_warned{false};
std::atomic<bool> memlock_warned{false};

constexpr const char* default_path =
  "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

} // namespace

worker_supervisor::worker_supervisor(supervisor_options options)
  : options_(std::move(options)) {
}

std::string worker_supervisor::worker_dir(const std::string& worker) const {
  return (fs::path{options_.data_dir} / "workers" / worker).string();
}

std::string worker_supervisor::runtime_for(const v1::RunSpec& spec) const {
  auto wanted = spec.runtime().empty() ? options_.runtime : spec.runtime();
  if (wanted == "process" || wanted == "runc")
    return wanted;
  // auto: a run without an image is a host command (runc has nothing to
  // run: it failed at start, "the run names no image").
  if (spec.image().empty())
    return "process";
  return find_executable(options_.runc, default_path).empty() ? "process" : "runc";
}

std::string worker_supervisor::host_process_refusal(const v1::WorkerOrder& order) const {
  // A named workspace's run with an image is a container: the controller
  // let it through as one (check_workspace_grants: a host process is
  // privileged work there). Run as a host process it would be root on the
  // machine, past the workspace's Bind grants (a new-user trial read the
  // host's files so).
  if (order.namespace_().empty() || order.spec().image().empty()
      || order.spec().runtime() == "process" || runtime_for(order.spec()) != "process")
    return {};
  return "workspace run " + order.run() + " asks for a container (image " + order.spec().image()
         + ") and this machine runs workers as host processes ("
         + (options_.runtime == "process" ? std::string{"workers.runtime process"}
                                          : std::string{"no runc installed"})
         + "): it is not run here as a host process";
}

v1::WorkerProcess worker_supervisor::start(const v1::WorkerOrder& order, int64_t now_ms,
                                           int64_t boot_ms) {
  v1::WorkerProcess rec;
  rec.set_worker(order.worker());
  rec.set_run(order.run());
  rec.set_runtime(runtime_for(order.spec()));
  rec.set_dir(worker_dir(order.worker()));
  rec.set_started_unix_ms(now_ms);
  rec.set_started_boot_ms(boot_ms);
  rec.set_stop_signal(SIGTERM);
  rec.set_cpus(order.cpuset_cpus());
  rec.set_mems(order.cpuset_mems());
  // Only containers get the memory limit (the process runtime applies none),
  // so only they can be OOMKilled by it.
  rec.set_has_memory_limit(rec.runtime() == "runc"
                           && order.spec().memory_bytes_per_worker() > 0);
  caf::error err;
  if (order.worker().empty() || order.worker().find('/') != std::string::npos
      || order.worker() == "." || order.worker() == "..") {
    err = caf::make_error(ec::invalid_request,
                          "worker name '" + order.worker() + "' is not a file name");
  } else if (auto refusal = host_process_refusal(order); !refusal.empty()) {
    err = caf::make_error(ec::invalid_request, std::move(refusal));
  } else {
    auto what = rec.runtime() == "runc" ? prepare_runc(order, rec) : prepare_process(order, rec);
    err = what ? launch(std::move(*what), rec) : what.error();
  }
  if (err) {
    // The machine's GPUs of the worker's vendor: a node they all share
    // fences them all (hand_over_failures_of).
    std::vector<std::string> vendor_gpus;
    if (!order.gpu_ids().empty()) {
      const auto& first = order.gpu_ids(0);
      if (amd_gpu_ids_.count(first)) {
        vendor_gpus.assign(amd_gpu_ids_.begin(), amd_gpu_ids_.end());
      } else {
        for (const auto& g : nvidia_gpus_)
          vendor_gpus.push_back(g.uuid);
      }
    }
    auto fenced = hand_over_failures_of(render_error(err),
                                        {order.gpu_ids().begin(), order.gpu_ids().end()},
                                        vendor_gpus);
    hand_over_failures_.insert(hand_over_failures_.end(), fenced.begin(), fenced.end());
    set_state(rec, worker_state::failed);
    rec.set_detail("cannot start: " + render_error(err));
    rec.set_exit_code(-1);
    append_log(rec.dir(), rec.detail());
    spdlog::error("agent: worker {}: {}", order.worker(), rec.detail());
    return rec;
  }
  kill_point("between_fork_and_record");
  set_state(rec, worker_state::running);
  spdlog::info("agent: worker {} running ({} runtime, pid {})", order.worker(),
               rec.runtime(), rec.pid());
  return rec;
}

caf::error worker_supervisor::launch(process_launch what, v1::WorkerProcess& rec) {
  // The marker its processes carry, and the lock its shim holds: how a
  // restarted agent finds a start whose record it never got back.
  rec.set_start_marker(new_start_marker(rec.worker()));
  what.env.push_back(std::string{worker_start_variable} + "=" + rec.start_marker());
  what.start_lock = start_lock_path(rec.dir());
  if (rec.runtime() == "process" && options_.cgroups) {
    auto cg = create_worker_cgroup(*options_.cgroups, rec.start_marker(), options_.cgroup_root);
    if (cg) {
      rec.set_cgroup(*cg);
      what.cgroup_dir = cgroup_dir(*options_.cgroups, *cg, options_.cgroup_root);
    } else {
      spdlog::warn("agent: worker {} gets no cgroup of its own: {}", rec.worker(),
                   render_error(cg.error()));
    }
  }
  // An exit file left by an earlier worker of this name would read as this
  // start's end: gone before the record says Starting.
  std::error_code gone;
  fs::remove(fs::path{rec.dir()} / "exit", gone);
  set_starting(rec);
  if (record_start_)
    if (auto err = record_start_(rec)) {
      end_cgroup(rec, true);
      return caf::make_error(ec::store_failure, "its start cannot be recorded before the fork: "
                                                  + render_error(err));
    }
  auto launched = launch_process(what);
  if (!launched) {
    end_cgroup(rec, true);
    return launched.error();
  }
  rec.set_shim_pid(launched->shim_pid);
  rec.set_pid(launched->pid);
  rec.set_start_ticks(launched->start_ticks);
  return caf::none;
}

namespace {

/// Whether this process may raise hard resource limits (CAP_SYS_RESOURCE
/// in its effective set, /proc/self/status CapEff bit 24).
bool can_raise_limits() {
  std::ifstream in{"/proc/self/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("CapEff:", 0) == 0) {
      try {
        return (std::stoull(line.substr(7), nullptr, 16) >> 24) & 1u;
      } catch (...) {
        return false;
      }
    }
  return false;
}

/// The limit `resource` a worker gets: `wanted` (RLIM_INFINITY for
/// unlimited), clamped to the agent's own hard limit when the agent may
/// not raise it, with a warning the first time.
rlimit worker_limit(int resource, rlim_t wanted, const char* what,
                    std::atomic<bool>& warned) {
  rlimit own{};
  ::getrlimit(resource, &own);
  rlimit out{wanted, wanted};
  static const bool privileged = can_raise_limits();
  if (!privileged && own.rlim_max != RLIM_INFINITY
      && (wanted == RLIM_INFINITY || wanted > own.rlim_max)) {
    if (!warned.exchange(true))
      spdlog::warn("agent: workers get {} {} instead of {}: the agent's own hard "
                   "limit is {} and it may not raise it (raise it, e.g. Limit{}= in "
                   "its unit)",
                   what, own.rlim_max,
                   wanted == RLIM_INFINITY ? std::string{"unlimited"} : std::to_string(wanted),
                   own.rlim_max,
                   std::string{what} == "nofile" ? "NOFILE" : "MEMLOCK");
    out.rlim_cur = out.rlim_max = own.rlim_max;
  }
  return out;
}

/// A container's limits no higher than the agent's own hard limits where
/// it may not raise them (runc could not set them: the start would fail);
/// each lowered limit is said in the agent's log, naming the worker.
void clamp_to_agent(std::vector<oci_rlimit>& limits, const std::string& worker) {
  static const bool privileged = can_raise_limits();
  if (privileged)
    return;
  for (auto& l : limits) {
    auto resource = rlimit_resource(l.name);
    if (!resource)
      continue;
    rlimit own{};
    if (::getrlimit(*resource, &own) != 0 || own.rlim_max == RLIM_INFINITY)
      continue;
    auto max = static_cast<int64_t>(own.rlim_max);
    auto over = [max](int64_t v) { return v < 0 || v > max; };
    if (!over(l.hard) && !over(l.soft))
      continue;
    spdlog::warn("agent: worker {}: {} lowered to {}: the agent's own hard limit, "
                 "which it may not raise",
                 worker, l.name, max);
    if (over(l.hard))
      l.hard = max;
    if (over(l.soft))
      l.soft = max;
  }
}

} // namespace

std::map<std::string, std::string> check_settings(const supervisor_options& o) {
  namespace env = validation::check_env;
  // Absolute: the check runs in its worker's folder, not the agent's (the
  // README's "Try it without a GPU" gives `--host-root test/fixtures/...`
  // and a stand-in library by relative paths). A bare library name
  // ("libnvidia-ml.so.1") is left for the loader to find.
  auto absolute = [](const std::string& v) {
    if (v.empty() || v.find('/') == std::string::npos)
      return v;
    std::error_code ec;
    auto path = std::filesystem::absolute(v, ec);
    return ec ? v : path.lexically_normal().string();
  };
  std::map<std::string, std::string> out;
  out[env::cdi_static_dir] = absolute(o.cdi.static_dir);
  out[env::cdi_dynamic_dir] = absolute(o.cdi.dynamic_dir);
  if (!o.nvml_library.empty())
    out[env::nvml_lib] = absolute(o.nvml_library);
  if (!o.cdi.host_root.empty())
    out[env::host_root] = absolute(o.cdi.host_root);
  // A stand-in NVML or CUDA library (README, "Try it without a GPU") reads
  // its answers from these: the check loads the same library, so it needs
  // the same answers as the agent.
  for (const char* stand_in : {"ASTRAEUS_NVML_FIXTURE", "ASTRAEUS_CUDA_FIXTURE"})
    if (const char* v = std::getenv(stand_in); v != nullptr && *v != '\0')
      out[stand_in] = absolute(v);
  return out;
}

caf::expected<process_launch>
worker_supervisor::prepare_process(const v1::WorkerOrder& order, v1::WorkerProcess& rec) {
  const auto& spec = order.spec();
  if (spec.command_size() == 0)
    return caf::make_error(ec::invalid_request,
                           "the run has no command: the process runtime runs the "
                           "run's command on the machine (an image's ENTRYPOINT "
                           "needs the runc runtime)");
  worker_env_context ctx;
  ctx.machine = options_.machine;
  ctx.rdma_ports = rdma_ports_;
  ctx.rdma_min_gbps = options_.rdma_min_gbps;
  ctx.host_process = true;
  ctx.rocr_names = rocr_names_;
  ctx.check_settings = check_settings(options_);
  mark_result_line(rec.dir(), spec);
  if (spec.outputs()) {
    if (auto err = prepare_outputs_dir(rec.dir(), ::getuid(), ::getgid()))
      return err;
    ctx.outputs_file = outputs_host_dir(rec.dir()) + "/outputs";
  }
  // Named as the run gave them: `astra slurm sbatch`'s script is a config
  // the user never wrote (a sixth new-user trial read "task_template.user,
  // volumes, configs and ipc_mode need the runc runtime" for it).
  if (auto fields = runc_only_fields(spec); !fields.empty())
    return caf::make_error(ec::invalid_request,
                           "this run's " + fields + " need the runc runtime, and machine "
                             + options_.machine
                             + " runs this worker as a host process (workers.runtime: "
                             + (spec.runtime() == "process"
                                  ? std::string{"process, as the run asks"}
                                : options_.runtime == "auto" ? std::string{"auto, without runc"}
                                                             : options_.runtime)
                             + "; a host process runs as the agent and sees the machine's "
                               "files): install runc there, or send the run to a machine "
                               "that has it (--pool)");
  auto code = prepare_host_code(spec, rec.dir());
  if (!code)
    return code.error();
  auto env = worker_environment(order, ctx);
  if (auto note = ib_hca_note(order, ctx); !note.empty())
    spdlog::warn("agent: worker {}: {}", order.worker(), note);
  env.emplace("PATH", default_path);
  env.emplace("HOME", "/root");
  process_launch what;
  what.cwd = *code;
  what.argv.assign(spec.command().begin(), spec.command().end());
  what.env = as_env_list(env);
  what.dir = rec.dir();
  what.log_max_bytes = options_.log_max_bytes;
  what.rlimits.emplace_back(RLIMIT_NOFILE, worker_limit(RLIMIT_NOFILE, options_.nofile,
                                                        "nofile", nofile_warned));
  // A host process sees the machine's /dev: its RDMA devices are only named.
  auto rdma = rdma_grant_for(order, env, rec);
  if (order.gpu_ids_size() > 0 || rdma)
    what.rlimits.emplace_back(RLIMIT_MEMLOCK, worker_limit(RLIMIT_MEMLOCK, RLIM_INFINITY,
                                                           "memlock", memlock_warned));
  what.cpus = cpu_list_members(order.cpuset_cpus()).value_or(std::vector<uint32_t>{});
  what.mems = cpu_list_members(order.cpuset_mems()).value_or(std::vector<uint32_t>{});
  apply_ulimits(what.rlimits, spec);
  return what;
}

caf::expected<process_launch>
worker_supervisor::prepare_runc(const v1::WorkerOrder& order, v1::WorkerProcess& rec) {
  const auto& spec = order.spec();
  auto runc = find_executable(options_.runc, default_path);
  if (runc.empty())
    return caf::make_error(ec::invalid_request,
                           "the runc program '" + options_.runc + "' is not found");
  auto image = find_image(spec.image(), options_.images_dir);
  if (!image)
    return image.error();
  auto bundle = (fs::path{rec.dir()} / "bundle").string();
  if (auto err = unpack_image(*image, bundle, options_.umoci, options_.skopeo))
    return err;
  auto rootfs = bundle + "/rootfs";
  oci_worker w;
  w.args = worker_command({spec.command().begin(), spec.command().end()}, *image,
                          {spec.args().begin(), spec.args().end()});
  if (w.args.empty())
    return caf::make_error(ec::invalid_request,
                           "the run has no command and image " + spec.image()
                             + " has no ENTRYPOINT or CMD");
  auto user = resolve_user(worker_user(spec, *image), rootfs);
  if (!user)
    return spec.user().empty() ? user.error()
                               : caf::make_error(ec::invalid_request,
                                                 "task_template.user: " + render_error(user.error()));
  w.user = *user;
  worker_env_context ctx;
  ctx.machine = options_.machine;
  ctx.rdma_ports = rdma_ports_;
  ctx.rdma_min_gbps = options_.rdma_min_gbps;
  auto ours = worker_environment(order, ctx);
  if (auto note = ib_hca_note(order, ctx); !note.empty())
    spdlog::warn("agent: worker {}: {}", order.worker(), note);
  // The image's variables first; ours (and the run's) win.
  std::map<std::string, std::string> env;
  for (const auto& kv : image->env) {
    auto eq = kv.find('=');
    if (eq != std::string::npos)
      env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (auto& [k, v] : ours)
    env[k] = v;
  env.emplace("PATH", default_path);
  if (!env.count("HOME"))  // the user's home from the image's /etc/passwd, else /root
    env["HOME"] = passwd_home(rootfs, w.user.uid);
  w.env = as_env_list(env);
  w.cwd = image->workdir.empty() ? "/" : image->workdir;
  w.hostname = options_.machine;
  w.memory_bytes = spec.memory_bytes_per_worker();
  w.cpus = spec.cpus_per_worker();
  w.shm_bytes = shm_size_bytes(static_cast<uint32_t>(order.gpu_ids_size()),
                               spec.memory_bytes_per_worker());
  auto as_oci = [](const char* name, rlimit l) {
    auto v = [](rlim_t x) { return x == RLIM_INFINITY ? int64_t{-1} : static_cast<int64_t>(x); };
    return oci_rlimit{name, v(l.rlim_cur), v(l.rlim_max)};
  };
  w.rlimits.push_back(as_oci("nofile", worker_limit(RLIMIT_NOFILE, options_.nofile,
                                                    "nofile", nofile_warned)));
  w.cpuset_cpus = order.cpuset_cpus();
  w.cpuset_mems = order.cpuset_mems();
  auto rdma = rdma_grant_for(order, ours, rec);
  if (order.gpu_ids_size() > 0 || rdma)
    w.rlimits.push_back(as_oci("memlock", worker_limit(RLIMIT_MEMLOCK, RLIM_INFINITY,
                                                       "memlock", memlock_warned)));
  if (order.gpu_ids_size() > 0) {
    auto reg = load_cdi(options_.cdi);
    std::vector<std::string> names;
    // The kind of the GPU's vendor, so an error names the kind asked for.
    for (const auto& id : order.gpu_ids()) {
      bool amd = amd_gpu_ids_.count(id) > 0 || reg.devices.count("amd.com/gpu=" + id) > 0;
      names.push_back((amd ? "amd.com/gpu=" : "nvidia.com/gpu=") + id);
    }
    // Checked before the hand-over; a stale NVIDIA spec is written again
    // rather than a worker started that fails.
    auto edits = checked_cdi_edits(options_.cdi, names, nvidia_driver_, nvidia_gpus_);
    if (!edits)
      return edits.error();
    w.devices.insert(w.devices.end(), edits->devices.begin(), edits->devices.end());
    w.mounts = edits->mounts;
    w.hooks = edits->hooks;
    w.user.groups.insert(w.user.groups.end(), edits->additional_gids.begin(),
                         edits->additional_gids.end());
    for (const auto& e : edits->env)
      w.env.push_back(e);
    // A worker placed in a multi-machine NVLink domain gets IMEX channel 0
    // (gpus.md), unless the CDI spec handed it over already: with runc and
    // CDI no NVIDIA runtime hook reads NVIDIA_IMEX_CHANNELS.
    auto imex = ours.find("NVIDIA_IMEX_CHANNELS");
    if (imex != ours.end() && imex->second == "0"
        && std::none_of(w.devices.begin(), w.devices.end(),
                        [](const oci_device& d) { return d.path == imex_channel0_path; })) {
      std::string problem;
      if (auto channel = imex_channel_device(options_.host_root, problem))
        w.devices.push_back(*channel);
      else
        spdlog::warn("agent: worker {}: {}", order.worker(), problem);
    }
  }
  if (!image->stop_signal.empty()) {
    auto sig = parse_signal(image->stop_signal);
    if (!sig)
      return sig.error();
    rec.set_stop_signal(*sig);
  }
  if (rdma)
    w.devices.insert(w.devices.end(), rdma->devices.begin(), rdma->devices.end());
  w.cpu_burst = spec.cpu_burst();
  apply_ulimits(w.rlimits, spec);
  clamp_to_agent(w.rlimits, rec.worker());
  mark_result_line(rec.dir(), spec);
  if (spec.outputs()) {
    if (auto err = prepare_outputs_dir(rec.dir(), w.user.uid, w.user.gid))
      return err;
    w.mounts.push_back({outputs_host_dir(rec.dir()), container_outputs_dir,
                        {"rbind", "rw", "nosuid", "nodev"}});
  }
  auto files = prepare_worker_mounts(spec, rec.dir(), w.user.uid, w.user.gid);
  if (!files)
    return files.error();
  w.mounts.insert(w.mounts.end(), files->begin(), files->end());
  if (!spec.code_tgz().empty())
    w.cwd = container_code_dir;
  w.host_ipc = spec.ipc_mode() == "host";
  {
    std::ofstream out{bundle + "/config.json", std::ios::trunc};
    out << oci_config(w, "rootfs").dump(2) << '\n';
    if (!out.flush())
      return caf::make_error(ec::store_failure, "cannot write " + bundle + "/config.json");
  }
  auto root = (fs::path{options_.data_dir} / "runc").string();
  auto id = container_id(order.worker());
  std::error_code ec_;
  if (fs::exists(fs::path{root} / id, ec_)) {
    // A container of that name left from an earlier start: remove it.
    if (run_tool({runc, "--root", root, "delete", "--force", id}).first != 0)
      spdlog::warn("agent: worker {}: cannot delete the old container {}",
                   order.worker(), id);
  }
  process_launch what;
  // --keep: the container (and its cgroup) stays after it exits, so its
  // OOM-kill counter can be read; finish() deletes it.
  what.argv = {runc, "--root", root, "run", "--keep", "--bundle", bundle, id};
  what.env = {std::string{"PATH="} + default_path};
  what.dir = rec.dir();
  what.log_max_bytes = options_.log_max_bytes;
  rec.set_container_id(id);
  return what;
}

void worker_supervisor::kill_now(const v1::WorkerProcess& rec) {
  if (rec.runtime() == "runc" && !rec.container_id().empty()) {
    auto runc = find_executable(options_.runc, default_path);
    auto root = (fs::path{options_.data_dir} / "runc").string();
    if (!runc.empty()
        && run_tool({runc, "--root", root, "kill", "--all", rec.container_id(), "KILL"}).first
             != 0)
      spdlog::debug("agent: runc kill {} failed (already gone?)", rec.container_id());
  }
  signal(rec.pid(), SIGKILL, true);
  end_cgroup(rec, false);
}

void worker_supervisor::end_cgroup(const v1::WorkerProcess& rec, bool remove) {
  if (rec.cgroup().empty() || !options_.cgroups)
    return;
  auto dir = cgroup_dir(*options_.cgroups, rec.cgroup(), options_.cgroup_root);
  kill_cgroup(dir);
  if (remove && !remove_cgroup(dir))
    spdlog::debug("agent: worker {}: cgroup {} not removed yet", rec.worker(), dir);
}

void worker_supervisor::signal(pid_t pid, int sig, bool group) const {
  if (options_.send_signal)
    options_.send_signal(pid, sig, group);
  else
    signal_process(pid, sig, group);
}

bool worker_supervisor::resolve_starting(worker_ledger& ledger, v1::WorkerProcess rec) {
  auto found = resolve_start(rec, options_.proc_root);
  const auto& name = rec.worker();
  switch (found.outcome) {
    case start_outcome::wait:
      return false;
    case start_outcome::not_started:
      spdlog::info("agent: worker {} was never started (the agent stopped before its "
                   "fork): it starts now",
                   name);
      end_cgroup(rec, true);
      if (auto err = ledger.erase_process(name))
        spdlog::error("agent: cannot forget worker {}: {}", name, render_error(err));
      return true;
    case start_outcome::adopt:
      rec.set_pid(found.main.pid);
      rec.set_shim_pid(found.main.ppid);
      rec.set_start_ticks(found.main.start_ticks);
      set_state(rec, worker_state::running);
      spdlog::info("agent: worker {} adopted (pid {}): it started before its record was "
                   "written, and is not started again",
                   name, rec.pid());
      break;
    case start_outcome::ended:
      if (!finish(rec))
        return false;
      spdlog::info("agent: worker {} started before its record was written and has ended",
                   name);
      break;
  }
  keep_record(ledger, rec);
  return true;
}

bool worker_supervisor::finish(v1::WorkerProcess& rec) {
  auto end = read_process_end(rec.dir());
  if (!end) {
    if (process_alive(rec.shim_pid(), 0, options_.proc_root)
        && process_start_ticks(rec.shim_pid(), options_.proc_root) != 0)
      return false;  // the shim is writing the exit file
    // The shim may have renamed its exit file into place and ended between
    // the first look and the liveness check: looked for again now that the
    // shim is gone, or a worker that exited 0 would be failed.
    end = read_process_end(rec.dir());
  }
  if (!end) {
    set_state(rec, worker_state::failed);
    rec.set_exit_code(-1);
    rec.set_detail("the worker's process ended and left no exit status");
    return true;
  }
  rec.set_exit_code(end->exit_code);
  // Whatever is left in its cgroup ends with it (the shim ended its
  // descendants already; this holds when the shim itself was killed).
  end_cgroup(rec, true);
  // A container's OOM kills, read from its memory cgroup (a new cgroup per
  // start, so any kill counted there happened in this run); then the kept
  // container is deleted.
  uint64_t oom_kills = 0;
  if (rec.runtime() == "runc" && !rec.container_id().empty()) {
    auto root = (fs::path{options_.data_dir} / "runc").string();
    if (auto cg = runc_memory_cgroup(root, rec.container_id()))
      oom_kills = cgroup_oom_kills(*cg, options_.cgroup_root).value_or(0);
    auto runc = find_executable(options_.runc, default_path);
    if (!runc.empty()
        && run_tool({runc, "--root", root, "delete", "--force", rec.container_id()}).first != 0)
      spdlog::warn("agent: worker {}: cannot delete its ended container {}", rec.worker(),
                   rec.container_id());
    remove_worker_mounts(rec.dir());  // EmptyDir volumes go with the container
  }
  // runc reports a container killed by signal N as exit code 128 + N.
  int sig = end->signal;
  if (sig == 0 && rec.runtime() == "runc" && end->exit_code > 128
      && end->exit_code < 128 + NSIG)
    sig = end->exit_code - 128;
  if (rec.stop_requested_unix_ms() != 0) {
    set_state(rec, worker_state::cancelled);
    rec.set_detail(sig == SIGKILL ? "stopped: killed after the stop grace"
                                  : "stopped");
  } else if (end->exit_code == 0) {
    set_state(rec, worker_state::exited);
    rec.set_detail("");
  } else if (oom_kills > 0) {
    set_state(rec, worker_state::oom_killed);
    rec.set_detail(rec.has_memory_limit()
                     ? "OOMKilled: the container exceeded its memory limit"
                     : "OOMKilled: the kernel's OOM killer ended a process of the "
                       "container (the machine ran out of memory)");
  } else if (sig != 0) {
    set_state(rec, worker_state::failed);
    rec.set_detail("killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")");
  } else {
    set_state(rec, worker_state::failed);
    rec.set_detail("exited with code " + std::to_string(end->exit_code));
  }
  spdlog::info("agent: worker {} {}{}{}", rec.worker(), rec.state(),
               rec.detail().empty() ? "" : ": ", rec.detail());
  auto outputs = read_outputs(rec.dir());
  rec.mutable_outputs()->insert(outputs.values.begin(), outputs.values.end());
  read_result_line(rec);
  for (const auto& warning : outputs.warnings) {
    spdlog::warn("agent: worker {}: {}", rec.worker(), warning);
    append_log(rec.dir(), warning);
  }
  return true;
}

bool worker_supervisor::reconcile(worker_ledger& ledger, int64_t now_ms, int64_t boot_ms) {
  bool changed = false;
  auto keep = [&](const v1::WorkerProcess& rec) { keep_record(ledger, rec); };
  // Each start writes its record durably before its fork, from whichever
  // thread runs it.
  record_start_ = ledger.process_writer();
  // Starts that came back from the offload (a worker that left the set
  // meanwhile is stopped below like any other).
  for (auto& [name, rec] : started_) {
    keep(rec);
    changed = true;
  }
  started_.clear();
  for (const auto& [name, ordered] : ledger.workers()) {
    if (ledger.processes().count(name) || starting_.count(name))
      continue;
    auto order = with_cpuset(ordered, ledger);
    if (!offload_) {
      keep(start(order, now_ms, boot_ms));
      changed = true;
      continue;
    }
    // The start blocks (unpacking, CDI): it runs on a copy of this
    // supervisor's settings and facts, off the agent's actor.
    starting_.insert(name);
    starting_cpus_[name] = order.cpuset_cpus();
    auto job = std::make_shared<worker_supervisor>(*this);
    job->offload_ = nullptr;
    auto rec = std::make_shared<v1::WorkerProcess>();
    offload_(
      [job, order = order, now_ms, boot_ms, rec] {
        try {
          *rec = job->start(order, now_ms, boot_ms);
        } catch (const std::exception& e) {
          rec->set_worker(order.worker());
          rec->set_run(order.run());
          rec->set_dir(job->worker_dir(order.worker()));
          set_state(*rec, worker_state::failed);
          rec->set_exit_code(-1);
          rec->set_detail(std::string{"cannot start: "} + e.what());
          spdlog::error("agent: worker {}: {}", order.worker(), rec->detail());
        }
      },
      [this, name = name, rec, job] {
        starting_.erase(name);
        starting_cpus_.erase(name);
        started_[name] = std::move(*rec);
        // The job's copy saw the hand-over failures; they are ours now.
        auto fenced = job->take_hand_over_failures();
        hand_over_failures_.insert(hand_over_failures_.end(), fenced.begin(), fenced.end());
      });
  }
  std::vector<std::string> names;
  for (const auto& [name, rec] : ledger.processes())
    names.push_back(name);
  for (const auto& name : names)
    changed = check(ledger, name, now_ms, boot_ms) || changed;
  return changed;
}

bool worker_supervisor::check(worker_ledger& ledger, const std::string& name, int64_t now_ms,
                              int64_t boot_ms) {
  auto rec = ledger.processes().at(name);
  auto keep = [&](const v1::WorkerProcess& r) { keep_record(ledger, r); };
  const bool ordered = ledger.workers().count(name) > 0;
  reap_child(rec.shim_pid());
  if (is_starting(rec))  // left so by a killed agent (this one's are in flight)
    return !starting_.count(name) && resolve_starting(ledger, rec);
  if (!live(rec)) {
    // The worker left the set and has ended: forget it, keep its log. One
    // stopped because it left the set and ordered again is a new worker of
    // the same name (its run was deleted and submitted again): forgotten
    // too, so the next pass starts the new one.
    bool again = ordered && rec.stop_requested_unix_ms() != 0;
    if (!ordered || again) {
      std::error_code err;
      fs::remove_all(fs::path{rec.dir()} / "bundle", err);
      remove_worker_mounts(rec.dir());
      if (auto e = ledger.erase_process(name))
        spdlog::error("agent: cannot forget worker {}: {}", name, render_error(e));
      if (again)
        spdlog::info("agent: worker {} ordered again after it was stopped: a new "
                     "worker of that name starts",
                     name);
    }
    return again;
  }
  if (!process_alive(rec.pid(), rec.start_ticks(), options_.proc_root)) {
    if (!finish(rec))
      return false;
    keep(rec);
    return true;
  }
  if (rec.stop_requested_unix_ms() == 0) {
    // The one reason the agent stops a worker: its run no longer holds
    // it (deleted, failed, preempted, or at its time limit: the scheduler
    // alone keeps time limits, and its next worker set leaves the worker
    // out). A machine cut off from the controller keeps its workers.
    if (ordered)
      return false;
    spdlog::info("agent: stopping worker {} (its run no longer holds it): {} to pid {}",
                 name, signal_name(rec.stop_signal()), rec.pid());
    set_state(rec, worker_state::stopping);
    rec.set_stop_requested_unix_ms(now_ms);
    rec.set_stop_requested_boot_ms(boot_ms);
    signal(rec.pid(), rec.stop_signal(), false);
    keep(rec);
    return true;
  }
  // Stopping: the grace runs on the boot clock from the stored moment of
  // the stop signal, never on the wall clock. A record without it (an older
  // agent's) or from before a reboot gets the whole grace from now.
  if (rec.stop_requested_boot_ms() <= 0 || rec.stop_requested_boot_ms() > boot_ms) {
    rec.set_stop_requested_boot_ms(boot_ms);
    keep(rec);
    return false;
  }
  if (boot_ms - rec.stop_requested_boot_ms() >= options_.stop_grace.count()) {
    spdlog::info("agent: worker {} still runs after the {} ms stop grace: SIGKILL",
                 name, options_.stop_grace.count());
    kill_now(rec);
  }
  return false;
}

namespace {

/// Whether device node `path` is one GPU's own (/dev/nvidia3,
/// /dev/dri/renderD128, /dev/dri/card1), not one its vendor's GPUs share.
bool one_gpus_node(std::string_view path) {
  auto digits_after = [&](std::string_view prefix) {
    return path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0
           && std::all_of(path.begin() + static_cast<long>(prefix.size()), path.end(),
                          [](char c) { return c >= '0' && c <= '9'; });
  };
  return digits_after("/dev/nvidia") || digits_after("/dev/dri/renderD")
         || digits_after("/dev/dri/card");
}

} // namespace

std::vector<hand_over_failure>
hand_over_failures_of(const std::string& error, const std::vector<std::string>& gpu_ids,
                      const std::vector<std::string>& machine_gpu_ids) {
  auto at = error.find(hand_over_failing_prefix);
  if (at == std::string::npos)
    return {};
  // "hand-over failing: /dev/nvidia3 missing" (or "... is not a character
  // device") without the context in parentheses after it.
  auto end = error.find(" (", at);
  auto reason = error.substr(at, end == std::string::npos ? std::string::npos : end - at);
  std::vector<hand_over_failure> out;
  for (const auto& id : gpu_ids)
    if (error.find("=" + id) != std::string::npos)
      out.push_back({id, reason, error});
  if (!out.empty())
    return out;
  const auto node_at = at + std::string_view{hand_over_failing_prefix}.size();
  const auto node = error.substr(node_at, error.find(' ', node_at) - node_at);
  const auto& fenced = one_gpus_node(node) || machine_gpu_ids.empty() ? gpu_ids
                                                                       : machine_gpu_ids;
  for (const auto& id : fenced)
    out.push_back({id, reason, error});
  return out;
}

std::vector<hand_over_failure> worker_supervisor::take_hand_over_failures() {
  return std::exchange(hand_over_failures_, {});
}

void worker_supervisor::sync_cdi(const v1::GpuSection& gpus, const std::string& sys_root) {
  // Each GPU's NUMA node, for its workers' cores (with_cpuset): from any
  // read that lists GPUs.
  if (gpus.gpus_size() > 0) {
    gpu_numa_.clear();
    for (const auto& g : gpus.gpus())
      if (g.has_numa_node() && !g.id().empty())
        gpu_numa_[g.id()] = g.numa_node();
  }
  // A complete read; not "pending" or "unresponsive" (keep what is there
  // then), nor "unavailable" unless the driver itself went away (NVML
  // cannot be loaded, or says the kernel driver is not loaded): then the
  // NVIDIA GPUs are gone for CDI.
  const auto how = read_as(gpus);
  bool driver_gone = false;
  if (how == gpu_read_as::unavailable) {
    driver_gone = gpus.detail().find("NVML_ERROR_DRIVER_NOT_LOADED") != std::string::npos;
    for (const auto& t : gpus.tried())
      driver_gone = driver_gone
                    || (t.rfind("NVML ", 0) == 0 && t.find(": not loaded (") != std::string::npos);
    if (!driver_gone)
      return;
  } else if (!is_complete_read(how)) {
    return;
  }
  std::string driver;
  std::vector<std::string> nvidia;
  std::vector<cdi_gpu> found;
  std::vector<amd_cdi_gpu> amd;
  for (const auto& g : gpus.gpus()) {
    if (g.vendor() == "nvidia" && driver_gone)
      continue;
    if (g.vendor() == "nvidia") {
      nvidia.push_back(g.id());
      found.push_back({g.id(), g.pci_address(), g.has_index() ? int64_t{g.index()} : -1,
                       nvidia_device_minor(sys_root, g.pci_address())});
      driver = g.driver_version();
    } else if (g.vendor() == "amd") {
      amd.push_back({g.id(), g.pci_address(),
                     {g.partition_render_nodes().begin(), g.partition_render_nodes().end()}});
    }
  }
  nvidia_driver_ = driver;
  nvidia_gpus_ = std::move(found);
  amd_gpu_ids_.clear();
  for (const auto& g : amd)
    amd_gpu_ids_.insert(g.id);
  rocr_names_ = rocr_visible_names({gpus.gpus().begin(), gpus.gpus().end()});
  cdi_wanted wanted{driver, std::move(nvidia), std::move(amd), sys_root};
  if (cdi_syncing_) {
    cdi_next_ = std::move(wanted);  // the latest pass wins
    return;
  }
  run_cdi_sync(std::move(wanted));
}

void worker_supervisor::run_cdi_sync(cdi_wanted wanted) {
  auto work = [o = options_.cdi, w = std::move(wanted)] {
    if (!o.nvidia_ctk.empty() || w.nvidia.empty()) {
      auto wrote = sync_nvidia_spec(o, w.driver, w.nvidia);
      if (!wrote)
        spdlog::error("agent: CDI: {}", render_error(wrote.error()));
      else if (*wrote)
        spdlog::info("agent: CDI: {} {}/nvidia.yaml", w.nvidia.empty() ? "removed" : "wrote",
                     o.dynamic_dir);
    }
    // Device nodes and groups of the host, under its root (fixtures in tests).
    auto wrote = write_amd_spec(o, w.sys_root, o.host_root.empty() ? "/" : o.host_root, w.amd);
    if (!wrote)
      spdlog::error("agent: CDI: {}", render_error(wrote.error()));
    else if (*wrote)
      spdlog::info("agent: CDI: {} {}/amd-astraeus.json", w.amd.empty() ? "removed" : "wrote",
                   o.dynamic_dir);
  };
  if (!offload_) {
    work();
    return;
  }
  cdi_syncing_ = true;
  offload_(std::move(work), [this] {
    cdi_syncing_ = false;
    if (cdi_next_) {
      auto next = std::move(*cdi_next_);
      cdi_next_.reset();
      run_cdi_sync(std::move(next));
    }
  });
}

caf::expected<v1::LogChunk> worker_supervisor::read_log(const worker_ledger& ledger,
                                                        const std::string& worker,
                                                        uint64_t offset,
                                                        uint32_t max_bytes) const {
  if (worker.empty() || worker.find('/') != std::string::npos || worker == "."
      || worker == "..")
    return caf::make_error(ec::invalid_request, "'" + worker + "' is not a worker name");
  if (max_bytes == 0 || max_bytes > (1u << 20))
    max_bytes = 1u << 20;
  auto piece = read_log_piece(worker_dir(worker), offset, max_bytes);
  if (!piece)
    return caf::make_error(ec::invalid_request, "machine " + options_.machine
                                                  + " has no log for worker " + worker);
  v1::LogChunk out;
  out.set_worker(worker);
  out.set_machine(options_.machine);
  out.set_next_offset(piece->next_offset);
  out.set_data(std::move(piece->data));
  auto p = ledger.processes().find(worker);
  out.set_state(p == ledger.processes().end() ? "Ended" : p->second.state());
  out.set_finished(p == ledger.processes().end() || !live(p->second));
  return out;
}

void worker_supervisor::set_host_layout(const v1::HostFacts& facts) {
  numa_nodes_.assign(facts.cpu().nodes().begin(), facts.cpu().nodes().end());
  rdma_nodes_.assign(facts.rdma_device_nodes().begin(), facts.rdma_device_nodes().end());
}

v1::WorkerOrder worker_supervisor::with_cpuset(const v1::WorkerOrder& order,
                                               const worker_ledger& ledger) const {
  auto cores = cores_wanted(order.spec());
  if (!order.cpuset_cpus().empty() || cores == 0 || numa_nodes_.empty())
    return order;
  std::set<uint32_t> taken;
  auto take = [&](const std::string& list) {
    for (auto c : cpu_list_members(list).value_or(std::vector<uint32_t>{}))
      taken.insert(c);
  };
  for (const auto& [name, rec] : ledger.processes())
    if (name != order.worker() && live(rec))
      take(rec.cpus());
  for (const auto& [name, cpus] : starting_cpus_)
    if (name != order.worker())
      take(cpus);
  // Its GPUs' nodes, as this machine's last GPU read placed them; the
  // scheduler's node (where most are) when they are not known here.
  std::map<int32_t, uint32_t> gpus_per_node;
  for (const auto& id : order.gpu_ids())
    if (auto g = gpu_numa_.find(id); g != gpu_numa_.end() && g->second >= 0)
      ++gpus_per_node[g->second];
  if (gpus_per_node.empty() && order.numa_node() >= 0)
    gpus_per_node[order.numa_node()] = 1;
  auto choice = choose_cpuset(cores, order.spec().memory_bytes_per_worker(), gpus_per_node,
                              numa_nodes_, taken);
  if (!choice.problem.empty())
    spdlog::warn("agent: worker {}: not pinned to NUMA-local cores: {}", order.worker(),
                 choice.problem);
  auto out = order;
  out.set_cpuset_cpus(choice.cpus);
  out.set_cpuset_mems(choice.mems);
  return out;
}

std::optional<rdma_grant> worker_supervisor::rdma_grant_for(
  const v1::WorkerOrder& order, const std::map<std::string, std::string>& env,
  v1::WorkerProcess& rec) const {
  if (!worker_gets_rdma(order, env))
    return std::nullopt;
  auto hca = env.find("NCCL_IB_HCA");
  auto grant = rdma_devices_for(hcas_in(hca == env.end() ? "" : hca->second, rdma_ports_),
                                rdma_ports_, rdma_nodes_, options_.host_root);
  for (const auto& problem : grant.problems)
    spdlog::warn("agent: worker {}: RDMA device left out: {}", order.worker(), problem);
  rec.clear_rdma_devices();
  for (const auto& path : grant.paths)
    rec.add_rdma_devices(path);
  return grant;
}

} // namespace astraeus
