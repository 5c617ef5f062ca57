// send and recv: the buffer streams through the slots of the connection to the peer.
#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

void point_to_point(Engine& engine, const Collective& call) {
  transport::Connection& peer = engine.connection(call.root);
  if (call.kind == Kind::send)
    Primitives(engine, nullptr, &peer).send(call.in, call.count);
  else
    Primitives(engine, &peer, nullptr).recv(call.out, call.count);
}

}  // namespace loom::algorithms
