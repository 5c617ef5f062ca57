#include "store/listen_socket.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/logging.hpp"
#include "loom/loom.hpp"

namespace loom::store {

int listen_tcp(const std::string& host, std::uint16_t port, int backlog) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); gai != 0)
    throw StoreError(
        fmt::format("store server: cannot resolve {}:{}: {}", host, port, ::gai_strerror(gai)));
  const addrinfo& at = *found;
  int fd = ::socket(at.ai_family, at.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, at.ai_protocol);
  const char* step = "socket";
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, at.ai_addr, at.ai_addrlen) != 0)
      step = "bind";
    else if (::listen(fd, backlog) != 0)
      step = "listen";
    else
      step = nullptr;
  }
  const int err = errno;
  ::freeaddrinfo(found);
  if (step == nullptr) return fd;
  if (fd >= 0) ::close(fd);
  throw StoreError(fmt::format("store server: cannot listen on {}:{}: {}: {}", host, port, step,
                               std::strerror(err)));
}

void make_close_on_exec_and_nonblocking(int fd) {
  ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void raise_descriptor_limit_once() {
  // Once per process, by pid: a forked child is a new process, with limits of its own.
  static std::atomic<pid_t> raised_in{0};
  const pid_t self = ::getpid();
  pid_t last = raised_in.load();
  if (last == self || !raised_in.compare_exchange_strong(last, self)) return;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) == 0)
    base::log().debug("store server: descriptor limit raised from {} to {}", before,
                      limit.rlim_max);
}

}  // namespace loom::store
