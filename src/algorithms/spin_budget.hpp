// How long a wait spins before it sleeps: the state waiter.cpp learns across calls.
#pragma once

#include <algorithm>
#include <chrono>

namespace loom::algorithms {

// How long a wait spins before it sleeps, learned from the waits so far (additive increase,
// multiplicative decrease). A wait that spun its whole window and then slept, yet was over within
// a few windows, most likely waited for a peer this rank's spinning kept off a core (a loaded or
// shared host): the window halves. A wait that ended while spinning earns a little back, up to
// LOOM_SPIN_US. A wait far longer than that (a peer still computing) says nothing about either
// and changes nothing. On an idle host with a core per rank the window stays at its ceiling.
//
// A short window can trap itself: once every wait outlasts it, every hand-over pays a wake-up,
// waits stay longer than the window, and none ever ends while spinning to earn it back (two ranks
// with a core each ran at a third of their speed for a whole launch). So one wait in
// kExploreEvery spins the whole ceiling: if it ends while spinning, the window grows to twice
// that wait at once; if it spins out, it halves again as any other.
class SpinBudget {
 public:
  static constexpr int kMinUs = 1;
  static constexpr int kExploreEvery = 64;
  explicit SpinBudget(int ceiling_us = 200) { reset(ceiling_us); }
  void reset(int ceiling_us) {
    ceiling_us_ = std::max(0, ceiling_us);
    window_us_ = ceiling_us_;
    exploring_ = false;
    waits_ = 0;
  }
  int window_us() const { return window_us_; }
  int ceiling_us() const { return ceiling_us_; }
  // At the start of a wait: how long it may spin.
  int start_wait() {
    exploring_ = window_us_ < ceiling_us_ && ++waits_ % kExploreEvery == 0;
    return exploring_ ? ceiling_us_ : window_us_;
  }
  // Whether the wait under way spins the whole ceiling (its record needs the time it took).
  bool exploring() const { return exploring_; }
  // A wait of `waited` that ended while spinning (spun_out false), or after its window ran out.
  void record(std::chrono::microseconds waited, bool spun_out) {
    if (ceiling_us_ == 0) return;
    if (!spun_out) {
      window_us_ = std::min(ceiling_us_, window_us_ + std::max(1, ceiling_us_ / 16));
      if (exploring_)
        window_us_ = std::max(
            window_us_, static_cast<int>(std::min<long long>(ceiling_us_, 2 * waited.count() + 1)));
    } else if (waited.count() <= 4 * static_cast<long long>(ceiling_us_)) {
      window_us_ = std::max(std::min(kMinUs, ceiling_us_), window_us_ / 2);
    }
    exploring_ = false;
  }

 private:
  int ceiling_us_ = 0;
  int window_us_ = 0;
  bool exploring_ = false;
  unsigned waits_ = 0;
};

}  // namespace loom::algorithms
