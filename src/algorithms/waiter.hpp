// Waiting without burning the CPU: drive the connections' progress, spin for a bounded window
// (sched_yield when ranks outnumber cores), then sleep in poll() on their descriptors. Every
// wait ends at the call's deadline with a TimeoutError naming the call, the rank and the peer.
#pragma once

#include <vector>

#include "algorithms/collective.hpp"

namespace loom::algorithms {

class Waiter {
 public:
  // Waits drive every connection the engine's current call has used: a slot posted to a peer
  // in an earlier step must keep moving while this rank waits on another.
  explicit Waiter(const Engine& engine);

  // Returns once ready() is true. `peer` and `what` name the wait in a timeout message.
  template <typename Ready>
  void until(Ready&& ready, int peer, const char* what) {
    if (ready()) return;
    begin();
    while (!ready()) step(peer, what);
  }

 private:
  void begin();
  void step(int peer, const char* what);

  const Engine& engine_;
  std::vector<pollfd> fds_;
  core::Clock::time_point spin_until_;
  unsigned spins_ = 0;
  bool oversubscribed_;
};

}  // namespace loom::algorithms
