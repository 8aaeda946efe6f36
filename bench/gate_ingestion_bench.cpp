// Report ingestion as the gate sees it (issue 14; plain main, figures in
// bench/RESULTS.md):
//
//   gate_ingestion_bench [--machines N] [--rounds R] [--threads T] [--dir DIR]
//                        [--chunk K] [--readings 1|0] [--policy wake|stealing|sharing]
//
// - The controller's side as it is wired (actors/controller/controller.cpp):
//   a RocksDB store in a fresh folder under DIR ($TMPDIR or /tmp), the
//   scheduler (background sync, as the controller runs it), the GPU history
//   actor, and N machine actors (2,000) with the store, the scheduler and the
//   history; each machine spawns its 8 GPU actors on its first report.
// - One secure channel per machine (runtime/gate/secure_channel.hpp: the
//   gate's channel_server, the agent's channel_client, a whole handshake).
// - Realistic reports: the host facts read from test/fixtures/hosts/dgx-h100,
//   8 H100 GPUs (ECC, row remapping, 18 NVLinks each; readings that change
//   every report), the worker list (two Running workers); ~11 KiB each. The
//   agents' side seals every frame before the clock starts (that is their
//   CPU, not the controller's).
// - Timed: a gate-like actor on the same CAF workers takes the sealed frames
//   round-robin, R rounds of one report per machine, in chunks of K (64),
//   and does per frame what the gate's new_data_msg handler does
//   (actors/controller/gate.cpp): the length header against the cap, the
//   channel's open and parse, the machine check, one typed message to the
//   machine actor. The clock stops when every machine actor has answered its
//   GPU views (which asks each GPU actor), i.e. every report was applied to
//   the machine and its GPU actors.
// - What it leaves out of the gate: the broker's socket reads (two
//   new_data_msg per frame from CAF's multiplexer).
//
// - Readings (issue 14; --readings 1, the default): each machine's reports
//   are what its agent sends a controller that takes readings reports: a
//   full report, then readings reports (MachineReport.readings_of: the GPUs'
//   use, temperature, power and memory used, the host's memory, pressure and
//   free space), a full one again every 30th report (the agent's
//   readings_between_full_reports). --readings 0: every report full, as
//   before issue 14 and as an older agent sends them.
//
// Prints reports/s, the CPU per report (the whole process: all actors,
// RocksDB, CAF's idle polling), and the first round (GPU actors spawned)
// apart from the steady rounds.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <spdlog/spdlog.h>

#include "actors/controller/gpu_history_actor.hpp"
#include "actors/controller/machine_actor.hpp"
#include "actors/scheduler/scheduler_actor.hpp"
#include "bench/sim_cluster.hpp"
#include "messages/error.hpp"
#include "messages/gpu_read.hpp"
#include "messages/report_readings.hpp"
#include "runtime/gate/frame_codec.hpp"
#include "runtime/gate/secure_channel.hpp"
#include "runtime/host/host_facts.hpp"
#include "runtime/process/system_setup.hpp"
#include "runtime/process/wake_stealing.hpp"
#include "store/store.hpp"

using namespace astraeus;

