// Absolute deadlines: every blocking wait in Loom has one.
#pragma once

#include <algorithm>
#include <chrono>

namespace loom::core {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds timeout)
      : at_(timeout.count() >= kForeverMs ? Clock::time_point::max() : Clock::now() + timeout) {}
  bool expired() const { return Clock::now() >= at_; }
  // Milliseconds left, clamped to [0, cap]: suitable for poll().
  int remaining_ms(int cap = 100) const {
    if (at_ == Clock::time_point::max()) return cap;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left + 1, 0, cap));
  }

 private:
  static constexpr long long kForeverMs = 1000LL * 3600 * 24 * 365;
  Clock::time_point at_;
};

}  // namespace loom::core
