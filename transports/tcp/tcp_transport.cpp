#include "transports/tcp/tcp_transport.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/cpu_cache.hpp"
#include "base/logging.hpp"
#include "base/process_memory.hpp"
#include "base/socket_io.hpp"
#include "store/keys.hpp"
#include "transports/await_key.hpp"

namespace loom::transport::tcp {
namespace {

// A handshake this old has had time to finish: one that has not is given up for a newcomer
// when every place is taken.
constexpr auto kSilentAfter = std::chrono::milliseconds(250);
// Out of descriptors, the listener stays readable: look at it again only after this pause.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
constexpr auto kWarningPeriod = std::chrono::seconds(10);

void set_buffers(int fd, std::size_t bytes) {
  if (bytes == 0) return;  // leave the kernel's autotuning alone
  int b = static_cast<int>(std::min<std::size_t>(bytes, 1u << 30));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::pair<std::string, std::uint16_t> split_address(const std::string& addr) {
  auto colon = addr.rfind(':');
  if (colon == std::string::npos) throw PeerError(fmt::format("malformed peer address '{}'", addr));
  return {addr.substr(0, colon), static_cast<std::uint16_t>(std::stoi(addr.substr(colon + 1)))};
}

// Waits until fd is ready for `events`, in short polls between which the halt is looked at.
base::IoResult wait_ready(int fd, short events, const base::Deadline& deadline,
                          const base::Halt& halt, const std::string& what) {
  for (;;) {
    if (halt.triggered()) halt.raise(what);
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, deadline.remaining_ms(kSetupPollMs));
    if (n < 0 && errno != EINTR) return base::IoResult::error;
    if (n > 0) {
      if (p.revents & events) return base::IoResult::ok;
      if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return base::IoResult::closed;
    }
    if (deadline.expired()) return base::IoResult::timeout;
  }
}

// Sends (or receives) exactly n bytes on a non-blocking socket, waiting as wait_ready() does.
base::IoResult transfer(int fd, void* buf, std::size_t n, bool sending,
                        const base::Deadline& deadline, const base::Halt& halt,
                        const std::string& what) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = sending ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
    } else if (r == 0 && !sending) {
      return base::IoResult::closed;
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      const auto w = wait_ready(fd, sending ? POLLOUT : POLLIN, deadline, halt, what);
      if (w != base::IoResult::ok) return w;
    } else {
      return errno == ECONNRESET || errno == EPIPE ? base::IoResult::closed : base::IoResult::error;
    }
  }
  return base::IoResult::ok;
}

}  // namespace

