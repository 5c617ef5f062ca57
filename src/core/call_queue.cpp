#include "core/call_queue.hpp"

#include <fmt/format.h>

#include "loom/loom.hpp"

namespace loom::core {

using algorithms::Collective;
using algorithms::Kind;

CallQueue::CallQueue(Runner& runner, int rank, std::shared_ptr<std::atomic<int>> callers_waiting)
    : runner_(runner), rank_(rank), callers_waiting_(std::move(callers_waiting)) {}

CallQueue::~CallQueue() {
  close();
}

void CallQueue::start() {
  worker_ = std::thread([this] { work_loop(); });
}

Work CallQueue::submit(Collective call) {
  auto state = std::make_shared<Work::State>();
  state->waiting = callers_waiting_;
  std::unique_lock lock(mu_);
  admit(call);
  state->run = [this, call, s = state.get()] { s->order_stream = runner_.execute(call, true); };
  enqueue(state, call);
  return Work(state);
}

void CallQueue::run(Collective call) {
  std::unique_lock lock(mu_);
  admit(call);
  if (!queue_.empty() || busy_) {  // behind earlier asynchronous calls: keep the order
    auto state = std::make_shared<Work::State>();
    state->run = [this, call, s = state.get()] { s->order_stream = runner_.execute(call, true); };
    enqueue(state, call);
    lock.unlock();
    Work(state).wait();
    return;
  }
  busy_.store(true, std::memory_order_relaxed);
  lock.unlock();
  struct Idle {  // on return or exception: the engine is free
    CallQueue& queue;
    ~Idle() { queue.caller_done(); }
  } idle{*this};
  if (auto order_stream = runner_.execute(call, false)) order_stream();
}

// The caller's thread is done with the engine: calls queued meanwhile may run, a halt that came
// meanwhile closes the connections, and close() (waiting for the engine) wakes.
void CallQueue::caller_done() {
  // Without the lock: clear busy_, then look. seq_cst on both sides (enqueue counts, close sets
  // closing_ and a halt is triggered, then read busy_): either this sees their store, or they see
  // busy_ clear.
  busy_.store(false, std::memory_order_seq_cst);
  if (queued_.load(std::memory_order_seq_cst) != 0 || runner_.halted() ||
      closing_.load(std::memory_order_seq_cst)) {
    std::lock_guard relock(mu_);
    if (!busy_.load(std::memory_order_relaxed)) runner_.engine_idle(closed_);
    wake_.notify_all();
  }
}

void CallQueue::enqueue(std::shared_ptr<Work::State> state, const Collective& call) {
  queue_.push_back(Queued{std::move(state), call});
  queued_.fetch_add(1, std::memory_order_seq_cst);
  wake_.notify_all();
  // A batch running on the worker takes it (Batch::take) at its next look: now, not at the end of
  // its sleep. (busy_ may be another caller's blocking call: then no batch sleeps, nothing to do.)
  if ((call.kind == Kind::send || call.kind == Kind::recv) && call.device < 0 &&
      busy_.load(std::memory_order_seq_cst))
    runner_.wake_batch();
}

void CallQueue::admit(Collective& call) {
  runner_.refuse(call);
  if (closed_)
    throw InvalidArgument(fmt::format("{}: rank {}: the communicator was destroyed",
                                      algorithms::to_string(call.kind), rank_));
  runner_.issue(call);  // what raises here leaves nothing queued
  if (call.kind == Kind::send)
    call.seq = sent_[call.root]++;
  else if (call.kind == Kind::recv)
    call.seq = received_[call.root]++;
  else
    call.seq = next_seq_++;
}

bool CallQueue::close() {
  {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    closed_ = true;  // admit() refuses every later call
    closing_.store(true, std::memory_order_seq_cst);
    wake_.notify_all();
  }
  if (worker_.joinable()) worker_.join();  // it runs what was queued, then returns
  std::unique_lock lock(mu_);
  wake_.wait(lock, [&] { return !busy_.load(std::memory_order_seq_cst); });
  return true;
}

void CallQueue::locked(const std::function<bool(const Now&)>& f) {
  std::lock_guard lock(mu_);
  const bool busy = busy_.load(std::memory_order_seq_cst);
  if (f(Now{closed_, busy}) && !busy) runner_.engine_idle(closed_);
}

bool CallQueue::closed() {
  std::lock_guard lock(mu_);
  return closed_;
}

void CallQueue::work_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    // Closed with calls queued behind another thread's call: they run when it ends (its
    // caller_done wakes this), not in a loop that looks until then.
    wake_.wait_for(lock, std::chrono::milliseconds(200),
                   [&] { return (!queue_.empty() && !busy_) || (closed_ && queue_.empty()); });
    if (queue_.empty()) {
      if (closed_) return;
      continue;
    }
    if (busy_) continue;
    busy_.store(true, std::memory_order_relaxed);
    if (point_to_point_first()) {
      run_point_to_point(lock);
    } else {
      auto state = std::move(queue_.front().state);
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_seq_cst);
      lock.unlock();
      state->execute();
      lock.lock();
    }
    busy_.store(false, std::memory_order_relaxed);
    runner_.engine_idle(closed_);
    wake_.notify_all();
  }
}

bool CallQueue::point_to_point_first() const {
  if (queue_.empty()) return false;
  const Collective& c = queue_.front().call;
  return (c.kind == Kind::send || c.kind == Kind::recv) && c.device < 0;
}

void CallQueue::Batch::take(const Add& add) {
  if (!states_.empty() && queue_.queued_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard lock(queue_.mu_);
  while (!states_.empty() && states_.front()->done.load(std::memory_order_acquire) != 0)
    states_.pop_front();
  while (queue_.point_to_point_first()) {
    Queued q = std::move(queue_.queue_.front());
    queue_.queue_.pop_front();
    queue_.queued_.fetch_sub(1, std::memory_order_seq_cst);
    Work::State* state = q.state.get();
    try {
      add(q.call, [state] { state->finish(nullptr); });
    } catch (...) {
      state->finish(std::current_exception());
      continue;
    }
    states_.push_back(std::move(q.state));
  }
}

// Each operation's Work is done as soon as it is; an error fails every operation of the batch
// not yet done.
void CallQueue::run_point_to_point(std::unique_lock<std::mutex>& lock) {
  Batch batch(*this);
  lock.unlock();
  std::exception_ptr failure;
  try {
    runner_.run_batch(batch);
  } catch (...) {
    failure = std::current_exception();
  }
  lock.lock();
  if (!failure) return;  // every operation taken is done; those queued since run in the next
  for (auto& state : batch.states_)
    if (state->done.load(std::memory_order_acquire) == 0) state->finish(failure);
}

}  // namespace loom::core
