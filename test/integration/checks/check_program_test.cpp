// End to end: the built astraeus-check program on fixture machines through
// the NVML and CUDA stand-ins, read as the validation actor reads it (the
// last line of stdout, the exit status).
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "runtime/host/sysfs_text.hpp"
#include "runtime/process/program_run.hpp"
#include "runtime/validation/check_result.hpp"
#include "unit/validation/check_fixtures.hpp"

namespace astraeus::validation {
namespace {

using astraeus::test::temp_dir;

struct program_run {
  int exit_code = -1;
  std::string out, err;
  check_result result;
};

program_run run_check(std::vector<std::string> args) {
  auto r = run_program(ASTRAEUS_CHECK_BIN, args,
                       std::chrono::steady_clock::now() + std::chrono::seconds{60});
  program_run out;
  out.exit_code = r.exit_code;
  out.out = r.out;
  out.err = r.err;
  auto lines = nonblank_lines(r.out);
  if (!lines.empty())
    if (auto parsed = parse_check_result(lines.back()))
      out.result = std::move(*parsed);
  return out;
}

struct CheckProgram : ::testing::Test {
  temp_dir dir;
  std::string root = astraeus::test::copy_host(dir, astraeus::test::gen4x8_fixture());
  std::vector<std::string> common() {
    astraeus::test::use_fixtures(root + "/nvml.json", root + "/cuda.json");
    return {"--json", "--host-root", root, "--nvml-lib", ASTRAEUS_NVML_STAND_IN, "--cuda-lib",
            ASTRAEUS_CUDA_STAND_IN};
  }
  program_run run(const std::string& check, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{check};
    for (auto& a : common())
      args.push_back(a);
    args.insert(args.end(), extra.begin(), extra.end());
    return run_check(args);
  }
};

TEST_F(CheckProgram, QuickOnAGen4x8GpuFailsWithTheFix) {
  auto r = run("quick");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.result.check, "quick") << r.out;
  EXPECT_EQ(r.result.result, verdict::fail);
  ASSERT_EQ(r.result.findings.size(), 1u) << r.out;
  EXPECT_EQ(r.result.findings[0].gpu, "GPU-11111111-2222-3333-4444-00000000002a");
  EXPECT_EQ(r.result.findings[0].fix,
            "reseat GPU GPU-11111111-2222-3333-4444-00000000002a (0000:2a:00.0) or check its "
            "riser and slot; its link trained at Gen4 x8");
  EXPECT_NE(r.err.find("fix: reseat GPU"), std::string::npos) << r.err;
}

TEST_F(CheckProgram, CopiesNamesTheSlowGpuWithItsFix) {
  astraeus::test::write_text(dir.path() + "/policy.yaml", "copies:\n  size_mib: 4\n");
  auto r = run("copies", {"--policy", dir.path() + "/policy.yaml"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.result.result, verdict::fail) << r.out;
  bool named = false;
  for (const auto& f : r.result.findings) {
    EXPECT_EQ(f.gpu, "GPU-11111111-2222-3333-4444-00000000002a") << f.what;
    named = named || f.what.find("host-to-device copies run at 12.4 GB/s, below the 48.0 GB/s")
                       != std::string::npos;
  }
  EXPECT_TRUE(named) << r.out;
}

TEST_F(CheckProgram, BurnPassesOnHealthyGpus) {
  auto r = run("burn", {"--duration", "2s"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.result.result, verdict::pass) << r.out;
  int fp32 = 0;
  for (const auto& m : r.result.measurements)
    if (m.name == "fp32") {
      ++fp32;
      EXPECT_NEAR(m.value, 50, 0.5);
    }
  EXPECT_EQ(fp32, 2) << r.out;
}

TEST_F(CheckProgram, BurnFailsOnAnXidReportedByNvml) {
  auto nvml = root + "/nvml.json";
  auto text = read_small_file(nvml).text;
  text.insert(text.find('{') + 1, "\n  \"xid_events\": [{\"gpu\": 1, \"xid\": 79}],");
  astraeus::test::write_text(nvml, text);
  auto r = run("burn", {"--duration", "2s"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  ASSERT_FALSE(r.result.findings.empty()) << r.out;
  EXPECT_EQ(r.result.findings[0].what,
            "Xid 79 on GPU-11111111-2222-3333-4444-00000000002a during the burn-in (GPU has "
            "fallen off the bus)");
}

TEST_F(CheckProgram, BurnFailsOnACudaError) {
  auto cuda = root + "/cuda.json";
  auto text = read_small_file(cuda).text;
  auto i = text.find("\"fp32_tflops\": 50}");
  ASSERT_NE(i, std::string::npos);
  text.replace(i, 18, "\"fp32_tflops\": 50, \"errors\": {\"cuLaunchKernel\": 700}}");
  astraeus::test::write_text(cuda, text);
  auto r = run("burn", {"--duration", "1s"});
  EXPECT_EQ(r.exit_code, 1);
  ASSERT_FALSE(r.result.findings.empty()) << r.out;
  EXPECT_NE(r.result.findings[0].what.find(
              "cuLaunchKernel returned CUDA_ERROR_ILLEGAL_ADDRESS (700)"),
            std::string::npos)
    << r.out;
}

TEST_F(CheckProgram, DcgmWithoutDcgmiIsSkippedAndExitsZero) {
  auto r = run("dcgm", {"--dcgmi", "/nonexistent/dcgmi", "--level", "2"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.result.result, verdict::skipped);
  EXPECT_NE(r.result.summary.find("DCGM is not installed"), std::string::npos);
}

TEST_F(CheckProgram, DiskJudgesFiosFigures) {
  ::setenv("ASTRAEUS_FIO_OUTPUT",
           (std::string{ASTRAEUS_FIXTURES} + "/checks/fio/vda-ext4.json").c_str(), 1);
  auto r = run("disk", {"--data-dir", dir.path(), "--fio",
                        std::string{ASTRAEUS_FIXTURES} + "/checks/fio/fio.sh"});
  EXPECT_EQ(r.result.check, "disk") << r.out << r.err;
  EXPECT_EQ(r.result.measurements.size(), 3u) << r.out;
}

// Issue 12: both ends of a pair through the ib_write_bw stand-in, the
// client trying again while the server does not listen yet.
TEST_F(CheckProgram, PairMeasuresEveryRailFromBothEnds) {
  std::string perftest = std::string{ASTRAEUS_FIXTURES} + "/checks/perftest/";
  std::string outputs = dir.path() + "/perftest";
  ASSERT_EQ(::mkdir(outputs.c_str(), 0755), 0);
  astraeus::test::write_text(outputs + "/mlx5_0.txt",
                             read_small_file(perftest + "client_ndr_400.txt").text);
  astraeus::test::write_text(outputs + "/mlx5_5.txt",
                             read_small_file(perftest + "client_hdr_200.txt").text);
  ::setenv("ASTRAEUS_PERFTEST_FIXTURES", outputs.c_str(), 1);
  ::setenv("ASTRAEUS_PERFTEST_REFUSE_ONCE", (dir.path() + "/refused-once").c_str(), 1);
  std::string stand_in = std::string{ASTRAEUS_FIXTURES} + "/../stand_in/ib_write_bw";
  auto client = run_check({"pair", "--json", "--role", "client", "--peer", "127.0.0.1",
                           "--rails", "mlx5_0:1:400,mlx5_5:1:200", "--ib-write-bw", stand_in,
                           "--duration", "1s"});
  EXPECT_EQ(client.exit_code, 0) << client.out << client.err;
  EXPECT_EQ(client.result.check, "pair");
  EXPECT_EQ(client.result.result, verdict::pass) << client.out;
  ASSERT_EQ(client.result.measurements.size(), 4u) << client.out;
  EXPECT_EQ(client.result.measurements[2].gpu, "mlx5_5");
  EXPECT_DOUBLE_EQ(client.result.measurements[2].value, 195.27);

  // Judged against 400 Gb/s, the 200 Gb/s rail is broken; a rail without a
  // figure fails too.
  auto server = run_check({"pair", "--json", "--role", "server", "--rails",
                           "mlx5_5:1:400,mlx5_9:1:400", "--ib-write-bw", stand_in});
  EXPECT_EQ(server.exit_code, 1) << server.out << server.err;
  ASSERT_EQ(server.result.findings.size(), 2u) << server.out;
  EXPECT_EQ(server.result.findings[0].severity, verdict::fail);
  EXPECT_NE(server.result.findings[1].what.find("mlx5_9 ib_write_bw server gave no figure"),
            std::string::npos)
    << server.result.findings[1].what;
  EXPECT_EQ(run_check({"pair", "--role", "client", "--rails", "mlx5_0:1:400"}).exit_code, 2);
  EXPECT_EQ(run_check({"pair", "--role", "server", "--rails", "mlx5_0"}).exit_code, 2);
}

// Issue 12: two ranks of `allreduce` in stand-in mode (ASTRAEUS_CUDA_FIXTURE)
// meet over TCP at rank 0's port; rank 0 prints all_reduce_perf's table at
// the fixture's bus bandwidth and carries its rows in its result.
TEST_F(CheckProgram, AllReduceRanksMeetAtTheRootAndRankZeroPrintsTheTable) {
  auto fixture = dir.path() + "/allreduce.json";
  astraeus::test::write_text(fixture, R"({"gpus": [{}, {}], "allreduce_busbw_gbs": 333})");
  astraeus::test::use_fixtures(root + "/nvml.json", fixture);
  auto port = std::to_string(20000 + ::getpid() % 20000);
  program_run rank1;
  std::thread peer([&] {
    rank1 = run_check({"allreduce", "--json", "--rank", "1", "--ranks", "2", "--root",
                       "127.0.0.1:" + port, "--max-bytes", "1073741824"});
  });
  auto rank0 = run_check({"allreduce", "--json", "--rank", "0", "--ranks", "2", "--root",
                          ":" + port, "--max-bytes", "1073741824"});
  peer.join();
  EXPECT_EQ(rank0.exit_code, 0) << rank0.err << rank0.out;
  EXPECT_EQ(rank0.result.check, "allreduce");
  EXPECT_EQ(rank0.result.result, verdict::pass);
  EXPECT_EQ(rank0.result.summary,
            "all-reduce rank 0 of 2 (2 of 4 GPUs): 333.0 GB/s bus bandwidth at 1073741824 B "
            "(stand-in)");
  EXPECT_NE(rank0.out.find("#       size         count      type   redop    root     time   "
                           "algbw   busbw #wrong     time   algbw   busbw #wrong\n"),
            std::string::npos)
    << rank0.out;
  EXPECT_NE(rank0.out.find("  1073741824     268435456     float     sum      -1"),
            std::string::npos)
    << rank0.out;
  EXPECT_NE(rank0.out.find("# Avg bus bandwidth    : "), std::string::npos);
  int sizes = 0;
  for (const auto& m : rank0.result.measurements)
    sizes += m.name == "busbw";
  EXPECT_EQ(sizes, 28) << "8 B to 1 GiB";
  EXPECT_EQ(rank1.exit_code, 0) << rank1.err;
  EXPECT_EQ(rank1.result.summary,
            "all-reduce rank 1 of 2 (2 of 4 GPUs): 333.0 GB/s bus bandwidth at 1073741824 B "
            "(stand-in)");
  EXPECT_EQ(rank1.out.find("# Avg bus bandwidth"), std::string::npos) << "rank 0's table only";
}

// One GPU in all (recorded on an H200 through the real NCCL: its in-place
// no-op "ran" at 943,824 GB/s): the sums are checked, the bus bandwidth is
// 0 as all_reduce_perf prints it, and the summary says why.
TEST_F(CheckProgram, AllReduceOfOneGpuChecksTheSumsButClaimsNoBusBandwidth) {
  auto fixture = dir.path() + "/allreduce.json";
  astraeus::test::write_text(fixture, R"({"gpus": [{}], "allreduce_busbw_gbs": 333})");
  astraeus::test::use_fixtures(root + "/nvml.json", fixture);
  auto port = std::to_string(20000 + (::getpid() + 7) % 20000);
  auto r = run_check({"allreduce", "--json", "--rank", "0", "--ranks", "1", "--root", ":" + port,
                      "--max-bytes", "1048576"});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(r.result.result, verdict::pass);
  EXPECT_EQ(r.result.summary,
            "all-reduce rank 0 of 1 (1 of 1 GPUs): its sums are right, but one GPU crosses no "
            "link, so there is no bus bandwidth to measure (run it over 2 or more GPUs) "
            "(stand-in)");
  for (const auto& m : r.result.measurements) {
    if (m.name == "busbw" || m.name == "busbw_in_place") {
      EXPECT_EQ(m.value, 0) << m.name << " at " << m.gpu;
    }
  }
}

// A rank that cannot reach the root fails naming the address; a rank other
// than 0 without the root's host is bad usage.
TEST_F(CheckProgram, AllReduceRankThatCannotReachTheRootFailsNamingIt) {
  auto fixture = dir.path() + "/allreduce.json";
  astraeus::test::write_text(fixture, R"({"gpus": [{}]})");
  astraeus::test::use_fixtures(root + "/nvml.json", fixture);
  auto port = std::to_string(40000 + ::getpid() % 20000);
  auto r = run_check({"allreduce", "--json", "--rank", "1", "--ranks", "2", "--root",
                      "127.0.0.1:" + port, "--connect-timeout", "1s"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  ASSERT_EQ(r.result.findings.size(), 1u) << r.out;
  EXPECT_NE(r.result.findings[0].what.find("rank 1 could not reach the all-reduce root at "
                                           "127.0.0.1:" + port + " within 1 s"),
            std::string::npos)
    << r.result.findings[0].what;
  auto lonely = run_check({"allreduce", "--json", "--rank", "0", "--ranks", "2", "--root",
                           ":" + port, "--connect-timeout", "1s"});
  EXPECT_EQ(lonely.exit_code, 1);
  ASSERT_EQ(lonely.result.findings.size(), 1u) << lonely.out;
  EXPECT_EQ(lonely.result.findings[0].what,
            "rank 0 heard from 1 of 2 ranks within 1 s on TCP port " + port
              + " (missing: rank 1)");
  EXPECT_EQ(run_check({"allreduce", "--rank", "1", "--ranks", "2", "--root", ":18600"}).exit_code,
            2);
  EXPECT_EQ(run_check({"allreduce", "--rank", "2", "--ranks", "2", "--root", "h:1"}).exit_code, 2);
}

// A check runs with CUDA_VISIBLE_DEVICES naming the GPUs its run was given
// (a machine's fenced GPU left out); CUDA, and the stand-in as the real
// driver, shows it only those. A sixth new-user trial saw a copies result
// with figures for the fenced GPU: the stand-in ignored the variable.
TEST_F(CheckProgram, ACheckSeesOnlyTheGpusItWasGiven) {
  astraeus::test::write_text(dir.path() + "/policy.yaml", "copies:\n  size_mib: 4\n");
  const std::string given = "GPU-11111111-2222-3333-4444-000000000018";
  ::setenv("CUDA_VISIBLE_DEVICES", given.c_str(), 1);
  auto r = run("copies", {"--policy", dir.path() + "/policy.yaml"});
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(r.result.check, "copies") << r.out << r.err;
  int measured = 0;
  for (const auto& m : r.result.measurements)
    if (!m.gpu.empty()) {
      ++measured;
      EXPECT_EQ(m.gpu, given) << m.name;
    }
  EXPECT_GT(measured, 0) << r.out;
  for (const auto& f : r.result.findings)
    EXPECT_NE(f.gpu, "GPU-11111111-2222-3333-4444-00000000002a") << f.what;
}

TEST_F(CheckProgram, ExplainPrintsTheTableAndBadUsageExitsTwo) {
  auto r = run_check({"explain"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("copies.nvswitch_floor_gbs"), std::string::npos);
  EXPECT_NE(r.out.find("Azure NHC"), std::string::npos);
  auto json = run_check({"explain", "--json"});
  EXPECT_EQ(json.out.rfind("{\"thresholds\":[{\"check\":\"quick\"", 0), 0u) << json.out;
  EXPECT_EQ(run_check({}).exit_code, 2);
  EXPECT_EQ(run_check({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(run_check({"disk"}).exit_code, 2);
  EXPECT_EQ(run_check({"burn", "--duration", "soon"}).exit_code, 2);
  astraeus::test::write_text(dir.path() + "/bad.yaml", "copies.peer_fracton: 0.8\n");
  auto bad = run_check({"explain", "--policy", dir.path() + "/bad.yaml"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("did you mean copies.peer_fraction?"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace astraeus::validation
