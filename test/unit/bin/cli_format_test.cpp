// What `astra` prints of the typed vocabularies (bin/cli_format.cpp): the
// words users read stay the words, whether a record carries the `*_code`
// twins (this build's writers) or the strings only (older ones).

#include <gtest/gtest.h>

#include "bin/cli_format.hpp"
#include "messages/gpu_health_state.hpp"
#include "messages/gpu_read.hpp"
#include "messages/run_state.hpp"
#include "messages/worker_state.hpp"

using namespace astraeus;

namespace {

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

/// A GPU view as this build writes it (words and twins) and as an older
/// controller wrote it (words only).
std::pair<v1::GpuList, v1::GpuList> gpu_lists(gpu_health health, gpu_read_status status) {
  v1::GpuList typed;
  auto* v = typed.add_gpus();
  v->set_machine("gpu-01");
  v->mutable_gpu()->set_id("GPU-1");
  set_health(*v, health);
  set_read_status(*v->mutable_gpu(), status);
  v->add_health_reasons("the GPU does not answer");
  v1::GpuList words = typed;
  words.mutable_gpus(0)->clear_health_code();
  words.mutable_gpus(0)->mutable_gpu()->clear_status_code();
  return {typed, words};
}

} // namespace

TEST(CliFormat, JsonShowsTheWordsAndNoTwins) {
  auto [typed, words] = gpu_lists(gpu_health::faulty, gpu_read_status::lost);
  EXPECT_EQ(cli::to_json(typed), cli::to_json(words));
  EXPECT_EQ(cli::to_json_compact(typed), cli::to_json_compact(words));
  EXPECT_FALSE(contains(cli::to_json(typed), "_code")) << cli::to_json(typed);
  EXPECT_TRUE(contains(cli::to_json(typed), "\"health\": \"Faulty\""));
  EXPECT_TRUE(contains(cli::to_json(typed), "\"status\": \"lost\""));
  v1::Run run;
  set_state(run, run_state::running);
  set_state(*run.add_workers(), worker_state::oom_killed);
  EXPECT_FALSE(contains(cli::to_json(run), "_code")) << cli::to_json(run);
  EXPECT_TRUE(contains(cli::to_json(run), "\"state\": \"OOMKilled\""));
}

TEST(CliFormat, AGpuThatDoesNotAnswerSaysSoInItsHealth) {
  for (auto status : {gpu_read_status::unresponsive, gpu_read_status::lost,
                      gpu_read_status::unavailable}) {
    auto [typed, words] = gpu_lists(gpu_health::faulty, status);
    auto want = std::string{"Faulty: the GPU does not answer ("} + to_string(status) + ")";
    EXPECT_TRUE(contains(cli::format_gpu_list(typed, 0), want)) << cli::format_gpu_list(typed, 0);
    EXPECT_EQ(cli::format_gpu_list(typed, 0), cli::format_gpu_list(words, 0));
  }
  auto [typed, words] = gpu_lists(gpu_health::at_risk, gpu_read_status::ok);
  EXPECT_TRUE(contains(cli::format_gpu_list(words, 0), "AtRisk: the GPU does not answer  "))
    << cli::format_gpu_list(words, 0);
  EXPECT_FALSE(contains(cli::format_gpu_list(words, 0), "(ok)"));
}

TEST(CliFormat, AnEndedRunShowsItsReasonFromEitherForm) {
  v1::Run run;
  run.mutable_spec()->set_name("train");
  set_state(run, run_state::failed);
  run.set_waiting_reason("worker train-0 Failed: exited with code 3");
  auto typed = cli::format_run(run, 0);
  EXPECT_TRUE(contains(typed, "State:       Failed\n")) << typed;
  EXPECT_TRUE(contains(typed, "Reason:      worker train-0 Failed")) << typed;
  run.clear_state_code();
  EXPECT_EQ(cli::format_run(run, 0), typed);
}

// issue 22: `astra run show` names the cores, NUMA nodes and RDMA devices
// each worker got; `-o json` carries assigned_gpu_ids; `astra machine`
// shows CPU use and the NUMA nodes.
TEST(CliFormat, RunShowNamesTheCoresAndDevicesItsWorkersGot) {
  v1::Run run;
  run.mutable_spec()->set_name("train");
  run.mutable_spec()->set_rdma(true);
  set_state(run, run_state::running);
  auto* w = run.add_workers();
  w->set_name("train-0");
  w->set_machine("gpu-01");
  w->add_gpu_ids("GPU-1");
  w->add_assigned_gpu_ids("GPU-1");
  w->set_cpus("0-15");
  w->set_mems("0");
  w->add_rdma_devices("/dev/infiniband/uverbs0");
  w->add_rdma_devices("/dev/infiniband/rdma_cm");
  set_state(*w, worker_state::running);
  auto text = cli::format_run(run, 0);
  EXPECT_TRUE(contains(text, "Cores and devices")) << text;
  EXPECT_TRUE(contains(text, "0-15")) << text;
  EXPECT_TRUE(contains(text, "/dev/infiniband/uverbs0,/dev/infiniband/rdma_cm")) << text;
  EXPECT_TRUE(contains(text, ", RDMA devices")) << text;
  auto json = cli::to_json(run);
  EXPECT_TRUE(contains(json, "\"assigned_gpu_ids\"")) << json;
  EXPECT_TRUE(contains(json, "\"gpu_ids\"")) << json;
}

TEST(CliFormat, MachineShowsCpuUseAndNumaNodes) {
  v1::MachineView m;
  auto* cpu = m.mutable_facts()->mutable_cpu();
  cpu->set_use_percent(37.5);
  auto* n = cpu->add_nodes();
  n->set_id(1);
  n->set_cpulist("56-111,168-223");
  n->set_memory_total_bytes(1ull << 40);
  n->set_memory_free_bytes(1ull << 39);
  auto text = cli::format_machine(m, 0);
  EXPECT_TRUE(contains(text, "  Use:       37.5% (over the last report interval)\n")) << text;
  EXPECT_TRUE(contains(text, "  NUMA 1:    CPUs 56-111,168-223, 512 GiB free of 1 TiB\n"))
    << text;
}
