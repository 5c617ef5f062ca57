#include "node_line.hpp"

#include <sstream>

#include <fmt/format.h>

namespace loomrun {

NodeLine parse_node(const std::string& line) {
  NodeLine n;
  std::istringstream in(line);
  std::string rest;
  in >> n.member.addr >> n.member.nproc >> n.previous_round >> n.previous_group_rank >>
      n.member.host;
  // A node's worker count adds into the job's size: one past the limit could overflow the sum.
  if (!in || n.member.nproc < 1 || n.member.nproc > kMaxNodeProcs || n.previous_group_rank < -1 ||
      n.previous_round < 0 || (in >> rest))
    throw RendezvousError(fmt::format("rendezvous: malformed node record '{}'", line));
  return n;
}

std::string format_node(const NodeLine& node) {
  return fmt::format("{} {} {} {} {}", node.member.addr, node.member.nproc, node.previous_round,
                     node.previous_group_rank, node.member.host);
}

}  // namespace loomrun
