// The API's read-only view: sorting, paging with a cursor, the index that
// watches follow, JSON kept for unchanged objects; and /metrics rendered
// from it under dcgm-exporter's names.

#include <gtest/gtest.h>

#include "messages/error.hpp"
#include "messages/json.hpp"
#include "runtime/http/api_view.hpp"
#include "runtime/http/prometheus_metrics.hpp"

using namespace astraeus;

namespace {

v1::GpuView gpu(const std::string& machine, const std::string& pci, const std::string& id,
                uint32_t index) {
  v1::GpuView v;
  v.set_machine(machine);
  v.set_health("Healthy");
  auto* g = v.mutable_gpu();
  g->set_id(id);
  g->set_pci_address(pci);
  g->set_index(index);
  g->set_vendor("nvidia");
  g->set_model("NVIDIA H100 80GB HBM3");
  g->set_utilization_percent(37);
  g->set_memory_total_bytes(80ull << 30);
  g->set_memory_used_bytes(1ull << 30);
  return v;
}

struct inputs {
  v1::MachineList machines;
  v1::GpuList gpus;
  v1::RunList runs;
};

inputs cluster() {
  inputs in;
  // Names a '/' or ' ' separator would mis-sort: gpu-1 before gpu-1-a.
  for (auto name : {"gpu-1-a", "gpu-2", "gpu-1"}) {
    auto* m = in.machines.add_machines();
    m->set_name(name);
    m->set_state(v1::Machine::Up);
    for (uint32_t i = 0; i < 3; ++i)
      *in.gpus.add_gpus() = gpu(name, "0000:1" + std::to_string(i) + ":00.0",
                                std::string{"GPU-"} + name + "-" + std::to_string(i), i);
  }
  return in;
}

std::shared_ptr<const api_view> build(inputs in, std::shared_ptr<const api_view> prev = nullptr) {
  return build_api_view(std::move(in.machines), std::move(in.gpus), std::move(in.runs), prev);
}

} // namespace

TEST(ApiView, SortsMachinesAndGpusAndFindsThem) {
  auto v = build(cluster());
  ASSERT_EQ(v->machines.size(), 3u);
  EXPECT_EQ(v->machines[0].key, "gpu-1");
  EXPECT_EQ(v->machines[1].key, "gpu-1-a");
  auto [first, last] = v->gpus_of("gpu-1");
  EXPECT_EQ(last - first, 3u);
  for (auto i = first; i < last; ++i)
    EXPECT_EQ(v->gpus[i].message.machine(), "gpu-1");
  EXPECT_NE(v->gpu("", "GPU-gpu-2-1"), nullptr);
  EXPECT_EQ(v->gpu("gpu-1", "GPU-gpu-2-1"), nullptr);
  EXPECT_EQ(v->machine("gpu-9"), nullptr);
  EXPECT_EQ(v->machines[0].json(), message_to_json(v->machines[0].message, false));
}

TEST(ApiView, PagesWalkEveryItemOnceWithTheCursor) {
  auto v = build(cluster());
  std::string cursor, next;
  size_t seen = 0;
  for (int i = 0; i < 10; ++i) {
    auto [lo, hi] = api_page(v->gpus, 0, v->gpus.size(), cursor, 4, next);
    seen += hi - lo;
    if (next.empty())
      break;
    cursor = next;
  }
  EXPECT_EQ(seen, 9u);
  auto [lo, hi] = api_page(v->gpus, 0, v->gpus.size(), "", 0, next);
  EXPECT_EQ(hi - lo, 9u);
  EXPECT_TRUE(next.empty());
}

TEST(ApiView, TheIndexMovesOnlyWhenSomethingChanged) {
  auto first = build(cluster());
  EXPECT_EQ(first->index, 1u);
  auto same = build(cluster(), first);
  EXPECT_EQ(same, first);
  auto in = cluster();
  in.machines.mutable_machines(0)->set_cordoned(true);
  auto changed = build(std::move(in), first);
  EXPECT_EQ(changed->index, 2u);
  // An unchanged GPU shares its JSON with the last view (rendered once).
  EXPECT_EQ(changed->gpus[0].cell, first->gpus[0].cell);
  EXPECT_NE(changed->machine("gpu-1-a")->cell, first->machine("gpu-1-a")->cell);
  EXPECT_EQ(changed->machine("gpu-1")->cell, first->machine("gpu-1")->cell);
  // Map fields do not make equal machines differ (deterministic bytes).
  auto labelled = cluster();
  for (auto& m : *labelled.machines.mutable_machines())
    for (int i = 0; i < 20; ++i)
      (*m.mutable_labels())["k" + std::to_string(i)] = "v";
  auto a = build(labelled);
  EXPECT_EQ(build(labelled, a), a);
}

