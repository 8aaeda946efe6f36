// `astra slurm sbatch`'s reading of #SBATCH directives (bin/astra/sbatch.hpp),
// on batch scripts written the way Slurm users write them.

#include "bin/astra/sbatch.hpp"

#include <string>

#include <gtest/gtest.h>

using namespace astraeus::cli;

namespace {

sbatch_script parsed(const std::string& text) {
  auto p = parse_sbatch(text);
  EXPECT_EQ(p.error, "");
  return p.script.value_or(sbatch_script{});
}

std::string refused(const std::string& text) {
  auto p = parse_sbatch(text);
  EXPECT_FALSE(p.script.has_value());
  return p.error;
}

} // namespace

TEST(Sbatch, ReadsATypicalTrainingScript) {
  auto s = parsed(R"(#!/bin/bash
#SBATCH --job-name=llama-ft
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=96
#SBATCH --mem=1000G
#SBATCH --time=2-00:00:00
#SBATCH --output=logs/%x-%j.out

# rendezvous on the first node
srun torchrun --nnodes $SLURM_NNODES train.py
)");
  EXPECT_EQ(s.job_name, "llama-ft");
  EXPECT_EQ(s.nodes, 4u);
  EXPECT_EQ(s.gpus_per_node, 8u);
  EXPECT_DOUBLE_EQ(s.cpus_per_task, 96);
  EXPECT_EQ(s.memory_bytes, 1000ull << 30);
  EXPECT_EQ(s.time_limit_seconds, 2u * 86400);
  EXPECT_EQ(s.output, "logs/%x-%j.out");
  EXPECT_EQ(s.interpreter, "/bin/bash");
}

TEST(Sbatch, BothSpellingsShortFormsCommentsAndGres) {
  auto s = parsed("#!/usr/bin/env bash\n"
                  "#SBATCH --job-name sweep   # the sweep\n"
                  "#SBATCH -N 2\n"
                  "#SBATCH -c4 --mem 16384\n"
                  "##SBATCH --partition=debug\n"
                  "# SBATCH --exclusive\n"
                  "\n"
                  "#SBATCH --gres=gpu:a100:2\n"
                  "#SBATCH -t 90\n"
                  "#SBATCH --array=0-9\n"
                  "echo $SLURM_ARRAY_TASK_ID\n");
  EXPECT_EQ(s.job_name, "sweep");
  EXPECT_EQ(s.nodes, 2u);
  EXPECT_DOUBLE_EQ(s.cpus_per_task, 4);
  EXPECT_EQ(s.memory_bytes, 16384ull << 20);  // MB without a unit, as Slurm reads it
  EXPECT_EQ(s.gpus_per_node, 2u);
  EXPECT_EQ(s.time_limit_seconds, 90u * 60);  // minutes
  EXPECT_EQ(s.array_size, 10u);
  EXPECT_EQ(s.interpreter, "bash");
}

TEST(Sbatch, DirectivesAfterTheFirstCommandAreIgnoredAsSlurmDoes) {
  auto s = parsed("#!/bin/sh\n#SBATCH --nodes=1\nmodule load cuda\n#SBATCH --nodes=8\n"
                  "#SBATCH --partition=gpu\n");
  EXPECT_EQ(s.nodes, 1u);
  // A script without a #! line runs with /bin/sh.
  EXPECT_EQ(parsed("#SBATCH -J x\ntrue\n").interpreter, "/bin/sh");
}

TEST(Sbatch, RefusesDirectivesWithoutAnEquivalentNamingThem) {
  auto err = refused("#!/bin/bash\n#SBATCH --job-name=a\n#SBATCH --partition=gpu\nhostname\n");
  EXPECT_EQ(err.rfind("line 3: #SBATCH --partition=gpu: has no Astraeus equivalent", 0), 0u)
    << err;
  EXPECT_EQ(refused("#SBATCH -p debug\n").rfind("line 1: #SBATCH -p debug: has no", 0), 0u);
  EXPECT_EQ(refused("#SBATCH --exclusive\n").rfind("line 1: #SBATCH --exclusive: has no", 0),
            0u);
  EXPECT_NE(refused("#SBATCH --ntasks-per-node=8\n").find("only --ntasks-per-node=1 maps"),
            std::string::npos);
  EXPECT_NE(refused("#SBATCH --array=1-10\n").find("only a range 0-N maps"), std::string::npos);
  EXPECT_NE(refused("#SBATCH --array=0-15%4\n").find("only a range 0-N maps"),
            std::string::npos);
  EXPECT_NE(refused("#SBATCH --mem=0\n").find("--mem=0 (all of it) has no equivalent"),
            std::string::npos);
  EXPECT_NE(refused("#SBATCH --nodes=2-4\n").find("a range min-max has no equivalent"),
            std::string::npos);
  EXPECT_EQ(refused("#SBATCH --time\n"), "line 1: #SBATCH --time needs a value");
}

TEST(Sbatch, SlurmTimeAndMemoryFormats) {
  EXPECT_EQ(parse_slurm_time("30"), 1800u);
  EXPECT_EQ(parse_slurm_time("30:15"), 1815u);
  EXPECT_EQ(parse_slurm_time("1:30:00"), 5400u);
  EXPECT_EQ(parse_slurm_time("2-12"), 2u * 86400 + 12 * 3600);
  EXPECT_EQ(parse_slurm_time("1-00:30"), 86400u + 1800);
  EXPECT_EQ(parse_slurm_time("UNLIMITED"), 0u);
  EXPECT_FALSE(parse_slurm_time("1h"));
  EXPECT_EQ(parse_slurm_mem("512"), 512ull << 20);
  EXPECT_EQ(parse_slurm_mem("64G"), 64ull << 30);
  EXPECT_EQ(parse_slurm_mem("500MB"), 500ull << 20);
  EXPECT_FALSE(parse_slurm_mem("lots"));
}

TEST(Sbatch, TheCommandRunsTheMountedScriptWithItsInterpreter) {
  sbatch_script s;
  s.interpreter = "/bin/bash";
  auto cmd = sbatch_command(s, {"--lr", "3e-4"});
  ASSERT_EQ(cmd.size(), 6u);
  EXPECT_EQ(cmd[0], "/bin/sh");
  EXPECT_EQ(cmd[1], "-c");
  EXPECT_NE(cmd[2].find("exec \"$0\" /astra/job.sbatch \"$@\""), std::string::npos);
  EXPECT_EQ(cmd[2].find("exec >>"), std::string::npos);
  EXPECT_EQ(cmd[3], "/bin/bash");
  EXPECT_EQ(cmd[4], "--lr");
  // --output is not followed, relative or absolute: its file would be in
  // the container's own filesystem, lost with it (new-user trials lost a
  // job's output so): the output stays in the worker's log.
  s.output = "/scratch/out-%x-%j_%a.log";
  cmd = sbatch_command(s, {});
  EXPECT_EQ(cmd[2].find("exec >>"), std::string::npos) << cmd[2];
  s.output = "out-%j.txt";
  cmd = sbatch_command(s, {});
  EXPECT_EQ(cmd[2].find("exec >>"), std::string::npos) << cmd[2];
}
