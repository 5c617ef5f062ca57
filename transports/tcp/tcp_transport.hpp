// TCP transport: each rank listens on one socket, publishes "ip:port" in the store, and sets up
// connections to peers on first use. The lower rank connects, the higher accepts; a hello
// message carrying the job token and both ranks authenticates each socket's purpose.
#pragma once

#include <map>
#include <memory>

#include "base/config.hpp"
#include "loom/store.hpp"
#include "transports/tcp/tcp_connection.hpp"

namespace loom::transport::tcp {

class TcpTransport final : public Transport {
 public:
  // Binds the listener and publishes its address (store::keys::tcp_address).
  TcpTransport(Store& store, int rank, int size, std::uint64_t job_token,
               const base::Config& config, const std::string& route_hint);
  ~TcpTransport() override;

  TransportKind kind_to(int) const override { return TransportKind::tcp; }
  Connection& connect(int peer, const base::Deadline& deadline) override;
  void abort() override;
  const std::string& listen_address() const { return listen_address_; }

 private:
  struct Hello;
  int dial(int peer, int index, const std::string& address, const base::Deadline& deadline);
  void accept_until(int peer, const base::Deadline& deadline);
  std::string handshake_accepted(int fd, Hello& hello);

  Store& store_;
  int rank_;
  std::uint64_t job_token_;
  base::Config config_;
  int listen_fd_ = -1;
  std::string listen_address_;
  std::map<int, std::unique_ptr<TcpConnection>> connections_;
  std::map<int, std::vector<int>> accepted_;  // peer -> fds by socket index (-1: not yet)
};

// The local IPv4 address to listen on: the interface named by `ifname` (exact name or prefix),
// else the one that routes to `route_hint`, else loopback when every rank is on this host, else
// the first non-loopback interface.
std::string choose_local_address(const std::string& ifname, const std::string& route_hint,
                                 bool single_host);

}  // namespace loom::transport::tcp
