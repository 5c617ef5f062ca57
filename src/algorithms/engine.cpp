#include "algorithms/engine.hpp"

#include <algorithm>

#include "algorithms/algorithms.hpp"
#include "algorithms/dispatch.hpp"
#include "algorithms/waiter.hpp"

namespace loom::algorithms {

transport::Connection& Engine::connection(int peer) {
  if (device_path_ == nullptr) return host_connection(peer);
  if (by_peer_device_.empty()) by_peer_device_.assign(static_cast<std::size_t>(size_), nullptr);
  transport::Connection*& known = by_peer_device_[static_cast<std::size_t>(peer)];
  if (known == nullptr) {
    known = &transport_.connect_device(peer, deadline_, halt_);
    device_path_->attach(*known);
  }
  use(*known);
  return *known;
}

transport::Connection& Engine::host_connection(int peer) {
  if (by_peer_.empty()) by_peer_.assign(static_cast<std::size_t>(size_), nullptr);
  transport::Connection*& known = by_peer_[static_cast<std::size_t>(peer)];
  if (known == nullptr) known = &transport_.connect(peer, deadline_, halt_);
  use(*known);
  return *known;
}

RingPosition Engine::ring() {
  RingPosition ring{size_, rank_, nullptr, nullptr};
  if (size_ > 1) {
    ring.next = &connection(ring_next());
    ring.prev = &connection(ring_prev());
  }
  return ring;
}

void Engine::use(transport::Connection& connection) {
  if (std::find(used_.begin(), used_.end(), &connection) == used_.end())
    used_.push_back(&connection);
}

const transport::Tag* Engine::own_call_like(const transport::Tag& tag) const {
  const transport::Tag& mine = history_[(tag.word >> 33) % kHistory];
  const bool same_space_and_seq = (mine.word >> 32) == (tag.word >> 32);
  return mine.word != 0 && same_space_and_seq ? &mine : nullptr;
}

void Engine::run(const Collective& call, Dispatcher& dispatcher, bool background,
                 DataPath* device_path, PeerMemory* peer_memory) {
  begin(&call, background, device_path, peer_memory);
  if (call.kind != Kind::send && call.kind != Kind::recv)
    history_[(call.tag().word >> 33) % kHistory] = call.tag();
  try {
    dispatcher.run(*this, call);
    flush();
  } catch (...) {
    // The caller's buffers are free once the call ends, failed or not: nothing queued may still
    // read or write them.
    for (transport::Connection* c : used_) {
      c->settle_sends();
      c->unsteer();
    }
    throw;
  }
  if (device_path_ && !device_ordered_) device_path_->complete();
}

void Engine::flush() {
  // Slots still queued in user space would otherwise wait for this rank's next call.
  Waiter waiter(*this);
  for (transport::Connection* c : used_)
    waiter.until([c] { return c->send_idle(); }, c->peer(), "the send queue to drain to");
}

void Engine::begin(const Collective* call, bool background, DataPath* device_path,
                   PeerMemory* peer_memory) {
  call_ = call;
  device_path_ = device_path;
  peer_memory_ = peer_memory;
  background_ = background;
  device_ordered_ = false;
  slice_bytes_ = 0;
  round_slices_ = 0;
  restart_deadline();
  used_.clear();
}

void Engine::begin_batch(bool background) {
  begin(nullptr, background, nullptr, nullptr);
}

void Engine::enter(const Collective& call, std::size_t slice_bytes) {
  call_ = &call;
  slice_bytes_ = slice_bytes;
  round_slices_ = 0;
}

}  // namespace loom::algorithms
