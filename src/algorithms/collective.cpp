#include "algorithms/collective.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "algorithms/waiter.hpp"

namespace loom::algorithms {

std::string_view to_string(Kind kind) {
  switch (kind) {
    case Kind::all_reduce:
      return "all_reduce";
    case Kind::reduce_scatter:
      return "reduce_scatter";
    case Kind::all_gather:
      return "all_gather";
    case Kind::broadcast:
      return "broadcast";
    case Kind::reduce:
      return "reduce";
    case Kind::barrier:
      return "barrier";
    case Kind::send:
      return "send";
    case Kind::recv:
      return "recv";
  }
  return "?";
}

std::uint64_t Collective::compute_tag() const {
  // A 32-bit hash of the fields every rank must agree on. send and recv share one signature
  // (they are the two halves of one transfer) and are numbered per peer, in a space of their own.
  auto mix =
      [](std::uint64_t x) {  // MurmurHash3's finaliser: every input bit moves every output bit
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 33;
        x *= 0xc4ceb9fe1a85ec53ull;
        return x ^ (x >> 33);
      };
  Kind k = kind == Kind::recv ? Kind::send : kind;
  std::uint64_t fields =
      static_cast<std::uint64_t>(k) | static_cast<std::uint64_t>(dtype) << 8 |
      static_cast<std::uint64_t>(op) << 16 |
      static_cast<std::uint64_t>(static_cast<std::uint32_t>(k == Kind::send ? 0 : root)) << 32;
  std::uint64_t h = mix(fields ^ mix(count + 0x9e3779b97f4a7c15ull));
  std::uint64_t space = k == Kind::send ? (1ull << 31) : 0;
  return (((seq & 0x7fffffff) | space) << 32) | (h & 0xffffffffull);
}

std::string Collective::describe() const {
  switch (kind) {
    case Kind::barrier:
      return fmt::format("barrier #{}", seq);
    case Kind::all_gather:
      return fmt::format("all_gather #{} ({} x {})", seq, loom::to_string(dtype), count);
    case Kind::send:
    case Kind::recv:
      return fmt::format("{} #{} ({} x {}, peer {})", to_string(kind), seq, loom::to_string(dtype),
                         count, root);
    case Kind::broadcast:
      return fmt::format("broadcast #{} ({} x {}, root {})", seq, loom::to_string(dtype), count,
                         root);
    case Kind::reduce:
      return fmt::format("reduce #{} ({} x {}, {}, root {})", seq, loom::to_string(dtype), count,
                         loom::to_string(op), root);
    default:
      return fmt::format("{} #{} ({} x {}, {})", to_string(kind), seq, loom::to_string(dtype),
                         count, loom::to_string(op));
  }
}

transport::Connection& Engine::connection(int peer) {
  transport::Connection& c = transport_.connect(peer, deadline_);
  if (std::find(used_.begin(), used_.end(), &c) == used_.end()) used_.push_back(&c);
  return c;
}

void select_and_run(Engine& engine, const Collective& call);  // selection.cpp

void Engine::run(const Collective& call, bool background) {
  call_ = &call;
  background_ = background;
  deadline_ = core::Deadline::from_first_wait(config_.timeout);
  used_.clear();
  select_and_run(*this, call);
  // Slots still queued in user space would otherwise wait for this rank's next call.
  Waiter waiter(*this);
  for (transport::Connection* c : used_)
    waiter.until([c] { return c->send_idle(); }, c->peer(), "the send queue to drain to");
}

}  // namespace loom::algorithms
