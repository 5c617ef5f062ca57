// Which transport reaches each peer, as a list in order of preference: the first route whose
// reach includes a peer carries that peer's calls (NCCL's canConnect, in one place). TCP comes
// last and reaches every peer; while another transport waits for a peer to connect, TCP serves
// the peers connecting to this rank. Routes for device buffers (CUDA IPC) are asked first for
// calls on GPU memory; a peer none of them reaches takes its host route (slots staged). The
// engine sees one Transport. Built by core::TransportBundle.
#pragma once

#include <memory>
#include <vector>

#include "transports/transport.hpp"

namespace loom::transport {

class TransportTable final : public Transport {
 public:
  enum class Buffers : bool { host, device };
  struct Route {
    std::unique_ptr<Transport> transport;
    std::vector<bool> reaches;  // by rank
    Buffers buffers = Buffers::host;
  };

  // `routes`: ahead of `tcp`, in order of preference.
  TransportTable(std::unique_ptr<Transport> tcp, std::vector<Route> routes)
      : tcp_(std::move(tcp)), routes_(std::move(routes)) {
    for (Route& r : routes_)
      r.transport->set_connect_wait(
          [this](int timeout_ms) { tcp_->serve_connecting_peers(timeout_ms); });
  }
  TransportKind kind_to(int peer) const override {
    return route(peer, Buffers::host).kind_to(peer);
  }
  Connection& connect(int peer, const base::Deadline& deadline, const base::Halt& halt) override {
    return route(peer, Buffers::host).connect(peer, deadline, halt);
  }
  Connection& connect_device(int peer, const base::Deadline& deadline,
                             const base::Halt& halt) override {
    return route(peer, Buffers::device).connect(peer, deadline, halt);
  }
  void serve_connecting_peers(int timeout_ms) override { tcp_->serve_connecting_peers(timeout_ms); }
  void abort() override {
    tcp_->abort();
    for (Route& r : routes_) r.transport->abort();
  }

 private:
  // The transport that reaches `peer` for calls on `buffers`: a device route first for device
  // buffers, then the host routes, then TCP.
  Transport& route(int peer, Buffers buffers) const {
    const auto p = static_cast<std::size_t>(peer);
    if (buffers == Buffers::device)
      for (const Route& r : routes_)
        if (r.buffers == Buffers::device && r.reaches[p]) return *r.transport;
    for (const Route& r : routes_)
      if (r.buffers == Buffers::host && r.reaches[p]) return *r.transport;
    return *tcp_;
  }

  std::unique_ptr<Transport> tcp_;
  std::vector<Route> routes_;
};

}  // namespace loom::transport
