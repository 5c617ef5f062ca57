#include "core/transport_bundle.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/rdma_factory.hpp"
#include "transports/shm/shm_transport.hpp"

namespace loom::core {

TransportBundle::TransportBundle(const Setting& setting, const base::Config& config)
    : s_(setting), rdma_why_("LOOM_TRANSPORT=" + config.transport) {
  tcp_ = std::make_unique<transport::tcp::TcpTransport>(setup(config), s_.route_hint);
  listen_address_ = tcp_->listen_address();
  if (s_.size <= 1 || config.transport != "auto") return;
  const RdmaFactory factory = rdma_factory();
  if (auto port = factory.choose_port(rdma_why_)) {
    try {
      rdma_ = factory.make(setup(config), *port);
      rdma_port_ =
          fmt::format("{}:{}:{}", port->device, port->port, port->ethernet ? "roce" : "ib");
      rdma_why_ = port->describe();
    } catch (const Error& e) {
      rdma_why_ = e.what();
    }
  }
}

TransportBundle::Finished TransportBundle::finish(const Topology& topology,
                                                  const base::Config& config) {
  const auto n = static_cast<std::size_t>(s_.size);
  std::vector<int> local_pids(n, 0);
  std::vector<bool> shm_peers(n, false);
  for (int r = 0; r < s_.size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const bool local = r != s_.rank && topology.same_host(s_.rank, r);
    if (topology.same_host(s_.rank, r)) local_pids[i] = topology.pid_of_rank[i];
    if (config.transport == "shm" && r != s_.rank && !local)
      throw InvalidArgument(fmt::format(
          "init: rank {}: LOOM_TRANSPORT=shm but rank {} is on another host", s_.rank, r));
    shm_peers[i] = local && config.transport != "tcp";
  }
  tcp_->set_peer_pids(std::move(local_pids));
  const bool any_shm = std::find(shm_peers.begin(), shm_peers.end(), true) != shm_peers.end();

  using Route = transport::TransportTable::Route;
  using Buffers = transport::TransportTable::Buffers;
  std::vector<Route> routes;
  if (any_shm)
    routes.push_back(
        {std::make_unique<transport::shm::ShmTransport>(setup(config), topology.pid_of_rank),
         shm_peers, Buffers::host});
  if (rdma_) {
    // The peers on other hosts whose port is on the same kind of link (ib or roce) as this one's.
    std::vector<bool> rdma_peers(n, false);
    const std::string link = rdma_port_.substr(rdma_port_.rfind(':'));
    for (int r = 0; r < s_.size; ++r) {
      const std::string& theirs = topology.rdma_of_rank[static_cast<std::size_t>(r)];
      rdma_peers[static_cast<std::size_t>(r)] = r != s_.rank && !topology.same_host(s_.rank, r) &&
                                                theirs != "-" &&
                                                theirs.substr(theirs.rfind(':')) == link;
    }
    routes.push_back({std::move(rdma_), std::move(rdma_peers), Buffers::host});
  }
  Finished done;
  // Device buffers of same-host peers: CUDA IPC, when this build and machine have CUDA.
  if (config.link.cuda_ipc && any_shm)
    if (auto ipc =
            transport::cudaipc::make_transport(setup(config), topology.pid_of_rank, shm_peers)) {
      done.ipc = ipc.get();
      routes.push_back({std::move(ipc), shm_peers, Buffers::device});
    }
  done.table = std::make_unique<transport::TransportTable>(std::move(tcp_), std::move(routes));
  return done;
}

}  // namespace loom::core
