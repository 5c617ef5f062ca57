// Absolute deadlines: every blocking wait in Loom has one.
#pragma once

#include <algorithm>
#include <chrono>

namespace loom::base {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds timeout) : timeout_(timeout) { start(); }
  // A deadline whose clock starts at its first query: a call that never has to wait never reads
  // the clock (a few percent of an 8-byte all-reduce).
  static Deadline from_first_wait(std::chrono::milliseconds timeout) {
    return Deadline(timeout, Lazy{});
  }

  bool expired() const { return Clock::now() >= at(); }
  // Milliseconds left, clamped to [0, cap]: suitable for poll().
  int remaining_ms(int cap = 100) const {
    if (at() == Clock::time_point::max()) return cap;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left + 1, 0, cap));
  }

 private:
  struct Lazy {};
  Deadline(std::chrono::milliseconds timeout, Lazy) : timeout_(timeout), started_(false) {}
  void start() const {
    at_ = timeout_.count() >= kForeverMs ? Clock::time_point::max() : Clock::now() + timeout_;
    started_ = true;
  }
  Clock::time_point at() const {
    if (!started_) start();
    return at_;
  }

  static constexpr long long kForeverMs = 1000LL * 3600 * 24 * 365;
  std::chrono::milliseconds timeout_;
  mutable Clock::time_point at_{};
  mutable bool started_ = true;
};

}  // namespace loom::base
