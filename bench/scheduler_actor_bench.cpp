// The scheduler actor on a simulated cluster, measured through its mailbox
// (plain main; figures in bench/RESULTS.md).
//
//   scheduler_actor_bench [--machines N[,N...]] [--fill PCT] [--ops N]
//                         [--serial-ops N] [--gang-ops N] [--window N]
//                         [--seconds S] [--threads N] [--seed S] [--dir DIR]
//                         [--slurm-shape JOBS] [--fenced PCT] [--at-risk PCT]
//                         [--background-sync 0|1] [--etcd HOST:PORT[,...]]
//                         [--etcd-connections N] [--commits-in-flight N]
//                         [--detached 0|1] [--policy wake|stealing|sharing]
//                         [--spin N] [--realtime-sync 0|1]
//
// For each cluster size (default 5,000 then 100,000 machines of 8 GPUs; the
// cluster of bench/sim_cluster.hpp: 2 NUMA nodes, racks, fabrics, NVLink
// domains, 2 % of GPUs Faulty and 1 % AtRisk by default):
//   - spawns a real scheduler actor (`astraeus::scheduler`) in a
//     caf::actor_system with a real RocksDB `Store` in a fresh temporary
//     folder, and sends it one `v1::SchedulerMachine` snapshot per machine
//     (as the machine actors do), then waits until it has taken them all;
//   - fills the cluster to `--fill` % (60) of its GPUs with single workers
//     (1/2/4/8 GPUs, weights 40/25/20/15, 10 % healthy_only) submitted
//     through the actor;
//   - single-worker mix: `--ops` submissions with `--window` requests in
//     flight at once from an event-based driver actor; after each placed
//     answer the driver deletes random placed runs (`atom::remove`) until
//     the cluster is back at the fill level, and deletes each run that had
//     to wait (as the engine bench drops them). The removals are requests
//     in the same window, so the rate is the actor's steady state;
//   - decision latency: `--serial-ops` submissions one at a time (window 1,
//     removals awaited before the next submit): submit -> answer;
//   - a 90 % single / 10 % gang (2-16 machines) mix, `--gang-ops` decisions;
//   - memory: VmRSS / VmHWM (the whole process: actor, index, runs, RocksDB).
// Each phase stops submitting after `--seconds` (6; 0 = never) even if its
// count or fill level is not reached, and says so: the default run (5,000
// then 100,000 machines) stays near a minute however slow the actor is.
// Options: --fill 60, --ops 20000, --serial-ops 2000, --gang-ops 2000,
// --window 64, --threads 2 (CAF workers), --seed 7, --dir $TMPDIR or /tmp
// (where the store's temporary folder goes: /dev/shm takes the disk out),
// --background-sync 1 (the group commit's write and fsync on a thread of their
// own, as the controller runs it: with etcd the actor no longer waits for the
// round trip; 0: inline on the actor's thread, as before issue 14).
//
// `--etcd ENDPOINTS`: HA mode's store instead of RocksDB (issue 15): the
// scheduler's group commit goes to etcd (store/etcd_store.hpp), split into
// transactions of at most 128 operations, under a fresh key prefix; each
// phase also prints how many transactions it took (etcd's revision).
// `--etcd-connections N` (default 4, the controller's): the gateway's pool;
// 1 runs every etcd call one after the other, as before the pool.
// `--commits-in-flight N` (default 0: the store's, RocksDB 1, etcd one less
// than its connections): bursts of the group commit written at once
// (scheduler_config::commits_in_flight); 1 is one burst at a time, as
// before several were committed side by side.
// `--detached 1`: the scheduler on a thread of its own (`spawn<caf::detached>`)
// in place of the CAF workers the controller gives it (RESULTS 28).
// `--policy wake` (default): the controller's scheduler (runtime/process/
// wake_stealing.hpp); `stealing`: CAF's work stealing as the controller ran
// it before (no polling phase); `sharing`: CAF's work sharing (RESULTS 29).
// `--spin N`: `work-stealing.aggressive-poll-attempts`, how long an idle
// worker spins before it sleeps (CAF's 100).
// `--realtime-sync 0`: the group commit's thread at normal priority, as
// before RESULTS 36 (default 1: real-time where the process may,
// store/wal_syncer.hpp). Each phase prints each thread's CPU and how long
// it waited for one (/proc/self/task/*/schedstat).
//
// `--ends N` (with --slurm-shape): then N placed runs end one at a time
// while the runs that waited stay queued (a backlog's cost per end).
//
// `--slurm-shape JOBS`: the Slurm side-by-side instead (bench/
// slurm_side_by_side.sh): an empty, healthy cluster (no fill, no fenced
// GPUs unless given), JOBS submissions of job i = 4 GPUs when i % 5 == 4,
// else 1 GPU, no pool, nothing removed; prints the rate in a line starting
// "slurm-shape:". `--warmup N` (with --slurm-shape): first N jobs of the
// same shape (other names), each deleted again once all are answered, so
// the measured burst meets a warm actor on an empty cluster (as Slurm's
// controller is warm when its held jobs are released); that first burst's
// rate is printed in a line starting "slurm-shape-cold:".
//
// Every phase also prints the process's context switches (getrusage, all
// threads) per request.

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include <sys/resource.h>
#include <unistd.h>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "actors/scheduler/scheduler_actor.hpp"
#include "messages/error.hpp"
#include "runtime/process/system_setup.hpp"
#include "runtime/process/wake_stealing.hpp"
#include "sim_cluster.hpp"
#include "store/etcd_store.hpp"
#include "store/store.hpp"

