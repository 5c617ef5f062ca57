#include "base/socket_io.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace loom::base {

IoResult wait_fd(int fd, short events, const Deadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, deadline.remaining_ms(100));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoResult::error;
    }
    if (n > 0) {
      if (p.revents & events) return IoResult::ok;
      if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return IoResult::closed;
    }
    if (deadline.expired()) return IoResult::timeout;
  }
}

IoResult read_exact(int fd, void* buf, std::size_t n, const Deadline& deadline) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
    } else if (r == 0) {
      return IoResult::closed;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (IoResult w = wait_fd(fd, POLLIN, deadline); w != IoResult::ok) return w;
    } else {
      return errno == ECONNRESET ? IoResult::closed : IoResult::error;
    }
  }
  return IoResult::ok;
}

IoResult write_exact(int fd, const void* buf, std::size_t n, const Deadline& deadline) {
  auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r >= 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (IoResult w = wait_fd(fd, POLLOUT, deadline); w != IoResult::ok) return w;
    } else {
      return (errno == EPIPE || errno == ECONNRESET) ? IoResult::closed : IoResult::error;
    }
  }
  return IoResult::ok;
}

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
}

std::string describe(IoResult r) {
  switch (r) {
    case IoResult::ok:
      return "ok";
    case IoResult::timeout:
      return "timed out";
    case IoResult::closed:
      return "connection closed by peer";
    case IoResult::error:
      return "socket error";
  }
  return "?";
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown";
  char host[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

}  // namespace loom::base
