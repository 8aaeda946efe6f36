#include "runtime/gate/gate_listener.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "messages/error.hpp"

namespace astraeus {

caf::expected<int> listen_tcp(const std::string& host, uint16_t port, bool share_port) {
  auto where = host + ":" + std::to_string(port);
  auto fail = [&](const std::string& why) {
    return caf::make_error(ec::invalid_config, "cannot listen on " + where + ": " + why);
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  auto service = std::to_string(port);
  if (auto rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(),
                              &hints, &res);
      rc != 0)
    return fail(gai_strerror(rc));
  std::string last = "no address";
  int fd = -1;
  for (auto* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                  ai->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (share_port)
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof(yes));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0)
      break;
    last = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0)
    return fail(last);
  return fd;
}

} // namespace astraeus
