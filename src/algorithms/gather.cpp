// Gather: every rank's block ends at the root.
// - linear: each rank sends its block straight to the root, which takes them in rank order;
//   the blocks stream through the slots, so large ones move at the links' speed.
// - binomial: in round k a rank whose relative rank has bit k set sends everything it holds
//   (its subtree's blocks) to the rank 2^k below and stops; after ceil(log2 n) rounds the root
//   holds every block. Fewer hops for small blocks, at the price of copies through the tree.
#include <vector>

#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

void linear_gather(Engine& engine, const Collective& call) {
  const int n = engine.size(), r = engine.rank(), root = call.root;
  const std::size_t bytes = call.count * size_of(call.dtype);
  if (r != root) {
    Primitives(engine, nullptr, &engine.connection(root))
        .use_caller_memory(true)
        .send(call.in, call.count);
    return;
  }
  auto* out = static_cast<std::byte*>(call.out);
  auto* mine = out + static_cast<std::size_t>(root) * bytes;
  if (call.in != mine) engine.data().copy(mine, call.in, bytes);
  for (int k = 1; k < n; ++k) {
    const int from = positive_mod(root + k, n);
    Primitives(engine, &engine.connection(from), nullptr)
        .use_caller_memory(true)
        .recv(out + static_cast<std::size_t>(from) * bytes, call.count);
  }
}

void binomial_gather(Engine& engine, const Collective& call) {
  const int n = engine.size(), root = call.root;
  const int v = positive_mod(engine.rank() - root, n);  // 0 at the root
  const std::size_t bytes = call.count * size_of(call.dtype);
  // The blocks of relative ranks v, v+1, ...: this rank's, then its subtree's as they arrive.
  int subtree = 1;
  while (subtree < n && (v & subtree) == 0) subtree <<= 1;
  std::vector<std::byte> held(static_cast<std::size_t>(std::min(subtree, n - v)) * bytes);
  engine.data().copy(held.data(), call.in, bytes);
  std::size_t have = 1;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      const int parent = positive_mod(v - mask + root, n);
      Primitives(engine, nullptr, &engine.connection(parent)).send(held.data(), have * call.count);
      return;
    }
    const int child = v + mask;
    if (child >= n) continue;
    const auto blocks = static_cast<std::size_t>(std::min(mask, n - child));
    Primitives(engine, &engine.connection(positive_mod(child + root, n)), nullptr)
        .recv(held.data() + have * bytes, blocks * call.count);
    have += blocks;
  }
  // The root: relative rank i is rank i + root.
  auto* out = static_cast<std::byte*>(call.out);
  for (int i = 0; i < n; ++i)
    engine.data().copy(out + static_cast<std::size_t>(positive_mod(i + root, n)) * bytes,
                       held.data() + static_cast<std::size_t>(i) * bytes, bytes);
}

}  // namespace loom::algorithms
