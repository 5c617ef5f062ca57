// Which ranks share a host. Processes in different network or mount namespaces of one machine
// count as different hosts: they cannot be assumed to share /dev/shm or loopback.
#pragma once

#include <string>
#include <vector>

#include "algorithms/selection.hpp"
#include "base/deadline.hpp"
#include "core/tuning_table.hpp"
#include "loom/store.hpp"

namespace loom::core {

// hostname + boot id + network and mount namespace ids, or LOOM_HOST_ID when set.
std::string local_host_id();

struct Topology {
  std::vector<std::string> host_of_rank;
  std::vector<int> pid_of_rank;
  // What loomrun calls each rank's process (base::Config::worker_id), "-" where nothing.
  std::vector<std::string> worker_id_of_rank;
  std::vector<int> cores_of_rank;  // processors each rank's host has
  // Each rank's RDMA port ("mlx5_0:1:ib", "rxe0:1:roce"), "-" when it has none.
  std::vector<std::string> rdma_of_rank;
  // Whether each rank may read other processes' memory (process_vm_readv; a seccomp filter, as
  // in some containers, refuses it).
  std::vector<bool> reads_peers_of_rank;
  // What each rank's init probe measured on its host (0s: it did not probe).
  std::vector<algorithms::MachineRates> rates_of_rank;
  // Each rank's settings that must agree (core/settings_agreement.hpp), "" where it sent none.
  std::vector<std::string> settings_of_rank;
  // The tuning table rank 0 read (empty: none) and its entries for rank 0's machine: the same
  // on every rank, and kept by split children.
  std::string tuning_from;
  std::vector<TuningEntry> tuning;
  // The machine the cost model assumes: each host's best figures (its ranks probed at once and
  // disturbed each other), then the worst host's. The same on every rank.
  algorithms::MachineRates machine_rates() const;
  // Whether any host runs more ranks than it has cores: the same answer on every rank.
  bool any_host_oversubscribed() const;
  // The most ranks that share one core on any host (ranks over cores, rounded up): the same on
  // every rank.
  int ranks_per_core() const;
  // The fewest processors any host has (0: no rank reported its host's).
  int fewest_cores() const;
  bool same_host(int a, int b) const { return host_of_rank[a] == host_of_rank[b]; }
  int ranks_on_host_of(int rank) const;
  // The ranks of each host, hosts ordered by their lowest rank, ranks ascending.
  std::vector<std::vector<int>> ranks_by_host() const;
  // "host A: ranks 0,1; host B: ranks 2,3" for the INFO log.
  std::string describe() const;
  // The topology of the ranks `ranks` (renumbered 0, 1, ... in that order).
  Topology of_ranks(const std::vector<int>& ranks) const;
};

// Appends rank r's record, as exchange_topology reads it from the store, to `t`: "pid cores rdma
// reads_peers worker pid_namespace", the host id, the machine rates, the settings that must agree,
// and (rank 0) the tuning table's path and entries, a line each. `pid_ns` is this process's pid
// namespace: a pid of another is kept as 0. StoreError for a record that is not one.
void add_topology_record(Topology& t, int r, const std::string& record, const std::string& pid_ns);

// exchange_topology's first half: this rank's record in the store, as add_topology_record reads it.
void publish_topology_record(Store& store, int rank, const std::string& worker_id,
                             const std::string& rdma, const algorithms::MachineRates& rates,
                             const std::string& tuning_from, const std::string& settings);

// Publishes this rank's host id, pid, the launcher's name for it (`worker_id`, empty: none),
// cores, RDMA port (`rdma`, one word, "-" for none), whether it reads peers' memory, what its
// probe measured and its `settings` line (store::keys::topology), and reads every rank's. Rank 0
// adds the tuning table at `tuning_from` (its entries for this machine).
Topology exchange_topology(Store& store, int rank, int size, std::chrono::milliseconds timeout,
                           const std::string& worker_id, const std::string& rdma = "-",
                           const algorithms::MachineRates& rates = {},
                           const std::string& tuning_from = {}, const std::string& settings = {});

}  // namespace loom::core
