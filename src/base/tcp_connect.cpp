#include "base/tcp_connect.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "base/socket_io.hpp"

namespace loom::base {
namespace {

int try_connect(const addrinfo* ai, const Deadline& deadline, int& err) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    err = errno;
    return -1;
  }
  set_nonblocking(fd);
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      err = errno;
      ::close(fd);
      return -1;
    }
    if (wait_fd(fd, POLLOUT, deadline) == IoResult::timeout) {
      err = ETIMEDOUT;
      ::close(fd);
      return -1;
    }
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      ::close(fd);
      return -1;
    }
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

int connect_tcp(const std::string& host, std::uint16_t port, const Deadline& deadline,
                std::string& error, bool retry_refused) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  auto backoff = std::chrono::milliseconds(5);
  for (;;) {
    addrinfo* res = nullptr;
    int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    int err = 0;
    if (gai == 0) {
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        int fd = try_connect(ai, deadline, err);
        if (fd >= 0) {
          ::freeaddrinfo(res);
          return fd;
        }
      }
      ::freeaddrinfo(res);
      error = std::strerror(err);
      if (err == ECONNREFUSED && !retry_refused) return -1;
    } else {
      error = ::gai_strerror(gai);
    }
    if (deadline.expired()) return -1;
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
        backoff, std::chrono::milliseconds(deadline.remaining_ms(1000))));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

}  // namespace loom::base
