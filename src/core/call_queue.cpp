// Calls run in issue order on one engine: a blocking call with nothing queued runs on the
// caller's thread (no allocation, no hand-off), everything else on the worker thread.
#include <deque>

#include <fmt/format.h>

#include "algorithms/algorithms.hpp"
#include "base/errors.hpp"
#include "core/communicator_impl.hpp"
#include "loom/trace.hpp"

namespace loom {

using algorithms::Collective;
using algorithms::Kind;

namespace {

// Errors from below the engine name the peer and cause; this adds which call was running.
[[noreturn]] void rethrow_in_context(const Collective& call) {
  try {
    throw;
  } catch (const Error& e) {
    rethrow_with_context(e, call.describe());
  } catch (const std::exception& e) {
    throw Error(call.describe() + ": " + e.what());
  }
}

}  // namespace

Work Communicator::Impl::submit(Collective call) {
  validate(call);
  place(call);
  auto state = std::make_shared<Work::State>();
  state->waiting = callers_waiting_;
  std::unique_lock lock(mu_);
  admit(call);
  state->run = [this, call, s = state.get()] { s->order_stream = execute(call, true); };
  enqueue(state, call);
  return Work(state);
}

void Communicator::Impl::run(Collective call) {
  validate(call);
  place(call);
  std::unique_lock lock(mu_);
  admit(call);
  if (!queue_.empty() || busy_) {  // behind earlier asynchronous calls: keep the order
    auto state = std::make_shared<Work::State>();
    state->run = [this, call, s = state.get()] { s->order_stream = execute(call, true); };
    enqueue(state, call);
    lock.unlock();
    Work(state).wait();
    return;
  }
  busy_.store(true, std::memory_order_relaxed);
  lock.unlock();
  struct Idle {  // on return or exception: the engine is free
    Impl& impl;
    ~Idle() { impl.engine_idle(); }
  } idle{*this};
  if (auto order_stream = execute(call, false)) order_stream();
}

// The caller's thread is done with the engine: calls queued meanwhile may run, a halt that came
// meanwhile closes the connections, and shutdown() (waiting for the engine) wakes.
void Communicator::Impl::engine_idle() {
  // Without the lock: clear busy_, then look. seq_cst on both sides (enqueue counts and
  // shutdown sets closing_, then read busy_): either this sees their store, or they see busy_
  // clear.
  busy_.store(false, std::memory_order_seq_cst);
  if (queued_.load(std::memory_order_seq_cst) != 0 || halt_.triggered() ||
      closing_.load(std::memory_order_seq_cst)) {
    std::lock_guard relock(mu_);
    close_if_halted();
    wake_.notify_all();
  }
}

// Under mu_.
void Communicator::Impl::enqueue(std::shared_ptr<Work::State> state, const Collective& call) {
  queue_.push_back(Queued{std::move(state), call});
  queued_.fetch_add(1, std::memory_order_seq_cst);
  wake_.notify_all();
}

// Under mu_: refuses calls on a destroyed or broken communicator, then numbers the call.
void Communicator::Impl::admit(Collective& call) {
  if (halt_.triggered())
    halt_.raise_unusable(fmt::format("{}: rank {}", algorithms::to_string(call.kind), rank_));
  if (destroyed_)
    throw InvalidArgument(fmt::format("{}: rank {}: the communicator was destroyed",
                                      algorithms::to_string(call.kind), rank_));
  if (call.device >= 0) gpu_->issue(call);  // what raises here leaves nothing queued
  if (call.kind == Kind::send)
    call.seq = sent_[call.root]++;
  else if (call.kind == Kind::recv)
    call.seq = received_[call.root]++;
  else
    call.seq = next_seq_++;
}

// background: on the worker thread, while the caller's thread probably computes. Returns, for a
// call on device buffers, how to order the user's stream after it.
std::function<void()> Communicator::Impl::execute(const Collective& call, bool background) {
  gpu::Runtime* runtime = call.device >= 0 ? gpu_.get() : nullptr;
  try {
    run_engine(call, background, runtime);
  } catch (...) {
    if (runtime) runtime->end(call, false);  // a failed call orders no stream after it
    throw;
  }
  return runtime ? runtime->end(call, true) : nullptr;
}

void Communicator::Impl::refuse_if_halted(const Collective& call) {
  if (halt_.triggered()) halt_.raise_unusable(fmt::format("{}: rank {}", call.describe(), rank_));
}

void Communicator::Impl::run_engine(const Collective& call, bool background,
                                    gpu::Runtime* runtime) {
  refuse_if_halted(call);
  // Nothing to move, on every rank alike (all_to_all_v's blocks may be empty here only).
  if (call.count == 0 && call.kind != Kind::barrier && call.kind != Kind::all_to_all_v) return;
  progress_.word.store(call.tag().word, std::memory_order_relaxed);
  progress_.count.store(call.tag().count, std::memory_order_relaxed);
  progress_.in_call.store(true, std::memory_order_relaxed);
  try {
    algorithms::DataPath* device_path = runtime ? &runtime->begin(call, *engine_) : nullptr;
    algorithms::PeerMemory* peer_memory = runtime ? runtime->peer_memory() : nullptr;
    if (trace::enabled()) {
      trace::Scope span(call.describe(), "collective");
      engine_->run(call, dispatcher_, background, device_path, peer_memory);
    } else {
      engine_->run(call, dispatcher_, background, device_path, peer_memory);
    }
    progress_.in_call.store(false, std::memory_order_relaxed);
  } catch (...) {
    progress_.in_call.store(false, std::memory_order_relaxed);
    fail_in_flight(call);
  }
}

void Communicator::Impl::fail_in_flight(const Collective& call) {
  try {
    rethrow_in_context(call);
  } catch (const Error& e) {
    fail(call, e);
  }
}

void Communicator::Impl::work_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    // Destroyed with calls queued behind another thread's call: they run when it ends (its
    // engine_idle wakes this), not in a loop that looks until then.
    wake_.wait_for(lock, std::chrono::milliseconds(200),
                   [&] { return (!queue_.empty() && !busy_) || (destroyed_ && queue_.empty()); });
    if (queue_.empty()) {
      if (destroyed_) return;
      continue;
    }
    if (busy_) continue;
    if (point_to_point_first()) {
      busy_.store(true, std::memory_order_relaxed);
      run_point_to_point(lock);
    } else {
      auto state = std::move(queue_.front().state);
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_seq_cst);
      busy_.store(true, std::memory_order_relaxed);
      lock.unlock();
      state->execute();
      lock.lock();
    }
    busy_.store(false, std::memory_order_relaxed);
    close_if_halted();
    wake_.notify_all();
  }
}

