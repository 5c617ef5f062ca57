#include "core/work.hpp"

#include <thread>

#include <fmt/format.h>

#include "base/deadline.hpp"
#include "base/futex.hpp"

namespace loom {

void Work::State::execute() {
  std::exception_ptr failure;
  try {
    run();
  } catch (...) {
    failure = std::current_exception();
  }
  finish(failure);
}

void Work::State::finish(std::exception_ptr failure) {
  error = std::move(failure);
  run = nullptr;
  done.store(1, std::memory_order_seq_cst);
  // seq_cst on both sides: either the waiter sees done, or this sees the waiter.
  if (sleepers.load(std::memory_order_seq_cst) != 0) base::futex_wake_all(done);
}

Work::Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

bool Work::test() const {
  if (!state_) throw InvalidArgument("Work::test: empty Work handle");
  if (state_->done.load(std::memory_order_acquire) == 0) return false;
  if (state_->error) std::rethrow_exception(state_->error);
  if (state_->order_stream) state_->order_stream();
  return true;
}

void Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) throw InvalidArgument("Work::wait: empty Work handle");
  if (state_->done.load(std::memory_order_acquire) != 0) {
    if (state_->error) std::rethrow_exception(state_->error);
    if (state_->order_stream) state_->order_stream();
    return;
  }
  base::Deadline deadline(timeout);
  if (state_->waiting) state_->waiting->fetch_add(1, std::memory_order_relaxed);
  struct Done {
    std::atomic<int>* waiting;
    ~Done() {
      if (waiting) waiting->fetch_sub(1, std::memory_order_relaxed);
    }
  } done_waiting{state_->waiting.get()};
  // A short spin catches operations that are about to finish without a sleep and wake-up.
  const auto spin_until = base::Clock::now() + std::chrono::microseconds(20);
  while (state_->done.load(std::memory_order_acquire) == 0) {
    if (base::Clock::now() < spin_until) {
      std::this_thread::yield();
      continue;
    }
    if (deadline.expired())
      throw TimeoutError(
          fmt::format("Work::wait: the operation did not finish within {} ms", timeout.count()));
    state_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (state_->done.load(std::memory_order_seq_cst) == 0)
      base::futex_wait(state_->done, 0, deadline.remaining_ms(100));
    state_->sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
  if (state_->error) std::rethrow_exception(state_->error);
  if (state_->order_stream) state_->order_stream();
}

}  // namespace loom
