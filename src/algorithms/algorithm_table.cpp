// The rows of the algorithm table (algorithm_table.hpp) and what each can take.
#include "algorithms/algorithm_table.hpp"

#include "algorithms/algorithm_costs.hpp"
#include "algorithms/algorithms.hpp"

namespace loom::algorithms {

namespace {

using transport::TransportKind;

const char* fits_always(const SelectionInputs&, std::size_t, bool) {
  return nullptr;
}

// The buffers these post whole before they receive: half the FIFO's slots must hold them.
const char* small_only(const SelectionInputs& in, std::size_t bytes, bool) {
  return in.size > 1 && bytes <= half_fifo(in) ? nullptr : "too large";
}

// Host buffers: its device path has not run on a GPU.
const char* host_only(const SelectionInputs&, std::size_t, bool device) {
  return device ? "host buffers only" : nullptr;
}

// One-shot keeps a host copy of the input.
const char* small_host_only(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device) return "host buffers only";
  return small_only(in, bytes, device);
}

// The model chooses hierarchical only where ranks span hosts with several ranks each; a rule may
// name it for any even layout (one host: a local reduce-scatter and all-gather).
const char* even_hosts(const SelectionInputs& in, std::size_t, bool) {
  return in.hosts_even() ? nullptr : "hosts run different numbers of ranks";
}

// Host buffers whose n blocks of `bytes` take at most `limit` bytes: the trees and Bruck's
// rounds copy through their ranks' host memory.
const char* host_blocks_within(const SelectionInputs& in, std::size_t bytes, bool device,
                               std::size_t limit) {
  if (device) return "host buffers only";
  return bytes * static_cast<std::size_t>(in.size) <= limit ? nullptr : "too large";
}
const char* small_tree(const SelectionInputs& in, std::size_t bytes, bool device) {
  return host_blocks_within(in, bytes, device, 64 * 1024);
}
const char* small_host_blocks(const SelectionInputs& in, std::size_t bytes, bool device) {
  return host_blocks_within(in, bytes, device, 1024 * 1024);
}

// Host buffers, every rank on one host over shared memory (the in-place algorithms' messages,
// and the single copy's, go through it).
const char* one_host_shm(const SelectionInputs& in, std::size_t, bool device) {
  if (device) return "host buffers only";
  if (!in.one_host() || in.local != TransportKind::shm) return "ranks on one host over shm only";
  return nullptr;
}
// The in-place rows: every rank on one host, device buffers (through CUDA IPC) or host buffers
// over shm (the windows' messages go through it).
const char* one_host_mapped(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (device) return in.one_host() ? nullptr : "ranks on one host only";
  return one_host_shm(in, bytes, device);
}
// ... of uneven blocks: device buffers only (the host windows serve the even kinds).
const char* one_host_device(const SelectionInputs& in, std::size_t, bool device) {
  if (!device) return "device buffers only";
  return in.one_host() ? nullptr : "ranks on one host only";
}
// ... where the kernel also lets every rank read its peers' memory.
const char* one_host_readable(const SelectionInputs& in, std::size_t bytes, bool device) {
  if (const char* why = one_host_shm(in, bytes, device)) return why;
  if (!in.reads_peers) return "process_vm_readv is refused on some rank";
  return nullptr;
}

constexpr Algorithm::Traits kAnySlice{.any_slice = true};
constexpr Algorithm::Traits kInPlace{.needs_windows = true};

}  // namespace

