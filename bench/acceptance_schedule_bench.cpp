/// Acceptance's schedule (issue 21, "Targets"; bring-up-a-gpu-cluster.md
/// step 3: "about 32 minutes for eight machines") and the controller's
/// overhead per step.
///
/// 1. The arithmetic: one check at a time per machine, the machines side by
///    side, so the per-machine checks take the sum of their durations once,
///    whatever the number of machines; then the fabric (issue 12): n-1
///    rounds of n/2 disjoint pairs and an all-reduce per group size 2, 4, …,
///    n. Durations are the suite's defaults (burn-in 10 min) and the checks'
///    typical run times (printed, changeable with --quick etc.).
/// 2. The measurement: one real validation actor (actors/validation/) in a
///    caf::actor_system, an acceptance of 8 machines x 5 checks against
///    stand-ins whose checks end at once (the scheduler stand-in answers
///    "Stopped" with a pass result at the first look): the wall time of the
///    whole validation, per step, is what the controller adds to each check
///    (slot, GPU look-up, submit, run look-ups, store with sync).
///
/// Run: build/bench/acceptance_schedule_bench [--machines 8] [--poll-ms 500]

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "actors/validation/validation_actor.hpp"
#include "actors/validation/validation_plan.hpp"
#include "runtime/process/system_setup.hpp"
#include "store/store.hpp"

