// Inputs of the selector for the unit tests of the choice and of the model.
#pragma once

#include <string_view>

#include "algorithms/algorithm_table.hpp"
#include "algorithms/selection.hpp"

namespace loom::algorithms::test_inputs {

using transport::TransportKind;

inline SelectionInputs one_host(int n) {
  SelectionInputs in;
  in.size = n;
  in.hosts.emplace_back();
  for (int r = 0; r < n; ++r) in.hosts.back().push_back(r);
  return in;
}

inline SelectionInputs hosts(int count, int per_host, TransportKind remote = TransportKind::tcp) {
  SelectionInputs in;
  in.size = count * per_host;
  for (int h = 0; h < count; ++h) {
    in.hosts.emplace_back();
    for (int l = 0; l < per_host; ++l) in.hosts.back().push_back(h * per_host + l);
  }
  in.remote = remote;
  return in;
}

inline std::string_view pick(const SelectionInputs& in, Kind kind, std::size_t bytes,
                             bool device = false, bool windows = false) {
  return Selector(in).choose(kind, bytes, device, windows).algorithm->name;
}

// Rates the probe measured on a 2-core Zen 4 (1 MiB L2): the pipe's slice and byte, the parts'.
inline MachineRates zen4_rates() {
  MachineRates r;
  r.copy_gbps = 48, r.reduce_gbps = 46, r.handover_us = 0.05, r.wake_us = 2.3;
  r.slice_us = 2.0, r.pipe_gbps = 17, r.core_cache_kib = 1024;
  return r;
}

// One host's ranks over loopback TCP on 2 cores, on the model `r` measures.
inline SelectionInputs loopback_on_two_cores(const MachineRates& r, int ranks) {
  auto in = one_host(ranks);
  in.local = TransportKind::tcp;
  in.costs = CostModel::measured(r, true);
  in.cores = 2;
  in.ranks_per_core = (ranks + 1) / 2;
  return in;
}

// One host's ranks over shared memory on `cores` cores, every rank able to read its peers'
// memory (the single copy), on the model `r` measures.
inline SelectionInputs shm_host(int ranks, int cores, const MachineRates& r) {
  auto in = one_host(ranks);
  in.costs = CostModel::measured(r, false);
  in.cores = cores;
  in.ranks_per_core = (ranks + cores - 1) / cores;
  in.reads_peers = true;
  return in;
}

}  // namespace loom::algorithms::test_inputs
