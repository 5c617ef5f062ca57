// Runs a process group's operations one at a time, in the order they were issued (every rank
// issues Loom's calls in the same order): on a worker thread, or on the thread that waits for an
// operation when that operation is next and nothing runs, so that a blocking call costs no
// hand-off; a send or receive with nothing ahead of it is issued by the thread that submits it.
//
// A worker completes the futures of what it ran, and their callbacks run there. A callback may
// wait for another operation of the group on its future (PowerSGD's hook does, one callback a
// bucket), which no thread would run while the only worker waits inside that callback: so when
// every worker is inside callbacks (blocked or not) and an operation is queued or in flight,
// another worker starts, and it ends once it has been idle for a while with another worker free.
// The operations still run one at a time in issue order; the callbacks of different operations
// may then run side by side.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <loom/loom.hpp>

namespace loom_torch {

struct Op {
  // Sends and receives on host tensors are issued, not run: `issue` starts Loom's asynchronous
  // call and the executor moves on, so a receive issued before a send never holds the send back
  // (Loom progresses its point-to-point operations side by side). `body` then runs once the
  // call is done (the copy back), on whichever thread completes it.
  std::function<loom::Work()> issue;
  loom::Work issued;
  std::function<void()> body;                        // the communication and its copies
  std::function<void(std::exception_ptr)> finish;    // completes the future (after body)
  std::function<void(std::exception_ptr)> on_error;  // told of a failure, before finish
  // A batch (coalescing): its body runs its members' calls; they finish with it, before it.
  std::vector<std::shared_ptr<Op>> members;
  std::weak_ptr<Op> batch;  // a member's batch: waiting for the member waits for it
  // Kept for a batch not ended yet: a wait returns at once (the batch's Work is the one to wait
  // for, as with NCCL's groups), where it would wait for ever.
  bool batched = false;
  // Its caller waits for it at once (and runs it, when it is next): no other thread is woken
  // for it (one may start, when it is submitted inside callbacks). A worker still runs it
  // within kIdlePoll if nobody does.
  bool waited_at_once = false;
  std::chrono::steady_clock::time_point submitted;  // for the workers' grace period
  std::atomic<bool> done{false};
  std::exception_ptr error;
  bool taken = false;      // out of the queue (under the executor's lock)
  bool in_flight = false;  // issued, not yet claimed for completion (under the lock)
};

class Executor : public std::enable_shared_from_this<Executor> {
 public:
  // Each worker holds a reference until it leaves its loop (the first, once it has run
  // everything queued before shutdown()).
  static std::shared_ptr<Executor> start();
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void submit(std::shared_ptr<Op> op);
  // Waits until op is done, running it here when it is next in line. Returns false if `timeout`
  // (when positive) passed first.
  bool wait(const std::shared_ptr<Op>& op, std::chrono::milliseconds timeout);
  // Runs what is queued, then stops the workers (waiting for them, unless called on one). Later
  // submits are refused.
  void shutdown();

 private:
  Executor() = default;
  // The first worker ends only at shutdown; the others also when they are not needed.
  void work_loop(bool first);
  // Under the lock.
  void start_worker(bool first);
  // Under the lock: starts another worker when every worker is inside callbacks while an
  // operation is queued or in flight (where a thread can be had).
  void add_worker_if_stuck() noexcept;
  class InCallbacks;
  // Called with running_ set and the lock released.
  void execute(const std::shared_ptr<Op>& op);
  // An issued operation, claimed (out of in_flight_): waits for Loom's call, runs the body.
  void complete(const std::shared_ptr<Op>& op);
  // The end of every operation: records the error, completes the future, wakes the waiters.
  void finish(const std::shared_ptr<Op>& op, std::exception_ptr error);
  // Under the lock: claims the first issued operation Loom has finished, to complete it (one at
  // a time: its callbacks may wait for the next, which must stay claimable by another thread).
  std::shared_ptr<Op> claim_finished();

  std::mutex mu_;
  std::condition_variable work_cv_;  // the workers: an op queued, or shutdown
  std::condition_variable done_cv_;  // waiters: an op finished, or the engine fell idle
  std::deque<std::shared_ptr<Op>> queue_;
  std::vector<std::shared_ptr<Op>> in_flight_;  // issued, in issue order
  bool running_ = false;
  bool stopping_ = false;
  int workers_ = 0;           // in their loop
  int in_callbacks_ = 0;      // of them, inside futures' callbacks
  std::thread first_worker_;  // joined where the last reference goes; the others are detached
};

}  // namespace loom_torch
