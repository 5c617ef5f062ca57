// Ring all-gather: each block travels once around the ring, copied out at every rank it passes.
#include <cstring>

#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

void ring_all_gather(Engine& engine, const Collective& call) {
  const int n = engine.size();
  const int r = engine.rank();
  const std::size_t elem = size_of(call.dtype);
  auto* out = static_cast<std::byte*>(call.out);
  auto block = [&](int b, std::size_t grid) {
    return out + (static_cast<std::size_t>(((b % n) + n) % n) * call.count + grid) * elem;
  };
  if (call.in != block(r, 0)) engine.data().copy(block(r, 0), call.in, call.count * elem);
  if (n == 1) return;
  transport::Connection& next = engine.connection(engine.ring_next());
  transport::Connection& prev = engine.connection(engine.ring_prev());
  Primitives prims(engine, &prev, &next);
  const std::size_t chunk = ring_chunk_elems(engine, next, call.dtype);
  for (std::size_t grid = 0; grid < call.count; grid += chunk) {
    const std::size_t len = std::min(chunk, call.count - grid);
    prims.send(block(r, grid), len);
    for (int j = 1; j < n - 1; ++j) prims.recv_copy_send(block(r - j, grid), len);
    prims.recv(block(r + 1, grid), len);
  }
}

}  // namespace loom::algorithms
