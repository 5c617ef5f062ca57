// The algorithms that pair ranks by rank ^ 2^k (recursive doubling, halving-doubling) run among
// p ranks, p the largest power of two <= n. The n - p others fold in first: rank p + i hands its
// input to rank i, which reduces it into its own, and gets the result back at the end.
#pragma once

#include "algorithms/primitives.hpp"

namespace loom::algorithms {

inline int power_of_two_below(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// Rank p + i sends its input to rank i and receives the result into call.out: false, its part is
// done. Rank i < n - p receives that input and reduces it with its own into call.out. Every rank
// below p returns true and takes part.
inline bool fold_in(Engine& engine, const Collective& call, int p) {
  const int r = engine.rank();
  if (r >= p) {
    transport::Connection& partner = engine.connection(r - p);
    Primitives prims(engine, &partner, &partner);
    prims.send(call.in, call.count);
    prims.recv(call.out, call.count);
    return false;
  }
  if (r < engine.size() - p) {
    transport::Connection& partner = engine.connection(r + p);
    Primitives(engine, &partner, nullptr).recv_reduce_copy(call.in, call.out, call.count, false, 1);
  }
  return true;
}

// Rank i < n - p sends the result in call.out, final, back to rank p + i (from call.out in place
// where the transport can: it stays unchanged until the call ends).
inline void fold_out(Engine& engine, const Collective& call, int p) {
  const int r = engine.rank();
  if (r >= engine.size() - p) return;
  transport::Connection& partner = engine.connection(r + p);
  Primitives(engine, nullptr, &partner).use_caller_memory(true).send(call.out, call.count);
}

}  // namespace loom::algorithms
