// Recursive-doubling all-reduce for small buffers: log2(p) exchanges of the whole buffer with
// rank ^ 2^k, where p is the largest power of two <= n; the n - p extra ranks fold in and out
// (power_of_two_fold.hpp). Every pairwise step computes a op b on one side and b op a on the
// other; the kernels' ops are commutative bit for bit (NaN-propagating min/max, -0 below +0), so
// all ranks end with identical bytes.
#include "algorithms/algorithms.hpp"
#include "algorithms/power_of_two_fold.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

void recursive_doubling_all_reduce(Engine& engine, const Collective& call) {
  const int n = engine.size();
  const int r = engine.rank();
  auto* out = static_cast<std::byte*>(call.out);
  const int p = power_of_two_below(n);
  if (!fold_in(engine, call, p)) return;
  // Not folded, out starts as the input: the first exchange reads it from there. The sends go
  // from the caller's memory where the transport can (TCP: no copy into a slot), and are settled
  // before the reduction overwrites what they read. 2 ranks over TCP at 64 KiB spent a tenth of
  // their time in these two copies.
  const bool folded = r < n - p;
  const std::byte* in = folded ? out : static_cast<const std::byte*>(call.in);
  if (p == 1 && in != out) engine.data().copy(out, in, call.count * size_of(call.dtype));
  for (int mask = 1; mask < p; mask <<= 1) {
    transport::Connection& peer = engine.connection(r ^ mask);
    Primitives prims(engine, &peer, &peer);
    prims.use_caller_memory(true).send(in, call.count);
    if (in == out) peer.settle_sends();  // the reduction below overwrites what it reads
    prims.recv_reduce_copy(in, out, call.count, false, 1);
    in = out;
  }
  if (call.op == ReduceOp::avg) engine.data().divide(out, out, call.count, call.dtype, n);
  fold_out(engine, call, p);
}

}  // namespace loom::algorithms
