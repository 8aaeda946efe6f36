// The GPU history actor on the test coordinator (issue 19): machine reports
// become samples, `get_gpu_history` answers through the cluster's request
// table, the flush timer writes one batch to the store, and a restarted
// actor answers the same history. Virtual time and a test wall clock: no
// sleep.

#include "actor_fixture.hpp"

#include "actors/controller/cluster_actor.hpp"
#include "actors/controller/gpu_history_actor.hpp"
#include "actors/controller/machine_actor.hpp"
#include "runtime/process/wall_clock.hpp"
#include "store/store.hpp"

using namespace astraeus;
using namespace std::chrono_literals;

namespace {

v1::Hello agent_hello(const std::string& name) {
  v1::Hello h;
  h.set_protocol_version(1);
  h.set_role(v1::AGENT);
  h.set_machine_name(name);
  h.set_machine_id("id-" + name);
  h.set_software_version("test");
  return h;
}

v1::MachineReport report(double util, double watts) {
  v1::MachineReport r;
  r.set_machine("gpu-01");
  auto* s = r.mutable_facts()->mutable_gpus();
  s->set_read_as("driver: healthy");
  auto* g = s->add_gpus();
  g->set_id("GPU-0");
  g->set_pci_address("0000:3b:00.0");
  g->set_index(0);
  g->set_memory_total_bytes(80ull << 30);
  g->set_memory_used_bytes(1ull << 30);
  g->set_utilization_percent(util);
  g->set_power_watts(watts);
  g->set_temperature_c(55);
  g->set_sm_clock_mhz(1980);
  return r;
}

v1::Request history_of(const std::string& machine, const std::string& gpu) {
  v1::Request r;
  r.set_id(7);
  r.mutable_get_gpu_history()->set_machine(machine);
  r.mutable_get_gpu_history()->set_gpu(gpu);
  return r;
}

class GpuHistoryActor : public test::actor_test {
protected:
  GpuHistoryActor() {
    auto s = Store::open(dir.path() + "/controller");
    if (!s)
      ADD_FAILURE() << render_error(s.error());
    else
      db = std::shared_ptr<Store>{std::move(*s)};
  }

  gpu_history_actor spawn_history() {
    gpu_history_config hc;
    hc.store = db;
    hc.clock = clock;
    auto h = spawn(gpu_history, std::move(hc));
    run();
    return h;
  }

  cluster_actor spawn_cluster(gpu_history_actor h) {
    cluster_config cc;
    cc.store = db;
    cc.clock = clock;
    cc.history = h;
    auto c = spawn(cluster, std::move(cc));
    run();
    return c;
  }

  /// Stored points of the history family.
  size_t stored_points() {
    size_t n = 0;
    db->for_each(family::gpu_history, [&](std::string_view, std::string_view) {
      ++n;
      return true;
    });
    return n;
  }

  test::temp_dir dir;
  std::shared_ptr<Store> db;
  std::shared_ptr<test_wall_clock> clock = std::make_shared<test_wall_clock>();
};

} // namespace