using namespace astraeus;
using namespace astraeus::bench;

namespace {

struct options {
  std::vector<size_t> sizes{5000, 100000};
  unsigned fill_percent = 60;
  size_t ops = 20000;
  size_t serial_ops = 2000;
  size_t gang_ops = 2000;
  size_t window = 64;
  double seconds = 6;   // per phase; 0 = no limit
  int threads = 2;
  uint64_t seed = 7;
  std::string dir;
  size_t slurm_jobs = 0; // > 0: the Slurm side-by-side shape only
  size_t ends = 0;       // --ends: after the Slurm shape, this many placed runs end
  size_t warmup = 0;     // --warmup: with --slurm-shape, a burst placed and deleted first
  std::string etcd;      // non-empty: etcd endpoints (HA mode's store)
  size_t etcd_connections = etcd_gateway::default_connections;
  health_mix health;
  bool health_given = false;
  bool background_sync = true; // scheduler_config::background_sync (the controller's)
  size_t commits_in_flight = 0; // scheduler_config::commits_in_flight (0: the store's)
  bool realtime_sync = true;     // scheduler_config::commit_priority
  bool detached = false;         // the scheduler on a thread of its own (caf::detached)
  std::string policy = "wake";    // --policy
  int64_t spin = -1;              // --spin: work-stealing.aggressive-poll-attempts (-1: CAF's)
};

/// The snapshot a machine actor would send for `m`.
v1::SchedulerMachine snapshot_of(const machine_spec& m) {
  v1::SchedulerMachine out;
  out.set_name(m.name);
  out.set_schedulable(m.schedulable);
  for (const auto& [k, v] : m.labels)
    (*out.mutable_labels())[k] = v;
  for (const auto& g : m.gpus) {
    auto* sg = out.add_gpus();
    sg->set_id(g.id);
    sg->set_numa_node(g.numa_node);
    set_health(*sg, g.health);
    for (unsigned j = 0; j < max_gpus_per_machine; ++j)
      if (g.nvlink_peers & (gpu_mask{1} << j))
        sg->add_nvlink_peers(j);
  }
  return out;
}

/// The run spec a user would submit for `r` (one group).
v1::RunSpec spec_of(const placement_request& r) {
  v1::RunSpec s;
  s.set_name(r.run);
  s.set_image("registry.example.net/bench:1");
  s.add_command("sleep");
  s.add_command("3600");
  s.set_gpus_per_worker(r.groups.at(0).gpus_per_worker);
  s.set_workers(r.groups.at(0).workers);
  if (auto it = r.required_labels.find("pool"); it != r.required_labels.end())
    s.set_pool(it->second);
  s.set_healthy_only(r.healthy_only);
  return s;
}

unsigned gpus_held(const v1::Run& run) {
  unsigned n = 0;
  for (const auto& w : run.workers())
    n += static_cast<unsigned>(w.gpu_ids_size());
  return n;
}

/// CPU time of this process (all threads), s.
double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

/// Context switches of this process so far (all threads, voluntary and
/// not: getrusage's ru_nvcsw + ru_nivcsw).
uint64_t process_switches() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_nvcsw) + static_cast<uint64_t>(ru.ru_nivcsw);
}