namespace {

using steady = std::chrono::steady_clock;

struct options {
  size_t machines = 2000;
  size_t rounds = 20;
  size_t chunk = 64;
  int threads = 2;
  bool readings = true;
  std::string dir;
  std::string policy = "wake";    // --policy
};

double seconds_since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

/// One agent's session: the gate's end and the agent's.
struct session {
  std::unique_ptr<channel_server> server;
  std::unique_ptr<channel_client> client;
  machine_actor machine;
  std::string name;
};

/// Machine `i`'s report of round `round`: the fixture's host facts, its 8
/// GPUs (fixed ids, readings that move), two Running workers.
v1::MachineReport report_of(const v1::HostFacts& host, const std::vector<v1::Gpu>& gpus,
                            const std::string& name, uint64_t round, std::mt19937_64& rng) {
  v1::MachineReport r;
  r.set_machine(name);
  r.set_sequence(round + 1);
  r.set_sent_unix_ms(1'790'000'000'000 + static_cast<int64_t>(round) * 10'000);
  r.set_agent_version("0.1.0");
  auto* f = r.mutable_facts();
  *f = host;
  f->set_hostname(name);
  auto* section = f->mutable_gpus();
  set_read_as(*section, gpu_read_as::driver);
  for (const auto& g : gpus) {
    auto* out = section->add_gpus();
    *out = g;
    out->set_utilization_percent(static_cast<double>(rng() % 101));
    out->set_temperature_c(static_cast<double>(30 + rng() % 50));
    out->set_power_watts(static_cast<double>(70 + rng() % 630));
    out->set_memory_used_bytes((rng() % 4000ull) << 20);  // idle: under the Foreign bar
  }
  auto* w = r.mutable_workers();
  w->set_machine(name);
  w->set_generation(1);
  for (int k = 0; k < 2; ++k) {
    auto* s = w->add_workers();
    s->set_worker("train-" + name + "-" + std::to_string(k));
    s->set_run("train-" + name);
    s->set_state("Running");
  }
  return r;
}

} // namespace

int main(int argc, char** argv) {
  options opt;
  const char* tmp = std::getenv("TMPDIR");
  opt.dir = tmp && *tmp ? tmp : "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string arg = argv[i], val = argv[i + 1];
    auto num = [&] { return std::strtoull(val.c_str(), nullptr, 10); };
    if (arg == "--machines")
      opt.machines = num();
    else if (arg == "--rounds")
      opt.rounds = std::max<size_t>(2, num());
    else if (arg == "--threads")
      opt.threads = static_cast<int>(num());
    else if (arg == "--dir")
      opt.dir = val;
    else if (arg == "--chunk")
      opt.chunk = std::max<size_t>(1, num());
    else if (arg == "--readings")
      opt.readings = num() != 0;
    else if (arg == "--policy" && (val == "wake" || val == "stealing" || val == "sharing"))
      opt.policy = val;
    else {
      std::fprintf(stderr, "usage: %s [--machines N] [--rounds R] [--threads T] [--dir DIR] "
                           "[--chunk K] [--readings 1|0] [--policy wake|stealing|sharing]\n",
                   argv[0]);
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);
  caf::actor_system_config cfg;
  register_astraeus_types(cfg);
  cfg.set("scheduler.max-threads", static_cast<int64_t>(opt.threads));
  // As the controller runs its actor system (configure_actor_system): an
  // idle worker waits on its condition variable at once, without ~50 ms of
  // polls and steal attempts first.
  cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
  // --policy: as in scheduler_actor_bench (wake: the controller's scheduler).
  if (opt.policy == "wake")
    use_wake_stealing(cfg); // as the controller (configure_actor_system)
  else
    cfg.set("scheduler.policy",
            opt.policy == "sharing" ? caf::atom("sharing") : caf::atom("stealing"));
  caf::actor_system sys{cfg};

  std::string folder = opt.dir + "/gate-ingestion-XXXXXX";
  if (!mkdtemp(folder.data())) {
    std::perror("mkdtemp");
    return 1;
  }
  {
    auto opened = Store::open(folder + "/controller");
    if (!opened) {
      std::fprintf(stderr, "store: %s\n", render_error(opened.error()).c_str());
      return 1;
    }
    std::shared_ptr<Store> store{std::move(*opened)};
    scheduler_config sc;
    sc.store = store;
    sc.background_sync = true;
    auto sched = sys.spawn(scheduler, std::move(sc));
    gpu_history_config hc;
    hc.store = store;
    auto history = sys.spawn(gpu_history, std::move(hc));

    HostReaderOptions ho;
    ho.root = std::string{ASTRAEUS_SOURCE_DIR} + "/test/fixtures/hosts/dgx-h100";
    ho.architecture = "x86_64";
    ho.statfs = [](const std::string&) -> std::optional<FilesystemUsage> {
      return FilesystemUsage{1ull << 40, 1ull << 39};
    };
    auto host = read_host_facts(ho);

    auto gate_keys = std::make_shared<const identity_keypair>(identity_keypair::generate());
    auto agent_keys = std::make_shared<const identity_keypair>(identity_keypair::generate());
    std::mt19937_64 rng{14};
    std::vector<session> sessions(opt.machines);
    std::vector<std::vector<v1::Gpu>> gpus(opt.machines);
    auto t_setup = steady::now();
    for (size_t i = 0; i < opt.machines; ++i) {
      auto& s = sessions[i];
      char name[32];
      std::snprintf(name, sizeof name, "dgx-%05zu", i);
      s.name = name;
      machine_config mc;
      mc.record.set_name(s.name);
      mc.record.set_machine_id("id-" + s.name);
      mc.store = store;
      mc.scheduler = sched;
      mc.history = history;
      s.machine = sys.spawn(machine, std::move(mc));
      s.server = std::make_unique<channel_server>(gate_keys);
      s.client = std::make_unique<channel_client>(agent_keys, gate_keys->public_bytes);
      auto hello = s.client->start();
      auto accept = s.server->on_record(hello.data() + 4, hello.size() - 4);
      auto auth = s.client->on_record(accept->reply.data() + 4, accept->reply.size() - 4);
      auto done = s.server->on_record(auth->reply.data() + 4, auth->reply.size() - 4);
      if (!done || !done->established) {
        std::fprintf(stderr, "handshake failed\n");
        return 1;
      }
      for (uint32_t g = 0; g < 8; ++g)
        gpus[i].push_back(bench::sim_h100_gpu(rng, g));
    }
    // The agents' side: every frame sealed in advance, round-robin order.
    std::vector<std::string> frames;
    frames.reserve(opt.machines * opt.rounds);
    size_t bytes = 0, readings_bytes = 0;
    for (size_t r = 0; r < opt.rounds; ++r)
      for (size_t i = 0; i < opt.machines; ++i) {
        v1::Frame f;
        *f.mutable_report() = report_of(host, gpus[i], sessions[i].name, r, rng);
        // As the agent's shrink_to_readings: full at 0, 30, 60, ...
        const uint64_t full = r / 30 * 30;
        if (opt.readings && r != full) {
          auto* report = f.mutable_report();
          *report->mutable_readings() = readings_only(report->facts());
          report->clear_facts();
          report->set_readings_of(full + 1);
        }
        if (r == 0 && i == 0)
          bytes = f.ByteSizeLong();
        if (r == 1 && i == 0)
          readings_bytes = f.ByteSizeLong();
        frames.push_back(sessions[i].client->encode(f));
      }
    std::printf("%zu machines x 8 GPUs, %zu rounds: %zu sealed frames of %zu bytes (report "
                "%zu B) ready in %.1f s\n",
                opt.machines, opt.rounds, frames.size(), frames.front().size(), bytes,
                seconds_since(t_setup));
    std::printf("%s\n", opt.readings ? ("readings reports after the first (one full report in "
                                        "30): " + std::to_string(readings_bytes) + " B each")
                                         .c_str()
                                      : "every report full (--readings 0)");

    // The gate-like actor: rounds [first, last) in one go, then the barrier
    // through every machine's GPU views.
    const uint64_t cap = 1u << 20;  // the gate's default frame cap
    auto run_rounds = [&](size_t first, size_t last) {
      std::promise<size_t> done;
      auto fut = done.get_future();
      sys.spawn([&, first, last, done = std::move(done)](caf::event_based_actor* self) mutable {
        auto next = std::make_shared<size_t>(first * opt.machines);
        auto end = last * opt.machines;
        auto failed = std::make_shared<size_t>(0);
        auto finish = std::make_shared<std::promise<size_t>>(std::move(done));
        auto barrier = [self, &sessions, failed, finish] {
          auto left = std::make_shared<size_t>(sessions.size());
          for (auto& s : sessions)
            self->request(s.machine, caf::infinite, atom::gpus_v)
              .then([left, failed, finish, self](std::vector<v1::GpuView>& views) {
                      if (views.size() != 8)
                        ++*failed;
                      if (--*left == 0) {
                        finish->set_value(*failed);
                        self->quit();
                      }
                    },
                    [left, failed, finish, self](caf::error&) {
                      ++*failed;
                      if (--*left == 0) {
                        finish->set_value(*failed);
                        self->quit();
                      }
                    });
        };
        // One chunk per message, as a broker takes one read per message.
        self->become([=, &frames, &sessions, &opt](atom::tick) {
          for (size_t k = 0; k < opt.chunk && *next < end; ++k, ++*next) {
            const auto& rec = frames[*next];
            auto& s = sessions[*next % opt.machines];
            auto len = decode_frame_length(rec.data(), s.server->record_cap(cap));
            if (!len) {
              ++*failed;
              continue;
            }
            auto step = s.server->on_record(rec.data() + frame_header_size, *len);
            if (!step || !step->frame || !step->frame->has_report()) {
              ++*failed;
              continue;
            }
            auto& report = *step->frame->mutable_report();
            if (report.machine() != s.name) {
              ++*failed;
              continue;
            }
            self->send(s.machine, std::move(report));
          }
          if (*next < end)
            self->send(self, atom::tick_v);
          else
            barrier();
        });
        self->send(self, atom::tick_v);
      });
      return fut.get();
    };

    auto show = [&](const char* what, size_t first, size_t last) {
      auto t0 = steady::now();
      auto c0 = process_cpu_s();
      size_t failed = run_rounds(first, last);
      auto wall = seconds_since(t0);
      auto cpu = process_cpu_s() - c0;
      auto n = static_cast<double>((last - first) * opt.machines);
      std::printf("  %s: %.0f reports in %.3f s: %.0f reports/s; process CPU %.2f s = %.1f us "
                  "per report (%.0f%% of the wall clock)%s\n",
                  what, n, wall, n / wall, cpu, cpu / n * 1e6, 100 * cpu / wall,
                  failed ? "; SOME REPORTS NOT APPLIED" : "");
    };
    show("round 1 (GPU actors spawned, first snapshots)", 0, 1);
    show("rounds 2..R (steady)", 1, opt.rounds);
    auto mem = bench::memory_mib();
    std::printf("  memory: VmRSS %.0f MiB, VmHWM %.0f MiB\n", mem.first, mem.second);

    caf::scoped_actor self{sys};
    for (auto& s : sessions)
      self->send_exit(s.machine, caf::exit_reason::user_shutdown);
    self->send_exit(sched, caf::exit_reason::user_shutdown);
    self->send_exit(history, caf::exit_reason::user_shutdown);
    self->wait_for(sched, history);
  }
  std::error_code ec;
  std::filesystem::remove_all(folder, ec);
  return 0;
}
