// Every algorithm Loom has, as rows: the collective it runs, its name (as LOOM_ALGO names it),
// whether it can take a call, its price and slice on the cost model (algorithm_costs.hpp), how to
// run it, and its traits. UCC's score map is the idea: every row that fits gets a cost, the
// lowest wins (selection.hpp).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "algorithms/collective.hpp"
#include "algorithms/cost_model.hpp"

namespace loom::algorithms {

class Engine;

struct Algorithm {
  // What the rules and the selector read besides the functions.
  struct Traits {
    // A rule may set its slice ("ring@256K"): it pipelines through the slots in slices of any
    // size. The others size their own (whole buffers that must fit half the FIFO) or send
    // whole slots.
    bool any_slice = false;
    // It reads and writes the peers' buffers in place: chosen only where their memory is mapped
    // here (device buffers through CUDA IPC; host buffers in the shared windows of
    // Communicator::alloc).
    bool needs_windows = false;
    // It reads the peers' blocks in place where the model prices that cheaper, and sends the
    // others through the slots (the single copy): its choice carries the blocks it reads.
    bool reads_blocks = false;
    // Slices a round of the ring carries per block (null: half the FIFO's slots).
    std::size_t (*round_slices)(const SelectionInputs&, std::size_t bytes, bool device) = nullptr;
  };

  Kind collective;
  std::string_view name;
  // Why it cannot take a call of `bytes` (nullptr: it can).
  const char* (*unfit)(const SelectionInputs&, std::size_t bytes, bool device);
  // Predicted time in microseconds.
  double (*cost)(const SelectionInputs&, std::size_t bytes, bool device);
  // How much one slot carries (0: whole slots).
  std::size_t (*slice)(const SelectionInputs&, std::size_t bytes, bool device);
  void (*run)(Engine&, const Collective&);
  Traits traits = {};

  // The row's place in the table: what the logs group calls by.
  std::size_t index() const;
};

const std::vector<Algorithm>& algorithm_table();

}  // namespace loom::algorithms
