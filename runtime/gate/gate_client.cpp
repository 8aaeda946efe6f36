#include "runtime/gate/gate_client.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "messages/error.hpp"

namespace astraeus {

namespace {

using std::chrono::milliseconds;
using clock_type = std::chrono::steady_clock;

int remaining_ms(clock_type::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline
                                                       - clock_type::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

} // namespace

caf::expected<gate_address> parse_gate_address(const std::string& text) {
  gate_address out;
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos)
      return caf::make_error(ec::invalid_request,
                             "address '" + text + "' lacks a closing ']'");
    out.host = text.substr(1, close - 1);
    if (close + 1 < text.size() && text[close + 1] == ':')
      port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos) {
      out.host = text;
    } else {
      out.host = text.substr(0, colon);
      port_text = text.substr(colon + 1);
    }
  }
  if (out.host.empty())
    out.host = "127.0.0.1";
  if (port_text.empty()) {
    out.port = 7450;
    return out;
  }
  char* end = nullptr;
  errno = 0;
  auto port = std::strtoul(port_text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || port == 0 || port > 65535)
    return caf::make_error(ec::invalid_request,
                           "address '" + text + "': port '" + port_text
                             + "' is not a number from 1 to 65535");
  out.port = static_cast<uint16_t>(port);
  return out;
}

gate_client::gate_client(int fd, std::string peer)
  : fd_(fd), peer_(std::move(peer)) {
}

gate_client::gate_client(gate_client&& other) noexcept
  : fd_(other.fd_),
    peer_(std::move(other.peer_)),
    next_id_(other.next_id_),
    reader_(std::move(other.reader_)),
    channel_(std::move(other.channel_)),
    welcome_(std::move(other.welcome_)) {
  other.fd_ = -1;
}

gate_client& gate_client::operator=(gate_client&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
    peer_ = std::move(other.peer_);
    next_id_ = other.next_id_;
    reader_ = std::move(other.reader_);
    channel_ = std::move(other.channel_);
    welcome_ = std::move(other.welcome_);
  }
  return *this;
}

gate_client::~gate_client() {
  if (fd_ >= 0)
    ::close(fd_);
}

caf::expected<gate_client> gate_client::open(const gate_address& addr,
                                             const gate_credentials& creds,
                                             milliseconds timeout) {
  auto deadline = clock_type::now() + timeout;
  auto peer = addr.host + ":" + std::to_string(addr.port);
  auto unreachable = [&](const std::string& why) {
    return caf::make_error(ec::unreachable, "cannot reach the controller at "
                                              + peer + ": " + why);
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  auto port = std::to_string(addr.port);
  if (auto rc = ::getaddrinfo(addr.host.c_str(), port.c_str(), &hints, &res);
      rc != 0)
    return unreachable(gai_strerror(rc));
  std::string last_error = "no address";
  int fd = -1;
  for (auto ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                  ai->ai_protocol);
    if (fd < 0)
      continue;
    auto flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, remaining_ms(deadline));
      if (rc == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        rc = -1;
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      ::fcntl(fd, F_SETFL, flags);
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0)
    return unreachable(last_error);
  gate_client client{fd, peer};
  auto identity = creds.identity;
  if (!identity)
    identity = std::make_shared<const identity_keypair>(identity_keypair::generate());
  client.channel_ = std::make_unique<channel_client>(identity, creds.pinned);
  client.reader_.set_cap(handshake_record_cap);
  if (auto err = client.send_raw(client.channel_->start()))
    return err;
  auto record = client.receive_record(deadline, timeout);
  if (!record)
    return record.error();
  auto step = client.channel_->on_record(record->data(), record->size());
  if (!step)
    return caf::make_error(static_cast<ec>(step.error().code()),
                           "the controller at " + peer + ": "
                             + render_error(step.error()));
  if (step->frame && step->frame->has_refusal())
    return caf::make_error(ec::protocol_violation,
                           "the controller at " + peer + " refused: "
                             + step->frame->refusal().reason());
  // Answers from the controller may be large (`astra runs` of a busy
  // cluster): up to 64 MiB, the gate's own largest cap.
  client.reader_.set_cap((64u << 20) + sealed_channel::overhead);
  if (auto err = client.send_raw(step->reply))
    return err;
  return client;
}