TcpTransport::TcpTransport(const Setup& setup, const std::string& route_hint)
    : store_(setup.store), rank_(setup.rank), job_token_(setup.token), link_(setup.link) {
  const int rank = setup.rank;
  const base::LinkConfig& link = setup.link;
  const base::Pacing& pacing = setup.pacing;
  // Without a route hint, "every rank on this host" is known only when the launcher says so.
  const bool single_host = pacing.local_world_size_given && pacing.local_world_size >= setup.size;
  std::string ip = choose_local_address(link.socket_ifname, route_hint, single_host);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0)
    throw PeerError(fmt::format("tcp: rank {}: socket: {}", rank, std::strerror(errno)));
  set_buffers(listen_fd_, link.socket_buffer_bytes);  // accepted sockets inherit the sizes
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
  handshakes_.clear();
  for (auto& [peer, fds] : accepted_)
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void TcpTransport::abort() {
  for (auto& [peer, conn] : connections_) conn->shutdown();
  handshakes_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

Connection& TcpTransport::connect(int peer, const base::Deadline& deadline,
                                  const base::Halt& halt) {
  if (auto it = connections_.find(peer); it != connections_.end()) return *it->second;
  const int n = link_.sockets_per_peer;
  std::string address;
  std::vector<int> fds;
  if (rank_ < peer) {
    // A top-level communicator's peers published theirs before the topology exchange, but a
    // child's (split, shrink) publish while they build it: wait for it as for a connection.
    const Bytes published =
        await_key(store_, store::keys::tcp_address(peer), deadline, halt, peer, 0,
                  fmt::format("tcp: rank {} (waiting for rank {}'s address)", rank_, peer));
    address.assign(published.begin(), published.end());
    try {
      for (int k = 0; k < n; ++k) fds.push_back(dial(peer, k, address, deadline, halt));
    } catch (...) {
      for (int fd : fds) ::close(fd);
      throw;
    }
  } else {
    accept_until(peer, deadline, halt);
    fds = std::move(accepted_[peer]);
    accepted_.erase(peer);
    address = base::peer_address(fds[0]);
  }
  // Frames read ahead wait in slot buffers for the engine: an eighth of the core's cache, the
  // share the cost model gives a slice (the core also holds the buffers reduced into).
  auto conn = std::make_unique<TcpConnection>(rank_, peer, std::move(fds), link_.slot_bytes(),
                                              link_.slots, base::core_cache_bytes() / 8, address);
  base::log().debug("connected: {}", conn->describe());
  return *(connections_[peer] = std::move(conn));
}

int TcpTransport::dial(int peer, int index, const std::string& address,
                       const base::Deadline& deadline, const base::Halt& halt) {
  const std::string what =
      fmt::format("tcp connect: rank {} -> rank {} at {}", rank_, peer, address);
  auto [host, port] = split_address(address);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &to.sin_addr) != 1)
    throw PeerError(fmt::format("{}: not an IPv4 address", what), peer);
  struct Socket {  // closed on every way out but success
    int fd;
    ~Socket() {
      if (fd >= 0) ::close(fd);
    }
  } socket{::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
  const int fd = socket.fd;
  if (fd < 0) throw PeerError(fmt::format("{}: socket: {}", what, std::strerror(errno)), peer);
  set_buffers(fd, link_.socket_buffer_bytes);
  auto fail = [&](const std::string& why) {
    return PeerError(fmt::format("{}: {}", what, why), peer);
  };
  auto timed_out = [&](const std::string& waiting_for) {
    return TimeoutError(
        fmt::format("{}: timed out waiting for {} (is rank {} alive and in the same collective?)",
                    what, waiting_for, peer));
  };
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    if (errno != EINPROGRESS) throw fail(std::strerror(errno));
    if (wait_ready(fd, POLLOUT, deadline, halt, what) == base::IoResult::timeout)
      throw timed_out("the connection");
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    // The peer listened before it published its address: a refusal means it is gone.
    if (err != 0)
      throw fail(fmt::format("{}{}", std::strerror(err),
                             err == ECONNREFUSED ? " (the peer is gone or has aborted)" : ""));
  }
  set_nodelay(fd);
  // The acceptor's challenge, then the hello with this side's response, then its proof.
  std::array<std::uint8_t, base::Challenge::kBytes> raw{};
  auto expect_ok = [&](base::IoResult r, const char* waiting_for, const std::string& why) {
    if (r == base::IoResult::timeout) throw timed_out(waiting_for);
    if (r != base::IoResult::ok) throw fail(why + base::describe(r));
  };
  expect_ok(transfer(fd, raw.data(), raw.size(), false, deadline, halt, what), "its challenge",
            "no challenge: ");
  auto challenge = base::Challenge::decode(raw.data(), raw.size());
  if (!challenge) throw fail("the peer's challenge is not Loom's");
  Hello hello{kHelloMagic, kHelloVersion, job_token_, rank_, peer, index, link_.sockets_per_peer};
  base::Handshake handshake("loom-data", link_.secret);
  const std::string_view context(reinterpret_cast<const char*>(&hello), sizeof(hello));
  auto reply = handshake.respond(*challenge, context);
  if (!reply.error.empty()) throw fail(reply.error);
  std::vector<std::uint8_t> message(sizeof(hello));
  std::memcpy(message.data(), &hello, sizeof(hello));
  message.insert(message.end(), reply.bytes.begin(), reply.bytes.end());
  expect_ok(transfer(fd, message.data(), message.size(), true, deadline, halt, what),
            "room to send the hello", "hello failed: ");
  std::vector<std::uint8_t> proof(handshake.proof_bytes());
  expect_ok(transfer(fd, proof.data(), proof.size(), false, deadline, halt, what), "its proof",
            "the peer rejected this rank's job secret: ");
  if (!handshake.verify_proof(proof.data(), proof.size(), context))
    throw fail("the peer does not know the job secret");
  socket.fd = -1;
  return fd;
}

void TcpTransport::accept_until(int peer, const base::Deadline& deadline, const base::Halt& halt) {
  auto complete = [&] {
    auto it = accepted_.find(peer);
    if (it == accepted_.end()) return false;
    for (int fd : it->second)
      if (fd < 0) return false;
    return true;
  };
  advance_handshakes();  // some may have finished while this rank was busy elsewhere
  std::vector<pollfd> fds;
  while (!complete()) {
    if (halt.triggered())
      halt.raise(fmt::format("tcp connect: rank {} (waiting for rank {} to connect)", rank_, peer));
    if (deadline.expired())
      throw TimeoutError(fmt::format(
          "tcp connect: rank {} timed out waiting for rank {} to connect (is rank {} alive and in "
          "the same collective?)",
          rank_, peer, peer));
    // A peer on this host that died before (or while) connecting never will.
    if (const int pid = static_cast<std::size_t>(peer) < pids_.size()
                            ? pids_[static_cast<std::size_t>(peer)]
                            : 0;
        pid > 0 && !base::process_alive(pid))
      throw PeerError(fmt::format("tcp connect: rank {} waiting for rank {} to connect: its "
                                  "process {} is gone (exited or crashed)",
                                  rank_, peer, pid),
                      peer);
    poll_handshakes(deadline.remaining_ms(kSetupPollMs), deadline, fds);
  }
}