TEST_F(GpuHistoryActor, ReportsBecomeAHistoryServedByTheCluster) {
  auto h = spawn_history();
  auto c = spawn_cluster(h);
  auto m = ask<machine_actor>(c, atom::enrol_v, agent_hello("gpu-01"), uint64_t{1});
  for (int i = 0; i < 3; ++i) {
    (*self)->send(m, report(10.0 * (i + 1), 100.0 + i));
    run();
    clock->advance(5s);
  }
  auto resp = ask<v1::Response>(c, history_of("gpu-01", "GPU-0"));
  ASSERT_FALSE(resp.has_error()) << resp.error().message();
  EXPECT_EQ(resp.id(), 7u);
  const auto& hist = resp.gpu_history();
  EXPECT_EQ(hist.machine(), "gpu-01");
  EXPECT_EQ(hist.gpu(), "GPU-0");
  ASSERT_EQ(hist.samples_size(), 3);
  EXPECT_DOUBLE_EQ(hist.samples(0).utilization_percent(), 10.0);
  EXPECT_DOUBLE_EQ(hist.samples(2).utilization_percent(), 30.0);
  EXPECT_DOUBLE_EQ(hist.samples(2).power_watts(), 102.0);
  EXPECT_EQ(hist.samples(2).sm_clock_mhz(), 1980u);
  EXPECT_EQ(hist.samples(2).memory_used_bytes(), 1ull << 30);
  EXPECT_EQ(hist.samples(1).unix_ms() - hist.samples(0).unix_ms(), 5000);
  // The GPU's health as its GPU actor judged it.
  EXPECT_EQ(hist.samples(0).health(), "Healthy");
  // By PCI address and index too.
  EXPECT_FALSE(ask<v1::Response>(c, history_of("gpu-01", "0000:3b:00.0")).has_error());
  EXPECT_FALSE(ask<v1::Response>(c, history_of("gpu-01", "0")).has_error());
  // Unknown machine, unknown GPU, no GPU: errors that name them.
  auto no_machine = ask<v1::Response>(c, history_of("gpu-09", "GPU-0"));
  EXPECT_EQ(no_machine.error().code(), "no_such_machine");
  auto no_gpu = ask<v1::Response>(c, history_of("gpu-01", "GPU-9"));
  EXPECT_EQ(no_gpu.error().code(), "invalid_request");
  EXPECT_NE(no_gpu.error().message().find("machine gpu-01 has no GPU GPU-9"),
            std::string::npos);
  auto unnamed = ask<v1::Response>(c, history_of("gpu-01", ""));
  EXPECT_NE(unnamed.error().message().find("name the GPU"), std::string::npos);
}

TEST_F(GpuHistoryActor, FlushesOneBatchEveryTenSecondsAndReloadsAfterARestart) {
  auto h = spawn_history();
  v1::GpuSamples samples;
  samples.set_machine("gpu-01");
  auto* v = samples.add_gpus();
  v->set_gpu("GPU-0");
  v->mutable_sample()->set_utilization_percent(42);
  v->mutable_sample()->set_unix_ms(clock->now_unix_ms());
  (*self)->send(h, samples);
  run();
  EXPECT_EQ(stored_points(), 0u);  // nothing written before the flush
  advance(10s);
  EXPECT_EQ(stored_points(), 1u);
  auto before = ask<v1::Response>(h, history_of("gpu-01", "GPU-0"));
  ASSERT_FALSE(before.has_error()) << before.error().message();
  // A sample after the last flush is written when the actor stops.
  v->mutable_sample()->set_unix_ms(clock->now_unix_ms() + 1000);
  (*self)->send(h, samples);
  run();
  caf::anon_send_exit(h, caf::exit_reason::user_shutdown);
  run();
  EXPECT_EQ(stored_points(), 2u);
  auto again = spawn_history();
  auto after = ask<v1::Response>(again, history_of("gpu-01", "GPU-0"));
  ASSERT_FALSE(after.has_error()) << after.error().message();
  ASSERT_EQ(after.gpu_history().samples_size(), 2);
  EXPECT_DOUBLE_EQ(after.gpu_history().samples(0).utilization_percent(), 42.0);
  // Other requests are refused in words.
  v1::Request other;
  other.mutable_list_machines();
  auto refused = ask<v1::Response>(again, other);
  EXPECT_EQ(refused.error().code(), "invalid_request");
}

TEST_F(GpuHistoryActor, ABadConfigIsRefused) {
  gpu_history_config hc;
  hc.clock = nullptr;
  EXPECT_EQ(hc.validate(), ec::invalid_config);
  hc.clock = clock;
  hc.flush_interval = caf::timespan{0};
  EXPECT_EQ(hc.validate(), ec::invalid_config);
}
