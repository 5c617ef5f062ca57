// The health monitor against a real store server: the stall report names who has and has not
// entered the stalled collective; an abort record reaches every rank; a rank whose heartbeat
// stops is declared failed by the rank that watches it; a store that stops answering names the
// rank hosting it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "algorithms/collective.hpp"
#include "core/failure_store.hpp"
#include "core/health_monitor.hpp"
#include "loom/store.hpp"

namespace loom::core {
namespace {

using namespace std::chrono_literals;

transport::Tag tag_of(algorithms::Kind kind, std::uint64_t seq, std::size_t count) {
  algorithms::Collective c{};
  c.kind = kind;
  c.seq = seq;
  c.dtype = DataType::f32;
  c.op = ReduceOp::sum;
  c.count = count;
  return c.tag();
}

// A store that stops answering when frozen, as a stopped process's requests stop reaching it.
class FreezableStore final : public Store {
 public:
  explicit FreezableStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  std::atomic<bool> frozen{false};
  void set(const std::string& k, const Bytes& v) override { live().set(k, v); }
  Bytes get(const std::string& k, std::chrono::milliseconds t) override { return live().get(k, t); }
  std::int64_t add(const std::string& k, std::int64_t d) override { return live().add(k, d); }
  Bytes compare_set(const std::string& k, const Bytes& e, const Bytes& d) override {
    return live().compare_set(k, e, d);
  }
  bool remove(const std::string& k) override { return live().remove(k); }
  void wait(const std::vector<std::string>& k, std::chrono::milliseconds t) override {
    live().wait(k, t);
  }
  std::vector<bool> check(const std::vector<std::string>& k) override { return live().check(k); }
  using Store::set;

 private:
  Store& live() {
    if (frozen.load()) throw TimeoutError("store: test: no answer");
    return *inner_;
  }
  std::shared_ptr<Store> inner_;
};

struct Rank {
  std::shared_ptr<FreezableStore> store;
  Progress progress;
  std::atomic<int> aborts{0};
  base::AbortRecord last;
  std::mutex mu;
  // Last, so that it is destroyed first: its thread writes the members above until joined.
  std::unique_ptr<HealthMonitor> monitor;
};

class Monitors : public ::testing::Test {
 protected:
  // The monitors' threads report into members declared after ranks_: stop them all first.
  ~Monitors() override {
    for (auto& r : ranks_) r->monitor.reset();
  }
  void start(int n, HealthMonitor::Settings base) {
    for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<Rank>());
    for (int r = 0; r < n; ++r) {
      auto s = base;
      s.rank = r;
      s.size = n;
      s.hosts.assign(static_cast<std::size_t>(n), "testhost");
      s.report = [this](const std::string& text) {
        std::lock_guard lock(mu_);
        reports_.push_back(text);
      };
      Rank& rank = *ranks_[static_cast<std::size_t>(r)];
      rank.store = std::make_shared<FreezableStore>(
          std::make_shared<TcpStore>("127.0.0.1", server_.port(), 5s, std::string()));
      rank.monitor = std::make_unique<HealthMonitor>(rank.store, s, rank.progress,
                                                     [&rank](const base::AbortRecord& record) {
                                                       std::lock_guard lock(rank.mu);
                                                       rank.last = record;
                                                       ++rank.aborts;
                                                     });
    }
  }
  void stop_rank(int r) { ranks_[static_cast<std::size_t>(r)]->monitor.reset(); }
  void freeze_rank(int r) { ranks_[static_cast<std::size_t>(r)]->store->frozen = true; }
  void expect_frozen_found(int frozen) {
    HealthMonitor::Settings s;
    s.heartbeat_timeout = 3s;
    start(3, s);
    std::this_thread::sleep_for(1500ms);
    const auto start = std::chrono::steady_clock::now();
    freeze_rank(frozen);  // its heartbeats stop, as a frozen process's would
    const int watcher = (frozen + 2) % 3;
    ASSERT_TRUE(failure_seen_by(watcher)) << "rank " << frozen << "'s silence went unnoticed";
    EXPECT_LT(std::chrono::steady_clock::now() - start, 3s + 2s);
    std::lock_guard lock(ranks_[static_cast<std::size_t>(watcher)]->mu);
    const auto& last = ranks_[static_cast<std::size_t>(watcher)]->last;
    EXPECT_EQ(last.failed, frozen);
    EXPECT_NE(
        last.cause.find("rank " + std::to_string(frozen) + " on host testhost stopped responding"),
        std::string::npos)
        << last.cause;
  }
  // Waits (up to 10 s) until rank r has seen a failure; true if it has.
  bool failure_seen_by(int r) {
    for (int i = 0; i < 200 && ranks_[static_cast<std::size_t>(r)]->aborts.load() == 0; ++i)
      std::this_thread::sleep_for(50ms);
    return ranks_[static_cast<std::size_t>(r)]->aborts.load() > 0;
  }
  std::vector<std::string> reports() {
    std::lock_guard lock(mu_);
    return reports_;
  }