caf::error gate_client::hello(const v1::Hello& hello, milliseconds timeout) {
  v1::Frame frame;
  *frame.mutable_hello() = hello;
  if (auto err = send(frame))
    return err;
  auto reply = receive(timeout);
  if (!reply)
    return reply.error();
  if (reply->has_refusal())
    return caf::make_error(ec::protocol_violation,
                           "the controller at " + peer_ + " refused: "
                             + reply->refusal().reason());
  if (!reply->has_welcome())
    return caf::make_error(ec::protocol_violation,
                           "the controller at " + peer_
                             + " answered the hello with a "
                             + std::string{frame_kind(*reply)});
  welcome_ = reply->welcome();
  return caf::none;
}

caf::expected<gate_client> gate_client::connect(const gate_address& addr,
                                                const v1::Hello& hello,
                                                milliseconds timeout,
                                                const gate_credentials& creds) {
  auto deadline = clock_type::now() + timeout;
  auto client = open(addr, creds, timeout);
  if (!client)
    return client.error();
  if (auto err = client->hello(
        hello, std::chrono::duration_cast<milliseconds>(deadline - clock_type::now())))
    return err;
  return client;
}

caf::expected<gate_client> gate_client::connect_cli(const gate_address& addr,
                                                    milliseconds timeout,
                                                    const gate_credentials& creds) {
  v1::Hello hello;
  hello.set_protocol_version(protocol_version);
  hello.set_role(v1::CLI);
  hello.set_software_version(ASTRAEUS_VERSION);
  hello.set_api_token(creds.api_token);
  return connect(addr, hello, timeout, creds);
}

caf::error gate_client::send(const v1::Frame& frame) {
  if (!channel_ || !channel_->established())
    return caf::make_error(ec::protocol_violation,
                           "the secure channel is not established");
  return send_raw(channel_->encode(frame));
}

caf::error gate_client::send_raw(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    auto n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return caf::make_error(ec::unreachable, "lost the connection to "
                                                + peer_ + ": "
                                                + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  return caf::none;
}

caf::expected<std::string>
gate_client::receive_record(clock_type::time_point deadline, milliseconds timeout) {
  for (;;) {
    auto next = reader_.next_record();
    if (!next)
      return next.error();
    if (*next)
      return std::move(**next);
    pollfd p{fd_, POLLIN, 0};
    auto rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc == 0)
      return caf::make_error(ec::timeout, "the controller at " + peer_
                                            + " did not answer within "
                                            + std::to_string(timeout.count())
                                            + " ms");
    if (rc < 0) {
      if (errno == EINTR)
        continue;
      return caf::make_error(ec::unreachable, std::strerror(errno));
    }
    char buf[65536];
    auto n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n == 0)
      return caf::make_error(ec::unreachable, "the controller at " + peer_
                                                + " closed the connection");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      return caf::make_error(ec::unreachable, "lost the connection to "
                                                + peer_ + ": "
                                                + std::strerror(errno));
    }
    reader_.feed(buf, static_cast<size_t>(n));
  }
}

caf::expected<v1::Frame> gate_client::receive(milliseconds timeout) {
  auto deadline = clock_type::now() + timeout;
  auto record = receive_record(deadline, timeout);
  if (!record)
    return record.error();
  auto step = channel_->on_record(record->data(), record->size());
  if (!step)
    return step.error();
  if (!step->frame)
    return caf::make_error(ec::protocol_violation,
                           "the controller at " + peer_
                             + " sent a handshake record after the handshake");
  return std::move(*step->frame);
}

caf::expected<v1::Response> gate_client::call(v1::Request req,
                                              milliseconds timeout) {
  req.set_id(next_id_++);
  v1::Frame frame;
  *frame.mutable_request() = std::move(req);
  auto id = frame.request().id();
  if (auto err = send(frame))
    return err;
  auto deadline = clock_type::now() + timeout;
  for (;;) {
    auto reply = receive(
      std::chrono::duration_cast<milliseconds>(deadline - clock_type::now()));
    if (!reply)
      return reply.error();
    if (reply->has_refusal())
      return caf::make_error(ec::protocol_violation,
                             "the controller refused: "
                               + reply->refusal().reason());
    if (reply->has_response() && reply->response().id() == id)
      return std::move(*reply->mutable_response());
  }
}

} // namespace astraeus
