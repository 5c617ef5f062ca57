// Runs a process group's operations one at a time, in the order they were issued (every rank
// issues Loom's calls in the same order): on a worker thread, or on the thread that waits for an
// operation when that operation is next and nothing runs, so that a blocking call costs no
// hand-off; a send or receive with nothing ahead of it is issued by the thread that submits it.
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
  // for it. The worker still runs it within kIdlePoll if nobody does.
  bool waited_at_once = false;
  std::chrono::steady_clock::time_point submitted;  // for the worker's grace period
  std::atomic<bool> done{false};
  std::exception_ptr error;
  bool taken = false;      // out of the queue (under the executor's lock)
  bool in_flight = false;  // issued, not yet claimed for completion (under the lock)
};

class Executor : public std::enable_shared_from_this<Executor> {
 public:
  // The worker holds a reference until it has run everything queued before shutdown().
  static std::shared_ptr<Executor> start();
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void submit(std::shared_ptr<Op> op);
  // Waits until op is done, running it here when it is next in line. Returns false if `timeout`
  // (when positive) passed first.
  bool wait(const std::shared_ptr<Op>& op, std::chrono::milliseconds timeout);
  // Runs what is queued, then stops the worker (waiting for it, unless called on it). Later
  // submits are refused.
  void shutdown();

 private:
  Executor() = default;
  void work_loop();
  // Called with running_ set and the lock released.
  void execute(const std::shared_ptr<Op>& op);
  // An issued operation, claimed (out of in_flight_): waits for Loom's call, runs the body.
  void complete(const std::shared_ptr<Op>& op);
  // The end of every operation: records the error, completes the future, wakes the waiters.
  void finish(const std::shared_ptr<Op>& op, std::exception_ptr error);
  // Under the lock: claims the issued operations Loom has finished, to complete them.
  std::vector<std::shared_ptr<Op>> claim_finished();

  std::mutex mu_;
  std::condition_variable work_cv_;  // the worker: an op queued, or shutdown
  std::condition_variable done_cv_;  // waiters: an op finished, or the engine fell idle
  std::deque<std::shared_ptr<Op>> queue_;
  std::vector<std::shared_ptr<Op>> in_flight_;  // issued, in issue order
  bool running_ = false;
  bool stopping_ = false;
  bool worker_done_ = false;
  std::thread worker_;
};

}  // namespace loom_torch
