// The engine's waits end at the call's deadline or at the halt even while a peer keeps moving
// bytes that never complete what is waited for (a trickle).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "algorithms/batch_wake.hpp"
#include "algorithms/dispatch.hpp"
#include "algorithms/engine.hpp"
#include "base/abort_record.hpp"
#include "base/logging.hpp"

namespace loom::algorithms {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A peer (rank 1) that never posts nor frees a slot; its sleep lasts its timeout.
class QuietConnection : public transport::Connection {
 public:
  int peer() const override { return 1; }
  std::size_t slot_bytes() const override { return 4096; }
  std::byte* try_acquire_send_slot(std::size_t) override { return nullptr; }
  void post_send(std::size_t, transport::Tag) override {}
  std::optional<transport::RecvSlot> try_recv_slot() override { return std::nullopt; }
  void release_recv_slot() override {}
  bool progress() override { return false; }
  bool send_idle() const override { return true; }
  void add_poll_fds(std::vector<pollfd>&) const override {}
  void sleep(int timeout_ms) override { std::this_thread::sleep_for(1ms * timeout_ms); }
  std::string describe() const override { return "a quiet peer"; }
  std::vector<Region> host_regions() const override { return {}; }
};

// A peer that moves a few bytes on every progress() until `trickle_until`, but never completes
// a slot.
class TricklingConnection final : public QuietConnection {
 public:
  explicit TricklingConnection(Clock::time_point trickle_until) : until_(trickle_until) {}
  bool progress() override { return Clock::now() < until_; }
  std::string describe() const override { return "a trickling peer"; }

 private:
  Clock::time_point until_;
};

class OnePeer final : public transport::Transport {
 public:
  explicit OnePeer(transport::Connection& c) : c_(c) {}
  transport::TransportKind kind_to(int) const override { return transport::TransportKind::tcp; }
  transport::Connection& connect(int, const base::Deadline&, const base::Halt&) override {
    return c_;
  }
  void abort() override {}

 private:
  transport::Connection& c_;
};

// The engine of rank 0 of 2, whose one peer is `peer`; its calls time out after `timeout`.
class OnePeerEngine {
 public:
  OnePeerEngine(transport::Connection& peer, std::chrono::milliseconds timeout,
                const base::Halt& halt)
      : transport_(peer),
        config_(with_timeout(timeout)),
        engine_(0, 2, transport_, config_, halt, callers_waiting_,
                std::make_shared<const Selector>(two_hosts())) {}
  Engine* operator->() { return &engine_; }

