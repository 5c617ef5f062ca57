// What the call queue (core/call_queue.hpp) runs for the communicator: one call on the engine,
// or a batch of host sends and receives; and what it asks before it takes a call.

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

bool Communicator::Impl::halted() const noexcept {
  return failure_.halt().triggered();
}

void Communicator::Impl::raise_if_halted(const std::string& context) const {
  if (failure_.halt().triggered()) failure_.halt().raise_unusable(context);
}

void Communicator::Impl::engine_idle(bool closed) {
  failure_.engine_idle(closed);
}

// Under the queue's lock: a broken communicator refuses every later call.
void Communicator::Impl::refuse(const Collective& call) {
  if (failure_.halt().triggered())
    failure_.halt().raise_unusable(
        fmt::format("{}: rank {}", algorithms::to_string(call.kind), rank_));
}

// Under the queue's lock: a call on device buffers is issued on the caller's stream now (what
// raises here leaves nothing queued).
void Communicator::Impl::issue(Collective& call) {
  if (gpu::Runtime* runtime = devices_.runtime_of(call)) runtime->issue(call);
}

// background: on the worker thread, while the caller's thread probably computes. Returns, for a
// call on device buffers, how to order the user's stream after it.
std::function<void()> Communicator::Impl::execute(const Collective& call, bool background) {
  gpu::Runtime* runtime = devices_.runtime_of(call);
  try {
    run_engine(call, background, runtime);
  } catch (...) {
    if (runtime) runtime->end(call, false);  // a failed call orders no stream after it
    throw;
  }
  return runtime ? runtime->end(call, true) : nullptr;
}

void Communicator::Impl::refuse_if_halted(const Collective& call) {
  if (failure_.halt().triggered())
    failure_.halt().raise_unusable(fmt::format("{}: rank {}", call.describe(), rank_));
}

void Communicator::Impl::run_engine(const Collective& call, bool background,
                                    gpu::Runtime* runtime) {
  refuse_if_halted(call);
  // Nothing to move, on every rank alike (all_to_all_v's blocks may be empty here only).
  if (call.count == 0 && call.kind != Kind::barrier && call.kind != Kind::all_to_all_v) return;
  failure_.progress().word.store(call.tag().word, std::memory_order_relaxed);
  failure_.progress().count.store(call.tag().count, std::memory_order_relaxed);
  failure_.progress().in_call.store(true, std::memory_order_relaxed);
  try {
    algorithms::DataPath* device_path = runtime ? &runtime->begin(call, *engine_) : nullptr;
    algorithms::PeerMemory* peer_memory = runtime ? runtime->peer_memory() : nullptr;
    if (trace::enabled()) {
      trace::Scope span(call.describe(), "collective");
      engine_->run(call, dispatcher_, background, device_path, peer_memory);
    } else {
      engine_->run(call, dispatcher_, background, device_path, peer_memory);
    }
    failure_.progress().in_call.store(false, std::memory_order_relaxed);
  } catch (...) {
    failure_.progress().in_call.store(false, std::memory_order_relaxed);
    fail_in_flight(call);
  }
}

void Communicator::Impl::fail_in_flight(const Collective& call) {
  try {
    rethrow_in_context(call);
  } catch (const Error& e) {
    failure_.fail(call, e);
  }
}

// The queue's worker: the sends and receives at the queue's front, and those issued while they
// run, side by side (PointToPointBatch). Each operation's Work is done as soon as it is; an error
// fails the communicator (as any call's does) and every operation of the batch not yet done.
void Communicator::Impl::wake_batch() {
  engine_->batch_wake().wake();
}

void Communicator::Impl::run_batch(core::CallQueue::Batch& ops) {
  algorithms::PointToPointBatch batch(*engine_);
  const auto add = [&](const Collective& call, std::function<void()> done) {
    refuse_if_halted(call);
    batch.add(call, std::move(done));
  };
  ops.take(add);
  try {
    try {
      failure_.progress().in_call.store(true, std::memory_order_relaxed);
      batch.run(true, [&] { ops.take(add); });
      failure_.progress().in_call.store(false, std::memory_order_relaxed);
    } catch (...) {
      failure_.progress().in_call.store(false, std::memory_order_relaxed);
      const Collective* call = batch.current();
      if (call == nullptr) throw;
      fail_in_flight(*call);
    }
  } catch (...) {
    ops.take(add);  // what came after the failure fails with it
    throw;
  }
}

}  // namespace loom
