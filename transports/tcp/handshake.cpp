#include "transports/tcp/handshake.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace loom::transport::tcp {

std::string check_hello(const Hello& hello, const HelloExpected& expected) {
  if (hello.magic != kHelloMagic || hello.version != kHelloVersion) return "not a Loom peer";
  if (hello.job_token != expected.job_token) return "hello from another job or communicator";
  if (hello.to != expected.rank || hello.from < 0 || hello.from >= expected.rank ||
      hello.index < 0 || hello.index >= expected.sockets)
    return fmt::format("hello names ranks {}->{} socket {}", hello.from, hello.to, hello.index);
  if (hello.sockets != expected.sockets)
    return fmt::format("peer uses LOOM_NSOCKS={}, this rank {}", hello.sockets, expected.sockets);
  return {};
}

AcceptingHandshake::AcceptingHandshake(int fd, const std::string& secret, Clock::time_point expires)
    : fd_(fd), handshake_("loom-data", secret), started_(Clock::now()), expires_(expires) {
  const auto challenge = handshake_.challenge().encode();
  out_.assign(challenge.begin(), challenge.end());
  in_.resize(sizeof(Hello) + handshake_.response_bytes());
}

AcceptingHandshake::~AcceptingHandshake() {
  if (fd_ >= 0) ::close(fd_);
}

int AcceptingHandshake::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

short AcceptingHandshake::events() const {
  return stage_ == Stage::hello ? POLLIN : POLLOUT;
}

AcceptingHandshake::Step AcceptingHandshake::refuse(std::string why) {
  why_ = std::move(why);
  return Step::refused;
}

AcceptingHandshake::Step AcceptingHandshake::advance(const HelloExpected& expected) {
  for (;;) {
    if (stage_ == Stage::hello) {
      const ssize_t n = ::recv(fd_, in_.data() + received_, in_.size() - received_, 0);
      if (n == 0) return refuse("closed before its hello was complete");
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Step::waiting;
        return refuse(fmt::format("no hello: {}", std::strerror(errno)));
      }
      received_ += static_cast<std::size_t>(n);
      if (received_ < in_.size()) continue;
      std::memcpy(&hello_, in_.data(), sizeof(hello_));
      const std::string_view context(reinterpret_cast<const char*>(in_.data()), sizeof(Hello));
      std::string why;
      auto proof = handshake_.check_response(in_.data() + sizeof(Hello),
                                             handshake_.response_bytes(), context, &why);
      if (!proof) return refuse(why);  // before any field of the hello is believed
      if (std::string bad = check_hello(hello_, expected); !bad.empty()) return refuse(bad);
      out_ = std::move(*proof);
      sent_ = 0;
      stage_ = Stage::proof;
      continue;
    }
    if (sent_ < out_.size()) {
      const ssize_t n = ::send(fd_, out_.data() + sent_, out_.size() - sent_, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Step::waiting;
        return refuse(fmt::format("{} not sent: {}",
                                  stage_ == Stage::challenge ? "challenge" : "proof",
                                  std::strerror(errno)));
      }
      sent_ += static_cast<std::size_t>(n);
      continue;
    }
    if (stage_ == Stage::proof) return Step::done;
    stage_ = Stage::hello;
  }
}

}  // namespace loom::transport::tcp
