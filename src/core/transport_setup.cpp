// Which transport reaches each peer: shared memory on this host, RDMA to hosts where both ends
// have a port, TCP to the rest, CUDA IPC for device buffers of same-host peers.
#include <algorithm>

#include <fmt/format.h>

#include "base/cpu_cache.hpp"
#include "base/logging.hpp"
#include "core/communicator_impl.hpp"
#include "core/machine_probe.hpp"
#include "core/rdma_factory.hpp"
#include "store/keys.hpp"
#include "transports/shm/shm_transport.hpp"
#include "transports/tcp/tcp_transport.hpp"

namespace loom {

// A communicator made by split() has its parent's topology already: it skips the exchange.
void Communicator::Impl::build_transports() {
  const bool child = !parent_ranks_.empty();
  const std::uint64_t token = token_;
  // A child knows its hosts: where they are one, TCP may listen on loopback, else on the
  // parent's interface. The parent's LOCAL_WORLD_SIZE (its ranks on this host) would call a child
  // spanning hosts with no more ranks than that one host's.
  if (child) {
    config_.pacing.set_local_world_size(topology_.ranks_on_host_of(rank_));
    config_.pacing.local_world_size_given = true;
  }
  auto tcp = std::make_unique<transport::tcp::TcpTransport>(
      *store_, rank_, size_, token, config_.link, config_.pacing, route_hint_);
  listen_address_ = tcp->listen_address();
  transport::tcp::TcpTransport& tcp_transport = *tcp;
  // RDMA is opened before the topology exchange, so that a port is advertised only when it
  // works here; the peers on other hosts that advertise one too are reached through it.
  // A child opens it with its own token (it has no job token in the store: its members derive
  // theirs).
  std::unique_ptr<transport::Transport> rdma;
  std::string rdma_port = "-", rdma_why = "LOOM_TRANSPORT=" + config_.transport;
  if (size_ > 1 && config_.transport == "auto") {
    const core::RdmaFactory factory = core::rdma_factory();
    if (auto port = factory.choose_port(rdma_why)) {
      try {
        rdma = factory.make(*store_, rank_, config_.link, *port, token);
        rdma_port =
            fmt::format("{}:{}:{}", port->device, port->port, port->ethernet ? "roce" : "ib");
        rdma_why = port->describe();
      } catch (const Error& e) {
        rdma_why = e.what();
      }
    }
  }
  // A child's peers take the RDMA ports its parent advertised: a member that cannot open its own
  // fails its part of the child (its peers learn so at once) rather than reach them by TCP while
  // they wait for it on RDMA.
  if (child && !rdma && topology_.rdma_of_rank[static_cast<std::size_t>(rank_)] != "-")
    for (int r = 0; r < size_; ++r)
      if (!topology_.same_host(rank_, r) &&
          topology_.rdma_of_rank[static_cast<std::size_t>(r)] != "-")
        throw Error(fmt::format("{}: the parent reached other hosts by RDMA; the child cannot: {}",
                                who(rank_), rdma_why));
  if (!child) {
    // Measured before the exchange, so that every rank models the same machine. TCP loopback
    // only matters when TCP runs within a host, which LOOM_TRANSPORT=tcp alone asks for.
    algorithms::MachineRates rates;
    if (size_ > 1 && config_.selection.probe_budget.count() > 0)
      rates = core::probe_machine(config_.selection.probe_budget, config_.transport == "tcp");
    // Rank 0's table decides for every rank (it travels in its topology record).
    topology_ =
        core::exchange_topology(*store_, rank_, size_, config_.timeout, config_.failure.worker_id,
                                rdma_port, rates, config_.selection.tuning_file);
  }
  std::vector<int> local_pids(static_cast<std::size_t>(size_), 0);
  for (int r = 0; r < size_; ++r)
    if (topology_.same_host(rank_, r))
      local_pids[static_cast<std::size_t>(r)] = topology_.pid_of_rank[static_cast<std::size_t>(r)];
  tcp_transport.set_peer_pids(std::move(local_pids));
  // The spinning policy follows the ranks that really share this host's cores.
  config_.pacing.set_local_world_size(topology_.ranks_on_host_of(rank_));
  config_.pacing.any_host_oversubscribed = topology_.any_host_oversubscribed();
  std::vector<bool> shm_peers(static_cast<std::size_t>(size_), false);
  for (int r = 0; r < size_; ++r) {
    const bool local = r != rank_ && topology_.same_host(rank_, r);
    if (config_.transport == "shm" && r != rank_ && !local)
      throw InvalidArgument(fmt::format(
          "init: rank {}: LOOM_TRANSPORT=shm but rank {} is on another host", rank_, r));
    shm_peers[static_cast<std::size_t>(r)] = local && config_.transport != "tcp";
  }
  const bool any_shm = std::find(shm_peers.begin(), shm_peers.end(), true) != shm_peers.end();
  std::unique_ptr<transport::Transport> shm;
  if (any_shm)
    shm = std::make_unique<transport::shm::ShmTransport>(*store_, rank_, token, config_.link,
                                                         config_.pacing, topology_.pid_of_rank);
  auto table =
      std::make_unique<transport::TransportTable>(std::move(tcp), std::move(shm), shm_peers);
  log_rdma_choice(rdma_port, rdma_why);
  if (rdma) {
    std::vector<bool> rdma_peers(static_cast<std::size_t>(size_), false);
    const std::string link = rdma_port.substr(rdma_port.rfind(':'));
    for (int r = 0; r < size_; ++r) {
      const std::string& theirs = topology_.rdma_of_rank[static_cast<std::size_t>(r)];
      rdma_peers[static_cast<std::size_t>(r)] = r != rank_ && !topology_.same_host(rank_, r) &&
                                                theirs != "-" &&
                                                theirs.substr(theirs.rfind(':')) == link;
    }
    table->set_rdma_transport(std::move(rdma), std::move(rdma_peers));
  }
  // Device buffers of same-host peers: CUDA IPC, when this build and machine have CUDA.
  if (config_.link.cuda_ipc && any_shm)
    if (auto ipc =
            transport::cudaipc::make_transport(*store_, rank_, token, config_.link, config_.pacing,
                                               topology_.pid_of_rank, shm_peers)) {
      ipc_ = ipc.get();
      table->set_device_transport(std::move(ipc));
    }
  transport_ = std::move(table);
  transport_summary_ = describe_peers();
}

// The links between ranks as the algorithm choice sees them: derived from the topology, so the
// same on every rank.
algorithms::SelectionInputs Communicator::Impl::selection_inputs() const {
  using transport::TransportKind;
  algorithms::SelectionInputs in;
  in.size = size_;
  in.hosts = topology_.ranks_by_host();
  in.local = config_.transport == "tcp" ? TransportKind::tcp : TransportKind::shm;
  // RDMA between hosts only where every pair of ranks on different hosts has it.
  bool rdma_everywhere = config_.transport == "auto";
  const auto link_of = [&](int r) {
    const std::string& port = topology_.rdma_of_rank[static_cast<std::size_t>(r)];
    return port == "-" ? std::string() : port.substr(port.rfind(':'));
  };
  for (int a = 0; a < size_ && rdma_everywhere; ++a)
    for (int b = a + 1; b < size_; ++b)
      if (!topology_.same_host(a, b) && (link_of(a).empty() || link_of(a) != link_of(b)))
        rdma_everywhere = false;
  in.remote = rdma_everywhere ? TransportKind::ibverbs : TransportKind::tcp;
  in.costs = algorithms::CostModel::measured(topology_.machine_rates(), in.hosts.size() == 1);
  in.slot_bytes = config_.link.slot_bytes();
  in.slots = config_.link.slots;
  in.ranks_per_core = topology_.ranks_per_core();
  in.cores = topology_.fewest_cores();
  in.reads_peers = std::all_of(topology_.reads_peers_of_rank.begin(),
                               topology_.reads_peers_of_rank.end(), [](bool b) { return b; });
  in.cache_bytes = base::last_level_cache_bytes();
  in.overrides = config_.selection.algorithm;
  // The tuning table's entry for this transport and shape, if rank 0 read one.
  const auto [transport, shape] = tuning_key(in);
  for (const core::TuningEntry& e : topology_.tuning)
    if (e.transport == transport && e.shape == shape) in.tuned = e.rules;
  in.tuned_from = topology_.tuning_from;
  return in;
}

std::pair<std::string, std::string> Communicator::Impl::tuning_key(
    const algorithms::SelectionInputs& in) {
  std::string transport = std::string(transport::to_string(in.local));
  if (!in.one_host()) transport += fmt::format("+{}", transport::to_string(in.remote));
  return {transport, core::job_shape(in.hosts)};
}

// "shm to rank(s) 1,2, tcp to rank(s) 3" for logs and describe().
std::string Communicator::Impl::describe_peers() const {
  const transport::TransportTable& table = *transport_;
  std::vector<std::string> parts;
  using transport::TransportKind;
  for (TransportKind kind : {TransportKind::shm, TransportKind::ibverbs, TransportKind::tcp}) {
    std::vector<int> ranks;
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && table.kind_to(r) == kind) ranks.push_back(r);
    if (!ranks.empty())
      parts.push_back(
          fmt::format("{} to rank(s) {}", transport::to_string(kind), fmt::join(ranks, ",")));
  }
  return parts.empty() ? "no peers" : fmt::format("{}", fmt::join(parts, ", "));
}

// Why the ranks on other hosts are reached by RDMA or by TCP, once, at INFO.
void Communicator::Impl::log_rdma_choice(const std::string& mine, const std::string& why) const {
  std::vector<int> remote, without;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || topology_.same_host(rank_, r)) continue;
    remote.push_back(r);
    if (topology_.rdma_of_rank[static_cast<std::size_t>(r)] == "-") without.push_back(r);
  }
  if (remote.empty()) {
    base::log().debug("rank {}: no rank on another host; ibverbs: {}", rank_, why);
  } else if (mine == "-") {
    base::log().info("rank {}: ibverbs unavailable ({}): TCP to the {} rank(s) on other hosts",
                     rank_, why, remote.size());
  } else if (!without.empty()) {
    base::log().info("rank {}: ibverbs on {}; rank(s) {} have no RDMA port: TCP to them", rank_,
                     why, fmt::join(without, ","));
  } else {
    base::log().info("rank {}: ibverbs on {} to the {} rank(s) on other hosts", rank_, why,
                     remote.size());
  }
}

}  // namespace loom
