#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <memory>

#include "loom/loom.hpp"

namespace loom {

struct LOOM_INTERNAL Work::State {
  std::function<void()> run;
  std::exception_ptr error;
  // Set by run when it succeeded on device buffers: orders the user's stream after the call.
  // Applied by wait() and by test() when they find the call done.
  std::function<void()> order_stream;
  std::atomic<std::uint32_t> done{0};      // futex word: 1 once run has finished
  std::atomic<std::uint32_t> sleepers{0};  // waiters inside futex_wait: wake only if any
  // The communicator's count of threads blocked in Work::wait: while one waits, the engine's
  // thread has the rank's core to itself and spins as a blocking call would.
  std::shared_ptr<std::atomic<int>> waiting;
  // Runs the operation, records its error, and wakes waiters.
  void execute();
  // Done without run (an operation a batch ran): records `failure` (null: success), wakes.
  void finish(std::exception_ptr failure);
};

}  // namespace loom
