// A run's outputs: the `key=value` lines a worker writes to
// $ASTRAEUS_OUTPUTS, read by its agent when it ends
// (shared/seeds/inside-a-worker.md, "Features you turn on").

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "actor_fixture.hpp"
#include "runtime/workers/worker_outputs.hpp"

using namespace astraeus;

namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << text;
}

} // namespace

TEST(WorkerOutputs, KeyValueLinesBecomeOutputsAndBadLinesAreNamed) {
  auto out = parse_outputs("loss=0.25\r\n\nurl=http://x/?a=b\noops\n=7\nloss=0.125");
  EXPECT_EQ(out.values, (std::map<std::string, std::string>{
                          {"loss", "0.125"}, {"url", "http://x/?a=b"}}))
    << "a later line wins; a value keeps its '='";
  EXPECT_EQ(out.warnings,
            (std::vector<std::string>{
              "outputs line 4: \"oops\" is not key=value (skipped)",
              "outputs line 5: \"=7\" has no key (skipped)"}));
}

TEST(WorkerOutputs, TheAgentReadsTheFileAWorkerLeftAndNothingElse) {
  test::temp_dir dir;
  EXPECT_TRUE(read_outputs(dir.path()).values.empty()) << "no file: no outputs";
  ASSERT_FALSE(prepare_outputs_dir(dir.path(), 0, 0));
  auto file = outputs_host_dir(dir.path()) + "/outputs";
  EXPECT_EQ(file, dir.path() + "/outputs/outputs");
  write_file(file, "loss=0.25\n");
  auto out = read_outputs(dir.path());
  EXPECT_EQ(out.values, (std::map<std::string, std::string>{{"loss", "0.25"}}));
  EXPECT_TRUE(out.warnings.empty());
  // A new start begins without the last one's outputs.
  ASSERT_FALSE(prepare_outputs_dir(dir.path(), 0, 0));
  EXPECT_FALSE(std::filesystem::exists(file));
}

TEST(WorkerOutputs, OnlyTheFirst64KiBAreReadAndTheCutLineIsDropped) {
  test::temp_dir dir;
  ASSERT_FALSE(prepare_outputs_dir(dir.path(), 0, 0));
  std::string text = "first=1\n";
  while (text.size() < max_outputs_bytes - 4)
    text += "x";
  text += "=cut-in-two\nlast=2\n";
  write_file(outputs_host_dir(dir.path()) + "/outputs", text);
  auto out = read_outputs(dir.path());
  EXPECT_EQ(out.values, (std::map<std::string, std::string>{{"first", "1"}}));
  ASSERT_EQ(out.warnings.size(), 1u);
  EXPECT_EQ(out.warnings[0], "outputs: the file is larger than 65536 bytes; only its "
                             "lines within the first 65536 bytes were read");
}
