// One-shot all-reduce for tiny buffers: every rank posts its whole input to every peer, then
// folds all n inputs in rank order (x0 op x1 op ... op xn-1) into its output. One hop whatever
// n is, at the price of (n-1) copies of the buffer per rank; over shared memory the posts land
// directly in the peers' slots or inline mailboxes. The fixed order makes every rank's result
// identical bit for bit.
#include <vector>

#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace loom::algorithms {

void one_shot_all_reduce(Engine& engine, const Collective& call) {
  const int n = engine.size();
  const int r = engine.rank();
  const std::size_t bytes = call.count * size_of(call.dtype);
  // Post first to every peer (each fits half a FIFO, so no post waits on a receive); staggered,
  // so that peers are not all served in the same order.
  for (int k = 1; k < n; ++k)
    Primitives(engine, nullptr, &engine.connection(positive_mod(r + k, n)))
        .send(call.in, call.count);
  // The local input is needed at position r of the fold; keep a copy in case out aliases in
  // (on the stack for the sizes this algorithm usually gets).
  alignas(64) std::byte small[1024];
  std::vector<std::byte> large;
  const std::byte* mine = static_cast<const std::byte*>(call.in);
  if (call.in == call.out && r > 0) {
    std::byte* copy = small;
    if (bytes > sizeof(small)) large.resize(bytes), copy = large.data();
    kernels::copy(copy, call.in, bytes);
    mine = copy;
  }
  auto* out = static_cast<std::byte*>(call.out);
  for (int p = 0; p < n; ++p) {
    if (p == r) {
      if (p == 0) {
        if (out != mine) kernels::copy(out, mine, bytes);
      } else {
        kernels::reduce(out, out, mine, call.count, call.dtype, call.op);
      }
      continue;
    }
    Primitives prims(engine, &engine.connection(p), nullptr);
    if (p == 0)
      prims.recv(out, call.count);
    else
      prims.recv_reduce_copy(out, out, call.count, false, 1);
  }
  if (call.op == ReduceOp::avg) kernels::divide(out, out, call.count, call.dtype, n);
}

}  // namespace loom::algorithms
