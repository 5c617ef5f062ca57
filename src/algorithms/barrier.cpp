// Dissemination barrier: in round k every rank signals rank+2^k and waits for rank-2^k;
// after ceil(log2 n) rounds every rank has heard, through some chain, from every other.
#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

void dissemination_barrier(Engine& engine, const Collective& /*call*/) {
  const std::uint8_t token = 1;
  std::uint8_t received = 0;
  for (int k = 1; k < engine.size(); k *= 2) {
    transport::Connection& to = engine.connection(engine.ring_next(k));
    transport::Connection& from = engine.connection(engine.ring_prev(k));
    Primitives prims(engine, &from, &to);
    prims.send(&token, 1);
    prims.recv(&received, 1);
  }
}

}  // namespace loom::algorithms