 private:
  static base::Config with_timeout(std::chrono::milliseconds timeout) {
    base::Config config;
    config.timeout = timeout;
    return config;
  }
  static SelectionInputs two_hosts() {
    SelectionInputs selection;
    selection.size = 2;
    selection.hosts = {{0}, {1}};
    return selection;
  }
  OnePeer transport_;
  base::Config config_;
  std::atomic<int> callers_waiting_{0};
  Engine engine_;
};

// How long a recv of one slot from the trickling peer takes to fail, and what it raised.
template <typename Error>
Clock::duration time_to_fail(std::chrono::milliseconds timeout, base::Halt& halt,
                             std::chrono::milliseconds halt_after = 0ms) {
  TricklingConnection peer(Clock::now() + 10s);
  OnePeerEngine engine(peer, timeout, halt);
  std::vector<std::byte> out(4096);
  Collective call;
  call.kind = Kind::recv;
  call.seq = 0;
  call.count = out.size();
  call.root = 1;
  call.out = out.data();
  std::thread halter;
  if (halt_after > 0ms)
    halter = std::thread([&] {
      std::this_thread::sleep_for(halt_after);
      halt.trigger(base::AbortRecord{base::AbortRecord::Kind::aborted, 0, 0, "test"}, true);
    });
  const auto start = Clock::now();
  Dispatcher dispatcher;
  EXPECT_THROW(engine->run(call, dispatcher), Error);
  const auto took = Clock::now() - start;
  if (halter.joinable()) halter.join();
  return took;
}

TEST(Waiter, ATricklingPeerCannotKeepACallPastItsDeadline) {
  base::Halt halt;
  EXPECT_LT(time_to_fail<TimeoutError>(200ms, halt), 2s);
}

TEST(Waiter, ATricklingPeerCannotKeepACallPastAbort) {
  base::Halt halt;
  EXPECT_LT(time_to_fail<Aborted>(60s, halt, 200ms), 2s);
}

// The spinning window: halves on a short wait that spun out, earns a sixteenth of its ceiling back
// on a wait that ended while spinning, ignores waits far past it; between 1 us and the ceiling.
TEST(SpinBudget, ShrinksOnShortWaitsThatSleptAndGrowsBackOnWaitsThatDidNot) {
  using std::chrono::microseconds;
  SpinBudget budget(200);
  EXPECT_EQ(budget.window_us(), 200);
  budget.record(microseconds(150), false);  // caught while spinning: already at the ceiling
  EXPECT_EQ(budget.window_us(), 200);
  budget.record(microseconds(410), true);  // spun 200 us, slept, done soon after
  EXPECT_EQ(budget.window_us(), 100);
  budget.record(microseconds(5000), true);  // a peer still computing: says nothing
  EXPECT_EQ(budget.window_us(), 100);
  for (int i = 0; i < 20; ++i) budget.record(microseconds(300), true);
  EXPECT_EQ(budget.window_us(), SpinBudget::kMinUs);
  budget.record(microseconds(1), false);
  EXPECT_EQ(budget.window_us(), 1 + 200 / 16);
  for (int i = 0; i < 40; ++i) budget.record(microseconds(1), false);
  EXPECT_EQ(budget.window_us(), 200);
}

// A window too short to catch any wait never earns anything back by itself; one wait in
// kExploreEvery spins the whole ceiling, and one that ends while spinning sets the window to twice
// its length at once.
TEST(SpinBudget, AWindowTooShortToCatchAnyWaitRecoversByExploring) {
  using std::chrono::microseconds;
  SpinBudget budget(200);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(budget.start_wait(), budget.window_us());
    budget.record(microseconds(300), true);
  }
  ASSERT_EQ(budget.window_us(), SpinBudget::kMinUs);
  // Hand-overs of about 6 us: every wait spins out of a 1 us window, until the exploring one.
  int waits = 20, explored_at = 0;
  while (explored_at == 0 && waits < 20 + 2 * SpinBudget::kExploreEvery) {
    const int window = budget.start_wait();
    ++waits;
    if (budget.exploring()) {
      EXPECT_EQ(window, 200);
      explored_at = waits;
      budget.record(microseconds(6), false);
    } else {
      EXPECT_EQ(window, SpinBudget::kMinUs);
      budget.record(microseconds(6), true);
    }
  }
  ASSERT_NE(explored_at, 0);
  EXPECT_LE(explored_at - 20, SpinBudget::kExploreEvery);
  EXPECT_EQ(budget.window_us(), 13);  // twice the wait, plus one; the additive step is smaller
  EXPECT_FALSE(budget.exploring());
  // At its ceiling the window never explores.
  for (int i = 0; i < 40; ++i) budget.record(microseconds(6), false);
  ASSERT_EQ(budget.window_us(), 200);
  for (int i = 0; i < 2 * SpinBudget::kExploreEvery; ++i) {
    EXPECT_EQ(budget.start_wait(), 200);
    EXPECT_FALSE(budget.exploring());
  }
}

TEST(SpinBudget, ACeilingOfZeroNeverSpins) {
  SpinBudget budget(0);
  budget.record(std::chrono::microseconds(1), false);
  EXPECT_EQ(budget.window_us(), 0);
  budget.record(std::chrono::microseconds(1), true);
  EXPECT_EQ(budget.window_us(), 0);
}

// A connection that counts wake_sleep() calls.
class WakeCountingConnection final : public QuietConnection {
 public:
  void wake_sleep() override { ++wakes; }
  std::atomic<int> wakes{0};
};