/// One thread's use of the CPUs so far (/proc/self/task/TID/schedstat).
struct thread_use {
  std::string name;      ///< /proc/self/task/TID/comm
  double cpu_s = 0;      ///< on a CPU
  double waited_s = 0;   ///< runnable but waiting for a CPU (run queue)
};

/// Each thread of this process, by thread id.
std::map<long, thread_use> thread_cpu() {
  std::map<long, thread_use> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    thread_use t;
    std::ifstream comm{e.path() / "comm"};
    if (!std::getline(comm, t.name))
      continue;
    // "cpu_time_ns run_delay_ns timeslices"
    std::ifstream stat{e.path() / "schedstat"};
    double cpu_ns = 0, delay_ns = 0;
    if (!(stat >> cpu_ns >> delay_ns))
      continue;
    t.cpu_s = cpu_ns / 1e9;
    t.waited_s = delay_ns / 1e9;
    out[std::atol(e.path().filename().c_str())] = std::move(t);
  }
  return out;
}

/// What each thread did between `before` and `after`, as shares of
/// `wall_s`, busiest first, on one line: "caf.actor 82 % (+9 % waiting
/// for a CPU), ...". A thread waiting for a CPU is runnable and not run:
/// on a 2-core machine, the other threads had both cores.
std::string thread_shares(const std::map<long, thread_use>& before,
                          const std::map<long, thread_use>& after, double wall_s) {
  std::vector<std::tuple<double, double, std::string>> used;
  for (const auto& [tid, t] : after) {
    auto b = before.find(tid);
    double cpu = t.cpu_s - (b == before.end() ? 0.0 : b->second.cpu_s);
    double waited = t.waited_s - (b == before.end() ? 0.0 : b->second.waited_s);
    if (cpu > 0.005 * wall_s)
      used.emplace_back(cpu, waited, t.name);
  }
  std::sort(used.rbegin(), used.rend());
  std::string out;
  for (const auto& [cpu, waited, name] : used) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s%s %.0f %% (+%.0f %% waiting for a CPU)",
                  out.empty() ? "" : ", ", name.c_str(), 100.0 * cpu / wall_s,
                  100.0 * waited / wall_s);
    out += buf;
  }
  return out.empty() ? "none measured" : out;
}

/// Placed runs the driver knows of, and the GPUs they hold.
struct live_runs {
  std::vector<std::pair<std::string, unsigned>> runs;
  uint64_t held = 0;
};

/// What one phase submits and how it keeps the cluster level.
struct phase_spec {
  size_t count = 0;                  ///< submissions; 0: until `live.held >= stop_at_held`
  uint64_t stop_at_held = 0;         ///< with count == 0
  uint64_t hold_at = UINT64_MAX;     ///< delete random placed runs while held > this
  size_t window = 1;                 ///< requests in flight (submits and removals)
  bool remove_waiting = true;        ///< delete a run that answered Waiting
  double seconds = 0;                ///< > 0: stop submitting after this long
  std::function<placement_request()> next;
};

struct phase_result {
  size_t submitted = 0, placed = 0, waited = 0, errors = 0, removals = 0;
  std::vector<double> latency_ns; ///< submit -> answer, every submission
  std::vector<double> answered_s; ///< when each answer came, s since the phase began
  double wall_s = 0;
  double cpu_s = 0;       ///< CPU time of the whole process meanwhile
  std::string threads;    ///< each thread's CPU meanwhile, % of the wall clock
  uint64_t switches = 0;  ///< context switches of the whole process meanwhile
  bool timed_out = false; ///< stopped by `phase_spec::seconds`
  std::string first_error;
};

