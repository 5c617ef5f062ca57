// Waiting without burning the CPU: drive the connections' progress, spin for a bounded window
// (sched_yield when ranks outnumber cores), then sleep in poll() on their descriptors or on the
// waited connection's futex. Every wait ends at the call's deadline with a TimeoutError naming
// the call, the rank and the peer.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/batch_wake.hpp"
#include "algorithms/engine.hpp"

namespace loom::algorithms {

class Waiter {
 public:
  // Waits drive every connection the engine's current call has used: a slot posted to a peer
  // in an earlier step must keep moving while this rank waits on another.
  explicit Waiter(const Engine& engine);
  // The longest one sleep lasts before the waiter looks again (100 ms by default): shorter where
  // what is waited for may arrive on a connection the sleep does not watch.
  void cap_sleep_ms(int ms) { sleep_cap_ms_ = ms; }
  // Sleeps that another thread may end early through `wake` (a batch that operations join).
  void wake_with(BatchWake& wake) { wake_ = &wake; }

  // Returns once ready() is true. `peer` and `what` name the wait in a timeout message.
  template <typename Ready>
  void until(Ready&& ready, int peer, const char* what) {
    if (ready()) return;
    const base::Clock::time_point started = begin();
    bool spun_out = false;
    std::uint64_t sleeps = 0;
    while (!ready()) {
      if (spin(peer, what)) continue;
      spun_out = true;
      transport::Connection* sleeper = prepare_sleep(peer, what);
      const Unmark unmark{wake_, fds_};  // also where ready() or sleep() raises
      if (ready()) break;                // what the sleeper recorded is older than this look
      sleep(sleeper);
      ++sleeps;
    }
    learn(started, spun_out);
    if (engine_.counting_waits()) note(started, sleeps);
  }

 private:
  // Clears the sleep's mark (BatchWake) when the look or the sleep after it ends.
  struct Unmark {
    BatchWake* wake;
    const std::vector<pollfd>& fds;
    ~Unmark() {
      if (wake != nullptr) wake->unmark(fds);
    }
  };
  // Opens the spinning window; returns the time it read.
  base::Clock::time_point begin();
  // Tells the spin budget how the wait went (a clock read only for a wait that spun out).
  void learn(base::Clock::time_point started, bool spun_out);
  // Adds this wait to the engine's count (Engine::count_waits).
  void note(base::Clock::time_point started, std::uint64_t sleeps) const;
  void open_spin_window(base::Clock::time_point now);
  // Moves every connection; true while the spinning window lasts (after a pause or yield). A
  // peer that keeps moving keeps the window open, so the halt and the deadline are looked at
  // here too, at least every kCheckEvery.
  bool spin(int peer, const char* what);
  // Raises the halt's error once it is triggered, TimeoutError past the deadline.
  void check(int peer, const char* what) const;
  // check(); then readies the sleep on `peer`'s connection (the one without descriptors) or on
  // the descriptors of all, and returns which.
  transport::Connection* prepare_sleep(int peer, const char* what);
  void sleep(transport::Connection* sleeper);

  const Engine& engine_;
  std::vector<pollfd> fds_;
  bool poll_waited_fd_ = false;  // the waited connection has descriptors in fds_
  static constexpr auto kCheckEvery = std::chrono::milliseconds(2);
  base::Clock::time_point spin_until_;
  base::Clock::time_point next_check_;
  unsigned spins_ = 0;
  bool yield_ = false;  // spin by yielding, briefly (decided whenever the window opens)
  int window_us_ = 0;   // how long this wait pauses after the last movement (decided at begin())
  int sleep_cap_ms_ = 100;
  BatchWake* wake_ = nullptr;
};

}  // namespace loom::algorithms
