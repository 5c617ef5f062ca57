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
  // FNV-1a over the fields every rank must agree on. send and recv share one signature (they
  // are the two halves of one transfer) and are numbered per peer, in a space of their own.
  Kind k = kind == Kind::recv ? Kind::send : kind;
  std::uint64_t fields[] = {static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(dtype),
                            static_cast<std::uint64_t>(op), count,
                            static_cast<std::uint64_t>(k == Kind::send ? 0 : root)};
  std::uint32_t h = 2166136261u;
  for (std::uint64_t f : fields)
    for (int i = 0; i < 8; ++i) h = (h ^ static_cast<std::uint8_t>(f >> (8 * i))) * 16777619u;
  std::uint64_t space = k == Kind::send ? (1ull << 31) : 0;
  return (((seq & 0x7fffffff) | space) << 32) | h;
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

void Engine::run(const Collective& call) {
  call_ = &call;
  deadline_ = core::Deadline(config_.timeout);
  used_.clear();
  select_and_run(*this, call);
  // Slots still queued in user space would otherwise wait for this rank's next call.
  Waiter waiter(*this);
  for (transport::Connection* c : used_)
    waiter.until([c] { return c->send_idle(); }, c->peer(), "the send queue to drain to");
}

}  // namespace loom::algorithms
