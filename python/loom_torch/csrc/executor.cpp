#include "executor.hpp"

#include <algorithm>
#include <stdexcept>

namespace loom_torch {

namespace {
// The worker leaves a new operation this long to a thread that waits for it at once (a blocking
// dist call), which then runs it without a hand-off; operations nobody waits for start after it.
// (A send or receive with nothing ahead is issued by the thread that submits it: submit().)
constexpr std::chrono::microseconds kGrace{100};
// How often the worker looks at issued operations nobody waits for (their futures complete).
constexpr std::chrono::milliseconds kInFlightPoll{1};
// How often an idle worker looks at the queue: an operation its caller said it would wait for at
// once wakes nobody, and runs here this late at the latest if the caller did not.
constexpr std::chrono::milliseconds kIdlePoll{10};
}  // namespace

std::shared_ptr<Executor> Executor::start() {
  std::shared_ptr<Executor> executor(new Executor());
  executor->worker_ = std::thread([self = executor] { self->work_loop(); });
  return executor;
}

// Runs where the last reference goes: after shutdown(), on the worker as it ends, or elsewhere
// once it has ended.
Executor::~Executor() {
  if (!worker_.joinable()) return;
  if (worker_.get_id() == std::this_thread::get_id())
    worker_.detach();
  else
    worker_.join();
}

void Executor::submit(std::shared_ptr<Op> op) {
  op->submitted = std::chrono::steady_clock::now();
  const bool wake = !op->waited_at_once;
  {
    std::unique_lock lock(mu_);
    if (stopping_) throw std::logic_error("the process group was shut down");
    // A send or receive with nothing ahead of it is issued here and now: issuing only queues
    // Loom's call, and left to the worker it waited kGrace first (a pipeline's step, whose irecv
    // is posted ahead and whose isend follows, took 100 us a message more than its transfer).
    if (op->issue && queue_.empty() && !running_) {
      op->taken = true;
      running_ = true;
      lock.unlock();
      execute(op);
      return;
    }
    queue_.push_back(std::move(op));
  }
  if (wake) work_cv_.notify_one();
}

bool Executor::wait(const std::shared_ptr<Op>& op, std::chrono::milliseconds timeout) {
  if (op->done.load(std::memory_order_acquire)) return true;
  if (auto batch = op->batch.lock()) return wait(batch, timeout);  // members finish first
  if (op->batched) return true;  // its batch has not ended: it completes with the batch
  const bool timed = timeout.count() > 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(mu_);
  while (!op->done.load(std::memory_order_acquire)) {
    // Issued and unclaimed: complete it here (Loom progresses it whoever waits).
    if (op->in_flight && !timed) {
      op->in_flight = false;
      std::erase(in_flight_, op);
      lock.unlock();
      complete(op);
      lock.lock();
      continue;
    }
    // Run the operations up to this one here, unless a timeout was asked for (an operation
    // cannot be left half way when it passes).
    const bool mine_queued = !op->taken;
    if (!timed && mine_queued && !running_ && !queue_.empty()) {
      std::shared_ptr<Op> next = std::move(queue_.front());
      queue_.pop_front();
      next->taken = true;
      running_ = true;
      lock.unlock();
      execute(next);
      lock.lock();
      continue;
    }
    if (!timed) {
      done_cv_.wait(lock);
    } else if (done_cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return op->done.load(std::memory_order_acquire);
    }
  }
  return true;
}

void Executor::execute(const std::shared_ptr<Op>& op) {
  std::exception_ptr error;
  if (op->issue) {
    try {
      op->issued = op->issue();
    } catch (...) {
      error = std::current_exception();
    }
    op->issue = nullptr;
    if (!error) {
      bool wake = false;
      {
        std::lock_guard lock(mu_);
        running_ = false;
        op->in_flight = true;
        // The worker looks at the operations in flight every kInFlightPoll while there are
        // any: woken for the first (it may wait kIdlePoll), and for what is queued behind.
        wake = in_flight_.empty() || !queue_.empty();
        in_flight_.push_back(op);
      }
      if (wake) work_cv_.notify_one();
      done_cv_.notify_all();
      return;
    }
  } else {
    try {
      op->body();
    } catch (...) {
      error = std::current_exception();
    }
  }
  op->body = nullptr;  // drops the tensors it holds
  bool more = false;
  {
    std::lock_guard lock(mu_);
    running_ = false;
    more = !queue_.empty();
  }
  if (more) work_cv_.notify_one();  // the worker is needed only for what is queued behind
  done_cv_.notify_all();
  finish(op, error);
}

void Executor::complete(const std::shared_ptr<Op>& op) {
  std::exception_ptr error;
  try {
    op->issued.wait();
    if (op->body) op->body();
  } catch (...) {
    error = std::current_exception();
  }
  op->body = nullptr;
  op->issued = loom::Work();
  finish(op, error);
}

void Executor::finish(const std::shared_ptr<Op>& op, std::exception_ptr error) {
  op->error = error;
  if (error && op->on_error) op->on_error(error);
  op->on_error = nullptr;
  for (const auto& member : op->members) finish(member, error);
  op->members.clear();
  // Outside the lock and with the next operation free to run: the future's callbacks may issue
  // and wait for operations of this process group.
  if (op->finish) op->finish(op->error);
  op->finish = nullptr;
  bool more = false;
  {
    std::lock_guard lock(mu_);
    op->done.store(true, std::memory_order_release);
    // (The worker already looks at what is in flight every kInFlightPoll.)
    more = !queue_.empty() || stopping_;
  }
  done_cv_.notify_all();
  if (more) work_cv_.notify_one();
}

std::vector<std::shared_ptr<Op>> Executor::claim_finished() {
  std::vector<std::shared_ptr<Op>> finished;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    bool over = true;
    try {
      over = (*it)->issued.test();
    } catch (...) {
      // complete() rethrows it
    }
    if (!over) {
      ++it;
      continue;
    }
    (*it)->in_flight = false;
    finished.push_back(std::move(*it));
    it = in_flight_.erase(it);
  }
  return finished;
}

void Executor::work_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (!in_flight_.empty()) {
      auto finished = claim_finished();
      if (!finished.empty()) {
        lock.unlock();
        for (auto& op : finished) complete(op);
        lock.lock();
        continue;
      }
    }
    if (queue_.empty() || running_) {
      if (stopping_ && queue_.empty() && !running_ && in_flight_.empty()) {
        worker_done_ = true;
        done_cv_.notify_all();
        return;
      }
      work_cv_.wait_for(lock, in_flight_.empty() ? kIdlePoll : kInFlightPoll);
      continue;
    }
    const auto due = queue_.front()->submitted + kGrace;
    if (!stopping_ && std::chrono::steady_clock::now() < due) {
      work_cv_.wait_until(lock, due);
      continue;
    }
    std::shared_ptr<Op> op = std::move(queue_.front());
    queue_.pop_front();
    op->taken = true;
    running_ = true;
    lock.unlock();
    execute(op);
    lock.lock();
  }
}

void Executor::shutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  // On the worker (the process group's last reference went in a future's callback) it finishes
  // the queue after returning here.
  if (worker_.get_id() == std::this_thread::get_id()) return;
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return queue_.empty() && !running_ && worker_done_; });
  // (the worker ends only once every issued operation is complete)
}

}  // namespace loom_torch
