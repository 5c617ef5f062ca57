// Ring reduce-scatter: block b travels the ring from rank b+1, each rank adding its own part;
// rank b finishes it into its output.
#include <cstring>

#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace loom::algorithms {

void ring_reduce_scatter(Engine& engine, const Collective& call) {
  const int n = engine.size();
  const int r = engine.rank();
  const std::size_t elem = size_of(call.dtype);
  auto* in = static_cast<const std::byte*>(call.in);
  auto* out = static_cast<std::byte*>(call.out);
  if (n == 1) {
    if (in != out) engine.data().copy(out, in, call.count * elem);
    return;
  }
  const int divisor = call.op == ReduceOp::avg ? n : 1;
  transport::Connection& next = engine.connection(engine.ring_next());
  transport::Connection& prev = engine.connection(engine.ring_prev());
  Primitives prims(engine, &prev, &next);
  const std::size_t chunk = ring_chunk_elems(engine, next, call.dtype);
  auto block = [&](int b, std::size_t grid) {
    return in + (static_cast<std::size_t>(((b % n) + n) % n) * call.count + grid) * elem;
  };
  for (std::size_t grid = 0; grid < call.count; grid += chunk) {
    const std::size_t len = std::min(chunk, call.count - grid);
    prims.send(block(r - 1, grid), len);
    for (int j = 2; j < n; ++j) prims.recv_reduce_send(block(r - j, grid), len);
    prims.recv_reduce_copy(block(r, grid), out + grid * elem, len, false, divisor);
  }
}

}  // namespace loom::algorithms
