#include <gtest/gtest.h>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deep_to_string.hpp>

#include "messages/error.hpp"
#include "messages/type_ids.hpp"

using namespace astraeus;

TEST(Messages, ProtobufRoundTripsThroughCafSerializers) {
  v1::MachineReport report;
  report.set_machine("gpu-01");
  report.set_sequence(7);
  report.mutable_facts()->mutable_cpu()->set_logical_cpus(64);
  std::vector<char> buf;
  caf::binary_serializer sink{static_cast<caf::execution_unit*>(nullptr), buf};
  ASSERT_FALSE(sink(report));
  v1::MachineReport copy;
  caf::binary_deserializer source{static_cast<caf::execution_unit*>(nullptr), buf};
  ASSERT_FALSE(source(copy));
  EXPECT_EQ(copy.machine(), "gpu-01");
  EXPECT_EQ(copy.sequence(), 7u);
  EXPECT_EQ(copy.facts().cpu().logical_cpus(), 64u);
}

TEST(Messages, GarbageBytesFailToLoad) {
  std::vector<char> buf;
  caf::binary_serializer sink{static_cast<caf::execution_unit*>(nullptr), buf};
  std::string garbage = "\xff\xff\xff\xff\x0f";
  ASSERT_FALSE(sink(garbage));
  v1::MachineReport copy;
  caf::binary_deserializer source{static_cast<caf::execution_unit*>(nullptr), buf};
  EXPECT_TRUE(static_cast<bool>(source(copy)));
}

TEST(Messages, StringificationIsReadable) {
  v1::GetMachine get;
  get.set_name("gpu-01");
  v1::Request req;
  *req.mutable_get_machine() = get;
  auto text = caf::deep_to_string(req);
  EXPECT_NE(text.find("gpu-01"), std::string::npos) << text;
}

TEST(Messages, ErrorsRenderTheirContext) {
  auto err = caf::make_error(ec::no_such_machine, "no machine named gpu-09");
  EXPECT_EQ(render_error(err), "no machine named gpu-09");
  EXPECT_STREQ(to_string(ec::frame_too_large), "frame_too_large");
}
