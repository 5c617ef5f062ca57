// Halving-doubling all-reduce (Rabenseifner's): a reduce-scatter by recursive halving, then an
// all-gather by recursive doubling, among p ranks, p the largest power of two <= n. Each of the
// log2(p) halving steps sends the half of the current range the partner (rank ^ 2^k) keeps and
// reduces the half this rank keeps; rank r ends with block r of p reduced, and the doubling steps
// trade ever larger ranges back. A rank sends 2(p-1)/p of the buffer in 2 log2(p) messages:
// recursive doubling's hop count twice over but fewer bytes than its log2(p) whole buffers, and
// the ring's bytes in fewer hops. The n - p extra ranks fold in and out (power_of_two_fold.hpp).
// Each step sends and receives side by side, slice by slice, so it takes any size. Pairwise steps
// compute a op b on one side and b op a on the other; the kernels' ops are commutative bit for
// bit, so all ranks end with identical bytes.
#include "algorithms/algorithms.hpp"
#include "algorithms/power_of_two_fold.hpp"
#include "algorithms/primitives.hpp"
#include "algorithms/ring_passes.hpp"

namespace loom::algorithms {

namespace {

// The first element of block `b` of `p` over `count` elements (blocks differ by one at most).
std::size_t block_start(std::size_t count, int p, int b) {
  return count * static_cast<std::size_t>(b) / static_cast<std::size_t>(p);
}

}  // namespace

void halving_doubling_all_reduce(Engine& engine, const Collective& call) {
  const int n = engine.size();
  const int r = engine.rank();
  const std::size_t elem = size_of(call.dtype);
  auto* out = static_cast<std::byte*>(call.out);
  const auto* in = static_cast<const std::byte*>(call.in);
  const int p = power_of_two_below(n);
  if (!fold_in(engine, call, p)) return;
  // What the first step reads: the input itself, or (folded) the input reduced with a partner's.
  const std::byte* source = r < n - p ? out : in;
  // The input stays unchanged until the call ends where it shares no byte with the output: a
  // step reading it may send from it in place (TCP: no copy into a slot).
  const bool input_stays = disjoint(in, call.count * elem, out, call.count * elem);
  auto offset = [&](int block) { return block_start(call.count, p, block) * elem; };
  auto span = [&](int first, int blocks) {
    return block_start(call.count, p, first + blocks) - block_start(call.count, p, first);
  };

  // Reduce-scatter: the range [low, low + 2 * half) of blocks halves at each step.
  int low = 0;
  for (int half = p / 2; half >= 1; half /= 2) {
    const int keep = (r & half) ? low + half : low;
    const int give = (r & half) ? low : low + half;
    transport::Connection& peer = engine.connection(r ^ half);
    // Sent from the input in place where it stays; from the output never, since the all-gather
    // writes the halves given away again.
    Primitives(engine, &peer, &peer)
        .use_caller_memory(source == in && input_stays)
        .send_recv_reduce(source + offset(give), span(give, half), source + offset(keep),
                          out + offset(keep), span(keep, half));
    low = keep;
    source = out;  // later steps read what the earlier ones reduced
  }
  if (p == 1 && call.in != call.out)  // one rank: nothing was exchanged
    engine.data().copy(out, call.in, call.count * elem);
  if (call.op == ReduceOp::avg)
    engine.data().divide(out + offset(r), out + offset(r), span(r, 1), call.dtype, n);

  // All-gather: this rank's range [low, low + size) doubles at each step. The ranges sent are
  // final and those received are not read before they arrive: the transport may move them in
  // place.
  for (int size = 1; size < p; size *= 2) {
    const int theirs = low ^ size;
    transport::Connection& peer = engine.connection(r ^ size);
    Primitives(engine, &peer, &peer)
        .use_caller_memory(true)
        .send_recv(out + offset(low), span(low, size), out + offset(theirs), span(theirs, size),
                   false);
    low = std::min(low, theirs);
  }
  fold_out(engine, call, p);
}

}  // namespace loom::algorithms
