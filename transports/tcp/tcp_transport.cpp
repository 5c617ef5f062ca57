#include "transports/tcp/tcp_transport.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/logging.hpp"
#include "core/socket_io.hpp"
#include "core/tcp_connect.hpp"

namespace loom::transport::tcp {
namespace {

struct Hello {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint64_t job_token;
  std::int32_t from;
  std::int32_t to;
  std::int32_t index;
  std::int32_t sockets;
};
constexpr std::uint32_t kHelloMagic = 0x4c4d4831;  // "LMH1"
constexpr std::uint32_t kVersion = 1;
// A connecting peer sends its hello at once; one that does not is not a Loom peer.
constexpr auto kHelloTimeout = std::chrono::seconds(10);

void set_buffers(int fd, std::size_t bytes) {
  if (bytes == 0) return;  // leave the kernel's autotuning alone
  int b = static_cast<int>(std::min<std::size_t>(bytes, 1u << 30));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
}

std::pair<std::string, std::uint16_t> split_address(const std::string& addr) {
  auto colon = addr.rfind(':');
  if (colon == std::string::npos) throw PeerError(fmt::format("malformed peer address '{}'", addr));
  return {addr.substr(0, colon), static_cast<std::uint16_t>(std::stoi(addr.substr(colon + 1)))};
}

}  // namespace

TcpTransport::TcpTransport(Store& store, int rank, int size, std::uint64_t job_token,
                           const core::Config& config, const std::string& route_hint)
    : store_(store), rank_(rank), size_(size), job_token_(job_token), config_(config) {
  std::string ip =
      choose_local_address(config.socket_ifname, route_hint, config.local_world_size >= size);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0)
    throw PeerError(fmt::format("tcp: rank {}: socket: {}", rank, std::strerror(errno)));
  set_buffers(listen_fd_, config.socket_buffer_bytes);  // accepted sockets inherit the sizes
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1 ||
      ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 1024) != 0) {
    int err = errno;
    ::close(listen_fd_);
    throw PeerError(
        fmt::format("tcp: rank {} cannot listen on {}: {}", rank, ip, std::strerror(err)));
  }
  core::set_nonblocking(listen_fd_);
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  listen_address_ = fmt::format("{}:{}", ip, ntohs(addr.sin_port));
  store_.set(fmt::format("tcp/{}", rank), listen_address_);
  core::log().debug("tcp: listening on {}", listen_address_);
}

TcpTransport::~TcpTransport() {
  connections_.clear();
  for (auto& [peer, fds] : accepted_)
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void TcpTransport::abort() {
  for (auto& [peer, conn] : connections_) conn->shutdown();
}

Connection& TcpTransport::connect(int peer, const core::Deadline& deadline) {
  if (auto it = connections_.find(peer); it != connections_.end()) return *it->second;
  const int n = config_.sockets_per_peer;
  std::string address;
  std::vector<int> fds;
  if (rank_ < peer) {
    address = store_.get_string(fmt::format("tcp/{}", peer),
                                std::chrono::milliseconds(deadline.remaining_ms(1 << 30)));
    try {
      for (int k = 0; k < n; ++k) fds.push_back(dial(peer, k, address, deadline));
    } catch (...) {
      for (int fd : fds) ::close(fd);
      throw;
    }
  } else {
    accept_until(peer, deadline);
    fds = std::move(accepted_[peer]);
    accepted_.erase(peer);
    address = core::peer_address(fds[0]);
  }
  auto conn = std::make_unique<TcpConnection>(
      rank_, peer, std::move(fds), config_.buffer_bytes / static_cast<std::size_t>(config_.slots),
      config_.slots, address);
  core::log().debug("connected: {}", conn->describe());
  return *(connections_[peer] = std::move(conn));
}

int TcpTransport::dial(int peer, int index, const std::string& address,
                       const core::Deadline& deadline) {
  auto [host, port] = split_address(address);
  std::string error;
  int fd = -1;
  // The peer listened before it published its address: a refusal means it is gone.
  fd = core::connect_tcp(host, port, deadline, error, /*retry_refused=*/false);
  if (fd < 0) {
    std::string msg = fmt::format("tcp connect: rank {} could not reach rank {} at {}: {}", rank_,
                                  peer, address, error);
    if (deadline.expired()) throw TimeoutError(msg);
    throw PeerError(msg);
  }
  set_buffers(fd, config_.socket_buffer_bytes);
  Hello hello{kHelloMagic, kVersion, job_token_, rank_, peer, index, config_.sockets_per_peer};
  if (core::IoResult r = core::write_exact(fd, &hello, sizeof(hello), deadline);
      r != core::IoResult::ok) {
    ::close(fd);
    throw PeerError(fmt::format("tcp connect: rank {} -> rank {} at {}: hello failed: {}", rank_,
                                peer, address, core::describe(r)));
  }
  return fd;
}

void TcpTransport::accept_until(int peer, const core::Deadline& deadline) {
  auto complete = [&] {
    auto it = accepted_.find(peer);
    if (it == accepted_.end()) return false;
    for (int fd : it->second)
      if (fd < 0) return false;
    return true;
  };
  while (!complete()) {
    if (core::wait_fd(listen_fd_, POLLIN, deadline) == core::IoResult::timeout)
      throw TimeoutError(fmt::format(
          "tcp connect: rank {} timed out waiting for rank {} to connect (is rank {} alive and in "
          "the same collective?)",
          rank_, peer, peer));
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Hello hello{};
    core::Deadline hello_deadline(
        std::chrono::duration_cast<std::chrono::milliseconds>(kHelloTimeout));
    core::IoResult r = core::read_exact(fd, &hello, sizeof(hello), hello_deadline);
    std::string why;
    if (r != core::IoResult::ok)
      why = "no hello: " + core::describe(r);
    else if (hello.magic != kHelloMagic || hello.version != kVersion)
      why = "not a Loom peer";
    else if (hello.job_token != job_token_)
      why = "hello from another job or communicator";
    else if (hello.to != rank_ || hello.from < 0 || hello.from >= rank_ || hello.index < 0 ||
             hello.index >= config_.sockets_per_peer)
      why = fmt::format("hello names ranks {}->{} socket {}", hello.from, hello.to, hello.index);
    else if (hello.sockets != config_.sockets_per_peer)
      why = fmt::format("peer uses LOOM_NSOCKS={}, this rank {}", hello.sockets,
                        config_.sockets_per_peer);
    if (!why.empty()) {
      core::log().warn("tcp: rank {} rejected a connection from {}: {}", rank_,
                       core::peer_address(fd), why);
      ::close(fd);
      continue;
    }
    auto& slots = accepted_[hello.from];
    slots.resize(static_cast<std::size_t>(config_.sockets_per_peer), -1);
    if (slots[hello.index] >= 0) ::close(slots[hello.index]);
    slots[hello.index] = fd;
  }
}

}  // namespace loom::transport::tcp
