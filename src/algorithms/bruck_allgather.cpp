// Bruck all-gather for small blocks: ceil(log2 n) rounds instead of the ring's n-1 hops, for any
// n. A scratch buffer holds the blocks in the order of the ranks from this one on (slot i is
// rank r+i's); in the round of distance d, each rank sends its first min(d, n-d) slots to rank
// r-d and appends as many from rank r+d, which are that rank's first ones. One rotation into
// place ends it. Each round waits for a peer, so where ranks outnumber cores (every hop a
// wake-up) the fewer rounds matter most.
#include <algorithm>
#include <memory>

#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

void bruck_all_gather(Engine& engine, const Collective& call) {
  const int n = engine.size(), r = engine.rank();
  const std::size_t block = call.count * size_of(call.dtype);
  auto* out = static_cast<std::byte*>(call.out);
  // Not zero-filled: every byte is written before it is read.
  const auto scratch_bytes = std::make_unique_for_overwrite<std::byte[]>(
      std::max<std::size_t>(1, block * static_cast<std::size_t>(n)));
  std::byte* const scratch = scratch_bytes.get();
  if (block > 0) engine.data().copy(scratch, call.in, block);
  for (int d = 1; d < n; d *= 2) {
    const auto blocks = static_cast<std::size_t>(std::min(d, n - d));
    // Connections are made at first use, in this order (as the pairwise all-to-all makes them):
    // made in another order on some ranks, a rank waiting for its peer to connect could close a
    // cycle of waits with ranks connecting elsewhere first.
    transport::Connection& from = engine.connection(positive_mod(r + d, n));
    transport::Connection& to = engine.connection(positive_mod(r - d, n));
    Primitives(engine, &from, &to)
        .send_recv(scratch, blocks * call.count, scratch + static_cast<std::size_t>(d) * block,
                   blocks * call.count, false);
  }
  if (block == 0) return;
  const std::size_t head = static_cast<std::size_t>(n - r) * block;  // ranks r..n-1
  engine.data().copy(out + static_cast<std::size_t>(r) * block, scratch, head);
  engine.data().copy(out, scratch + head, static_cast<std::size_t>(r) * block);
}

}  // namespace loom::algorithms