TEST(PrometheusMetrics, DcgmNamesAndLabelsAndNoValueForUnknowns) {
  auto in = cluster();
  in.gpus.mutable_gpus(0)->mutable_gpu()->clear_utilization_percent();
  in.gpus.mutable_gpus(1)->set_holder("train-0");
  auto v = build(std::move(in));
  const auto& text = v->metrics();
  EXPECT_NE(text.find("# TYPE DCGM_FI_DEV_GPU_UTIL gauge"), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-gpu-1-a-1\",pci_bus_id=\""
                      "00000000:11:00.0\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\","
                      "Hostname=\"gpu-1-a\"} 37\n"),
            std::string::npos)
    << text.substr(0, 800);
  // The GPU whose utilisation is unknown has no GPU_UTIL sample.
  EXPECT_EQ(text.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-gpu-1-a-0\""), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_FB_FREE{gpu=\"0\",UUID=\"GPU-gpu-1-a-0\""), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-gpu-1-0\""), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-gpu-1-0\",pci_bus_id=\"00000000:"
                      "10:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\","
                      "Hostname=\"gpu-1\"} 1024\n"),
            std::string::npos);
  EXPECT_NE(text.find(",holder=\"train-0\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("astraeus_gpu_health{"), std::string::npos);
  EXPECT_NE(text.find("astraeus_machine_state{machine=\"gpu-1\",state=\"Up\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("astraeus_scheduler_waiting_runs 0\n"), std::string::npos);
}

// Third new-user trial: a machine Down for a minute still served 97 % use
// and 512 W; a dead host's dcgm-exporter serves nothing.
TEST(PrometheusMetrics, AMachineThatIsDownServesNoReadings) {
  auto in = cluster();
  in.machines.mutable_machines(1)->set_state(v1::Machine::Down);  // gpu-2
  auto v = build(std::move(in));
  const auto& text = v->metrics();
  EXPECT_EQ(text.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-gpu-2-0\""), std::string::npos);
  EXPECT_EQ(text.find("DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-gpu-2-0\""), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-gpu-1-0\""), std::string::npos)
    << "an Up machine's readings stay";
  // What the controller knows stays: health, latches, the state.
  EXPECT_NE(text.find("astraeus_gpu_health{gpu=\"0\",UUID=\"GPU-gpu-2-0\""), std::string::npos);
  EXPECT_NE(text.find("astraeus_gpu_latched_faults{gpu=\"0\",UUID=\"GPU-gpu-2-0\""),
            std::string::npos);
  EXPECT_NE(text.find("astraeus_machine_state{machine=\"gpu-2\",state=\"Down\"} 1\n"),
            std::string::npos);
}

TEST(PrometheusMetrics, AViewRenderedIntoAGoneViewsBufferHasOnlyItsOwnText) {
  // A big view's text goes first; the next, smaller view renders into its
  // kept buffer and must carry none of the old text.
  auto big = cluster();
  for (int i = 0; i < 4; ++i)
    big.gpus.add_gpus()->CopyFrom(gpu("gpu-9", "0000:9" + std::to_string(i) + ":00.0",
                                      "GPU-gone-" + std::to_string(i), static_cast<uint32_t>(i)));
  std::string old_text;
  {
    auto first = build(std::move(big));
    old_text = first->metrics();
  }
  auto small = cluster();
  small.gpus.mutable_gpus(0)->mutable_gpu()->set_utilization_percent(12);
  auto second = build(std::move(small));
  EXPECT_EQ(second->metrics(), render_prometheus_metrics(*second));
  EXPECT_EQ(second->metrics().find("GPU-gone-"), std::string::npos);
  EXPECT_NE(old_text.find("GPU-gone-"), std::string::npos);
}

TEST(PrometheusMetrics, EscapesLabelValuesAndSpellsPciAsDcgm) {
  EXPECT_EQ(prometheus_escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(dcgm_pci_bus_id("0000:3b:00.0"), "00000000:3B:00.0");
}

TEST(MessageJson, RefusesMalformedJsonWrongTypesAndUnknownFields) {
  v1::CreateJoinToken t;
  EXPECT_FALSE(message_from_json(R"({"labels":{"pool":"a100"},"ttl_seconds":60})", t));
  EXPECT_EQ(t.ttl_seconds(), 60u);
  EXPECT_TRUE(message_from_json("{\"labels\": ", t));
  EXPECT_EQ(t.ttl_seconds(), 0u);
  auto err = message_from_json(R"({"ttl_seconds":"soon"})", t);
  ASSERT_TRUE(err);
  EXPECT_NE(render_error(err).find("ttl_seconds"), std::string::npos) << render_error(err);
  EXPECT_TRUE(message_from_json(R"({"ttl":1})", t));
  EXPECT_TRUE(message_from_json("[1,2]", t));
  EXPECT_TRUE(message_from_json(std::string(100000, '['), t));
}
