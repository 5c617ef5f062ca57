// The transport of each peer: shared memory for ranks on this host, InfiniBand verbs for ranks
// on other hosts when both ends have an RDMA port, TCP for the rest (LOOM_TRANSPORT,
// LOOM_SHM_DISABLE and LOOM_IB_DISABLE narrow this); for calls on GPU buffers, CUDA IPC where
// shared memory would serve. The engine sees one Transport.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "transports/transport.hpp"

namespace loom::transport {

class TransportTable final : public Transport {
 public:
  TransportTable(std::unique_ptr<Transport> tcp, std::unique_ptr<Transport> shm,
                 std::vector<bool> shm_peers)
      : tcp_(std::move(tcp)), shm_(std::move(shm)), shm_peers_(std::move(shm_peers)) {
    if (shm_) shm_->set_connect_wait(serve_tcp());
  }
  TransportKind kind_to(int peer) const override { return route(peer).kind_to(peer); }
  // RDMA for the peers on other hosts that it reaches (both ends have a port).
  void set_rdma_transport(std::unique_ptr<Transport> rdma, std::vector<bool> rdma_peers) {
    rdma_ = std::move(rdma);
    rdma_peers_ = std::move(rdma_peers);
  }
  Connection& connect(int peer, const base::Deadline& deadline, const base::Halt& halt) override {
    return route(peer).connect(peer, deadline, halt);
  }
  // Device-memory connections for the peers shared memory reaches (CUDA IPC), when available.
  void set_device_transport(std::unique_ptr<Transport> device) {
    device_ = std::move(device);
    device_->set_connect_wait(serve_tcp());
  }
  Connection& connect_device(int peer, const base::Deadline& deadline,
                             const base::Halt& halt) override {
    return device_ && shm_peers_[static_cast<std::size_t>(peer)]
               ? device_->connect(peer, deadline, halt)
               : connect(peer, deadline, halt);
  }
  void serve_connecting_peers(int timeout_ms) override { tcp_->serve_connecting_peers(timeout_ms); }
  void abort() override {
    tcp_->abort();
    if (shm_) shm_->abort();
    if (device_) device_->abort();
    if (rdma_) rdma_->abort();
  }

 private:
  // The transport that reaches peer for calls on host buffers.
  Transport& route(int peer) const {
    const auto p = static_cast<std::size_t>(peer);
    if (shm_peers_[p]) return *shm_;
    if (rdma_ && rdma_peers_[p]) return *rdma_;
    return *tcp_;
  }

  // The pause of a connect waiting for a same-host peer: TCP peers connecting to this rank move.
  std::function<void(int)> serve_tcp() {
    return [this](int timeout_ms) { tcp_->serve_connecting_peers(timeout_ms); };
  }

  std::unique_ptr<Transport> tcp_;
  std::unique_ptr<Transport> shm_;
  std::unique_ptr<Transport> device_;
  std::unique_ptr<Transport> rdma_;
  std::vector<bool> shm_peers_;
  std::vector<bool> rdma_peers_;
};

}  // namespace loom::transport
