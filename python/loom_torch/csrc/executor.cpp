#include "executor.hpp"

#include <algorithm>
#include <stdexcept>

namespace loom_torch {

namespace {
// The worker leaves a new operation this long to a thread that waits for it at once (a blocking
// dist call), which then runs it without a hand-off; operations nobody waits for start after it.
// (A send or receive with nothing ahead is issued by the thread that submits it: submit().)
constexpr std::chrono::microseconds kGrace{100};
// How often a worker looks at issued operations nobody waits for (their futures complete).
constexpr std::chrono::milliseconds kInFlightPoll{1};
// How often an idle worker looks at the queue: an operation its caller said it would wait for at
// once wakes nobody, and runs here this late at the latest if the caller did not.
constexpr std::chrono::milliseconds kIdlePoll{10};
// Workers at most: as many callbacks may wait at once (one a bucket, with PowerSGD's hook); more
// wait until one of them returns, or for ever if none does (as with one worker).
constexpr int kMaxWorkers = 256;
// A worker other than the first ends once it has had nothing to do this long while another worker
// is free (not inside callbacks).
constexpr std::chrono::seconds kRetireAfter{1};

// The executor whose worker this thread is (null on other threads), and how deep in futures'
// callbacks that worker is.
thread_local const Executor* worker_of = nullptr;
thread_local int callback_depth = 0;
}  // namespace

std::shared_ptr<Executor> Executor::start() {
  std::shared_ptr<Executor> executor(new Executor());
  std::lock_guard lock(executor->mu_);
  executor->start_worker(true);
  return executor;
}

// Runs where the last reference goes: after shutdown(), on a worker as it ends, or elsewhere
// once they have ended (every worker holds a reference until it leaves its loop).
Executor::~Executor() {
  if (!first_worker_.joinable()) return;
  if (first_worker_.get_id() == std::this_thread::get_id())
    first_worker_.detach();
  else
    first_worker_.join();
}

void Executor::start_worker(bool first) {
  // (It cannot start its loop before the count below: it takes the lock held here.)
  std::thread worker([self = shared_from_this(), first] { self->work_loop(first); });
  ++workers_;
  if (first)
    first_worker_ = std::move(worker);
  else
    worker.detach();
}

void Executor::add_worker_if_stuck() noexcept {
  const bool stuck = workers_ == in_callbacks_ && (!queue_.empty() || !in_flight_.empty());
  if (!stuck || workers_ >= kMaxWorkers) return;
  try {
    start_worker(false);
  } catch (...) {
    // No thread to spare: the callbacks wait as they would with one worker, until one returns.
  }
}

void Executor::submit(std::shared_ptr<Op> op) {
  op->submitted = std::chrono::steady_clock::now();
  const bool wake = !op->waited_at_once;
  {
    std::unique_lock lock(mu_);
    if (stopping_) throw std::logic_error("the process group was shut down");
    // A send or receive with nothing ahead of it is issued here and now: issuing only queues
    // Loom's call, and left to a worker it waited kGrace first (a pipeline's step, whose irecv
    // is posted ahead and whose isend follows, took 100 us a message more than its transfer).
    if (op->issue && queue_.empty() && !running_) {
      op->taken = true;
      running_ = true;
      lock.unlock();
      execute(op);
      return;
    }
    queue_.push_back(std::move(op));
    add_worker_if_stuck();
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
        add_worker_if_stuck();
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
  if (more) work_cv_.notify_one();  // a worker is needed only for what is queued behind
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

// A worker inside futures' callbacks, counted once however deeply they nest.
class Executor::InCallbacks {
 public:
  explicit InCallbacks(Executor& executor)
      : executor_(executor),
        on_worker_(worker_of == &executor),
        counted_(on_worker_ && callback_depth++ == 0) {
    if (!counted_) return;
    std::lock_guard lock(executor_.mu_);
    ++executor_.in_callbacks_;
    executor_.add_worker_if_stuck();
  }
  ~InCallbacks() {
    if (on_worker_) --callback_depth;
    if (!counted_) return;
    std::lock_guard lock(executor_.mu_);
    --executor_.in_callbacks_;
  }
  InCallbacks(const InCallbacks&) = delete;
  InCallbacks& operator=(const InCallbacks&) = delete;

 private:
  Executor& executor_;
  const bool on_worker_;
  const bool counted_;
};

void Executor::finish(const std::shared_ptr<Op>& op, std::exception_ptr error) {
  op->error = error;
  if (error && op->on_error) op->on_error(error);
  op->on_error = nullptr;
  for (const auto& member : op->members) finish(member, error);
  op->members.clear();
  // Outside the lock and with the next operation free to run: the future's callbacks may issue
  // and wait for operations of this process group. On a worker, they count as its time inside
  // callbacks, where another worker may be needed.
  if (op->finish) {
    InCallbacks inside(*this);
    op->finish(op->error);
  }
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

std::shared_ptr<Op> Executor::claim_finished() {
  for (auto it = in_flight_.begin(); it != in_flight_.end(); ++it) {
    bool over = true;
    try {
      over = (*it)->issued.test();
    } catch (...) {
      // complete() rethrows it
    }
    if (!over) continue;
    std::shared_ptr<Op> finished = std::move(*it);
    finished->in_flight = false;
    in_flight_.erase(it);
    return finished;
  }
  return nullptr;
}

void Executor::work_loop(bool first) {
  worker_of = this;
  auto busy = std::chrono::steady_clock::now();  // when this worker last did something
  std::unique_lock lock(mu_);
  for (;;) {
    if (!in_flight_.empty()) {
      if (std::shared_ptr<Op> finished = claim_finished()) {
        lock.unlock();
        complete(finished);
        lock.lock();
        busy = std::chrono::steady_clock::now();
        continue;
      }
    }
    if (queue_.empty() || running_) {
      const bool over = stopping_ && queue_.empty() && !running_ && in_flight_.empty();
      const bool spare = !first && workers_ - in_callbacks_ >= 2 &&
                         std::chrono::steady_clock::now() - busy >= kRetireAfter;
      if (over || spare) {
        --workers_;
        worker_of = nullptr;
        done_cv_.notify_all();
        if (over) work_cv_.notify_all();  // the other workers end too
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
    busy = std::chrono::steady_clock::now();
  }
}

void Executor::shutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  std::unique_lock lock(mu_);
  // On a worker (shutdown in a future's callback, or the process group's last reference gone
  // there) the workers finish the queue after this returns; an operation running now (on
  // another worker, or a waiting thread) ends first.
  if (worker_of == this) {
    done_cv_.wait(lock, [&] { return !running_; });
    return;
  }
  done_cv_.wait(lock, [&] { return queue_.empty() && !running_ && workers_ == 0; });
  // (the workers end only once every issued operation is complete)
}

}  // namespace loom_torch
