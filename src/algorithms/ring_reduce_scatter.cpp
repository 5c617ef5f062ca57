// Ring reduce-scatter (and reduce_scatter_v, whose blocks are uneven): block b of every rank's
// input travels the ring and is finished at rank b, into its output.
#include "algorithms/ring_passes.hpp"

namespace loom::algorithms {

void ring_reduce_scatter(Engine& engine, const Collective& call) {
  const int n = engine.size();
  const Blocks blocks = call.layout ? Blocks::uneven(*call.layout)
                                    : Blocks::even(call.count * static_cast<std::size_t>(n), n);
  const std::size_t elem = size_of(call.dtype);
  if (n == 1) {
    const auto* mine = static_cast<const std::byte*>(call.in) + blocks.offset(0) * elem;
    if (mine != call.out) engine.data().copy(call.out, mine, blocks.length(0) * elem);
    return;
  }
  RingPasses passes(engine, engine.ring(), blocks, call.dtype);
  std::size_t in_elems = 0;
  for (int b = 0; b < n; ++b) in_elems = std::max(in_elems, blocks.offset(b) + blocks.length(b));
  passes.input_stays(
      disjoint(call.in, in_elems * elem, call.out, blocks.length(engine.ring().position) * elem));
  for (std::size_t round = 0; round < passes.rounds(); ++round)
    passes.reduce_scatter_round(round, call.in, call.out, call.op == ReduceOp::avg ? n : 1, false);
}

}  // namespace loom::algorithms
