#include "algorithms/batch_wake.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "transports/transport.hpp"

namespace loom::algorithms {

BatchWake::BatchWake() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

BatchWake::~BatchWake() {
  if (fd_ >= 0) ::close(fd_);
}

void BatchWake::wake() noexcept {
  if (polling_.load(std::memory_order_seq_cst) && fd_ >= 0) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(fd_, &one, sizeof one);  // full: already ready
  }
  if (transport::Connection* c = sleeper_.load(std::memory_order_seq_cst)) c->wake_sleep();
}

void BatchWake::mark_poll(std::vector<pollfd>& fds) {
  if (fd_ < 0) return;
  fds.push_back(pollfd{fd_, POLLIN, 0});
  polling_.store(true, std::memory_order_seq_cst);
  // The worker's next look at the queue comes after this mark (store-load order).
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void BatchWake::mark_sleep_on(transport::Connection& connection) {
  sleeper_.store(&connection, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void BatchWake::unmark(const std::vector<pollfd>& fds) {
  polling_.store(false, std::memory_order_relaxed);
  sleeper_.store(nullptr, std::memory_order_relaxed);
  if (fds.empty() || fds.back().fd != fd_ || fd_ < 0 || (fds.back().revents & POLLIN) == 0) return;
  std::uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = ::read(fd_, &count, sizeof count);
}

}  // namespace loom::algorithms
