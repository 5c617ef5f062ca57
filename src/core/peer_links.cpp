#include "core/peer_links.hpp"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/cpu_cache.hpp"
#include "base/logging.hpp"

namespace loom::core {

std::string host_name() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

// The links between ranks as the algorithm choice sees them: derived from the topology, so the
// same on every rank.
algorithms::SelectionInputs selection_inputs(const Topology& topology, const base::Config& config,
                                             int size) {
  using transport::TransportKind;
  algorithms::SelectionInputs in;
  in.size = size;
  in.hosts = topology.ranks_by_host();
  in.local = config.transport == "tcp" ? TransportKind::tcp : TransportKind::shm;
  // RDMA between hosts only where every pair of ranks on different hosts has it.
  bool rdma_everywhere = config.transport == "auto";
  const auto link_of = [&](int r) {
    const std::string& port = topology.rdma_of_rank[static_cast<std::size_t>(r)];
    return port == "-" ? std::string() : port.substr(port.rfind(':'));
  };
  for (int a = 0; a < size && rdma_everywhere; ++a)
    for (int b = a + 1; b < size; ++b)
      if (!topology.same_host(a, b) && (link_of(a).empty() || link_of(a) != link_of(b)))
        rdma_everywhere = false;
  in.remote = rdma_everywhere ? TransportKind::ibverbs : TransportKind::tcp;
  in.costs = algorithms::CostModel::measured(topology.machine_rates(), in.hosts.size() == 1);
  in.slot_bytes = config.link.slot_bytes();
  in.slots = config.link.slots;
  in.ranks_per_core = topology.ranks_per_core();
  in.cores = topology.fewest_cores();
  in.reads_peers = std::all_of(topology.reads_peers_of_rank.begin(),
                               topology.reads_peers_of_rank.end(), [](bool b) { return b; });
  in.cache_bytes = base::last_level_cache_bytes();
  in.overrides = config.selection.algorithm;
  in.trials = config.selection.trials;
  // The tuning table's entry for this transport and shape, if rank 0 read one.
  const auto [transport, shape] = tuning_key(in);
  for (const core::TuningEntry& e : topology.tuning)
    if (e.transport == transport && e.shape == shape) in.tuned = e.rules;
  in.tuned_from = topology.tuning_from;
  return in;
}

std::pair<std::string, std::string> tuning_key(const algorithms::SelectionInputs& in) {
  std::string transport = std::string(transport::to_string(in.local));
  if (!in.one_host()) transport += fmt::format("+{}", transport::to_string(in.remote));
  return {transport, job_shape(in.hosts)};
}

// "shm to rank(s) 1,2, tcp to rank(s) 3" for logs and describe().
std::string describe_peers(const transport::TransportTable& table, int rank, int size) {
  std::vector<std::string> parts;
  using transport::TransportKind;
  for (TransportKind kind : {TransportKind::shm, TransportKind::ibverbs, TransportKind::tcp}) {
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r)
      if (r != rank && table.kind_to(r) == kind) ranks.push_back(r);
    if (!ranks.empty())
      parts.push_back(
          fmt::format("{} to rank(s) {}", transport::to_string(kind), fmt::join(ranks, ",")));
  }
  return parts.empty() ? "no peers" : fmt::format("{}", fmt::join(parts, ", "));
}

// Why the ranks on other hosts are reached by RDMA or by TCP, once, at INFO.
void log_rdma_choice(const Topology& topology, int rank, int size, const std::string& mine,
                     const std::string& why) {
  std::vector<int> remote, without;
  for (int r = 0; r < size; ++r) {
    if (r == rank || topology.same_host(rank, r)) continue;
    remote.push_back(r);
    if (topology.rdma_of_rank[static_cast<std::size_t>(r)] == "-") without.push_back(r);
  }
  if (remote.empty()) {
    base::log().debug("rank {}: no rank on another host; ibverbs: {}", rank, why);
  } else if (mine == "-") {
    base::log().info("rank {}: ibverbs unavailable ({}): TCP to the {} rank(s) on other hosts",
                     rank, why, remote.size());
  } else if (!without.empty()) {
    base::log().info("rank {}: ibverbs on {}; rank(s) {} have no RDMA port: TCP to them", rank, why,
                     fmt::join(without, ","));
  } else {
    base::log().info("rank {}: ibverbs on {} to the {} rank(s) on other hosts", rank, why,
                     remote.size());
  }
}

}  // namespace loom::core
