// A node's line in a rendezvous round, as it writes it to the store and every node reads it:
// "addr nproc previous_round previous_group_rank hostname".
#pragma once

#include <cstdint>
#include <string>

#include "rendezvous.hpp"

namespace loomrun {

struct NodeLine {
  Member member;
  std::int64_t previous_round = 0;
  int previous_group_rank = -1;
};

// The line's fields, or RendezvousError naming the line: five fields and nothing after them,
// 1 to kMaxNodeProcs workers, a group rank of -1 or more.
NodeLine parse_node(const std::string& line);
std::string format_node(const NodeLine& node);

// The most workers one node's line may name (Loom's limit on a job's ranks).
constexpr int kMaxNodeProcs = 1 << 20;

}  // namespace loomrun
