// The failure protocol on its own, over a file store and a call queue whose calls the test holds:
// an abort on an idle engine closes the connections at once and publishes the cause; an abort
// while a call runs closes them only when the call has left the engine; a call's own failure
// publishes its cause, closes and raises it; a rank that only saw a peer's connection close
// raises the cause another rank published; the rank hosting the store waits for the survivors.
#include "core/failure_protocol.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "../support/gate.hpp"
#include "core/failure_store.hpp"

namespace loom::core {
namespace {

using algorithms::Collective;
using algorithms::Kind;
using namespace std::chrono_literals;
using RecordKind = base::AbortRecord::Kind;

using loom::testing::Gate;

// Runs calls by waiting for the test's gate; refuses calls after a halt, as a communicator does.
class HeldCalls final : public CallQueue::Runner {
 public:
  explicit HeldCalls(FailureProtocol& failure) : failure_(failure) {}
  void refuse(const Collective& call) override {
    if (failure_.halt().triggered())
      failure_.halt().raise_unusable(std::string(algorithms::to_string(call.kind)) + ": rank 0");
  }
  void issue(Collective&) override {}
  std::function<void()> execute(const Collective&, bool) override {
    running.store(true);
    gate.wait();
    return nullptr;
  }
  void run_batch(CallQueue::Batch&) override {}
  void wake_batch() override {}
  bool halted() const noexcept override { return failure_.halt().triggered(); }
  void engine_idle(bool closed) override { failure_.engine_idle(closed); }

  Gate gate;
  std::atomic<bool> running{false};

 private:
  FailureProtocol& failure_;
};

Collective all_reduce() {
  Collective c;
  c.kind = Kind::all_reduce;
  c.count = 1;
  return c;
}

struct FailureProtocolTest : ::testing::Test {
  std::filesystem::path dir;
  std::shared_ptr<Store> store;
  std::atomic<int> closes{0};
  // Whether a failure record stood in the store when the connections first closed.
  std::atomic<bool> published_before_closing{false};
  FailureProtocol failure{{0, 3, [](int r) { return "rank " + std::to_string(r); },
                           [](int r) { return "host" + std::to_string(r); },
                           [this] {
                             if (closes.fetch_add(1) == 0)
                               published_before_closing = read_abort(*store).has_value();
                           }}};
  HeldCalls runner{failure};
  CallQueue queue{runner, 0, std::make_shared<std::atomic<int>>(0)};