bool Communicator::Impl::point_to_point_first() const {
  if (queue_.empty()) return false;
  const Collective& c = queue_.front().call;
  return (c.kind == Kind::send || c.kind == Kind::recv) && c.device < 0;
}

// The worker's thread, busy_ set. Each operation's Work is done as soon as it is; an error fails
// the communicator (as any call's does) and every operation of the batch not yet done.
void Communicator::Impl::run_point_to_point(std::unique_lock<std::mutex>& lock) {
  // The operations taken and not yet known done (those done go from the front as more come:
  // a batch kept open by receives posted ahead must not keep every state it ever ran).
  std::deque<std::shared_ptr<Work::State>> states;
  algorithms::PointToPointBatch batch(*engine_);
  // Under mu_: the sends and receives at the queue's front join.
  auto take = [&] {
    while (!states.empty() && states.front()->done.load(std::memory_order_acquire) != 0)
      states.pop_front();
    while (point_to_point_first()) {
      Queued q = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_seq_cst);
      try {
        refuse_if_halted(q.call);
      } catch (...) {
        q.state->finish(std::current_exception());
        continue;
      }
      Work::State* state = q.state.get();
      states.push_back(std::move(q.state));
      batch.add(q.call, [state] { state->finish(nullptr); });
    }
  };
  take();
  lock.unlock();
  auto more = [&] {
    if (queued_.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard relock(mu_);
    take();
  };
  std::exception_ptr failure;
  try {
    try {
      progress_.in_call.store(true, std::memory_order_relaxed);
      batch.run(true, more);
      progress_.in_call.store(false, std::memory_order_relaxed);
    } catch (...) {
      progress_.in_call.store(false, std::memory_order_relaxed);
      const Collective* call = batch.current();
      if (call == nullptr) throw;
      fail_in_flight(*call);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  lock.lock();
  if (!failure) return;  // every operation taken is done; those queued since run in the next
  take();                // what came after the failure fails with it
  for (auto& state : states)
    if (state->done.load(std::memory_order_acquire) == 0) state->finish(failure);
}

}  // namespace loom
