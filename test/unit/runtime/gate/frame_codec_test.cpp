// The gate's frame codec: the length is checked against the cap before
// anything is allocated; garbage, truncation and empty frames are errors.

#include <gtest/gtest.h>

#include "messages/error.hpp"
#include "runtime/gate/frame_codec.hpp"

using namespace astraeus;

namespace {

v1::Frame hello_frame() {
  v1::Frame f;
  f.mutable_hello()->set_protocol_version(protocol_version);
  f.mutable_hello()->set_role(v1::AGENT);
  f.mutable_hello()->set_machine_name("gpu-01");
  return f;
}

} // namespace

TEST(FrameCodec, RoundTripsAFrame) {
  auto bytes = encode_frame(hello_frame());
  ASSERT_GT(bytes.size(), frame_header_size);
  auto len = decode_frame_length(bytes.data(), default_frame_cap);
  ASSERT_TRUE(len) << render_error(len.error());
  EXPECT_EQ(*len, bytes.size() - frame_header_size);
  auto frame = decode_frame_body(bytes.data() + frame_header_size, *len);
  ASSERT_TRUE(frame);
  EXPECT_EQ(frame->hello().machine_name(), "gpu-01");
  EXPECT_EQ(frame_kind(*frame), "hello");
}

TEST(FrameCodec, ALengthOverTheCapIsRefusedBeforeReadingTheBody) {
  const char header[4] = {'\xff', '\xff', '\xff', '\xf0'};
  auto len = decode_frame_length(header, default_frame_cap);
  ASSERT_FALSE(len);
  EXPECT_EQ(len.error(), ec::frame_too_large);
  EXPECT_NE(render_error(len.error()).find("4294967280 bytes exceeds the cap of 1048576"),
            std::string::npos)
    << render_error(len.error());
  // Exactly at the cap is fine, one over is not.
  const char at_cap[4] = {0, 0x10, 0, 0};
  EXPECT_TRUE(decode_frame_length(at_cap, 1u << 20));
  EXPECT_FALSE(decode_frame_length(at_cap, (1u << 20) - 1));
}

TEST(FrameCodec, AZeroLengthIsMalformed) {
  const char header[4] = {0, 0, 0, 0};
  auto len = decode_frame_length(header, default_frame_cap);
  ASSERT_FALSE(len);
  EXPECT_EQ(len.error(), ec::malformed_frame);
}

TEST(FrameCodec, GarbageBodiesAreMalformed) {
  const std::string garbage = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff";
  auto frame = decode_frame_body(garbage.data(), garbage.size());
  ASSERT_FALSE(frame);
  EXPECT_EQ(frame.error(), ec::malformed_frame);
}

TEST(FrameCodec, TruncatedBodiesAreMalformed) {
  auto bytes = encode_frame(hello_frame());
  auto body = bytes.substr(frame_header_size);
  for (size_t n = 1; n < body.size(); ++n) {
    auto frame = decode_frame_body(body.data(), n);
    // A prefix either fails to parse or parses to a different frame; it
    // never yields the original hello.
    if (frame) {
      EXPECT_NE(frame->hello().machine_name(), "gpu-01") << "prefix " << n;
    }
  }
}

TEST(FrameCodec, AFrameWithoutABodyIsMalformed) {
  // A field number this build does not know (e.g. from a newer peer).
  const std::string unknown = "\xf8\x07\x01";  // field 127, varint 1
  auto frame = decode_frame_body(unknown.data(), unknown.size());
  ASSERT_FALSE(frame);
  EXPECT_EQ(frame.error(), ec::malformed_frame);
}

TEST(FrameReader, ReassemblesFramesFedByteByByte) {
  auto bytes = encode_frame(hello_frame()) + encode_frame(hello_frame());
  frame_reader reader;
  int frames = 0;
  for (char c : bytes) {
    reader.feed(&c, 1);
    auto next = reader.next();
    ASSERT_TRUE(next) << render_error(next.error());
    if (*next)
      ++frames;
  }
  EXPECT_EQ(frames, 2);
  auto none = reader.next();
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
}

TEST(FrameReader, StaysFailedAfterAnOversizedLength) {
  frame_reader reader{1024};
  const char header[4] = {0, 0, 0x10, 0};  // 4096 > 1024
  reader.feed(header, 4);
  auto next = reader.next();
  ASSERT_FALSE(next);
  EXPECT_EQ(next.error(), ec::frame_too_large);
  auto good = encode_frame(hello_frame());
  reader.feed(good.data(), good.size());
  EXPECT_FALSE(reader.next()) << "a failed stream must not resynchronise";
}
