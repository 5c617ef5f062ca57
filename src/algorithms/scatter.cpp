// Scatter: block r of the root's input ends at rank r.
// - linear: the root sends each rank its block, in rank order, straight through the slots.
// - binomial: the root sends half of the blocks (those of relative ranks n/2 ...) to relative
//   rank n/2, a quarter to n/4, ...; each receiver does the same within its half. ceil(log2 n)
//   hops for small blocks, at the price of copies through the tree.
#include <vector>

#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

void linear_scatter(Engine& engine, const Collective& call) {
  const int n = engine.size(), r = engine.rank(), root = call.root;
  const std::size_t bytes = call.count * size_of(call.dtype);
  if (r != root) {
    Primitives(engine, &engine.connection(root), nullptr)
        .use_caller_memory(true)
        .recv(call.out, call.count);
    return;
  }
  const auto* in = static_cast<const std::byte*>(call.in);
  for (int k = 1; k < n; ++k) {
    const int to = positive_mod(root + k, n);
    Primitives(engine, nullptr, &engine.connection(to))
        .use_caller_memory(true)
        .send(in + static_cast<std::size_t>(to) * bytes, call.count);
  }
  const auto* mine = in + static_cast<std::size_t>(root) * bytes;
  if (call.out != mine) engine.data().copy(call.out, mine, bytes);
}

void binomial_scatter(Engine& engine, const Collective& call) {
  const int n = engine.size(), root = call.root;
  const int v = positive_mod(engine.rank() - root, n);  // 0 at the root
  const std::size_t bytes = call.count * size_of(call.dtype);
  // This rank's subtree: relative ranks v .. v + span - 1 (span a power of two, cut at n).
  int span = 1;
  if (v == 0) {
    while (span < n) span <<= 1;
  } else {
    span = v & -v;
  }
  const auto held_blocks = static_cast<std::size_t>(std::min(span, n - v));
  std::vector<std::byte> held(held_blocks * bytes);
  if (v == 0) {
    const auto* in = static_cast<const std::byte*>(call.in);
    for (int i = 0; i < n; ++i)  // relative rank i is rank i + root
      engine.data().copy(held.data() + static_cast<std::size_t>(i) * bytes,
                         in + static_cast<std::size_t>(positive_mod(i + root, n)) * bytes, bytes);
  } else {
    const int parent = positive_mod(v - span + root, n);
    Primitives(engine, &engine.connection(parent), nullptr)
        .recv(held.data(), held_blocks * call.count);
  }
  for (int mask = span >> 1; mask > 0; mask >>= 1) {
    const int child = v + mask;
    if (child >= n) continue;
    const auto blocks = static_cast<std::size_t>(std::min(mask, n - child));
    Primitives(engine, nullptr, &engine.connection(positive_mod(child + root, n)))
        .send(held.data() + static_cast<std::size_t>(mask) * bytes, blocks * call.count);
  }
  engine.data().copy(call.out, held.data(), bytes);
}

}  // namespace loom::algorithms
