// Ring all-reduce: reduce-scatter then all-gather around the ring, chunk by chunk. The step
// that completes a chunk writes the result and forwards it in the same pass.
#include <cstring>

#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace loom::algorithms {

std::size_t ring_chunk_elems(Engine& engine, transport::Connection& next, DataType dtype) {
  std::size_t slots = static_cast<std::size_t>(std::max(1, engine.config().slots / 2));
  std::size_t slice = next.slot_bytes();
  if (engine.slice_bytes() != 0) slice = std::min(slice, engine.slice_bytes());
  return std::max<std::size_t>(1, slice / size_of(dtype)) * slots;
}

void ring_all_reduce_pass(Engine& engine, const RingPosition& ring, const void* input, void* output,
                          std::size_t count, DataType dtype, int divisor) {
  const int n = ring.size;
  const std::size_t elem = size_of(dtype);
  auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  if (n == 1) {
    if (in != out) engine.data().copy(out, in, count * elem);
    return;
  }
  Primitives prims(engine, ring.prev, ring.next);
  const std::size_t chunk = ring_chunk_elems(engine, *ring.next, dtype);
  auto mod = [n](int x) { return ((x % n) + n) % n; };

  for (std::size_t grid = 0; grid < count; grid += chunk * static_cast<std::size_t>(n)) {
    // Chunk c of this round covers [grid + c*size, grid + (c+1)*size) clipped to the buffer.
    const std::size_t size = std::min(chunk, (count - grid + n - 1) / n);
    auto offset = [&](int c) { return grid + static_cast<std::size_t>(c) * size; };
    auto length = [&](int c) {
      std::size_t o = offset(c);
      return o >= count ? 0 : std::min(size, count - o);
    };
    const int r = ring.position;
    int c = mod(r - 1);
    prims.send(in + offset(c) * elem, length(c));
    for (int j = 2; j < n; ++j) {
      c = mod(r - j);
      prims.recv_reduce_send(in + offset(c) * elem, length(c));
    }
    c = r;
    prims.recv_reduce_copy(in + offset(c) * elem, out + offset(c) * elem, length(c), true, divisor);
    for (int j = 1; j < n - 1; ++j) {
      c = mod(r - j);
      prims.recv_copy_send(out + offset(c) * elem, length(c));
    }
    c = mod(r + 1);
    prims.recv(out + offset(c) * elem, length(c));
  }
}

void ring_all_reduce(Engine& engine, const Collective& call) {
  const int n = engine.size();
  RingPosition ring{n, engine.rank(), nullptr, nullptr};
  if (n > 1) {
    ring.next = &engine.connection(engine.ring_next());
    ring.prev = &engine.connection(engine.ring_prev());
  }
  ring_all_reduce_pass(engine, ring, call.in, call.out, call.count, call.dtype,
                       call.op == ReduceOp::avg ? n : 1);
}

}  // namespace loom::algorithms