/// Drives one phase from an event-based actor: keeps `window` requests in
/// flight until the phase is done.
class driver : public std::enable_shared_from_this<driver> {
public:
  driver(caf::event_based_actor* self, scheduler_actor sched, live_runs& live,
         phase_spec spec, std::mt19937_64& rng, std::promise<phase_result> done)
    : self_(self), sched_(std::move(sched)), live_(live), spec_(std::move(spec)), rng_(rng),
      done_(std::move(done)) {
  }

  void start() {
    t0_ = clock_type::now();
    cpu0_ = process_cpu_s();
    threads0_ = thread_cpu();
    switches0_ = process_switches();
    pump();
  }

private:
  bool more() {
    if (spec_.seconds > 0 && ns_since(t0_) > spec_.seconds * 1e9) {
      res_.timed_out = true;
      return false;
    }
    return spec_.count ? res_.submitted < spec_.count : live_.held < spec_.stop_at_held;
  }

  void pump() {
    while (in_flight_ < spec_.window && more())
      submit();
    if (in_flight_ == 0 && !more() && !finished_) {
      finished_ = true;
      res_.wall_s = ns_since(t0_) / 1e9;
      res_.cpu_s = process_cpu_s() - cpu0_;
      res_.threads = thread_shares(threads0_, thread_cpu(), res_.wall_s);
      res_.switches = process_switches() - switches0_;
      done_.set_value(std::move(res_));
      self_->quit();
    }
  }

  void error(const caf::error& err) {
    ++res_.errors;
    if (res_.first_error.empty())
      res_.first_error = render_error(err);
  }

  void submit() {
    auto spec = spec_of(spec_.next());
    ++res_.submitted;
    ++in_flight_;
    auto t = clock_type::now();
    auto me = shared_from_this();
    self_->request(sched_, caf::infinite, atom::submit_v, std::move(spec))
      .then(
        [me, t](v1::Run& run) {
          me->res_.latency_ns.push_back(ns_since(t));
          me->res_.answered_s.push_back(ns_since(me->t0_) / 1e9);
          --me->in_flight_;
          if (state_of(run) == run_state::placed) {
            ++me->res_.placed;
            unsigned n = gpus_held(run);
            me->live_.runs.emplace_back(run.spec().name(), n);
            me->live_.held += n;
          } else {
            ++me->res_.waited;
            if (me->spec_.remove_waiting)
              me->remove(run.spec().name());
          }
          while (me->live_.held > me->spec_.hold_at && !me->live_.runs.empty())
            me->remove_random();
          me->pump();
        },
        [me, t](caf::error& err) {
          me->res_.latency_ns.push_back(ns_since(t));
          --me->in_flight_;
          me->error(err);
          me->pump();
        });
  }

  void remove_random() {
    auto& v = live_.runs;
    size_t i = rng_() % v.size();
    live_.held -= v[i].second;
    auto name = std::move(v[i].first);
    v[i] = std::move(v.back());
    v.pop_back();
    remove(std::move(name));
  }

  void remove(std::string name) {
    ++res_.removals;
    ++in_flight_;
    auto me = shared_from_this();
    self_->request(sched_, caf::infinite, atom::remove_v, std::move(name))
      .then(
        [me](v1::Run&) {
          --me->in_flight_;
          me->pump();
        },
        [me](caf::error& err) {
          --me->in_flight_;
          me->error(err);
          me->pump();
        });
  }

  caf::event_based_actor* self_;
  scheduler_actor sched_;
  live_runs& live_;
  phase_spec spec_;
  std::mt19937_64& rng_;
  std::promise<phase_result> done_;
  phase_result res_;
  size_t in_flight_ = 0;
  bool finished_ = false;
  clock_type::time_point t0_;
  double cpu0_ = 0;
  std::map<long, thread_use> threads0_;
  uint64_t switches0_ = 0;
};

