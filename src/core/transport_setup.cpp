// The communicator's side of its transports (core/transport_bundle.hpp makes them): its
// topology exchange between the bundle's two steps, the selection inputs its topology gives, and
// how it describes its peers.
#include <algorithm>

#include <fmt/format.h>

#include "base/cpu_cache.hpp"
#include "base/logging.hpp"
#include "core/communicator_impl.hpp"
#include "core/machine_probe.hpp"
#include "core/transport_bundle.hpp"
#include "store/keys.hpp"

namespace loom {

// A communicator made by split() has its parent's topology already: it skips the exchange.
void Communicator::Impl::build_transports() {
  const bool child = !parent_ranks_.empty();
  // A child knows its hosts: where they are one, TCP may listen on loopback, else on the
  // parent's interface. The parent's LOCAL_WORLD_SIZE (its ranks on this host) would call a child
  // spanning hosts with no more ranks than that one host's.
  if (child) {
    config_.pacing.set_local_world_size(topology_.ranks_on_host_of(rank_));
    config_.pacing.local_world_size_given = true;
  }
  // RDMA is opened before the topology exchange, so that a port is advertised only when it
  // works here. A child opens it with its own token (its members derive theirs).
  core::TransportBundle bundle({*store_, rank_, size_, token_, route_hint_}, config_);
  listen_address_ = bundle.listen_address();
  // A child's peers take the RDMA ports its parent advertised: a member that cannot open its own
  // fails its part of the child (its peers learn so at once) rather than reach them by TCP while
  // they wait for it on RDMA.
  if (child && !bundle.has_rdma() && topology_.rdma_of_rank[static_cast<std::size_t>(rank_)] != "-")
    for (int r = 0; r < size_; ++r)
      if (!topology_.same_host(rank_, r) &&
          topology_.rdma_of_rank[static_cast<std::size_t>(r)] != "-")
        throw Error(fmt::format("{}: the parent reached other hosts by RDMA; the child cannot: {}",
                                who(rank_), bundle.rdma_why()));
  if (!child) {
    // Measured before the exchange, so that every rank models the same machine. TCP loopback
    // only matters when TCP runs within a host, which LOOM_TRANSPORT=tcp alone asks for.
    algorithms::MachineRates rates;
    if (size_ > 1 && config_.selection.probe_budget.count() > 0)
      rates = core::probe_machine(config_.selection.probe_budget, config_.transport == "tcp");
    // Rank 0's table decides for every rank (it travels in its topology record).
    topology_ =
        core::exchange_topology(*store_, rank_, size_, config_.timeout, config_.failure.worker_id,
                                bundle.rdma_port(), rates, config_.selection.tuning_file);
  }
  // The spinning policy follows the ranks that really share this host's cores.
  config_.pacing.set_local_world_size(topology_.ranks_on_host_of(rank_));
  config_.pacing.any_host_oversubscribed = topology_.any_host_oversubscribed();
  core::TransportBundle::Finished made = bundle.finish(topology_, config_);
  log_rdma_choice(bundle.rdma_port(), bundle.rdma_why());
  ipc_ = made.ipc;
  transport_ = std::move(made.table);
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
