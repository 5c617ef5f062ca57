// The call queue on its own, with a runner that records what it is asked: issue order, the
// caller's thread for a blocking call with nothing queued, numbering, batches of sends and
// receives, closing, and the rule that the engine goes idle before a halt closes anything.
#include "core/call_queue.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "../support/gate.hpp"

namespace loom::core {
namespace {

using algorithms::Collective;
using algorithms::Kind;
using namespace std::chrono_literals;

using loom::testing::Gate;

struct Ran {
  Kind kind;
  int root;
  std::uint64_t seq;
  bool background;
  std::thread::id thread;
};

class Recorder final : public CallQueue::Runner {
 public:
  void refuse(const Collective& call) override {
    if (call.count == kRefused) throw InvalidArgument("refused by the runner");
  }
  void issue(Collective&) override { issued.fetch_add(1); }
  std::function<void()> execute(const Collective& call, bool background) override {
    if (call.count == kGated) {
      held.store(true);
      gate.wait();
    }
    record(call, background);
    if (call.count == kFailing) throw Error("the call failed");
    return nullptr;
  }
  void wake_batch() override { wakes.fetch_add(1); }
  void run_batch(CallQueue::Batch& batch) override {
    std::vector<std::function<void()>> done;
    batch.take([&](const Collective& call, std::function<void()> d) {
      record(call, true);
      done.push_back(std::move(d));
    });
    for (std::size_t i = 0; i < done.size(); ++i) {
      if (fail_batch_after == static_cast<int>(i)) throw Error("the batch failed");
      done[i]();
    }
  }
  bool halted() const noexcept override { return halt.load(); }
  void engine_idle(bool) override { idles.fetch_add(1); }

  std::vector<Ran> ran() {
    std::lock_guard lock(mu);
    return ran_;
  }

  static constexpr std::size_t kRefused = 7, kGated = 9, kFailing = 11;
  Gate gate;
  std::atomic<bool> halt{false};
  std::atomic<int> idles{0};
  std::atomic<int> issued{0};     // calls admitted
  std::atomic<bool> held{false};  // a kGated call is waiting at the gate
  std::atomic<int> wakes{0};      // wake_batch() calls
  int fail_batch_after = -1;
  std::mutex mu;