phase_result run_phase(caf::actor_system& sys, const scheduler_actor& sched, live_runs& live,
                       phase_spec spec, std::mt19937_64& rng) {
  std::promise<phase_result> done;
  auto fut = done.get_future();
  sys.spawn([&, sched, spec = std::move(spec), done = std::move(done)](
              caf::event_based_actor* self) mutable {
    auto d = std::make_shared<driver>(self, sched, live, std::move(spec), rng, std::move(done));
    d->start();
  });
  return fut.get();
}

void print_phase(const phase_result& r, uint64_t held, uint64_t gpus) {
  std::printf("  %zu submitted in %.2f s: %zu placed, %zu waited (deleted), %zu deletions in "
              "all, %zu errors%s%s\n",
              r.submitted, r.wall_s, r.placed, r.waited, r.removals, r.errors,
              r.first_error.empty() ? "" : "; first: ", r.first_error.c_str());
  std::printf("  %.0f decisions/s, %.0f placements/s (wall clock, deletions included); "
              "held %.1f %%%s\n",
              static_cast<double>(r.submitted) / r.wall_s,
              static_cast<double>(r.placed) / r.wall_s,
              100.0 * static_cast<double>(held) / static_cast<double>(gpus),
              r.timed_out ? "; STOPPED by --seconds before its count or level" : "");
  print_latency("submit -> answer", r.latency_ns);
  size_t requests = r.submitted + r.removals;
  std::printf("  process CPU %.2f s for %zu requests (%.0f us each; %.0f%% of the wall clock; "
              "on a shared machine, CPU per request is the steadier figure)\n",
              r.cpu_s, requests, requests ? r.cpu_s / static_cast<double>(requests) * 1e6 : 0.0,
              100.0 * r.cpu_s / r.wall_s);
  std::printf("  threads (%% of the wall clock): %s\n", r.threads.c_str());
  std::printf("  context switches %" PRIu64 " (%.2f per request, all threads)\n", r.switches,
              requests ? static_cast<double>(r.switches) / static_cast<double>(requests) : 0.0);
  // Does the rate hold up as runs accumulate? First and last tenth.
  const auto& a = r.answered_s;
  if (a.size() >= 100) {
    size_t tenth = a.size() / 10;
    std::printf("  answers/s over the first tenth %.0f, over the last tenth %.0f\n",
                static_cast<double>(tenth) / a[tenth - 1],
                static_cast<double>(tenth) / (a.back() - a[a.size() - 1 - tenth]));
  }
}

/// `--ends N`: N placed runs end one at a time (deleted, each answered
/// before the next), while the runs that waited stay queued: what a run's
/// end costs with a backlog (each end frees GPUs, so the whole queue may be
/// tried again; like runs are refused from one try, RESULTS 32).
void end_runs(caf::actor_system& sys, const scheduler_actor& sched, live_runs& live,
              size_t n) {
  caf::scoped_actor self{sys};
  std::vector<double> ns;
  const auto cpu0 = process_cpu_s();
  const auto t0 = clock_type::now();
  size_t ended = 0;
  for (; ended < n && !live.runs.empty(); ++ended) {
    auto name = std::move(live.runs.back().first);
    live.held -= live.runs.back().second;
    live.runs.pop_back();
    auto t = clock_type::now();
    self->request(sched, caf::infinite, atom::remove_v, std::move(name))
      .receive([](v1::Run&) {},
               [](caf::error& err) {
                 std::fprintf(stderr, "remove: %s\n", render_error(err).c_str());
               });
    ns.push_back(ns_since(t));
  }
  const double wall = ns_since(t0) / 1e9;
  const double cpu = process_cpu_s() - cpu0;
  std::printf("  %zu placed runs ended one at a time in %.3f s, the rest still queued\n", ended,
              wall);
  print_latency("delete -> answer", ns);
  std::printf("  process CPU %.0f us per end\n",
              ended ? cpu / static_cast<double>(ended) * 1e6 : 0.0);
}

/// Deletes every run in `live`, one request at a time, each answered.
void delete_all(caf::actor_system& sys, const scheduler_actor& sched, live_runs& live) {
  caf::scoped_actor self{sys};
  for (auto& [name, n] : live.runs)
    self->request(sched, caf::infinite, atom::remove_v, std::move(name))
      .receive([](v1::Run&) {},
               [](caf::error& err) {
                 std::fprintf(stderr, "remove: %s\n", render_error(err).c_str());
               });
  live.runs.clear();
  live.held = 0;
}

