// A communicator's transports, made by one factory in two steps around the topology exchange:
//   open     TCP listens (its address goes into the exchange), and RDMA opens where a port works
//            here (the exchange advertises it only then);
//   finish   with every rank's host and port known: shared memory to the peers on this host,
//            RDMA to the peers on other hosts whose port is on the same link, CUDA IPC for device
//            buffers of same-host peers, TCP to the rest; the routes as a TransportTable.
// Each transport is made the same way (transports/setup.hpp): the store (for its addresses), the
// rank and size, the job token (names this communicator's connections), the link settings and the
// pacing, and what that transport needs besides.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/config.hpp"
#include "core/topology.hpp"
#include "loom/store.hpp"
#include "transports/cudaipc/cudaipc.hpp"
#include "transports/tcp/tcp_transport.hpp"
#include "transports/transport_table.hpp"

namespace loom::core {

class TransportBundle {
 public:
  struct Setting {
    Store& store;
    int rank;
    int size;
    std::uint64_t token;
    // What the tcp transport listens on: the store's host, so that peers reach it as they reach
    // the store.
    std::string route_hint;
  };
  // Opens TCP, and RDMA when LOOM_TRANSPORT=auto and a port works (else says why not).
  TransportBundle(const Setting& setting, const base::Config& config);

  const std::string& listen_address() const { return listen_address_; }
  // "device:port:ib|roce", or "-" without RDMA; and why (the port chosen, or what failed).
  const std::string& rdma_port() const { return rdma_port_; }
  const std::string& rdma_why() const { return rdma_why_; }
  bool has_rdma() const { return rdma_ != nullptr; }

  struct Finished {
    std::unique_ptr<transport::TransportTable> table;
    transport::cudaipc::IpcTransport* ipc = nullptr;  // owned by the table; null: none
  };
  // The routes, from the topology; InvalidArgument when LOOM_TRANSPORT=shm meets a rank on
  // another host. Once.
  Finished finish(const Topology& topology, const base::Config& config);

 private:
  transport::Setup setup(const base::Config& config) const {
    return {s_.store, s_.rank, s_.size, s_.token, config.link, config.pacing};
  }

  Setting s_;
  std::unique_ptr<transport::tcp::TcpTransport> tcp_;
  std::unique_ptr<transport::Transport> rdma_;
  std::string listen_address_;
  std::string rdma_port_ = "-";
  std::string rdma_why_;
};

}  // namespace loom::core
