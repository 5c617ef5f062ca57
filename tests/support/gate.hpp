// A latch a test opens once: the threads that wait on it (a held call, a held rank) go on
// together.
#pragma once

#include <condition_variable>
#include <mutex>

namespace loom::testing {

class Gate {
 public:
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace loom::testing