 private:
  void record(const Collective& call, bool background) {
    std::lock_guard lock(mu);
    ran_.push_back({call.kind, call.root, call.seq, background, std::this_thread::get_id()});
  }
  std::vector<Ran> ran_;
};

Collective call_of(Kind kind, std::size_t count = 1, int root = 0) {
  Collective c;
  c.kind = kind;
  c.count = count;
  c.root = root;
  return c;
}

struct CallQueueTest : ::testing::Test {
  Recorder runner;
  CallQueue queue{runner, 0, std::make_shared<std::atomic<int>>(0)};
  void SetUp() override { queue.start(); }
};

TEST_F(CallQueueTest, ABlockingCallWithNothingQueuedRunsOnTheCallersThread) {
  queue.run(call_of(Kind::all_reduce));
  const auto ran = runner.ran();
  ASSERT_EQ(ran.size(), 1u);
  EXPECT_EQ(ran[0].thread, std::this_thread::get_id());
  EXPECT_FALSE(ran[0].background);
}

TEST_F(CallQueueTest, SubmittedCallsRunInIssueOrderOnTheWorker) {
  std::vector<Work> works;
  // The first holds the worker until the blocking call below is queued behind them all.
  works.push_back(queue.submit(call_of(Kind::all_reduce, Recorder::kGated)));
  for (int i = 1; i < 50; ++i) works.push_back(queue.submit(call_of(Kind::all_reduce)));
  std::thread caller([&] { queue.run(call_of(Kind::broadcast)); });  // behind them: waits its turn
  while (runner.issued.load() < 51) std::this_thread::sleep_for(1ms);
  runner.gate.open();
  caller.join();
  for (auto& w : works) w.wait();
  const auto ran = runner.ran();
  ASSERT_EQ(ran.size(), 51u);
  for (std::size_t i = 0; i < ran.size(); ++i) {
    EXPECT_EQ(ran[i].seq, i);
    EXPECT_TRUE(ran[i].background);
    EXPECT_EQ(ran[i].thread, ran[0].thread) << "not on the worker";
    EXPECT_NE(ran[i].thread, std::this_thread::get_id());
  }
  EXPECT_EQ(ran.back().kind, Kind::broadcast);
}

TEST_F(CallQueueTest, SendsAndReceivesAreNumberedPerPeerAndDirectionAndRunAsABatch) {
  std::vector<Work> works;
  for (auto [kind, peer] : {std::pair{Kind::send, 1},
                            {Kind::recv, 1},
                            {Kind::send, 1},
                            {Kind::send, 2},
                            {Kind::recv, 1}})
    works.push_back(queue.submit(call_of(kind, 1, peer)));
  works.push_back(queue.submit(call_of(Kind::all_gather)));
  for (auto& w : works) w.wait();
  const auto ran = runner.ran();
  ASSERT_EQ(ran.size(), 6u);
  const std::vector<std::uint64_t> seqs{0, 0, 1, 0, 1, 0};
  for (std::size_t i = 0; i < ran.size(); ++i) EXPECT_EQ(ran[i].seq, seqs[i]) << i;
}

TEST_F(CallQueueTest, ABatchThatFailsFailsEveryOperationNotDone) {
  runner.fail_batch_after = 1;
  // A gated collective holds the worker while a send and a receive queue behind it: the worker
  // then takes both as one batch, whose first operation is done and whose second fails.
  Work held = queue.submit(call_of(Kind::all_reduce, Recorder::kGated));
  Work send = queue.submit(call_of(Kind::send, 1, 1));
  Work recv = queue.submit(call_of(Kind::recv, 1, 1));
  runner.gate.open();
  held.wait();
  send.wait();
  EXPECT_THROW(recv.wait(), Error);
  EXPECT_EQ(runner.ran().size(), 3u);
  queue.run(call_of(Kind::all_reduce));  // the queue goes on
}

TEST_F(CallQueueTest, AFailedCallFailsItsWorkAloneAndTheQueueGoesOn) {
  Work bad = queue.submit(call_of(Kind::all_reduce, Recorder::kFailing));
  Work good = queue.submit(call_of(Kind::all_reduce));
  EXPECT_THROW(bad.wait(), Error);
  good.wait();
  EXPECT_THROW(queue.run(call_of(Kind::all_reduce, Recorder::kFailing)), Error);
  queue.run(call_of(Kind::all_reduce));
  EXPECT_EQ(runner.ran().size(), 4u);
}

TEST_F(CallQueueTest, ARefusedCallIsNeitherQueuedNorNumbered) {
  EXPECT_THROW(queue.submit(call_of(Kind::all_reduce, Recorder::kRefused)), InvalidArgument);
  EXPECT_THROW(queue.run(call_of(Kind::all_reduce, Recorder::kRefused)), InvalidArgument);
  queue.run(call_of(Kind::all_reduce));
  const auto ran = runner.ran();
  ASSERT_EQ(ran.size(), 1u);
  EXPECT_EQ(ran[0].seq, 0u);
}

TEST_F(CallQueueTest, CloseRunsWhatWasQueuedThenRefusesEveryCall) {
  std::vector<Work> works;
  for (int i = 0; i < 10; ++i) works.push_back(queue.submit(call_of(Kind::all_reduce)));
  EXPECT_TRUE(queue.close());
  for (auto& w : works) EXPECT_TRUE(w.test());
  EXPECT_TRUE(queue.closed());
  EXPECT_FALSE(queue.close());
  EXPECT_THROW(queue.submit(call_of(Kind::all_reduce)), InvalidArgument);
  EXPECT_THROW(queue.run(call_of(Kind::all_reduce)), InvalidArgument);
  EXPECT_EQ(runner.ran().size(), 10u);
}

// The failure protocol's rule: a halt closes the connections only while the engine is idle; one
// that comes during a call is left to the thread running it, when the call ends.
TEST_F(CallQueueTest, AHaltDuringACallWaitsForTheEngineToGoIdle) {
  std::thread caller([&] { queue.run(call_of(Kind::all_reduce, Recorder::kGated)); });
  // Wait until the caller's thread holds the engine.
  bool busy = false;
  for (int i = 0; i < 2000 && !busy; ++i) {
    queue.locked([&](const CallQueue::Now& now) {
      busy = now.busy;
      return false;
    });
    if (!busy) std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(busy);
  const int before = runner.idles.load();
  runner.halt = true;
  queue.locked([](const CallQueue::Now& now) { return !now.closed; });
  EXPECT_EQ(runner.idles.load(), before) << "closed while the engine was in use";
  runner.gate.open();
  caller.join();
  EXPECT_EQ(runner.idles.load(), before + 1) << "the call's end did not close";
  // Idle now: a halt's request closes at once.
  queue.locked([](const CallQueue::Now& now) { return !now.closed; });
  EXPECT_EQ(runner.idles.load(), before + 2);
}

// A host send or receive queued while the engine is busy wakes the batch that may sleep on the
// worker (it takes the operation at once); a collective, a device send, or anything queued while
// the engine is idle does not.
TEST_F(CallQueueTest, AHostSendOrReceiveQueuedWhileTheEngineIsBusyWakesTheBatch) {
  queue.submit(call_of(Kind::send, 1, 1)).wait();  // the engine idle
  EXPECT_EQ(runner.wakes.load(), 0);
  Work held = queue.submit(call_of(Kind::all_reduce, Recorder::kGated));
  while (!runner.held.load()) std::this_thread::sleep_for(1ms);
  std::vector<Work> works;
  works.push_back(queue.submit(call_of(Kind::broadcast)));
  Collective on_device = call_of(Kind::send, 1, 1);
  on_device.device = 0;
  works.push_back(queue.submit(on_device));
  EXPECT_EQ(runner.wakes.load(), 0);
  works.push_back(queue.submit(call_of(Kind::recv, 1, 1)));
  EXPECT_EQ(runner.wakes.load(), 1);
  works.push_back(queue.submit(call_of(Kind::send, 1, 1)));
  EXPECT_EQ(runner.wakes.load(), 2);
  runner.gate.open();
  held.wait();
  for (auto& w : works) w.wait();
}

}  // namespace
}  // namespace loom::core
