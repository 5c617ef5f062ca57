// send and recv: the buffer streams through the slots of the connection to the peer. One at a
// time (point_to_point), or side by side (PointToPointBatch).
#include <algorithm>
#include <utility>

#include "algorithms/algorithms.hpp"
#include "algorithms/primitives.hpp"
#include "algorithms/waiter.hpp"

namespace loom::algorithms {

void point_to_point(Engine& engine, const Collective& call) {
  transport::Connection& peer = engine.connection(call.root);
  if (call.kind == Kind::send)
    Primitives(engine, nullptr, &peer).send(call.in, call.count);
  else
    Primitives(engine, &peer, nullptr).recv(call.out, call.count);
}

void PointToPointBatch::add(const Collective& call, std::function<void()> done) {
  Op& op = ops_.emplace_back(Op{call, std::move(done)});
  // Both ends choose the slice from the same call, as a dispatched call does.
  op.slice_bytes = engine_.selector().choose(call.kind, call.bytes(), false).slice;
}

bool PointToPointBatch::step() {
  bool moved = false;
  blocked_.clear();  // (peer, direction) with an earlier operation still open
  for (std::size_t i = first_open_; i < ops_.size(); ++i) {
    Op& op = ops_[i];
    if (op.finished) continue;
    const auto lane = std::pair{op.call.root, op.call.kind};
    if (std::find(blocked_.begin(), blocked_.end(), lane) != blocked_.end()) continue;
    current_ = &op.call;
    engine_.enter(op.call, op.slice_bytes);
    transport::Connection& peer = engine_.connection(op.call.root);
    const std::size_t before = op.moved;
    if (op.call.kind == Kind::send)
      op.moved = Primitives(engine_, nullptr, &peer).send_some(op.call.in, op.call.count, op.moved);
    else
      op.moved =
          Primitives(engine_, &peer, nullptr).recv_some(op.call.out, op.call.count, op.moved);
    moved |= op.moved != before;
    if (op.moved < op.call.count) {
      blocked_.push_back(lane);
      continue;
    }
    op.finished = true;
    // A send's buffer is free once its slices are in the slots; they reach the peer as the
    // connection drains (the flush at the batch's end, or any later wait).
    op.done();
  }
  while (first_open_ < ops_.size() && ops_[first_open_].finished) ++first_open_;
  // Finished operations go: a batch may never end (a receive posted ahead of each wait keeps
  // it open), and must not grow with every operation it ran. All but the one the engine and
  // current() point at, which goes at the next step that enters another.
  while (first_open_ > 0 && &ops_.front().call != current_) {
    ops_.pop_front();
    --first_open_;
  }
  return moved;
}

void PointToPointBatch::run(bool background, const std::function<void()>& more) {
  engine_.begin_batch(background);
  Waiter waiter(engine_);
  // What arrives may come on a connection other than the one the sleep watches, and operations
  // issued meanwhile join (they wake the sleep too): look again every millisecond.
  waiter.cap_sleep_ms(1);
  waiter.wake_with(engine_.batch_wake());
  for (;;) {
    more();
    if (step()) {
      engine_.restart_deadline();
      continue;
    }
    if (first_open_ == ops_.size()) {
      more();
      if (first_open_ == ops_.size()) break;
      continue;
    }
    const Op& waiting = ops_[first_open_];
    waiter.until(
        [&] {
          more();
          return step() || first_open_ == ops_.size();
        },
        waiting.call.root, waiting.call.kind == Kind::send ? "a free send slot to" : "data from");
    engine_.restart_deadline();
  }
  if (current_ != nullptr) engine_.flush();
}

}  // namespace loom::algorithms
