// Waiting without burning the CPU: drive the connections' progress, spin for a bounded window
// (sched_yield when ranks outnumber cores), then sleep in poll() on their descriptors. Every
// wait ends at the call's deadline with a TimeoutError naming the call, the rank and the peer.
#pragma once

#include <initializer_list>
#include <vector>

#include "algorithms/collective.hpp"

namespace loom::algorithms {

class Waiter {
 public:
  Waiter(const Engine& engine, std::initializer_list<transport::Connection*> connections);

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
  std::vector<transport::Connection*> connections_;
  std::vector<pollfd> fds_;
  core::Clock::time_point spin_until_;
  bool oversubscribed_;
};

}  // namespace loom::algorithms
