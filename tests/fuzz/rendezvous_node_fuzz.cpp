// libFuzzer: a node's line in a rendezvous round, as any node (or anything with the secret) wrote
// it. parse_node must raise RendezvousError or return fields that format back to a line parsing
// to the same, with a worker count that cannot overflow the job's size, never crash.
#include <cstdint>
#include <string>

#include "tools/loomrun/node_line.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace loomrun;
  const std::string line(reinterpret_cast<const char*>(data), size);
  try {
    const NodeLine n = parse_node(line);
    if (n.member.nproc < 1 || n.member.nproc > kMaxNodeProcs || n.previous_group_rank < -1)
      __builtin_trap();
    const NodeLine again = parse_node(format_node(n));
    if (again.member.addr != n.member.addr || again.member.nproc != n.member.nproc ||
        again.member.host != n.member.host || again.previous_round != n.previous_round ||
        again.previous_group_rank != n.previous_group_rank)
      __builtin_trap();
  } catch (const RendezvousError&) {
  }
  return 0;
}
