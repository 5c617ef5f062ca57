// Ring reduce-scatter: block b of every rank's input travels the ring and is finished at rank b,
// into its output.
#include "algorithms/ring_passes.hpp"

namespace loom::algorithms {

void ring_reduce_scatter(Engine& engine, const Collective& call) {
  const int n = engine.size();
  if (n == 1) {
    if (call.in != call.out)
      engine.data().copy(call.out, call.in, call.count * size_of(call.dtype));
    return;
  }
  RingPasses passes(engine, engine.ring(), Blocks{call.count * static_cast<std::size_t>(n), n},
                    call.dtype);
  for (std::size_t round = 0; round < passes.rounds(); ++round)
    passes.reduce_scatter_round(round, call.in, call.out, call.op == ReduceOp::avg ? n : 1, false);
}

}  // namespace loom::algorithms