/// Sends every snapshot and waits until the actor has taken them all.
double feed_snapshots(caf::actor_system& sys, const scheduler_actor& sched, size_t machines,
                      std::mt19937_64& rng, health_mix health, uint64_t& gpus,
                      uint64_t& fenced) {
  auto t0 = clock_type::now();
  caf::scoped_actor self{sys};
  for (size_t i = 0; i < machines; ++i) {
    auto m = sim_machine(i, machines, rng, health);
    for (const auto& g : m.gpus) {
      ++gpus;
      fenced += g.health == gpu_health::faulty || g.health == gpu_health::foreign;
    }
    self->send(sched, snapshot_of(m));
  }
  self->request(sched, caf::infinite, atom::runs_v)
    .receive([](v1::RunList&) {},
             [](caf::error& err) {
               std::fprintf(stderr, "barrier failed: %s\n", render_error(err).c_str());
               std::exit(1);
             });
  return ns_since(t0) / 1e9;
}

std::string make_temp_dir(const std::string& base) {
  std::string tmpl = base + "/scheduler-bench-XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    std::perror("mkdtemp");
    std::exit(1);
  }
  return tmpl;
}

void run_size(caf::actor_system& sys, size_t machines, const options& opt) {
  std::mt19937_64 rng{opt.seed};
  const bool slurm = opt.slurm_jobs > 0;
  health_mix health = opt.health;
  if (slurm && !opt.health_given)
    health = health_mix{0, 0};
  std::printf("== %zu machines x 8 GPUs%s ==\n", machines,
              slurm ? " (Slurm side-by-side shape)" : "");
  auto folder = make_temp_dir(opt.dir);
  auto m0 = memory_mib();
  {
    std::shared_ptr<Store> store;
    if (opt.etcd.empty()) {
      auto opened = Store::open(folder + "/controller");
      if (!opened) {
        std::fprintf(stderr, "store: %s\n", render_error(opened.error()).c_str());
        std::exit(1);
      }
      store = std::move(*opened);
    } else {
      etcd_options eo;
      for (size_t at = 0; at <= opt.etcd.size();) {
        auto end = std::min(opt.etcd.find(',', at), opt.etcd.size());
        eo.endpoints.push_back(opt.etcd.substr(at, end - at));
        at = end + 1;
      }
      eo.prefix = "/astraeus/bench-" + std::to_string(::getpid()) + "-"
                  + std::to_string(machines) + "/";
      eo.connections = opt.etcd_connections;
      auto opened = etcd_store::open(eo);
      if (!opened) {
        std::fprintf(stderr, "store: %s\n", render_error(opened.error()).c_str());
        std::exit(1);
      }
      std::printf("store: etcd %s (prefix %s, %zu connection(s))\n", opt.etcd.c_str(),
                  eo.prefix.c_str(), eo.connections);
      store = std::move(*opened);
    }
    scheduler_config sc;
    sc.store = store;
    sc.background_sync = opt.background_sync;  // as the controller spawns it
    sc.commits_in_flight = opt.commits_in_flight;
    sc.commit_priority = opt.realtime_sync ? sync_priority::realtime : sync_priority::normal;
    if (opt.background_sync)
      std::printf("group commit: up to %zu burst(s) in flight\n",
                  opt.commits_in_flight != 0 ? opt.commits_in_flight
                                             : store->limits().writes_in_flight);
    auto sched = opt.detached ? sys.spawn<caf::detached>(scheduler, std::move(sc))
                              : sys.spawn(scheduler, std::move(sc));

    uint64_t gpus = 0, fenced = 0;
    double feed_s = feed_snapshots(sys, sched, machines, rng, health, gpus, fenced);
    auto m1 = memory_mib();
    std::printf("  %zu snapshots taken in %.2f s (%.0f/s): %" PRIu64 " GPUs, %" PRIu64
                " fenced; RSS %.0f MiB (+%.0f)\n",
                machines, feed_s, static_cast<double>(machines) / feed_s, gpus, fenced, m1.first,
                m1.first - m0.first);

    live_runs live;
    uint64_t n = 0;
    // Runs one phase and prints its figures under its title.
    auto phase = [&](const std::string& title, size_t count, uint64_t hold_at, size_t window,
                     std::function<placement_request()> next) {
      phase_spec p;
      p.count = count;
      p.stop_at_held = count ? 0 : hold_at;
      p.hold_at = count ? hold_at : UINT64_MAX;
      p.window = window;
      p.seconds = opt.seconds;
      p.remove_waiting = !slurm;
      p.next = std::move(next);
      // With etcd: its revision grows by one per transaction (nothing else
      // writes meanwhile), so the phase's transactions are counted.
      auto revision = [&]() -> int64_t {
        if (opt.etcd.empty())
          return 0;
        auto rev = store->revision();
        return rev ? *rev : 0;
      };
      auto rev0 = revision();
      auto r = run_phase(sys, sched, live, std::move(p), rng);
      std::printf("  %s, window %zu:\n", title.c_str(), window);
      print_phase(r, live.held, gpus);
      if (!opt.etcd.empty()) {
        auto txns = revision() - rev0;
        std::printf("  etcd: %" PRId64 " transactions for %zu requests (%.1f each)\n", txns,
                    r.submitted + r.removals,
                    txns > 0 ? static_cast<double>(r.submitted + r.removals)
                                 / static_cast<double>(txns)
                             : 0.0);
      }
      return r;
    };
    if (slurm) {
      if (opt.warmup > 0) {
        // As Slurm's controller is when its jobs are released (up, its
        // nodes registered, the held jobs submitted): the actor has served
        // a burst of the same shape, deleted again, so the cluster is empty.
        auto w = phase("warm-up burst (deleted again)", opt.warmup, UINT64_MAX, opt.window,
                       [&n] { return slurm_shape_request(n++); });
        std::printf("slurm-shape-cold: %zu jobs, %zu placed, %.4f s, %.0f placements/s\n",
                    w.submitted, w.placed, w.wall_s, static_cast<double>(w.placed) / w.wall_s);
        delete_all(sys, sched, live);
      }
      auto r = phase("Slurm shape (1-GPU and 4-GPU jobs, 4:1), nothing deleted", opt.slurm_jobs,
                     UINT64_MAX, opt.window, [&n] { return slurm_shape_request(n++); });
      std::printf("slurm-shape: %zu jobs, %zu placed, %.4f s, %.0f placements/s\n", r.submitted,
                  r.placed, r.wall_s, static_cast<double>(r.placed) / r.wall_s);
      if (opt.ends > 0)
        end_runs(sys, sched, live, opt.ends);
    } else {
      uint64_t level = gpus * opt.fill_percent / 100;
      auto singles = [&rng, &n] { return single_request(rng, n++); };
      phase("fill to " + std::to_string(opt.fill_percent) + " % with single workers", 0, level,
            opt.window, singles);
      // The later phases hold the level reached (lower if --seconds cut the
      // fill short).
      level = std::min(level, live.held);
      char at_buf[64];
      std::snprintf(at_buf, sizeof at_buf, " at %.1f %%",
                    100.0 * static_cast<double>(level) / static_cast<double>(gpus));
      const std::string at = at_buf;
      if (opt.ops)
        phase("single-worker mix" + at, opt.ops, level, opt.window, singles);
      if (opt.serial_ops)
        phase("single-worker mix" + at + ", one request at a time (decision latency)",
              opt.serial_ops, level, 1, singles);
      if (opt.gang_ops) {
        std::uniform_real_distribution<double> share(0, 1);
        phase("90 % single workers + 10 % gangs of 2-16 machines" + at, opt.gang_ops, level,
              opt.window, [&rng, &n, share]() mutable {
                return share(rng) < 0.9 ? single_request(rng, n++) : gang_request(rng, n++);
              });
      }
    }
    auto mem = memory_mib();
    std::printf("  memory: VmRSS %.0f MiB, VmHWM %.0f MiB (whole process)\n", mem.first,
                mem.second);
    caf::scoped_actor self{sys};
    self->send_exit(sched, caf::exit_reason::user_shutdown);
    self->wait_for(sched);
  }
  std::error_code ec;
  std::filesystem::remove_all(folder, ec);
  std::printf("\n");
}

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--machines N[,N...]] [--fill PCT] [--ops N] [--serial-ops N] "
               "[--gang-ops N] [--window N] [--seconds S] [--threads N] [--seed S] [--dir DIR] "
               "[--slurm-shape JOBS [--ends N] [--warmup N]] [--fenced PCT] [--at-risk PCT] [--background-sync 0|1] "
               "[--etcd HOST:PORT[,...]] [--etcd-connections N] [--commits-in-flight N] "
               "[--detached 0|1] [--policy wake|stealing|sharing] [--spin N] [--realtime-sync 0|1]\n",
               argv0);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  const char* tmp = std::getenv("TMPDIR");
  o.dir = tmp && *tmp ? tmp : "/tmp";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc)
      usage(argv[0]);
    std::string val = argv[++i];
    auto num = [&] { return std::strtoull(val.c_str(), nullptr, 10); };
    if (arg == "--machines")
      o.sizes = parse_sizes(val);
    else if (arg == "--fill")
      o.fill_percent = static_cast<unsigned>(num());
    else if (arg == "--ops")
      o.ops = num();
    else if (arg == "--serial-ops")
      o.serial_ops = num();
    else if (arg == "--gang-ops")
      o.gang_ops = num();
    else if (arg == "--window")
      o.window = std::max<size_t>(1, num());
    else if (arg == "--seconds")
      o.seconds = std::strtod(val.c_str(), nullptr);
    else if (arg == "--threads")
      o.threads = static_cast<int>(num());
    else if (arg == "--seed")
      o.seed = num();
    else if (arg == "--dir")
      o.dir = val;
    else if (arg == "--etcd")
      o.etcd = val;
    else if (arg == "--etcd-connections")
      o.etcd_connections = std::max<size_t>(1, num());
    else if (arg == "--slurm-shape")
      o.slurm_jobs = num();
    else if (arg == "--ends")
      o.ends = num();
    else if (arg == "--warmup")
      o.warmup = num();
    else if (arg == "--fenced")
      o.health.faulty_percent = static_cast<unsigned>(num()), o.health_given = true;
    else if (arg == "--commits-in-flight")
      o.commits_in_flight = num();
    else if (arg == "--realtime-sync")
      o.realtime_sync = num() != 0;
    else if (arg == "--detached")
      o.detached = num() != 0;
    else if (arg == "--policy")
      o.policy = val;
    else if (arg == "--spin")
      o.spin = static_cast<int64_t>(num());
    else if (arg == "--background-sync")
      o.background_sync = num() != 0;
    else if (arg == "--at-risk")
      o.health.at_risk_percent = static_cast<unsigned>(num()), o.health_given = true;
    else
      usage(argv[0]);
  }
  return o;
}

} // namespace

int main(int argc, char** argv) {
  auto opt = parse(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  caf::actor_system_config cfg;
  register_astraeus_types(cfg);
  cfg.set("scheduler.max-threads", static_cast<int64_t>(opt.threads));
  // As the controller runs its actor system (configure_actor_system): an
  // idle worker waits on its condition variable at once, instead of polling
  // for ~50 ms with a sleep between polls (runtime/process/system_setup.cpp).
  cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
  if (opt.policy != "wake" && opt.policy != "stealing" && opt.policy != "sharing")
    usage(argv[0]);
  if (opt.spin >= 0)
    cfg.set("work-stealing.aggressive-poll-attempts", static_cast<size_t>(opt.spin));
  if (opt.policy == "wake")
    use_wake_stealing(cfg); // as the controller (configure_actor_system)
  else
    cfg.set("scheduler.policy",
            opt.policy == "sharing" ? caf::atom("sharing") : caf::atom("stealing"));
  caf::actor_system sys{cfg};
  auto t0 = clock_type::now();
  for (size_t m : opt.sizes)
    run_size(sys, m, opt);
  std::printf("total %.1f s\n", ns_since(t0) / 1e9);
  return 0;
}
