// Waking the worker's sleep in a batch of sends and receives when another thread adds an
// operation to the batch. A receive posted ahead of each wait keeps the batch open and its
// worker asleep on the peer it waits for, while the caller's next send (which that peer waits
// for) sits in the queue until the sleep ends: a round trip took the sleep's cap (1 ms) instead
// of tens of microseconds. The worker marks where it sleeps (poll() with this object's eventfd
// among the descriptors, or one connection's futex) before it looks a last time for work, and
// the thread that queued the operation wakes that sleep.
#pragma once

#include <poll.h>

#include <atomic>
#include <vector>

namespace loom::transport {
class Connection;
}

namespace loom::algorithms {

class BatchWake {
 public:
  BatchWake();  // without an eventfd (none could be made), poll sleeps wake at their cap only
  ~BatchWake();
  BatchWake(const BatchWake&) = delete;
  BatchWake& operator=(const BatchWake&) = delete;

  // From any thread, after the operation is queued (a sequentially consistent store the worker
  // reads after marking its sleep): ends the sleep marked now, if any.
  void wake() noexcept;

  // The worker, before its last look for work: the sleep will be in poll() on `fds`, which gets
  // the eventfd, or on `connection`'s futex.
  void mark_poll(std::vector<pollfd>& fds);
  void mark_sleep_on(transport::Connection& connection);
  // The worker, after the sleep: clears the mark; empties the eventfd where poll() saw it ready.
  void unmark(const std::vector<pollfd>& fds);

 private:
  int fd_ = -1;
  std::atomic<bool> polling_{false};
  std::atomic<transport::Connection*> sleeper_{nullptr};
};

}  // namespace loom::algorithms
