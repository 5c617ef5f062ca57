#include "algorithms/engine.hpp"

#include <algorithm>

#include "algorithms/waiter.hpp"

namespace loom::algorithms {

transport::Connection& Engine::connection(int peer) {
  const bool device = device_path_ != nullptr;
  auto& table = device ? by_peer_device_ : by_peer_;
  if (table.empty()) table.assign(static_cast<std::size_t>(size_), nullptr);
  transport::Connection*& known = table[static_cast<std::size_t>(peer)];
  if (known == nullptr) {
    if (device) {
      known = &transport_.connect_device(peer, deadline_, halt_);
      device_path_->attach(*known);
    } else {
      known = &transport_.connect(peer, deadline_, halt_);
    }
  }
  if (std::find(used_.begin(), used_.end(), known) == used_.end()) used_.push_back(known);
  return *known;
}

void select_and_run(Engine& engine, const Collective& call);  // selection.cpp

const transport::Tag* Engine::own_call_like(const transport::Tag& tag) const {
  const transport::Tag& mine = history_[(tag.word >> 33) % kHistory];
  const bool same_space_and_seq = (mine.word >> 32) == (tag.word >> 32);
  return mine.word != 0 && same_space_and_seq ? &mine : nullptr;
}

void Engine::run(const Collective& call, bool background, DataPath* device_path) {
  call_ = &call;
  device_path_ = device_path;
  background_ = background;
  slice_bytes_ = 0;
  if (call.kind != Kind::send && call.kind != Kind::recv)
    history_[(call.tag().word >> 33) % kHistory] = call.tag();
  deadline_ = base::Deadline::from_first_wait(config_.timeout);
  used_.clear();
  select_and_run(*this, call);
  // Slots still queued in user space would otherwise wait for this rank's next call.
  Waiter waiter(*this);
  for (transport::Connection* c : used_)
    waiter.until([c] { return c->send_idle(); }, c->peer(), "the send queue to drain to");
  if (device_path_) device_path_->complete();
}

}  // namespace loom::algorithms
