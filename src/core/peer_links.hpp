// What the topology and the transports say about this rank's links to its peers, as plain
// functions: the selection inputs (the same on every rank, since the topology is), the tuning
// table's key, and the summaries a communicator logs.
#pragma once

#include <string>
#include <utility>

#include "algorithms/cost_model.hpp"
#include "base/config.hpp"
#include "core/topology.hpp"
#include "transports/transport_table.hpp"

namespace loom::core {

std::string host_name();

// The links between ranks as the algorithm choice sees them.
algorithms::SelectionInputs selection_inputs(const Topology& topology, const base::Config& config,
                                             int size);
// The transport ("shm", "tcp", "shm+tcp") and shape ("4x1") a tuning table entry names.
std::pair<std::string, std::string> tuning_key(const algorithms::SelectionInputs& in);
// "shm to rank(s) 1,2, tcp to rank(s) 3" for logs and describe().
std::string describe_peers(const transport::TransportTable& table, int rank, int size);
// Why the ranks on other hosts are reached by RDMA or by TCP (mine: this rank's RDMA port or
// "-"; why: what opening it found), once, at INFO.
void log_rdma_choice(const Topology& topology, int rank, int size, const std::string& mine,
                     const std::string& why);

}  // namespace loom::core