  void SetUp() override {
    char name[] = "/tmp/loom-failure-XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    dir = name;
    store = std::make_shared<FileStore>((dir / "store").string(), 5s);
    base::FailureConfig config;
    config.heartbeat_timeout = 0ms;  // the other ranks do not exist: no beats to expect
    failure.start(store, config, queue);
    queue.start();
  }
  void TearDown() override {
    queue.close();
    failure.stop_monitor();
    std::filesystem::remove_all(dir);
  }
  // The record in the store: a publish gives up waiting for the store after a bound (and the
  // write goes on), so a loaded machine may see it late.
  std::optional<base::AbortRecord> record() {
    for (int i = 0; i < 1000; ++i) {
      if (auto r = read_abort(*store)) return r;
      std::this_thread::sleep_for(10ms);
    }
    return std::nullopt;
  }
  // `e` in flight, as the call runner has it.
  template <typename E>
  void fail_with(const E& e) {
    try {
      throw e;
    } catch (const Error& in_flight) {
      failure.fail(all_reduce(), in_flight);
    }
  }
};

TEST_F(FailureProtocolTest, AnAbortOnAnIdleEngineClosesAtOnceAndPublishesTheCause) {
  failure.abort(queue);
  EXPECT_TRUE(failure.halt().triggered());
  EXPECT_EQ(closes.load(), 1);
  const auto record = this->record();
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->kind, RecordKind::aborted);
  EXPECT_EQ(record->failed, 0);
  EXPECT_NE(record->cause.find("rank 0 on host host0 aborted"), std::string::npos) << record->cause;
  failure.abort(queue);  // the first halt stands: nothing more closes
  EXPECT_EQ(closes.load(), 1);
  EXPECT_THROW(queue.run(all_reduce()), Aborted);
}

TEST_F(FailureProtocolTest, AnAbortWhileACallRunsClosesOnlyOnceTheEngineIsIdle) {
  Work work = queue.submit(all_reduce());
  while (!runner.running.load()) std::this_thread::sleep_for(1ms);
  failure.abort(queue);
  EXPECT_TRUE(failure.halt().triggered());
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(closes.load(), 0) << "closed while the engine was in use";
  runner.gate.open();
  work.wait();
  for (int i = 0; i < 1000 && closes.load() == 0; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(closes.load(), 1);
}

TEST_F(FailureProtocolTest, ACallsOwnFailurePublishesItsCauseClosesAndRaisesIt) {
  runner.gate.open();
  EXPECT_THROW(fail_with(TimeoutError("all_reduce #0: rank 0: waited 5 s for rank 1")),
               TimeoutError);
  EXPECT_TRUE(failure.halt().triggered());
  EXPECT_GE(closes.load(), 1);
  EXPECT_FALSE(published_before_closing) << "its own failure: no peer may wait on it meanwhile";
  const auto record = this->record();
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->kind, RecordKind::timeout);
  EXPECT_EQ(record->reporter, 0);
  EXPECT_THROW(queue.run(all_reduce()), PeerError);  // a later call: unusable
}

TEST_F(FailureProtocolTest, ARankThatOnlySawAPeerCloseRaisesTheCauseAnotherRankPublished) {
  runner.gate.open();
  publish_abort(*store, {RecordKind::mismatch, 2, -1, "collective mismatch: rank 2 ran gather"});
  try {
    fail_with(PeerError("all_reduce #0: rank 0: rank 1 closed its connection", 1));
    FAIL() << "no error raised";
  } catch (const CollectiveMismatch& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 ran gather"), std::string::npos) << e.what();
  }
  EXPECT_GE(closes.load(), 1);
  EXPECT_EQ(record()->reporter, 2);  // the standing record is kept
}

// A failure before start() (a communicator whose construction failed halfway) has no store to
// tell: it closes and raises what it saw.
TEST(FailureProtocolUnstarted, AFailureBeforeStartClosesAndRaisesWithoutAStore) {
  int closes = 0;
  FailureProtocol failure{{0, 2, [](int r) { return "rank " + std::to_string(r); },
                           [](int) { return std::string("host"); }, [&] { ++closes; }}};
  try {
    throw TimeoutError("all_reduce #0: rank 0: waited 5 s for rank 1");
  } catch (const Error& e) {
    EXPECT_THROW(failure.fail(all_reduce(), e), TimeoutError);
  }
  EXPECT_TRUE(failure.halt().triggered());
  EXPECT_GE(closes, 1);
}

// Seen second-hand, with no record standing yet: this rank publishes what it saw before its
// neighbours can see it close (they would take it for the failed one).
TEST_F(FailureProtocolTest, ARankThatOnlySawAPeerClosePublishesBeforeItCloses) {
  runner.gate.open();
  EXPECT_THROW(fail_with(PeerError("all_reduce #0: rank 0: rank 1 closed its connection", 1)),
               PeerError);
  EXPECT_GE(closes.load(), 1);
  EXPECT_TRUE(published_before_closing);
  const auto record = this->record();
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->kind, RecordKind::peer_failed);
  EXPECT_EQ(record->failed, 1);
  EXPECT_EQ(record->reporter, 0);
}

TEST_F(FailureProtocolTest, TheStoresHostWaitsForTheSurvivorsToReadTheRecordAtMostAFewSeconds) {
  runner.gate.open();
  failure.keep_store_for_survivors(true);  // no halt: returns at once
  failure.abort(queue);
  const auto started = std::chrono::steady_clock::now();
  std::thread survivor([&] {
    std::this_thread::sleep_for(200ms);
    mark_abort_seen(*store, 1);
  });
  failure.keep_store_for_survivors(true);  // rank 2 never reads it: bounded
  survivor.join();
  const auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_GE(waited, 2s);
  EXPECT_LT(waited, 10s);
}

}  // namespace
}  // namespace loom::core