namespace {

using namespace astraeus;
namespace fs = std::filesystem;
using steady = std::chrono::steady_clock;

struct options {
  int machines = 8;
  int gpus = 8;
  std::vector<int> poll_ms{500, 50};
  // Minutes per check (typical run times; burn-in: the suite's default).
  double quick = 0.5, dcgm = 2, burn = 10, copies = 1, disk = 2, pair = 1, all_reduce = 1;
};

/// What the stand-ins share with main: runs by name, the validation's end.
struct world {
  std::mutex mu;
  std::map<std::string, v1::Run> runs;
  std::atomic<bool> done{false};
  std::atomic<int> steps{0};
  v1::Validation last;
};

double arithmetic(const options& o) {
  std::printf("1. The schedule's arithmetic (%d machines x %d GPUs, burn-in %.0f min)\n",
              o.machines, o.gpus, o.burn);
  double per_machine = o.quick + o.dcgm + o.burn + o.copies + o.disk;
  std::printf("   per machine, one check at a time: quick %.1f + dcgm %.1f + burn %.1f + copies "
              "%.1f + disk %.1f = %.1f min\n",
              o.quick, o.dcgm, o.burn, o.copies, o.disk, per_machine);
  std::printf("   the %d machines run side by side (each holds only its own GPUs): %.1f min\n",
              o.machines, per_machine);
  int rounds = o.machines - 1;
  int groups = 0;
  for (int g = 2; g <= o.machines; g *= 2)
    ++groups;
  double fabric = rounds * o.pair + groups * o.all_reduce;
  std::printf("   fabric (issue 12): %d rounds of %d disjoint pairs x %.1f min + %d all-reduce "
              "group sizes (2..%d) x %.1f min = %.1f min\n",
              rounds, o.machines / 2, o.pair, groups, o.machines, o.all_reduce, fabric);
  double total = per_machine + fabric;
  std::printf("   total %.1f min (the seed says about 32 min): %s\n\n", total,
              total <= 32 ? "within" : "OVER");
  return total;
}

/// Runs one acceptance of `machines` machines with poll interval `poll`;
/// returns its wall time in seconds.
double measure(const options& o, caf::actor_system& sys, int poll_ms, const fs::path& dir) {
  auto w = std::make_shared<world>();
  auto store = Store::open((dir / ("store-" + std::to_string(poll_ms))).string());
  if (!store) {
    std::fprintf(stderr, "cannot open a store: %s\n", render_error(store.error()).c_str());
    std::exit(1);
  }
  std::shared_ptr<Store> db{std::move(*store)};
  auto sched = caf::actor_cast<scheduler_actor>(sys.spawn([w](caf::event_based_actor*) -> caf::behavior {
    return {
      [w](atom::submit, v1::RunSpec& spec) -> v1::Run {
        v1::Run run;
        *run.mutable_spec() = spec;
        run.set_state("Placed");
        std::lock_guard<std::mutex> lock{w->mu};
        w->runs[spec.name()] = run;
        return run;
      },
      [w](atom::get, std::string& name) -> v1::Run {
        std::lock_guard<std::mutex> lock{w->mu};
        auto& r = w->runs[name];
        r.set_state("Stopped");
        const auto check = r.spec().command_size() > 1 ? r.spec().command(1) : std::string{};
        (*r.add_workers()->mutable_outputs())["astraeus.result"] =
          R"({"check":")" + check + R"(","verdict":"pass","summary":"fine"})";
        return r;
      },
      [](atom::remove, std::string& name) -> v1::Run {
        v1::Run r;
        r.mutable_spec()->set_name(name);
        r.set_state("Stopped");
        return r;
      },
    };
  }));
  int gpus = o.gpus;
  auto cluster = caf::actor_cast<cluster_actor>(sys.spawn([gpus](caf::event_based_actor*) -> caf::behavior {
    return {
      [gpus](v1::Request& req) -> v1::Response {
        v1::Response out;
        out.set_id(req.id());
        if (req.has_get_machine()) {
          auto* m = out.mutable_machine();
          m->set_name(req.get_machine().name());
          m->set_data_location("/data");
          for (int i = 0; i < gpus; ++i)
            m->mutable_facts()->mutable_gpus()->add_gpus()->set_id("GPU-" + std::to_string(i));
        } else if (req.has_list_gpus()) {
          out.mutable_gpus();
        }
        return out;
      },
    };
  }));
  auto owner = caf::actor_cast<validations_actor>(sys.spawn([w](caf::event_based_actor*) -> caf::behavior {
    return {
      [](atom::slot, std::string&, std::string&, bool) -> std::string { return {}; },
      [w](atom::validate, v1::ValidationStep&) { ++w->steps; },
      [w](atom::validate, v1::Validation& v) {
        if (v.state() != "Running") {
          std::lock_guard<std::mutex> lock{w->mu};
          w->last = v;
          w->done = true;
        }
      },
    };
  }));
  std::vector<std::string> names;
  for (int i = 1; i <= o.machines; ++i)
    names.push_back((i < 10 ? "gpu-0" : "gpu-") + std::to_string(i));
  v1::StartValidation start;
  start.set_suite("acceptance");
  start.set_pool("h100");
  validation_config c;
  c.store = db;
  c.scheduler = sched;
  c.cluster = cluster;
  c.owner = owner;
  c.poll_interval = std::chrono::milliseconds{poll_ms};
  c.validation = validation::make_validation("val-20261006-7f3a2c", start, names, "on-demand", 0);
  auto t0 = steady::now();
  sys.spawn(validation_behavior, std::move(c));
  while (!w->done)
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  double s = std::chrono::duration<double>(steady::now() - t0).count();
  int per_machine = static_cast<int>(validation::checks_of("acceptance").size());
  std::printf("   poll %4d ms: %d steps (%d per machine) in %.3f s: %.3f s per step "
              "(%s the 1 s target); verdict %s, %u/%d pass\n",
              poll_ms, w->steps.load(), per_machine, s, s / per_machine,
              s / per_machine <= 1.0 ? "within" : "OVER", w->last.state().c_str(),
              w->last.machines_passed(), o.machines);
  caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(cluster, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(owner, caf::exit_reason::user_shutdown);
  return s;
}

} // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--machines") == 0)
      o.machines = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--poll-ms") == 0)
      o.poll_ms = {std::atoi(argv[i + 1])};
    else if (std::strcmp(argv[i], "--burn") == 0)
      o.burn = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--machines N] [--poll-ms MS] [--burn MINUTES]\n", argv[0]);
      return 2;
    }
  }
  if (o.machines < 2 || o.machines > 4096) {
    std::fprintf(stderr, "--machines %d: give 2 to 4096\n", o.machines);
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  arithmetic(o);
  caf::actor_system_config cfg;
  register_astraeus_types(cfg);
  caf::actor_system sys{cfg};
  auto dir = fs::temp_directory_path() / ("astraeus-acceptance-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::printf("2. Controller overhead per step (%d machines x %zu checks, checks that end at "
              "once; each step's store write with sync)\n",
              o.machines, validation::checks_of("acceptance").size());
  for (int p : o.poll_ms)
    measure(o, sys, p, dir);
  std::error_code ec;
  fs::remove_all(dir, ec);
  return 0;
}
