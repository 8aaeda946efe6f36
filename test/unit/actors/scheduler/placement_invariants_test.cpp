// A seeded property test of the placement engine: random interleavings of
// machine, GPU, queue and placement changes, checked after every step
// against an independent model and with check_invariants()
// (actors/scheduler/placement_invariants.cpp).

#include "actors/scheduler/placement.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test/unit/actors/scheduler/placement_test_support.hpp"

using namespace astraeus;
using namespace astraeus::placement_test;

// -- property test -------------------------------------------------------------

namespace {

struct model_gpu {
  gpu_health health = gpu_health::healthy;
  std::string holder; // run name, empty = free
};

struct model_run {
  placement_request request;
  allocation_id allocation = 0;
  int64_t end = 0;
};

// What a property run went through, so that the test shows it covered the
// interesting paths.
struct coverage {
  int placed = 0, multi_machine = 0, at_risk = 0, backfilled = 0, reservations = 0,
      reserved_waits = 0;
};

// Runs `steps` random steps on a 16-machine cluster and checks, after each,
// the index against a model kept by the test alone.
void run_property(uint32_t seed, int steps, coverage& seen) {
  std::mt19937 rng{seed};
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  placement_index idx;
  scheduler_queue q{idx};
  const int machines = 16;
  std::vector<std::vector<model_gpu>> gpus(machines, std::vector<model_gpu>(8));
  std::vector<bool> up(machines, true);
  std::vector<std::string> pool(machines);
  std::vector<machine_id> ids(machines);
  for (int i = 0; i < machines; ++i) {
    pool[i] = i < 12 ? "h100" : "a100";
    label_map l{{"pool", pool[i]},
                {topology_label::site, i % 2 ? "s1" : "s2"},
                {topology_label::rack, "r" + std::to_string(i / 4)},
                {topology_label::fabric, "f" + std::to_string(i / 8)}};
    if (i < 6)
      l[topology_label::nvlink_domain] = "nvl" + std::to_string(i / 3);
    auto spec = dgx("m" + std::to_string(i), l);
    if (i % 3 == 0) // NVLink pairs instead of NVSwitch
      for (unsigned g = 0; g < 8; ++g)
        spec.gpus[g].nvlink_peers = gpu_mask{1} << (g ^ 1u);
    auto id = idx.add_machine(spec);
    ASSERT_TRUE(id);
    ids[i] = *id;
  }
  std::map<std::string, model_run> running;
  std::map<std::string, placement_request> submitted;
  int64_t now = 0;
  int next_run = 0;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " step " + std::to_string(step));
    switch (pick(12)) {
      case 0: case 1: case 2: case 3: { // submit
        placement_request r;
        r.run = "r" + std::to_string(next_run++);
        static const uint32_t sizes[] = {1, 1, 2, 4, 8};
        uint32_t groups = pick(5) == 0 ? 2 : 1;
        for (uint32_t g = 0; g < groups; ++g)
          r.groups.push_back({"g" + std::to_string(g), 1 + static_cast<uint32_t>(pick(3) ? 0 : pick(4)),
                              sizes[pick(5)]});
        r.leader_group = static_cast<uint32_t>(pick(groups));
        r.required_labels = {{"pool", pick(4) ? "h100" : "a100"}};
        r.healthy_only = pick(5) == 0;
        r.time_limit_seconds = pick(4) == 0 ? 0 : 50 + static_cast<int64_t>(pick(500));
        r.priority = pick(10) == 0 ? 1 : 0;
        submitted[r.run] = r;
        ASSERT_FALSE(q.submit(r, now));
        break;
      }
      case 4: { // complete a running run
        if (running.empty())
          break;
        auto it = std::next(running.begin(), static_cast<long>(pick(running.size())));
        ASSERT_FALSE(q.complete(it->first));
        for (auto& m : gpus)
          for (auto& g : m)
            if (g.holder == it->first)
              g.holder.clear();
        running.erase(it);
        break;
      }
      case 5: { // fence a GPU
        int m = static_cast<int>(pick(machines)), s = static_cast<int>(pick(8));
        ASSERT_FALSE(idx.set_gpu_health({ids[m], static_cast<uint8_t>(s)}, gpu_health::faulty));
        gpus[m][s].health = gpu_health::faulty;
        break;
      }
      case 6: { // other health changes: at risk, foreign, cleared
        int m = static_cast<int>(pick(machines)), s = static_cast<int>(pick(8));
        static const gpu_health hs[] = {gpu_health::at_risk, gpu_health::foreign,
                                        gpu_health::healthy, gpu_health::healthy};
        gpu_health h = hs[pick(4)];
        ASSERT_FALSE(idx.set_gpu_health({ids[m], static_cast<uint8_t>(s)}, h));
        gpus[m][s].health = h;
        break;
      }
      case 7: { // a machine goes Down or comes back
        int m = static_cast<int>(pick(machines));
        up[m] = !up[m];
        ASSERT_FALSE(idx.set_schedulable(ids[m], up[m]));
        break;
      }
      case 8: { // cancel a waiting run
        if (q.waiting_count() == 0)
          break;
        for (const auto& [name, r] : submitted)
          if (!running.count(name) && q.waiting(name)) {
            std::string victim = name;
            ASSERT_FALSE(q.cancel(victim));
            submitted.erase(victim);
            break;
          }
        break;
      }
      default: { // time passes; runs end at their time limits
        now += static_cast<int64_t>(pick(120));
        for (auto it = running.begin(); it != running.end();) {
          if (it->second.end <= now) {
            ASSERT_FALSE(q.complete(it->first));
            for (auto& m : gpus)
              for (auto& g : m)
                if (g.holder == it->first)
                  g.holder.clear();
            it = running.erase(it);
          } else {
            ++it;
          }
        }
      }
    }
    auto started = q.schedule(now);
    const auto& res = q.reservation();
    seen.reservations += res.has_value();
    for (const auto& [name, r] : submitted)
      if (const auto* w = q.waiting(name); w && w->code == waiting_code::reserved)
        ++seen.reserved_waits;
    for (const auto& d : started) {
      ++seen.placed;
      seen.backfilled += d.backfilled;
      seen.at_risk += d.where.uses_at_risk;
      seen.multi_machine += d.where.tier != placement_tier::one_machine;
      const auto& req = submitted.at(d.run);
      ASSERT_EQ(d.where.workers.size(), [&] {
        size_t n = 0;
        for (const auto& g : req.groups)
          n += g.workers;
        return n;
      }());
      const auto& leader = d.where.workers.at(d.where.leader);
      EXPECT_EQ(leader.group, req.leader_group);
      EXPECT_EQ(leader.group_rank, 0u);
      std::set<std::string> sites;
      bool at_risk = false;
      for (const auto& w : d.where.workers) {
        int m = static_cast<int>(w.machine);
        ASSERT_TRUE(up[m]) << "placed on a machine that takes no new work";
        ASSERT_EQ(pool[m], req.required_labels.at("pool"));
        ASSERT_EQ(__builtin_popcountll(w.gpus), static_cast<int>(req.groups[w.group].gpus_per_worker));
        sites.insert(*idx.machine_label(w.machine, topology_label::site));
        for (unsigned s = 0; s < 8; ++s) {
          if (!(w.gpus & (gpu_mask{1} << s)))
            continue;
          auto& g = gpus[m][s];
          ASSERT_EQ(g.holder, "") << "GPU assigned twice";
          ASSERT_NE(g.health, gpu_health::faulty) << "placed onto a fenced GPU";
          ASSERT_NE(g.health, gpu_health::foreign);
          if (g.health == gpu_health::at_risk)
            at_risk = true;
          g.holder = d.run;
        }
        if (res && d.backfilled && d.end > res->start) {
          for (const auto& set : res->gpus) {
            if (set.machine == w.machine) {
              ASSERT_EQ(set.gpus & w.gpus, 0u) << "backfill on reserved GPUs past the reservation";
            }
          }
        }
      }
      EXPECT_EQ(sites.size(), 1u) << "a gang spans sites";
      if (req.healthy_only) {
        ASSERT_FALSE(at_risk) << "AtRisk GPU for a healthy_only run";
      }
      running[d.run] = model_run{req, d.allocation, d.end};
    }
    // Recount: the index holds exactly what the model says, and its free
    // GPUs are what health and holds leave.
    for (int m = 0; m < machines; ++m) {
      gpu_mask free_healthy = 0;
      for (unsigned s = 0; s < 8; ++s) {
        const auto& g = gpus[m][s];
        allocation_id h = idx.holder({ids[m], static_cast<uint8_t>(s)});
        if (g.holder.empty())
          ASSERT_EQ(h, 0u) << "m" << m << " slot " << s << " held by nobody's run";
        else
          ASSERT_EQ(h, running.at(g.holder).allocation);
        if (g.holder.empty() && g.health == gpu_health::healthy)
          free_healthy |= gpu_mask{1} << s;
      }
      ASSERT_EQ(idx.free_gpus(ids[m], false), free_healthy);
    }
    ASSERT_EQ(idx.totals().allocations, running.size());
    ASSERT_EQ(q.running_count(), running.size());
    auto problem = idx.check_invariants();
    ASSERT_EQ(problem, "");
  }
}

} // namespace

