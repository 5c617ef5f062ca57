// Pipelined broadcast: the root's data flows down the ring as a chain, slot by slot, so every
// link is busy at once and the time is one buffer's transfer plus a slot per hop.
#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

void pipelined_broadcast(Engine& engine, const Collective& call) {
  const int n = engine.size();
  const int pos = positive_mod(engine.rank() - call.root, n);  // 0 at the root
  if (pos == 0 && call.in != call.out)
    engine.data().copy(call.out, call.in, call.count * size_of(call.dtype));
  if (n == 1) return;
  transport::Connection* next = pos < n - 1 ? &engine.connection(engine.ring_next()) : nullptr;
  transport::Connection* prev = pos > 0 ? &engine.connection(engine.ring_prev()) : nullptr;
  Primitives prims(engine, prev, next);
  prims.use_caller_memory(true);  // the root's input is read, the others' output written, once
  if (pos == 0)
    prims.send(call.in, call.count);
  else if (pos < n - 1)
    prims.recv_copy_send(call.out, call.count);
  else
    prims.recv(call.out, call.count);
}

}  // namespace loom::algorithms
