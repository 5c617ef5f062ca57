// One-shot all-reduce for tiny buffers: every rank posts its whole input to every peer, then
// folds all n inputs in rank order (x0 op x1 op ... op xn-1) into its output. One hop whatever
// n is, at the price of (n-1) copies of the buffer per rank; over shared memory the posts land
// directly in the peers' slots. The fixed order makes every rank's result identical bit for bit.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"
#include "reduce.hpp"

namespace loom::algorithms {

void one_shot_all_reduce(Engine& engine, const Collective& call) {
  const int n = engine.size();
  const int r = engine.rank();
  const std::size_t bytes = call.count * size_of(call.dtype);
  std::vector<transport::Connection*> peers(static_cast<std::size_t>(n), nullptr);
  for (int p = 0; p < n; ++p)
    if (p != r) peers[static_cast<std::size_t>(p)] = &engine.connection(p);
  // Post first to every peer (each fits half a FIFO, so no post waits on a receive).
  for (int k = 1; k < n; ++k) {
    const int p = (r + k) % n;  // staggered, so peers are not all served in the same order
    Primitives(engine, nullptr, peers[static_cast<std::size_t>(p)]).send(call.in, call.count);
  }
  // The local input is needed at position r of the fold; keep a copy in case out aliases in.
  std::vector<std::byte> mine(static_cast<const std::byte*>(call.in),
                              static_cast<const std::byte*>(call.in) + bytes);
  auto* out = static_cast<std::byte*>(call.out);
  for (int p = 0; p < n; ++p) {
    if (p == r) {
      if (p == 0)
        std::memcpy(out, mine.data(), bytes);
      else
        kernels::reduce(out, out, mine.data(), call.count, call.dtype, call.op);
      continue;
    }
    Primitives prims(engine, peers[static_cast<std::size_t>(p)], nullptr);
    if (p == 0)
      prims.recv(out, call.count);
    else
      prims.recv_reduce_copy(out, out, call.count, false, 1);
  }
  if (call.op == ReduceOp::avg) kernels::divide(out, out, call.count, call.dtype, n);
}

}  // namespace loom::algorithms