TEST(Placement, PropertyRandomInterleavingsNeverDoubleAssignOrUseFencedGpus) {
  coverage seen;
  for (uint32_t seed : {1u, 2u, 3u, 42u, 2026u})
    run_property(seed, 2000, seen);
  std::printf("placed %d (across machines %d, with AtRisk GPUs %d, backfilled %d); passes with "
              "a reservation %d; waits for reserved GPUs %d\n",
              seen.placed, seen.multi_machine, seen.at_risk, seen.backfilled, seen.reservations,
              seen.reserved_waits);
  EXPECT_GT(seen.placed, 1000);
  EXPECT_GT(seen.multi_machine, 20);
  EXPECT_GT(seen.at_risk, 5);
  EXPECT_GT(seen.backfilled, 20);
  EXPECT_GT(seen.reservations, 100);
  EXPECT_GT(seen.reserved_waits, 20);
}

// Issue 22: seeded random GPU runs and gangs asking for cores and memory,
// beside CPU-only use that comes and goes (`set_outside_use`), on machines
// of two sizes: no machine ever has more cores or memory promised than it
// has, the index's free figures are exactly what the model leaves, and a
// run that waits for cores or memory names a machine that is short of them.
TEST(Placement, PropertyCoresAndMemoryAreNeverOverPromised) {
  int placed_n = 0, short_waits = 0, across = 0;
  for (uint32_t seed : {7u, 8u, 9u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng{seed};
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    placement_index idx;
    scheduler_queue q{idx};
    const int machines = 8;
    std::vector<machine_id> ids(machines);
    std::vector<uint64_t> cpu_cap(machines), mem_cap(machines), outside_cpu(machines, 0),
      outside_mem(machines, 0);
    for (int i = 0; i < machines; ++i) {
      uint32_t cpus = i % 2 ? 64 : 128;
      uint64_t mem = i % 2 ? 512 : 1024;
      ids[i] = add(idx, sized(dgx("m" + std::to_string(i),
                                  {{"pool", "h100"}, {topology_label::rack, i < 4 ? "r0" : "r1"}}),
                              cpus, mem));
      cpu_cap[i] = uint64_t{cpus} * 1000;
      mem_cap[i] = mem << 30;
    }
    // What each running run holds per machine (cores x 1000, bytes).
    std::map<std::string, std::map<int, std::pair<uint64_t, uint64_t>>> running;
    int64_t now = 0;
    for (int step = 0; step < 600; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      switch (pick(6)) {
        case 0: case 1: { // a GPU run or gang asking for cores and memory
          static const uint32_t gpus[] = {1, 2, 4, 8};
          static const double cpus[] = {0, 4, 16, 24.5, 48, 96};
          static const uint64_t mem[] = {0, 32, 128, 300, 600};
          auto r = asking(gang("r" + std::to_string(step), 1 + static_cast<uint32_t>(pick(3)),
                               gpus[pick(4)]),
                          cpus[pick(6)], mem[pick(5)]);
          r.time_limit_seconds = 10 + static_cast<int64_t>(pick(200));
          ASSERT_FALSE(q.submit(r, now));
          break;
        }
        case 2: { // CPU-only use changes on a machine
          int m = static_cast<int>(pick(machines));
          outside_cpu[m] = pick(3) ? 0 : 1000 * pick(64);
          outside_mem[m] = pick(3) ? 0 : (uint64_t{32} << 30) * pick(8);
          ASSERT_FALSE(idx.set_outside_use(ids[m], outside_cpu[m], outside_mem[m]));
          break;
        }
        case 3: { // a run ends
          if (running.empty())
            break;
          auto it = std::next(running.begin(), static_cast<long>(pick(running.size())));
          ASSERT_FALSE(q.complete(it->first));
          running.erase(it);
          break;
        }
        default:
          now += static_cast<int64_t>(pick(60));
      }
      // What this pass places on a machine fits what was free before it.
      std::vector<uint64_t> free_cpu(machines), free_mem(machines), new_cpu(machines, 0),
        new_mem(machines, 0);
      for (int m = 0; m < machines; ++m) {
        free_cpu[m] = idx.free_cpu_millis(ids[m]);
        free_mem[m] = idx.free_memory_bytes(ids[m]);
      }
      for (const auto& d : q.schedule(now)) {
        ++placed_n;
        across += d.where.tier != placement_tier::one_machine;
        auto& use = running[d.run];
        for (const auto& w : d.where.workers) {
          auto m = static_cast<int>(w.machine);
          use[m].first += d.where.cpu_millis_per_worker;
          use[m].second += d.where.memory_bytes_per_worker;
          new_cpu[m] += d.where.cpu_millis_per_worker;
          new_mem[m] += d.where.memory_bytes_per_worker;
        }
      }
      for (int m = 0; m < machines; ++m) {
        ASSERT_LE(new_cpu[m], free_cpu[m]) << "a worker placed on m" << m << " short of cores";
        ASSERT_LE(new_mem[m], free_mem[m]) << "a worker placed on m" << m << " short of memory";
      }
      for (int m = 0; m < machines; ++m) {
        uint64_t cpu = 0, mem = 0;
        for (const auto& [name, use] : running)
          if (auto u = use.find(m); u != use.end()) {
            cpu += u->second.first;
            mem += u->second.second;
          }
        // What was placed never exceeds what was free (the outside use may
        // grow past it afterwards: it is the CPU-only runs' own business).
        uint64_t used_cpu = cpu + outside_cpu[m], used_mem = mem + outside_mem[m];
        ASSERT_EQ(idx.free_cpu_millis(ids[m]), used_cpu < cpu_cap[m] ? cpu_cap[m] - used_cpu : 0);
        ASSERT_EQ(idx.free_memory_bytes(ids[m]),
                  used_mem < mem_cap[m] ? mem_cap[m] - used_mem : 0);
        ASSERT_LE(cpu, cpu_cap[m]) << "more cores promised than m" << m << " has";
        ASSERT_LE(mem, mem_cap[m]) << "more memory promised than m" << m << " has";
      }
      ASSERT_EQ(idx.check_invariants(), "");
    }
    // Count the waits for cores or memory of the last pass.
    for (int step = 0; step < 600; ++step)
      if (const auto* w = q.waiting("r" + std::to_string(step));
          w && w->code == waiting_code::not_enough_cores_or_memory) {
        ++short_waits;
        EXPECT_NE(w->message.find(" has the GPUs but "), std::string::npos) << w->message;
      }
  }
  std::printf("placed %d (across machines %d); waits for cores or memory at the end %d\n",
              placed_n, across, short_waits);
  EXPECT_GT(placed_n, 100);
  EXPECT_GT(across, 5);
}
