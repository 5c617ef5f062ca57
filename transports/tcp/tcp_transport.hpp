// TCP transport: each rank listens on one socket, publishes "ip:port" in the store, and sets up
// connections to peers on first use. The lower rank connects, the higher accepts; a hello
// message carrying the job token and both ranks authenticates each socket's purpose.
#pragma once

#include <chrono>
#include <map>
#include <memory>

#include "base/config.hpp"
#include "loom/store.hpp"
#include "transports/setup.hpp"
#include "transports/tcp/handshake.hpp"
#include "transports/tcp/tcp_connection.hpp"

namespace loom::transport::tcp {

// A client has this long after its connection is accepted to send its hello (less when the
// call's deadline is nearer): a genuine peer sends it at once.
inline constexpr std::chrono::milliseconds kHelloBudget{1000};
// Handshakes under way at once; beyond them a new connection waits in the backlog, or takes the
// place of the oldest once that one has had a fair time to answer.
inline constexpr std::size_t kMaxHandshakes = 64;

class TcpTransport final : public Transport {
 public:
  // Binds the listener and publishes its address (store::keys::tcp_address).
  // route_hint: the store's host, so that peers reach this rank as they reach the store.
  TcpTransport(const Setup& setup, const std::string& route_hint);
  ~TcpTransport() override;

  TransportKind kind_to(int) const override { return TransportKind::tcp; }
  Connection& connect(int peer, const base::Deadline& deadline, const base::Halt& halt) override;
  // Also closes the listener: a peer that has not connected yet is refused at once.
  void abort() override;
  void serve_connecting_peers(int timeout_ms) override;
  const std::string& listen_address() const { return listen_address_; }
  // By rank, the pid of each peer on this host (0: elsewhere or unknown), once the topology is
  // known: a wait for a peer to connect ends as soon as its process is gone.
  void set_peer_pids(std::vector<int> pids) { pids_ = std::move(pids); }

 private:
  using Clock = std::chrono::steady_clock;
  int dial(int peer, int index, const std::string& address, const base::Deadline& deadline,
           const base::Halt& halt);
  void accept_until(int peer, const base::Deadline& deadline, const base::Halt& halt);
  // One wait of up to `timeout_ms` on the listener and the handshakes under way, then accepts
  // what waits (its hellos due by `deadline`) and moves every handshake. `fds`: scratch.
  void poll_handshakes(int timeout_ms, const base::Deadline& deadline, std::vector<pollfd>& fds);
  // Takes every connection waiting on the listener into a handshake.
  void accept_waiting(const base::Deadline& deadline);
  // Moves every handshake; those done join accepted_, the refused and the late are closed.
  void advance_handshakes();
  void reject(const AcceptingHandshake& handshake, const std::string& why);
  // One WARN per period at most (the rest at DEBUG): a flood of bad connections must not flood
  // the log.
  void warn_limited(const std::string& message);

  Store& store_;
  int rank_;
  std::uint64_t job_token_;
  base::LinkConfig link_;
  int listen_fd_ = -1;
  std::string listen_address_;
  std::map<int, std::unique_ptr<TcpConnection>> connections_;
  std::map<int, std::vector<int>> accepted_;  // peer -> fds by socket index (-1: not yet)
  std::vector<std::unique_ptr<AcceptingHandshake>> handshakes_;  // oldest first
  Clock::time_point accept_paused_until_{};  // out of descriptors: accept later, do not spin
  Clock::time_point next_warning_{};
  int unreported_warnings_ = 0;
  std::vector<int> pids_;
};

// The local IPv4 address to listen on: the interface named by `ifname` (exact name or prefix),
// else the one that routes to `route_hint`, else loopback when every rank is known to be on
// this host, else the first non-loopback interface (loopback when there is none).
std::string choose_local_address(const std::string& ifname, const std::string& route_hint,
                                 bool single_host);

}  // namespace loom::transport::tcp
