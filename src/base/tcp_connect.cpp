#include "base/tcp_connect.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

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

// What a resolver thread hands back; whichever of it and its caller finishes last frees it.
struct Lookup {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  int status = 0;
  addrinfo* found = nullptr;
  ~Lookup() {
    if (found != nullptr) ::freeaddrinfo(found);
  }
};

}  // namespace

AddressList resolve_tcp(const std::string& host, std::uint16_t port, const Deadline& deadline,
                        std::string& error, const Resolver& resolver) {
  const std::string service = std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  int status = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (status == 0) return AddressList(found, &::freeaddrinfo);
  if (status != EAI_NONAME) {
    error = ::gai_strerror(status);
    return AddressList(nullptr, &::freeaddrinfo);
  }
  hints.ai_flags = 0;
  auto lookup = std::make_shared<Lookup>();
  try {
    std::thread([lookup, resolver, host, service, hints] {
      addrinfo* result = nullptr;
      const int rc = resolver(host.c_str(), service.c_str(), &hints, &result);
      std::lock_guard lock(lookup->mu);
      lookup->status = rc;
      lookup->found = rc == 0 ? result : nullptr;
      lookup->done = true;
      lookup->done_cv.notify_all();
    }).detach();
  } catch (const std::system_error& e) {
    error = std::string("cannot start the name resolution: ") + e.what();
    return AddressList(nullptr, &::freeaddrinfo);
  }
  std::unique_lock lock(lookup->mu);
  while (!lookup->done && !deadline.expired())
    lookup->done_cv.wait_for(lock, std::chrono::milliseconds(deadline.remaining_ms(100)));
  if (!lookup->done) {
    error = "resolving " + host + " timed out";
    return AddressList(nullptr, &::freeaddrinfo);
  }
  if (lookup->status != 0) {
    error = ::gai_strerror(lookup->status);
    return AddressList(nullptr, &::freeaddrinfo);
  }
  return AddressList(std::exchange(lookup->found, nullptr), &::freeaddrinfo);
}

int connect_tcp(const std::string& host, std::uint16_t port, const Deadline& deadline,
                std::string& error, bool retry_refused) {
  auto backoff = std::chrono::milliseconds(5);
  for (;;) {
    if (AddressList addresses = resolve_tcp(host, port, deadline, error)) {
      int err = 0;
      for (addrinfo* ai = addresses.get(); ai != nullptr; ai = ai->ai_next) {
        int fd = try_connect(ai, deadline, err);
        if (fd >= 0) return fd;
      }
      error = std::strerror(err);
      if (err == ECONNREFUSED && !retry_refused) return -1;
    }
    if (deadline.expired()) return -1;
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
        backoff, std::chrono::milliseconds(deadline.remaining_ms(1000))));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

}  // namespace loom::base