const std::vector<Algorithm>& algorithm_table() {
  static const std::vector<Algorithm> table = {
      {Kind::all_reduce,
       "ring",
       fits_always,
       ring_cost,
       ring_slice,
       ring_all_reduce,
       {.any_slice = true, .round_slices = ring_round_slices}},
      {Kind::all_reduce, "recursive_doubling", small_only, recursive_doubling_cost,
       whole_buffer_slice, recursive_doubling_all_reduce},
      {Kind::all_reduce, "halving_doubling", host_only, halving_doubling_cost, half_buffer_slice,
       halving_doubling_all_reduce, kAnySlice},
      {Kind::all_reduce, "one_shot", small_host_only, one_shot_cost, whole_buffer_slice,
       one_shot_all_reduce},
      {Kind::all_reduce, "hierarchical", even_hosts, hierarchical_cost, no_slice,
       hierarchical_all_reduce},
      {Kind::all_reduce, "single_copy", one_host_readable, single_copy_all_reduce_cost, no_slice,
       single_copy_all_reduce},
      {Kind::reduce_scatter, "ring", fits_always, chain_cost, chain_slice, ring_reduce_scatter,
       kAnySlice},
      {Kind::all_gather, "ring", fits_always, ring_gather_cost, chain_slice, ring_all_gather,
       kAnySlice},
      {Kind::all_gather, "bruck", small_host_blocks, bruck_cost, no_slice, bruck_all_gather},
      {Kind::broadcast, "chain", fits_always, chain_cost, chain_slice, pipelined_broadcast,
       kAnySlice},
      {Kind::reduce, "chain", fits_always, chain_cost, chain_slice, pipelined_reduce, kAnySlice},
      {Kind::barrier, "dissemination", fits_always, barrier_cost, no_slice, dissemination_barrier},
      {Kind::send, "stream", fits_always, p2p_cost, p2p_slice, point_to_point, kAnySlice},
      {Kind::recv, "stream", fits_always, p2p_cost, p2p_slice, point_to_point, kAnySlice},
      {Kind::gather, "binomial", small_tree, tree_cost, no_slice, binomial_gather},
      {Kind::gather, "linear", fits_always, linear_cost, p2p_slice, linear_gather, kAnySlice},
      {Kind::scatter, "binomial", small_tree, tree_cost, no_slice, binomial_scatter},
      {Kind::scatter, "linear", fits_always, linear_cost, p2p_slice, linear_scatter, kAnySlice},
      {Kind::all_to_all, "pairwise", fits_always, pairwise_cost, p2p_slice, pairwise_all_to_all,
       kAnySlice},
      {Kind::all_to_all,
       "single_copy",
       one_host_readable,
       single_copy_cost,
       p2p_slice,
       single_copy_all_to_all,
       {.any_slice = true, .reads_blocks = true}},
      // The single copy first: at the size all ranks share it ties with pairwise (its cost).
      {Kind::all_to_all_v,
       "single_copy",
       one_host_readable,
       single_copy_v_cost,
       no_slice,
       single_copy_all_to_all,
       {.reads_blocks = true}},
      {Kind::all_to_all_v, "pairwise", fits_always, pairwise_cost, no_slice, pairwise_all_to_all},
      {Kind::all_gather_v, "ring", fits_always, chain_cost, uneven_slice, ring_all_gather,
       kAnySlice},
      {Kind::all_reduce, "direct", one_host_mapped, direct_all_reduce_cost, no_slice, direct,
       kInPlace},
      {Kind::reduce_scatter, "direct", one_host_mapped, direct_reduce_cost, no_slice, direct,
       kInPlace},
      {Kind::all_gather, "direct", one_host_mapped, direct_gather_cost, no_slice, direct, kInPlace},
      {Kind::broadcast, "direct", one_host_mapped, direct_copy_cost, no_slice, direct, kInPlace},
      {Kind::reduce, "direct", one_host_mapped, direct_reduce_cost, no_slice, direct, kInPlace},
      {Kind::gather, "direct", one_host_mapped, direct_gather_cost, no_slice, direct, kInPlace},
      {Kind::scatter, "direct", one_host_mapped, direct_copy_cost, no_slice, direct, kInPlace},
      {Kind::all_to_all, "direct", one_host_mapped, direct_gather_cost, no_slice, direct, kInPlace},
      {Kind::reduce_scatter_v, "ring", fits_always, chain_cost, uneven_slice, ring_reduce_scatter,
       kAnySlice},
      {Kind::all_to_all_v, "direct", one_host_device, direct_device_cost, no_slice, direct,
       kInPlace},
      {Kind::all_gather_v, "direct", one_host_device, direct_device_cost, no_slice, direct,
       kInPlace},
      {Kind::reduce_scatter_v, "direct", one_host_device, direct_device_cost, no_slice, direct,
       kInPlace},
  };
  return table;
}

std::size_t Algorithm::index() const {
  return static_cast<std::size_t>(this - algorithm_table().data());
}

}  // namespace loom::algorithms
