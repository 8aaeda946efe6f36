// The GPU read vocabulary (messages/gpu_read.hpp): the words, the
// predicates, and records written before the enums (strings only).

#include <gtest/gtest.h>

#include "messages/astraeus.pb.h"
#include "messages/gpu_read.hpp"

using namespace astraeus;

namespace {

/// What a record written before the `*_code` fields holds: its bytes parsed
/// by this build (the string fields kept their numbers).
template <class T>
T old_record(const T& strings_only) {
  T out;
  EXPECT_TRUE(out.ParseFromString(strings_only.SerializeAsString()));
  return out;
}

} // namespace

TEST(GpuRead, EveryStatusWordRoundTrips) {
  for (auto s : {gpu_read_status::ok, gpu_read_status::unresponsive, gpu_read_status::lost,
                 gpu_read_status::unavailable}) {
    auto parsed = parse_gpu_read_status(to_string(s));
    ASSERT_TRUE(parsed) << to_string(s);
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(parse_gpu_read_status(""), gpu_read_status::ok);
  EXPECT_FALSE(parse_gpu_read_status("Lost"));
}

TEST(GpuRead, OnlyAnOkGpuAnswers) {
  EXPECT_TRUE(answers(gpu_read_status::ok));
  EXPECT_FALSE(answers(gpu_read_status::unresponsive));
  EXPECT_FALSE(answers(gpu_read_status::lost));
  EXPECT_FALSE(answers(gpu_read_status::unavailable));
}

TEST(GpuRead, ReadingsAreCurrentUnlessTheLastKnownWereKept) {
  EXPECT_TRUE(readings_current(gpu_read_status::ok));
  EXPECT_TRUE(readings_current(gpu_read_status::lost));
  EXPECT_FALSE(readings_current(gpu_read_status::unresponsive));
  EXPECT_FALSE(readings_current(gpu_read_status::unavailable));
}

TEST(GpuRead, OnlyDriverNvidiaSmiAndNoGpuAreCompleteReads) {
  EXPECT_TRUE(is_complete_read(gpu_read_as::driver));
  EXPECT_TRUE(is_complete_read(gpu_read_as::nvidia_smi));
  EXPECT_TRUE(is_complete_read(gpu_read_as::no_gpu));
  EXPECT_FALSE(is_complete_read(gpu_read_as::pending));
  EXPECT_FALSE(is_complete_read(gpu_read_as::unresponsive));
  EXPECT_FALSE(is_complete_read(gpu_read_as::unavailable));
  EXPECT_FALSE(is_complete_read(gpu_read_as::unknown));
}

TEST(GpuRead, EveryReadAsWordRoundTrips) {
  for (auto how : {gpu_read_as::pending, gpu_read_as::driver, gpu_read_as::nvidia_smi,
                   gpu_read_as::no_gpu, gpu_read_as::unresponsive, gpu_read_as::unavailable})
    EXPECT_EQ(parse_gpu_read_as(to_string(how)), how) << to_string(how);
  EXPECT_STREQ(to_string(gpu_read_as::driver), "driver: healthy");
  EXPECT_EQ(parse_gpu_read_as(""), gpu_read_as::unknown);
  EXPECT_EQ(parse_gpu_read_as("healthy"), gpu_read_as::unknown)
    << "a word is matched whole, never by a piece of it";
}

TEST(GpuRead, SettersWriteTheEnumAndTheWord) {
  v1::Gpu g;
  set_read_status(g, gpu_read_status::lost);
  EXPECT_EQ(g.status(), "lost");
  EXPECT_EQ(g.status_code(), v1::GpuReadStatus::lost);
  v1::GpuSection s;
  set_read_as(s, gpu_read_as::nvidia_smi);
  EXPECT_EQ(s.read_as(), "nvidia-smi");
  EXPECT_EQ(s.read_as_code(), v1::GpuReadAs::nvidia_smi);
}

TEST(GpuRead, AnOldRecordWithWordsOnlyReadsBack) {
  v1::GpuSection section;
  section.set_read_as("unavailable");
  section.add_gpus()->set_status("unresponsive");
  section.add_gpus()->set_status("lost");
  section.add_gpus();  // no status at all: an answering GPU, as before
  auto old = old_record(section);
  EXPECT_FALSE(old.has_read_as_code());
  EXPECT_EQ(read_as(old), gpu_read_as::unavailable);
  EXPECT_EQ(read_status(old.gpus(0)), gpu_read_status::unresponsive);
  EXPECT_EQ(read_status(old.gpus(1)), gpu_read_status::lost);
  EXPECT_EQ(read_status(old.gpus(2)), gpu_read_status::ok);
}

TEST(GpuRead, TheEnumWinsOverTheWord) {
  v1::Gpu g;
  g.set_status("ok");
  g.set_status_code(v1::GpuReadStatus::unresponsive);
  EXPECT_EQ(read_status(g), gpu_read_status::unresponsive);
  // A value this build does not know (a newer writer): the word decides.
  g.set_status_code(static_cast<v1::GpuReadStatus::Value>(42));
  EXPECT_EQ(read_status(g), gpu_read_status::ok);
}
