// Ring all-reduce: the buffer in one block per rank, each round a reduce-scatter (whose
// finishing step forwards the finished piece) and an all-gather.
#include "algorithms/ring_passes.hpp"

namespace loom::algorithms {

void ring_all_reduce_pass(Engine& engine, const RingPosition& ring, const void* in, void* out,
                          std::size_t count, DataType dtype, int divisor, bool stream_outputs) {
  if (ring.size == 1) {
    if (in != out) engine.data().copy(out, in, count * size_of(dtype));
    return;
  }
  const Blocks blocks = Blocks::even(count, ring.size);
  RingPasses passes(engine, ring, blocks, dtype);
  passes.stream_outputs(stream_outputs);
  const std::size_t bytes = count * size_of(dtype);
  passes.input_stays(disjoint(in, bytes, out, bytes));
  auto* mine = static_cast<std::byte*>(out) + blocks.offset(ring.position) * size_of(dtype);
  for (std::size_t round = 0; round < passes.rounds(); ++round) {
    passes.reduce_scatter_round(round, in, mine, divisor, true);
    passes.all_gather_round(round, out, true);
  }
}

void ring_all_reduce(Engine& engine, const Collective& call) {
  // Each rank's input and output (one buffer in place), on all of the host's ranks. (The
  // hierarchical all-reduce reads its pass's output again at once: it keeps it cached.)
  const std::size_t buffers = call.in == call.out ? 1 : 2;
  ring_all_reduce_pass(
      engine, engine.ring(), call.in, call.out, call.count, call.dtype,
      call.op == ReduceOp::avg ? engine.size() : 1,
      engine.ring_outputs_beyond_cache(buffers * call.count * size_of(call.dtype)));
}

}  // namespace loom::algorithms