void TcpTransport::serve_connecting_peers(int timeout_ms) {
  advance_handshakes();
  std::vector<pollfd> fds;
  poll_handshakes(timeout_ms, base::Deadline(kHelloBudget), fds);
}

void TcpTransport::poll_handshakes(int timeout_ms, const base::Deadline& deadline,
                                   std::vector<pollfd>& fds) {
  fds.clear();
  const bool listening = listen_fd_ >= 0 && Clock::now() >= accept_paused_until_;
  if (listening) fds.push_back(pollfd{listen_fd_, POLLIN, 0});
  for (const auto& h : handshakes_) fds.push_back(pollfd{h->fd(), h->events(), 0});
  ::poll(fds.data(), fds.size(), timeout_ms);  // with nothing to watch: a pause
  if (listening && (fds.front().revents & POLLIN)) accept_waiting(deadline);
  advance_handshakes();
}

void TcpTransport::accept_waiting(const base::Deadline& deadline) {
  for (std::size_t taken = 0; taken < kMaxHandshakes; ++taken) {
    if (handshakes_.size() >= kMaxHandshakes) {
      // The oldest has had the longest to answer; while it is young, the rest wait their turn
      // in the backlog (a burst of genuine peers), once old it is most likely silent.
      if (const auto free_at = handshakes_.front()->started() + kSilentAfter;
          Clock::now() < free_at) {
        accept_paused_until_ = free_at;
        return;
      }
      reject(*handshakes_.front(), fmt::format("more than {} handshakes at once", kMaxHandshakes));
      handshakes_.erase(handshakes_.begin());
    }
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accept_paused_until_ = Clock::now() + kAcceptPause;
        warn_limited(fmt::format("tcp: rank {} cannot accept connections for now: {}", rank_,
                                 std::strerror(errno)));
      }
      return;  // EAGAIN: nothing more is waiting
    }
    set_nodelay(fd);
    const auto budget = std::min<std::chrono::milliseconds>(
        kHelloBudget, std::chrono::milliseconds(deadline.remaining_ms(kHelloBudget.count())));
    handshakes_.push_back(
        std::make_unique<AcceptingHandshake>(fd, link_.secret, Clock::now() + budget));
  }
}

void TcpTransport::advance_handshakes() {
  const HelloExpected expected{job_token_, rank_, link_.sockets_per_peer};
  const auto now = Clock::now();
  std::erase_if(handshakes_, [&](const std::unique_ptr<AcceptingHandshake>& h) {
    switch (h->advance(expected)) {
      case AcceptingHandshake::Step::done: {
        const Hello& hello = h->hello();
        auto& slots = accepted_[hello.from];
        slots.resize(static_cast<std::size_t>(link_.sockets_per_peer), -1);
        if (slots[hello.index] >= 0) ::close(slots[hello.index]);
        slots[hello.index] = h->release();
        return true;
      }
      case AcceptingHandshake::Step::refused:
        reject(*h, h->why());
        return true;
      case AcceptingHandshake::Step::waiting:
        if (now < h->expires()) return false;
        reject(*h, fmt::format("no hello within {} ms",
                               std::chrono::duration_cast<std::chrono::milliseconds>(h->expires() -
                                                                                     h->started())
                                   .count()));
        return true;
    }
    return false;
  });
}

void TcpTransport::reject(const AcceptingHandshake& handshake, const std::string& why) {
  warn_limited(fmt::format("tcp: rank {} rejected a connection from {}: {}", rank_,
                           base::peer_address(handshake.fd()), why));
}

void TcpTransport::warn_limited(const std::string& message) {
  const auto now = Clock::now();
  if (now < next_warning_) {
    ++unreported_warnings_;
    base::log().debug("{}", message);
    return;
  }
  base::log().warn("{}{}", message,
                   unreported_warnings_ == 0
                       ? std::string()
                       : fmt::format(" ({} more since the last warning)", unreported_warnings_));
  unreported_warnings_ = 0;
  next_warning_ = now + kWarningPeriod;
}

}  // namespace loom::transport::tcp
