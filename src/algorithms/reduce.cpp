// Pipelined reduce: a chain along the ring that starts after the root and ends at it; each rank
// adds its data to the partial result as it streams past.
#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

void pipelined_reduce(Engine& engine, const Collective& call) {
  const int n = engine.size();
  const int divisor = call.op == ReduceOp::avg ? n : 1;
  if (n == 1) {
    engine.data().divide(call.out, call.in, call.count, call.dtype, divisor);
    return;
  }
  const int pos = positive_mod(engine.rank() - call.root - 1, n);  // 0 first in the chain, n-1 root
  transport::Connection* next = pos < n - 1 ? &engine.connection(engine.ring_next()) : nullptr;
  transport::Connection* prev = pos > 0 ? &engine.connection(engine.ring_prev()) : nullptr;
  Primitives prims(engine, prev, next);
  if (pos == 0)
    prims.send(call.in, call.count);
  else if (pos < n - 1)
    prims.recv_reduce_send(call.in, call.count);
  else
    prims.recv_reduce_copy(call.in, call.out, call.count, false, divisor);
}

}  // namespace loom::algorithms
