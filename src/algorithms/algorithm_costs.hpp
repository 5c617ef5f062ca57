// What the cost model predicts for each algorithm: its time for a call of `bytes` (in
// microseconds) and its slice (how much one slot carries; 0: whole slots). The rows of the
// algorithm table (algorithm_table.cpp) point at these; `device` is a call on GPU buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/cost_model.hpp"

namespace loom::algorithms {

// ---- all-reduce
double ring_cost(const SelectionInputs& in, std::size_t bytes, bool device);
std::size_t ring_slice(const SelectionInputs& in, std::size_t bytes, bool device);
// Slices a round of the ring carries per block (0: half the FIFO's slots).
std::size_t ring_round_slices(const SelectionInputs& in, std::size_t bytes, bool device);
double recursive_doubling_cost(const SelectionInputs& in, std::size_t bytes, bool device);
// The whole buffer in each slice, at least so many that it fits half the FIFO.
std::size_t whole_buffer_slice(const SelectionInputs& in, std::size_t bytes, bool device);
double halving_doubling_cost(const SelectionInputs& in, std::size_t bytes, bool device);
std::size_t half_buffer_slice(const SelectionInputs& in, std::size_t bytes, bool device);
double one_shot_cost(const SelectionInputs& in, std::size_t bytes, bool device);
double hierarchical_cost(const SelectionInputs& in, std::size_t bytes, bool device);
double single_copy_all_reduce_cost(const SelectionInputs& in, std::size_t bytes, bool device);
// Each phase sets its own.
std::size_t no_slice(const SelectionInputs& in, std::size_t bytes, bool device);

// ---- the one-algorithm collectives: a block of `bytes` crossing n-1 hops (reduce-scatter and
// all-gather: every rank's block; broadcast and reduce: the chain)
double chain_cost(const SelectionInputs& in, std::size_t bytes, bool device);
std::size_t chain_slice(const SelectionInputs& in, std::size_t bytes, bool device);
// The uneven calls: the blocks' average crosses the ring.
std::size_t uneven_slice(const SelectionInputs& in, std::size_t bytes, bool device);
double barrier_cost(const SelectionInputs& in, std::size_t bytes, bool device);
double p2p_cost(const SelectionInputs& in, std::size_t bytes, bool device);
std::size_t p2p_slice(const SelectionInputs& in, std::size_t bytes, bool device);

// ---- all-gather, `bytes` one rank's block
double ring_gather_cost(const SelectionInputs& in, std::size_t bytes, bool device);
double bruck_cost(const SelectionInputs& in, std::size_t bytes, bool device);

// ---- gather, scatter, all-to-all: `bytes` is one rank's block (all_to_all_v: none, since no
// size is the same on every rank; it moves whole slots)
double tree_cost(const SelectionInputs& in, std::size_t bytes, bool device);
double linear_cost(const SelectionInputs& in, std::size_t bytes, bool device);
double pairwise_cost(const SelectionInputs& in, std::size_t bytes, bool device);
double single_copy_cost(const SelectionInputs& in, std::size_t bytes, bool device);
double single_copy_v_cost(const SelectionInputs& in, std::size_t bytes, bool device);
// The blocks the single copy reads in place, [from, to) bytes (powers of two: where its price per
// block is below pairwise's); the others go through the slots. Both ends of a block decide from
// its size, which they share, and from the model, the same on every rank. from == SIZE_MAX: none.
struct ReadRange {
  std::size_t from = 1;
  std::size_t to = SIZE_MAX;
  bool reads(std::size_t bytes) const { return bytes >= from && bytes < to; }
};
ReadRange single_copy_reads(const SelectionInputs& in);

// ---- in place in the peers' buffers: device buffers through CUDA IPC, host buffers in
// Communicator::alloc's windows (one host over shm)
double direct_device_cost(const SelectionInputs& in, std::size_t bytes, bool device);
double direct_all_reduce_cost(const SelectionInputs& in, std::size_t bytes, bool device);
double direct_reduce_cost(const SelectionInputs& in, std::size_t bytes, bool device);
double direct_gather_cost(const SelectionInputs& in, std::size_t bytes, bool device);
double direct_copy_cost(const SelectionInputs& in, std::size_t bytes, bool device);

}  // namespace loom::algorithms
