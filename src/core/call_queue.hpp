// A communicator's calls in issue order on its one engine: a blocking call with nothing queued
// runs on the caller's thread (no allocation, no hand-off), every other call on the queue's
// worker thread, and the host sends and receives at the queue's front run side by side as one
// batch. The queue owns its lock, its worker, the numbering of calls (one sequence for the
// collectives, one per peer and direction for sends and receives), the mark that the engine is
// in use, and its closing; what a call does, and what a halt does, its Runner says.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "algorithms/collective.hpp"
#include "core/work.hpp"

namespace loom::core {

class CallQueue {
 public:
  class Batch;
  // What the queue asks of its communicator.
  class Runner {
   public:
    virtual ~Runner() = default;
    // Under the queue's lock, first: raises to refuse a call (a halted communicator).
    virtual void refuse(const algorithms::Collective& call) = 0;
    // Under the queue's lock, once the queue takes the call: raises to refuse it (a device call
    // the GPU runtime will not issue), leaving nothing queued.
    virtual void issue(algorithms::Collective& call) = 0;
    // Runs one call on the engine (`background`: on the worker, while the caller's thread
    // computes); returns how to order a device stream after it, or nothing.
    virtual std::function<void()> execute(const algorithms::Collective& call, bool background) = 0;
    // Runs the sends and receives `batch` takes, side by side, until each is done; raises what
    // failed (the queue then fails every operation taken and not done).
    virtual void run_batch(Batch& batch) = 0;
    // Under the queue's lock, a host send or receive just queued while the engine is busy: ends
    // the worker's sleep in a batch, which takes the operation (nothing where no batch sleeps:
    // a collective on the worker, a blocking call on another caller's thread).
    virtual void wake_batch() = 0;
    // Without the lock, from any thread: whether a halt may wait for the engine to go idle.
    virtual bool halted() const noexcept = 0;
    // Under the queue's lock, the engine idle: after every call and every batch, and at once
    // when locked() finds it idle and asks (the failure protocol closes the connections here).
    // `closed`: close() has begun (its caller closes everything next).
    virtual void engine_idle(bool closed) = 0;
  };

  // The host sends and receives at the queue's front, for Runner::run_batch.
  class Batch {
   public:
    // Takes the sends and receives now at the queue's front, handing each to `add` with what to
    // call once it is done; an operation whose `add` raises fails alone with that error. Cheap
    // when nothing was queued since the last take.
    using Add = std::function<void(const algorithms::Collective&, std::function<void()> done)>;
    void take(const Add& add);

   private:
    friend class CallQueue;
    explicit Batch(CallQueue& queue) : queue_(queue) {}
    CallQueue& queue_;
    // Taken and not yet known done (those done go from the front as more come: a batch kept open
    // by receives posted ahead must not keep every state it ever ran).
    std::deque<std::shared_ptr<Work::State>> states_;
  };

  // rank: for the messages; callers_waiting: the count Work::wait keeps (see Engine).
  CallQueue(Runner& runner, int rank, std::shared_ptr<std::atomic<int>> callers_waiting);
  ~CallQueue();
  CallQueue(const CallQueue&) = delete;
  CallQueue& operator=(const CallQueue&) = delete;

  // Starts the worker; the last step of the communicator's construction.
  void start();
  // Numbers and queues one call for the worker.
  Work submit(algorithms::Collective call);
  // Numbers and runs one call, returning when it is done: on the caller's thread when nothing
  // is queued or running, else behind the calls issued before it.
  void run(algorithms::Collective call);
  // Refuses every later call, runs what was queued, then waits for the engine (a blocking call
  // on another thread ends at its deadline, or at once after an abort). False, at once, when
  // another call closed it already.
  bool close();
  // What locked() tells its function.
  struct Now {
    bool closed;  // close() has begun
    bool busy;    // a call uses the engine
  };
  // Runs `f(Now)` under the queue's lock; when `f` returns true and the engine is idle,
  // Runner::engine_idle() runs too, still under the lock (else the thread using the engine runs
  // it when the call ends).
  void locked(const std::function<bool(const Now&)>& f);
  bool closed();

 private:
  struct Queued {
    std::shared_ptr<Work::State> state;
    algorithms::Collective call;
  };
  // Under mu_: refuses (closed, Runner), issues and numbers a call.
  void admit(algorithms::Collective& call);
  // Under mu_.
  void enqueue(std::shared_ptr<Work::State> state, const algorithms::Collective& call);
  // Under mu_: the queue's front is a send or receive on host buffers.
  bool point_to_point_first() const;
  // The worker's thread, busy_ set and mu_ held by `lock`, released while the batch runs.
  void run_point_to_point(std::unique_lock<std::mutex>& lock);
  // The caller's thread is done with the engine.
  void caller_done();
  void work_loop();

  Runner& runner_;
  const int rank_;
  std::shared_ptr<std::atomic<int>> callers_waiting_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Queued> queue_;
  // The engine is running a call (on the worker or a caller's thread). Set under mu_; a caller's
  // thread clears it without the lock.
  std::atomic<bool> busy_{false};
  std::atomic<std::uint32_t> queued_{0};  // queue_.size(), readable without the lock
  std::atomic<bool> closing_{false};      // close() waits for the engine: wake it when idle
  bool closed_ = false;
  std::uint64_t next_seq_ = 0;
  std::map<int, std::uint64_t> sent_;
  std::map<int, std::uint64_t> received_;
  std::thread worker_;
};

}  // namespace loom::core