// The worker of a batch sleeps in poll() with the eventfd among its descriptors: another
// thread's wake() ends the sleep (its timeout is 20 s), unmark() empties the eventfd, and a
// wake() with no sleep marked leaves it empty.
TEST(BatchWake, AWakeFromAnotherThreadEndsAPollSleepAndIsEmptiedAfter) {
  BatchWake wake;
  std::vector<pollfd> fds;
  wake.mark_poll(fds);
  ASSERT_EQ(fds.size(), 1u);
  std::thread other([&] {
    std::this_thread::sleep_for(50ms);
    wake.wake();
  });
  const auto start = Clock::now();
  const int ready = ::poll(fds.data(), fds.size(), 20000);
  other.join();
  EXPECT_EQ(ready, 1);
  EXPECT_LT(Clock::now() - start, 10s);
  wake.unmark(fds);
  fds[0].revents = 0;
  EXPECT_EQ(::poll(fds.data(), fds.size(), 0), 0) << "the eventfd was not emptied";
  wake.wake();
  EXPECT_EQ(::poll(fds.data(), fds.size(), 0), 0) << "a wake with no sleep marked reached it";
}

// A sleep on a connection's futex: wake() reaches the connection marked, and none once unmarked.
TEST(BatchWake, AWakeReachesTheConnectionMarkedAndNoneAfterUnmark) {
  BatchWake wake;
  WakeCountingConnection c;
  wake.wake();
  EXPECT_EQ(c.wakes, 0);
  wake.mark_sleep_on(c);
  wake.wake();
  EXPECT_EQ(c.wakes, 1);
  wake.unmark({});
  wake.wake();
  EXPECT_EQ(c.wakes, 1);
}

// A peer with one slot ready: 4096 bytes of 7s, for the call whose tag it is given.
class OneSlotConnection final : public QuietConnection {
 public:
  std::optional<transport::RecvSlot> try_recv_slot() override {
    if (released) return std::nullopt;
    return transport::RecvSlot{data.data(), data.size(), tag};
  }
  void release_recv_slot() override { released = true; }
  std::vector<std::byte> data = std::vector<std::byte>(4096, std::byte{7});
  transport::Tag tag{};
  bool released = false;
};

// Engine::WorkStats: while the engine counts (DEBUG logging), a received slot's copy into the
// caller's buffer is counted as work out of the slots, its bytes exactly, afresh for each call;
// the other kinds stay empty. Not counting, nothing is. (The log stays at WARN here: at DEBUG the
// dispatch counts every call itself.)
TEST(WorkStats, AReceivedSliceCountsItsBytesOutOfTheSlotsOnlyWhileCounting) {
  const auto level = base::log().level();
  base::log().set_level(spdlog::level::warn);
  for (const bool counting : {true, false}) {
    OneSlotConnection peer;
    base::Halt halt;
    OnePeerEngine engine(peer, 10s, halt);
    Dispatcher dispatcher;
    std::vector<std::byte> out(4096);
    for (std::uint64_t seq = 0; seq < 2; ++seq) {  // the second call's count starts afresh
      Collective call;
      call.kind = Kind::recv;
      call.seq = seq;
      call.count = out.size();
      call.root = 1;
      call.out = out.data();
      peer.tag = call.tag();
      peer.released = false;
      engine->count_waits(counting);
      engine->run(call, dispatcher);
      engine->count_waits(false);
      EXPECT_TRUE(peer.released);
      EXPECT_EQ(out[4095], std::byte{7});
    }
    const Engine::WorkStats& work = engine->work_stats();
    const auto kind = [](Engine::Work w) { return static_cast<int>(w); };
    EXPECT_EQ(work.bytes[kind(Engine::Work::out_of_slots)], counting ? 4096.0 : 0.0);
    EXPECT_EQ(work.bytes[kind(Engine::Work::into_slots)], 0.0);
    EXPECT_EQ(work.bytes[kind(Engine::Work::peer_memory)], 0.0);
    EXPECT_EQ(work.bytes[kind(Engine::Work::own_memory)], 0.0);
    if (!counting) {
      EXPECT_EQ(work.us[kind(Engine::Work::out_of_slots)], 0.0);
    }
  }
  base::log().set_level(level);
}

}  // namespace
}  // namespace loom::algorithms
