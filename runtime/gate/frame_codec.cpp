#include "runtime/gate/frame_codec.hpp"

#include "messages/error.hpp"

namespace astraeus {

std::string frame_length_prefix(uint32_t n) {
  std::string out(frame_header_size, '\0');
  out[0] = static_cast<char>((n >> 24) & 0xff);
  out[1] = static_cast<char>((n >> 16) & 0xff);
  out[2] = static_cast<char>((n >> 8) & 0xff);
  out[3] = static_cast<char>(n & 0xff);
  return out;
}

std::string encode_frame(const v1::Frame& frame) {
  auto body = frame.SerializeAsString();
  auto out = frame_length_prefix(static_cast<uint32_t>(body.size()));
  out += body;
  return out;
}

caf::expected<uint32_t> decode_frame_length(const char* header, uint64_t cap) {
  auto b = reinterpret_cast<const unsigned char*>(header);
  uint32_t n = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16)
               | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
  if (n == 0)
    return caf::make_error(ec::malformed_frame,
                           "frame length is 0 (a frame must carry a body)");
  if (n > cap)
    return caf::make_error(ec::frame_too_large,
                           "frame of " + std::to_string(n)
                             + " bytes exceeds the cap of "
                             + std::to_string(cap) + " bytes");
  return n;
}

caf::expected<v1::Frame> decode_frame_body(const char* data, size_t size) {
  v1::Frame frame;
  if (!frame.ParseFromArray(data, static_cast<int>(size)))
    return caf::make_error(ec::malformed_frame,
                           "frame body of " + std::to_string(size)
                             + " bytes is not a valid astraeus.v1.Frame");
  if (frame.body_case() == v1::Frame::BODY_NOT_SET)
    return caf::make_error(ec::malformed_frame,
                           "frame carries no known body (newer peer?)");
  return frame;
}

std::string_view frame_kind(const v1::Frame& frame) {
  switch (frame.body_case()) {
    case v1::Frame::kHello: return "hello";
    case v1::Frame::kWelcome: return "welcome";
    case v1::Frame::kRefusal: return "refusal";
    case v1::Frame::kReport: return "report";
    case v1::Frame::kRequest: return "request";
    case v1::Frame::kResponse: return "response";
    case v1::Frame::kClearFault: return "clear-fault";
    case v1::Frame::kClearFaultReply: return "clear-fault-reply";
    case v1::Frame::kWorkerOrders: return "worker-orders";
    case v1::Frame::kWorkerStatuses: return "worker-statuses";
    case v1::Frame::kChannelHello: return "channel-hello";
    case v1::Frame::kChannelAccept: return "channel-accept";
    case v1::Frame::kChannelAuth: return "channel-auth";
    case v1::Frame::kLogs: return "logs";
    case v1::Frame::kLogsReply: return "logs-reply";
    case v1::Frame::BODY_NOT_SET: break;
  }
  return "empty";
}

void frame_reader::feed(const char* data, size_t size) {
  if (!failed_)
    buffer_.append(data, size);
}

caf::expected<std::optional<std::string>> frame_reader::next_record() {
  if (failed_)
    return failed_;
  if (buffer_.size() < frame_header_size)
    return std::optional<std::string>{};
  auto len = decode_frame_length(buffer_.data(), cap_);
  if (!len) {
    failed_ = len.error();
    return failed_;
  }
  if (buffer_.size() < frame_header_size + *len)
    return std::optional<std::string>{};
  auto record = buffer_.substr(frame_header_size, *len);
  buffer_.erase(0, frame_header_size + *len);
  return std::optional<std::string>{std::move(record)};
}

caf::expected<std::optional<v1::Frame>> frame_reader::next() {
  auto record = next_record();
  if (!record)
    return record.error();
  if (!*record)
    return std::optional<v1::Frame>{};
  auto frame = decode_frame_body((*record)->data(), (*record)->size());
  if (!frame) {
    failed_ = frame.error();
    return failed_;
  }
  return std::optional<v1::Frame>{std::move(*frame)};
}

} // namespace astraeus
