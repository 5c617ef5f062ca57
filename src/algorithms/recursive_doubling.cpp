// Recursive-doubling all-reduce for small buffers: log2(p) exchanges of the whole buffer with
// rank ^ 2^k, where p is the largest power of two <= n. The n - p extra ranks first hand their
// data to a partner below p and get the result back at the end. Every pairwise step computes
// a op b on one side and b op a on the other; the kernels' ops are commutative bit for bit
// (NaN-propagating min/max, -0 below +0), so all ranks end with identical bytes.
#include <cstring>

#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace loom::algorithms {

void recursive_doubling_all_reduce(Engine& engine, const Collective& call) {
  const int n = engine.size();
  const int r = engine.rank();
  auto* out = static_cast<std::byte*>(call.out);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;

  if (r >= p) {  // fold in, then wait for the result
    transport::Connection& partner = engine.connection(r - p);
    Primitives prims(engine, &partner, &partner);
    prims.send(call.in, call.count);
    prims.recv(out, call.count);
    return;
  }
  if (r < extra) {
    transport::Connection& partner = engine.connection(r + p);
    Primitives(engine, &partner, nullptr).recv_reduce_copy(call.in, out, call.count, false, 1);
  } else if (call.in != call.out) {
    engine.data().copy(out, call.in, call.count * size_of(call.dtype));
  }
  for (int mask = 1; mask < p; mask <<= 1) {
    transport::Connection& peer = engine.connection(r ^ mask);
    Primitives prims(engine, &peer, &peer);
    prims.send(out, call.count);
    prims.recv_reduce_copy(out, out, call.count, false, 1);
  }
  if (call.op == ReduceOp::avg) engine.data().divide(out, out, call.count, call.dtype, n);
  if (r < extra) {
    transport::Connection& partner = engine.connection(r + p);
    Primitives(engine, nullptr, &partner).send(out, call.count);
  }
}

}  // namespace loom::algorithms