  StoreServer server_{"127.0.0.1", 0, std::string()};
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::mutex mu_;
  std::vector<std::string> reports_;
};

TEST_F(Monitors, StallReportNamesWhoHasAndHasNotEnteredTheCollective) {
  HealthMonitor::Settings s;
  s.stall_warn = 1s;
  s.heartbeat_timeout = 0s;
  start(3, s);
  const auto stalled = tag_of(algorithms::Kind::all_reduce, 5, 1024);
  const auto earlier = tag_of(algorithms::Kind::barrier, 4, 0);
  for (int r : {0, 1}) {
    auto& p = ranks_[static_cast<std::size_t>(r)]->progress;
    p.word = stalled.word, p.count = stalled.count, p.in_call = true;
  }
  auto& behind = ranks_[2]->progress;
  behind.word = earlier.word, behind.count = earlier.count, behind.in_call = false;
  for (int i = 0; i < 100 && reports().empty(); ++i) std::this_thread::sleep_for(50ms);
  ASSERT_FALSE(reports().empty()) << "no stall report within 5 s";
  const std::string text = reports().front();
  EXPECT_NE(text.find("all_reduce(f32 x 1024, sum) as collective #5"), std::string::npos) << text;
  EXPECT_NE(text.find("entered by rank(s) 0,1;"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 2 (last: barrier() as collective #4, finished"), std::string::npos)
      << text;
}

TEST_F(Monitors, AnAbortRecordReachesEveryRank) {
  HealthMonitor::Settings s;
  s.heartbeat_timeout = 0s;
  start(3, s);
  TcpStore client("127.0.0.1", server_.port(), 5s, std::string());
  publish_abort(client, base::AbortRecord{base::AbortRecord::Kind::mismatch, 1, -1,
                                          "collective mismatch: test"});
  for (int i = 0; i < 60; ++i) {
    bool all = true;
    for (auto& r : ranks_) all &= r->aborts.load() == 1;
    if (all) break;
    std::this_thread::sleep_for(50ms);
  }
  for (auto& r : ranks_) {
    EXPECT_EQ(r->aborts.load(), 1);
    std::lock_guard lock(r->mu);
    EXPECT_EQ(r->last.kind, base::AbortRecord::Kind::mismatch);
    EXPECT_EQ(r->last.cause, "collective mismatch: test");
  }
}

// Every rank is watched by the next one, rank 0 by the last: a frozen rank 0 is found too.
TEST_F(Monitors, AFrozenRankZeroIsDeclaredFailedByTheLastRank) {
  expect_frozen_found(0);
}
TEST_F(Monitors, AFrozenMiddleRankIsDeclaredFailedByTheRankBeforeIt) {
  expect_frozen_found(1);
}

TEST_F(Monitors, ARankThatLeavesOnPurposeIsNotDeclaredFailed) {
  HealthMonitor::Settings s;
  s.heartbeat_timeout = 2s;
  start(3, s);
  std::this_thread::sleep_for(1s);
  stop_rank(2);  // its communicator was destroyed
  std::this_thread::sleep_for(4s);
  EXPECT_EQ(ranks_[1]->aborts.load(), 0);
  EXPECT_EQ(ranks_[0]->aborts.load(), 0);
}

// Rank 1 watches rank 2; rank 1 leaves on purpose (its communicator destroyed, its job part
// done), then rank 2 freezes. Rank 2 had no watcher any more: its freeze went unnoticed until a
// connection or LOOM_TIMEOUT. Rank 0, which watched rank 1, moves on to rank 2 once rank 1 has
// left, and finds it.
TEST_F(Monitors, AFreezeAfterItsWatcherLeftIsStillFound) {
  HealthMonitor::Settings s;
  s.heartbeat_timeout = 3s;
  start(3, s);
  std::this_thread::sleep_for(1s);
  stop_rank(1);
  std::this_thread::sleep_for(2s);  // rank 0 sees rank 1 gone and takes rank 2 over
  freeze_rank(2);
  ASSERT_TRUE(failure_seen_by(0)) << "rank 2's freeze went unnoticed once its watcher had left";
  std::lock_guard lock(ranks_[0]->mu);
  EXPECT_EQ(ranks_[0]->last.failed, 2);
  EXPECT_NE(ranks_[0]->last.cause.find("rank 2 on host testhost stopped responding"),
            std::string::npos)
      << ranks_[0]->last.cause;
}

// The store stops answering everyone, and rank 0 hosts it: every other rank finds rank 0 failed
// on its own (no store to tell them) within the heartbeat timeout and a tick or two.
TEST_F(Monitors, AStoreThatStopsAnsweringNamesTheRankThatHostsIt) {
  HealthMonitor::Settings s;
  s.heartbeat_timeout = 3s;
  start(3, s);
  for (auto& r : ranks_) r->monitor->set_store_host(0, "127.0.0.1:1");
  std::this_thread::sleep_for(1s);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 3; ++r) freeze_rank(r);
  for (int r : {1, 2}) {
    ASSERT_TRUE(failure_seen_by(r)) << "rank " << r;
    std::lock_guard lock(ranks_[static_cast<std::size_t>(r)]->mu);
    const auto& last = ranks_[static_cast<std::size_t>(r)]->last;
    EXPECT_EQ(last.failed, 0);
    EXPECT_NE(last.cause.find("which hosts the rendezvous store at 127.0.0.1:1"), std::string::npos)
        << last.cause;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s + 2s);
  EXPECT_EQ(ranks_[0]->aborts.load(), 0) << "rank 0 hosts the store: it does not blame itself";
}

// A failure record goes through the monitor's own connection, within the caller's deadline,
// also when the store does not answer.
TEST_F(Monitors, PublishingAFailureHonoursItsDeadline) {
  HealthMonitor::Settings s;
  s.heartbeat_timeout = 0s;
  start(2, s);
  const base::AbortRecord mine{base::AbortRecord::Kind::peer_failed, 1, 1, "rank 1 failed: test"};
  auto standing = ranks_[1]->monitor->publish(mine, 2s, 0ms);
  ASSERT_TRUE(standing.has_value());
  EXPECT_EQ(standing->cause, mine.cause);
  freeze_rank(0);
  const auto start = std::chrono::steady_clock::now();
  const base::AbortRecord other{base::AbortRecord::Kind::peer_failed, 0, 0, "rank 0: test"};
  auto none = ranks_[0]->monitor->publish(other, 300ms, 0ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);
  EXPECT_FALSE(none.has_value());
}

TEST(AbortRecords, EncodeDecodeAndRejectMalformed) {
  base::AbortRecord r{base::AbortRecord::Kind::timeout, 3, -1, "a cause\nwith a newline"};
  auto back = base::AbortRecord::decode(r.encode());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->kind, r.kind);
  EXPECT_EQ(back->reporter, 3);
  EXPECT_EQ(back->failed, -1);
  EXPECT_EQ(back->cause, r.cause);
  for (std::string bad : {"", "1", "9\n1\n2\nx", "1\nx\n2\ny", "1\n2\n3"})
    EXPECT_FALSE(base::AbortRecord::decode(Bytes(bad.begin(), bad.end()))) << bad;
}

}  // namespace
}  // namespace loom::core
