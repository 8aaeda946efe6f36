// HA mode's failover time (issue 15; plain main; figures in
// bench/RESULTS.md): three controllers on a 3-member etcd on loopback
// (test/integration/ha/ha_group.hpp). Each round SIGKILLs the leading
// controller and measures the time until a write (a join token minted
// through the gate) is accepted by the next leader, then restarts the
// killed one as a standby. Every write acknowledged before a kill is
// checked to be there after it.
//
//   ha_failover_bench [--kills N] [--dir DIR]
//
// Prints each round's time (with every controller's recent log for a round
// over 3 s), then p50, p90, p99 and the maximum.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "integration/ha/ha_group.hpp"

using namespace astraeus;
using namespace astraeus::itest;

int main(int argc, char** argv) {
  size_t kills = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string arg = argv[i];
    if (arg == "--kills")
      kills = std::strtoull(argv[i + 1], nullptr, 10);
    else if (arg == "--dir")
      ::setenv("TMPDIR", argv[i + 1], 1);
    else {
      std::fprintf(stderr, "usage: %s [--kills N] [--dir DIR]\n", argv[0]);
      return 2;
    }
  }
  temp_dir dir{"astraeus-ha-bench"};
  ha_group g{dir.path()};
  if (!g.ready_etcd()) {
    std::fprintf(stderr, "etcd did not start\n");
    return 1;
  }
  if (!g.start_all()) {
    std::fprintf(stderr, "the first controller made no keys\n");
    g.end(true);
    return 1;
  }
  auto leader = g.wait_leader(20s);
  if (!leader) {
    std::fprintf(stderr, "no controller leads\n");
    g.end(true);
    return 1;
  }
  std::vector<double> times;
  size_t acknowledged = 0;
  size_t lost = 0;
  for (size_t round = 0; round < kills; ++round) {
    // Every standby is up and standing before the kill.
    if (!g.write_through(*leader, 2s)) {
      std::fprintf(stderr, "round %zu: the leader refused a write\n", round);
      g.end(true);
      return 1;
    }
    ++acknowledged;
    auto before = g.join_tokens(*leader);
    auto t0 = steady::now();
    auto killed = *leader;
    g.controller(killed)->kill_now();
    auto next = g.wait_new_leader(killed, 15s);
    if (!next) {
      std::fprintf(stderr, "round %zu: no new leader accepted a write within 15 s\n", round);
      g.end(true);
      return 1;
    }
    times.push_back(seconds_since(t0));
    ++acknowledged;
    auto after = g.join_tokens(*next);
    if (before && after)
      for (const auto& id : *before)
        if (std::find(after->begin(), after->end(), id) == after->end())
          ++lost;
    std::printf("round %3zu: controller %zu -> %zu in %.3f s\n", round, killed, *next,
                times.back());
    if (times.back() > 3.0) {
      // Over the target: the evidence, before the folder is gone.
      for (size_t i = 0; i < g.size(); ++i) {
        auto err = g.controller(i)->err();
        std::printf("---- slow round %zu, controller %zu (%s):\n%s\n", round, i,
                    g.controller(i)->command_line().c_str(),
                    err.substr(err.size() > 2500 ? err.size() - 2500 : 0).c_str());
      }
    }
    std::fflush(stdout);
    g.start(killed);
    leader = next;
    // The restarted one stands by (its standby API answers) before the next kill.
    wait_until(
      [&] {
        httplib::Client c{"127.0.0.1", g.api_port(killed)};
        c.set_connection_timeout(0, 200000);
        auto r = c.Get("/");
        return r && (r->status == 307 || r->status == 503);
      },
      10s, 50ms);
  }
  auto sorted = times;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double p) {
    if (sorted.empty())
      return 0.0;
    auto i = static_cast<size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
    return sorted[std::min(i, sorted.size() - 1)];
  };
  std::printf("failover over %zu kills: p50 %.3f s, p90 %.3f s, p99 %.3f s, max %.3f s; "
              "%zu writes acknowledged, %zu lost\n",
              sorted.size(), pct(0.5), pct(0.9), pct(0.99), sorted.back(), acknowledged, lost);
  g.end(false);
  return lost == 0 ? 0 : 1;
}
