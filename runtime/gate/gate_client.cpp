#include "runtime/gate/gate_client.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <set>
#include <thread>

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

/// The error for a gate's refusal: a standby's answer keeps its own code
/// (HA mode); every other refusal is ec::protocol_violation with its reason.
caf::error refusal_error(const std::string& peer, const v1::Refusal& refusal) {
  if (refusal.code() == to_string(ec::not_leader))
    return caf::make_error(ec::not_leader, "the controller at " + peer
                                             + " is a standby; the leader's gate is "
                                             + refusal.leader());
  if (refusal.code() == to_string(ec::no_leader))
    return caf::make_error(ec::no_leader,
                           "the controller at " + peer
                             + " is a standby and no controller leads yet (an "
                               "election is under way)");
  return caf::make_error(ec::protocol_violation,
                         "the controller at " + peer + " refused: " + refusal.reason());
}

} // namespace

std::string to_string(const gate_address& addr) {
  auto host = addr.host.find(':') != std::string::npos ? "[" + addr.host + "]" : addr.host;
  return host + ":" + std::to_string(addr.port);
}

caf::expected<std::vector<gate_address>> parse_gate_addresses(const std::string& text) {
  std::vector<gate_address> out;
  size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find(',', start);
    if (end == std::string::npos)
      end = text.size();
    auto entry = text.substr(start, end - start);
    start = end + 1;
    auto b = entry.find_first_not_of(" \t");
    if (b == std::string::npos)
      continue;
    entry = entry.substr(b, entry.find_last_not_of(" \t") - b + 1);
    auto addr = parse_gate_address(entry);
    if (!addr)
      return addr.error();
    out.push_back(std::move(*addr));
  }
  if (out.empty())
    return caf::make_error(ec::invalid_request,
                           "address list '" + text + "' holds no address");
  return out;
}

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
  if (!text.empty() && text.front() != '[' && out.host.find_first_of(":;, \t/") != std::string::npos)
    return caf::make_error(ec::invalid_request,
                           "address '" + text + "': host '" + out.host
                             + "' is not a host name or an IPv4 address (separate several "
                               "addresses with commas; an IPv6 address goes in brackets, "
                               "[::1]:7450)");
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
    welcome_(std::move(other.welcome_)),
    last_refusal_(std::move(other.last_refusal_)) {
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
    last_refusal_ = std::move(other.last_refusal_);
  }
  return *this;
}

gate_client::~gate_client() {
  if (fd_ >= 0)
    ::close(fd_);
}

caf::expected<gate_client> gate_client::open(const gate_address& addr,
                                             const gate_credentials& creds,
                                             milliseconds timeout,
                                             v1::Refusal* refused) {
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
  if (step->frame && step->frame->has_refusal()) {
    if (refused != nullptr)
      *refused = step->frame->refusal();
    return refusal_error(peer, step->frame->refusal());
  }
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
  if (reply->has_refusal()) {
    last_refusal_ = reply->refusal();
    return refusal_error(peer_, reply->refusal());
  }
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
                                                const gate_credentials& creds,
                                                v1::Refusal* refused) {
  auto deadline = clock_type::now() + timeout;
  auto client = open(addr, creds, timeout, refused);
  if (!client)
    return client.error();
  if (auto err = client->hello(
        hello, std::chrono::duration_cast<milliseconds>(deadline - clock_type::now()))) {
    if (refused != nullptr)
      *refused = client->last_refusal_;
    return err;
  }
  return client;
}

caf::expected<gate_client> gate_client::connect_cli(const gate_address& addr,
                                                    milliseconds timeout,
                                                    const gate_credentials& creds,
                                                    v1::Refusal* refused) {
  v1::Hello hello;
  hello.set_protocol_version(protocol_version);
  hello.set_role(v1::CLI);
  hello.set_software_version(ASTRAEUS_VERSION);
  hello.set_api_token(creds.api_token);
  return connect(addr, hello, timeout, creds, refused);
}

caf::expected<gate_client>
gate_client::connect_cli_leader(const std::vector<gate_address>& addrs,
                                milliseconds timeout, const gate_credentials& creds) {
  if (addrs.empty())
    return caf::make_error(ec::invalid_request, "no controller address given");
  auto deadline = clock_type::now() + timeout;
  auto each = std::max(milliseconds{1000},
                       timeout / static_cast<milliseconds::rep>(addrs.size()));
  // The last thing each address answered, in the order first tried.
  std::vector<std::pair<std::string, caf::error>> outcomes;
  auto record = [&](const std::string& where, caf::error err) {
    for (auto& [addr, last] : outcomes)
      if (addr == where) {
        last = std::move(err);
        return;
      }
    outcomes.emplace_back(where, std::move(err));
  };
  size_t attempts = 0;
  for (;;) {
    std::deque<gate_address> queue{addrs.begin(), addrs.end()};
    std::set<std::string> tried;
    // A standby answered: a leader exists or is being elected, so another
    // round may find it; when nothing answered, another round will not.
    bool standby_answered = false;
    while (!queue.empty() && clock_type::now() < deadline) {
      auto addr = queue.front();
      queue.pop_front();
      auto where = to_string(addr);
      if (!tried.insert(where).second)
        continue;
      v1::Refusal refusal;
      auto left = std::chrono::duration_cast<milliseconds>(deadline - clock_type::now());
      auto client = connect_cli(addr, std::min(each, left), creds, &refusal);
      ++attempts;
      if (client)
        return client;
      auto code = client.error();
      if (code == ec::not_leader) {
        standby_answered = true;
        if (auto leader = parse_gate_address(refusal.leader()))
          queue.push_front(*leader);
      } else if (code == ec::no_leader) {
        standby_answered = true;
      } else if (code != ec::unreachable && code != ec::timeout) {
        return client.error();  // the leader's own answer
      }
      if (addrs.size() == 1 && attempts == 1 && code != ec::not_leader
          && code != ec::no_leader)
        return client.error();  // one controller, not in HA mode: as it was
      record(where, client.error());
    }
    if (!standby_answered || clock_type::now() + milliseconds{250} >= deadline)
      break;
    std::this_thread::sleep_for(milliseconds{250});
  }
  std::string names;
  std::string lines;
  for (const auto& [where, err] : outcomes) {
    names += (names.empty() ? "" : ", ") + where;
    lines += "\n  " + render_error(err);
  }
  return caf::make_error(ec::unreachable,
                         "no leading controller answered at " + names + ":"
                           + lines);
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
