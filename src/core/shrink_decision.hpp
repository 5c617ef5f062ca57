// A shrink's decision, as the rank that made it first wrote it in the store: the job's fewest
// nodes by its Config::min_nodes, then the members ("2:0,1,3"), so that every member judges by
// one minimum. Every member reads it back; a malformed one is StoreError.
#pragma once

#include <vector>

#include "loom/store.hpp"

namespace loom::core {

struct ShrinkDecision {
  int min_nodes = 0;
  std::vector<int> members;  // increasing ranks of a communicator of `size`
};

Bytes encode(const ShrinkDecision& d);
// StoreError unless `bytes` is "<min>:<rank>,<rank>,..." with increasing ranks in [0, size).
ShrinkDecision decode_shrink_decision(const Bytes& bytes, int size);

}  // namespace loom::core
