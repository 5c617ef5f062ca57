#include "transports/tcp/tcp_transport.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/auth.hpp"
#include "base/logging.hpp"
#include "base/socket_io.hpp"
#include "base/tcp_connect.hpp"
#include "store/keys.hpp"

namespace loom::transport::tcp {
struct TcpTransport::Hello {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint64_t job_token;
  std::int32_t from;
  std::int32_t to;
  std::int32_t index;
  std::int32_t sockets;
};

namespace {
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
                           const base::Config& config, const std::string& route_hint)
    : store_(store), rank_(rank), job_token_(job_token), config_(config) {
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
  base::set_nonblocking(listen_fd_);
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  listen_address_ = fmt::format("{}:{}", ip, ntohs(addr.sin_port));
  store_.set(store::keys::tcp_address(rank), listen_address_);
  base::log().debug("tcp: listening on {}", listen_address_);
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

Connection& TcpTransport::connect(int peer, const base::Deadline& deadline) {
  if (auto it = connections_.find(peer); it != connections_.end()) return *it->second;
  const int n = config_.sockets_per_peer;
  std::string address;
  std::vector<int> fds;
  if (rank_ < peer) {
    address = store_.get_string(store::keys::tcp_address(peer),
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
    address = base::peer_address(fds[0]);
  }
  auto conn = std::make_unique<TcpConnection>(
      rank_, peer, std::move(fds), config_.buffer_bytes / static_cast<std::size_t>(config_.slots),
      config_.slots, address);
  base::log().debug("connected: {}", conn->describe());
  return *(connections_[peer] = std::move(conn));
}

int TcpTransport::dial(int peer, int index, const std::string& address,
                       const base::Deadline& deadline) {
  auto [host, port] = split_address(address);
  std::string error;
  int fd = -1;
  // The peer listened before it published its address: a refusal means it is gone.
  fd = base::connect_tcp(host, port, deadline, error, /*retry_refused=*/false);
  if (fd < 0) {
    std::string msg = fmt::format("tcp connect: rank {} could not reach rank {} at {}: {}", rank_,
                                  peer, address, error);
    if (deadline.expired()) throw TimeoutError(msg);
    throw PeerError(msg, peer);
  }
  set_buffers(fd, config_.socket_buffer_bytes);
  // The acceptor's challenge, then the hello with this side's response, then its proof.
  auto fail = [&](const std::string& why) {
    ::close(fd);
    return PeerError(
        fmt::format("tcp connect: rank {} -> rank {} at {}: {}", rank_, peer, address, why), peer);
  };
  std::array<std::uint8_t, base::Challenge::kBytes> raw{};
  if (auto r = base::read_exact(fd, raw.data(), raw.size(), deadline); r != base::IoResult::ok)
    throw fail("no challenge: " + base::describe(r));
  auto challenge = base::Challenge::decode(raw.data(), raw.size());
  if (!challenge) throw fail("the peer's challenge is not Loom's");
  Hello hello{kHelloMagic, kVersion, job_token_, rank_, peer, index, config_.sockets_per_peer};
  base::Handshake handshake("loom-data", config_.secret);
  const std::string_view context(reinterpret_cast<const char*>(&hello), sizeof(hello));
  auto reply = handshake.respond(*challenge, context);
  if (!reply.error.empty()) throw fail(reply.error);
  std::vector<std::uint8_t> message(sizeof(hello));
  std::memcpy(message.data(), &hello, sizeof(hello));
  message.insert(message.end(), reply.bytes.begin(), reply.bytes.end());
  if (auto r = base::write_exact(fd, message.data(), message.size(), deadline);
      r != base::IoResult::ok)
    throw fail("hello failed: " + base::describe(r));
  std::vector<std::uint8_t> proof(handshake.proof_bytes());
  if (auto r = base::read_exact(fd, proof.data(), proof.size(), deadline); r != base::IoResult::ok)
    throw fail("the peer rejected this rank's job secret (" + base::describe(r) + ")");
  if (!handshake.verify_proof(proof.data(), proof.size(), context))
    throw fail("the peer does not know the job secret");
  return fd;
}

// The accepting side of the handshake; an empty string when `fd` is a peer of this job.
std::string TcpTransport::handshake_accepted(int fd, Hello& hello) {
  const base::Deadline deadline(
      std::chrono::duration_cast<std::chrono::milliseconds>(kHelloTimeout));
  base::Handshake handshake("loom-data", config_.secret);
  const auto challenge = handshake.challenge().encode();
  if (auto r = base::write_exact(fd, challenge.data(), challenge.size(), deadline);
      r != base::IoResult::ok)
    return "challenge not sent: " + base::describe(r);
  std::vector<std::uint8_t> message(sizeof(hello) + handshake.response_bytes());
  if (auto r = base::read_exact(fd, message.data(), message.size(), deadline);
      r != base::IoResult::ok)
    return "no hello: " + base::describe(r);
  std::memcpy(&hello, message.data(), sizeof(hello));
  std::string why;
  const std::string_view context(reinterpret_cast<const char*>(message.data()), sizeof(hello));
  auto proof = handshake.check_response(message.data() + sizeof(hello), handshake.response_bytes(),
                                        context, &why);
  if (!proof) return why;  // before any field of the hello is believed
  if (hello.magic != kHelloMagic || hello.version != kVersion) return "not a Loom peer";
  if (hello.job_token != job_token_) return "hello from another job or communicator";
  if (hello.to != rank_ || hello.from < 0 || hello.from >= rank_ || hello.index < 0 ||
      hello.index >= config_.sockets_per_peer)
    return fmt::format("hello names ranks {}->{} socket {}", hello.from, hello.to, hello.index);
  if (hello.sockets != config_.sockets_per_peer)
    return fmt::format("peer uses LOOM_NSOCKS={}, this rank {}", hello.sockets,
                       config_.sockets_per_peer);
  if (auto r = base::write_exact(fd, proof->data(), proof->size(), deadline);
      r != base::IoResult::ok)
    return "proof not sent: " + base::describe(r);
  return {};
}

void TcpTransport::accept_until(int peer, const base::Deadline& deadline) {
  auto complete = [&] {
    auto it = accepted_.find(peer);
    if (it == accepted_.end()) return false;
    for (int fd : it->second)
      if (fd < 0) return false;
    return true;
  };
  while (!complete()) {
    if (base::wait_fd(listen_fd_, POLLIN, deadline) == base::IoResult::timeout)
      throw TimeoutError(fmt::format(
          "tcp connect: rank {} timed out waiting for rank {} to connect (is rank {} alive and in "
          "the same collective?)",
          rank_, peer, peer));
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Hello hello{};
    const std::string why = handshake_accepted(fd, hello);
    if (!why.empty()) {
      base::log().warn("tcp: rank {} rejected a connection from {}: {}", rank_,
                       base::peer_address(fd), why);
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
