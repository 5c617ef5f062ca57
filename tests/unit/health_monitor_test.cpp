// The health monitor against a real store server: the stall report names who has and has not
// entered the stalled collective; an abort record reaches every rank; a rank whose heartbeat
// stops is declared failed by rank 0.
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

struct Rank {
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
      rank.monitor = std::make_unique<HealthMonitor>(
          std::make_shared<TcpStore>("127.0.0.1", server_.port(), 5s, std::string()), s,
          rank.progress, [&rank](const base::AbortRecord& record) {
            std::lock_guard lock(rank.mu);
            rank.last = record;
            ++rank.aborts;
          });
    }
  }
  void stop_rank(int r) { ranks_[static_cast<std::size_t>(r)]->monitor.reset(); }
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

TEST_F(Monitors, RankZeroDeclaresARankWithoutHeartbeatFailed) {
  HealthMonitor::Settings s;
  s.heartbeat_timeout = 3s;
  start(3, s);
  std::this_thread::sleep_for(1500ms);
  stop_rank(2);  // its heartbeats stop, as a frozen process's would
  for (int i = 0; i < 200 && ranks_[0]->aborts.load() == 0; ++i) std::this_thread::sleep_for(50ms);
  ASSERT_EQ(ranks_[0]->aborts.load(), 1) << "rank 2's silence went unnoticed";
  std::lock_guard lock(ranks_[0]->mu);
  EXPECT_EQ(ranks_[0]->last.failed, 2);
  EXPECT_NE(ranks_[0]->last.cause.find("rank 2 on host testhost stopped responding"),
            std::string::npos)
      << ranks_[0]->last.cause;
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
