// Setting up a connection is a wait like any other: a peer that aborts or dies before its
// connection exists, or this rank's own abort(), ends it within seconds, never at LOOM_TIMEOUT.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "../support/ranks.hpp"
#include "../support/transports.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::RankContext;
using testing::run_ranks_raw;

constexpr int kWorld = 4;
constexpr int kVictim = 2;  // rank 0 hosts the store; rank 3 opens the shm segment of 2-3

std::vector<std::string> survivor_keys() {
  std::vector<std::string> keys;
  for (int r = 0; r < kWorld; ++r)
    if (r != kVictim) keys.push_back(fmt::format("finished/{}", r));
  return keys;
}

// Every survivor's first all_reduce fails with PeerError naming the victim within 5 s.
void expect_survivor_fails_fast(RankContext& ctx, Communicator& comm) {
  std::vector<float> v(1 << 16, 1.0f);
  const auto start = Clock::now();
  try {
    comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum);
    ADD_FAILURE() << "rank " << ctx.rank << " completed an all_reduce without rank " << kVictim;
  } catch (const PeerError& e) {
    EXPECT_EQ(e.peer(), kVictim) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 5s) << "rank " << ctx.rank;
  ctx.store->set(fmt::format("finished/{}", ctx.rank), std::string("1"));
}

class BeforeConnecting : public ::testing::TestWithParam<const char*> {};

TEST_P(BeforeConnecting, ARankThatAbortsMakesTheOthersRaisePeerErrorWithinSeconds) {
  const std::string transport = GetParam();
  run_ranks_raw(kWorld, [&](RankContext& ctx) {
    Options o;
    o.transport.emplace(transport);
    o.timeout = 60s;  // far beyond the 5 s allowed
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    if (ctx.rank == kVictim) {
      comm.abort();  // alive, but gone from the communicator before any connection exists
      ctx.store->wait(survivor_keys(), 60s);
      return;
    }
    expect_survivor_fails_fast(ctx, comm);
  });
}

TEST_P(BeforeConnecting, ARankKilledRightAfterJoiningMakesEverySurvivorFailWithinSeconds) {
  const std::string transport = GetParam();
  testing::RunOptions opts;
  opts.may_die = {kVictim};
  run_ranks_raw(
      kWorld,
      [&](RankContext& ctx) {
        Options o;
        o.transport.emplace(transport);
        o.timeout = 60s;
        Communicator comm(ctx.store, ctx.rank, ctx.size, o);
        if (ctx.rank == kVictim) {
          testing::die_by_sigkill(ctx);
        }
        expect_survivor_fails_fast(ctx, comm);
      },
      opts);
}

INSTANTIATE_TEST_SUITE_P(Transports, BeforeConnecting, loom::testing::transports(),
                         [](const auto& info) { return std::string(info.param); });

// One rank calls, the other never does: the caller is stuck setting up the connection (dialing,
// accepting, or waiting for the segment) until abort() from another of its threads ends it.
struct StuckCase {
  const char* transport;
  int caller;
  const char* where;
};

void PrintTo(const StuckCase& c, std::ostream* out) {
  *out << c.transport << ", rank " << c.caller << " stuck in " << c.where;
}

class StuckInSetup : public ::testing::TestWithParam<StuckCase> {};

TEST_P(StuckInSetup, AbortFromAnotherThreadEndsTheCallWithinASecond) {
  const StuckCase c = GetParam();
  run_ranks_raw(2, [&](RankContext& ctx) {
    Options o;
    o.transport.emplace(c.transport);
    o.timeout = 20s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    if (ctx.rank != c.caller) {
      ctx.store->wait({"aborted"}, 60s);
      return;
    }
    Clock::time_point aborted_at;
    std::thread aborter([&] {
      std::this_thread::sleep_for(300ms);
      aborted_at = Clock::now();
      comm.abort();
    });
    float x = 1;
    EXPECT_THROW(comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum), Aborted);
    const auto ended_at = Clock::now();
    aborter.join();
    EXPECT_LT(ended_at - aborted_at, 1s);
    ctx.store->set("aborted", std::string("1"));
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, StuckInSetup,
                         ::testing::Values(StuckCase{"tcp", 0, "dial"},
                                           StuckCase{"tcp", 1, "accept"},
                                           StuckCase{"shm", 1, "open"}),
                         [](const auto& info) {
                           return fmt::format("{}_{}", info.param.transport, info.param.where);
                         });

// The highest descriptor open in this process.
int highest_open_fd() {
  int highest = 2;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    highest = std::max(highest, std::stoi(entry.path().filename().string()));
  return highest;
}

// A child communicator (split, shrink) publishes each member's address while that member
// builds it. A member that cannot build its child (here: no descriptor left for the child's
// listening socket) never publishes one, and the others' first call waited for it in a blocking
// store get, which neither the halt nor abort() reaches: until LOOM_TIMEOUT (120 s here). Now
// the member says so through the child's failure record, and the wait for its address polls,
// watching the halt (with a short heartbeat timeout should the record not get through).
TEST(ChildCommunicator, AMemberThatCannotBuildItsChildFailsTheOthersWithinSeconds) {
  run_ranks_raw(2, [](RankContext& ctx) {
    ::setenv("LOOM_HEARTBEAT_TIMEOUT", "3", 1);
    Options o;
    o.transport.emplace("tcp");
    o.timeout = 120s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    float x = 1;
    comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum);  // the parent's connections
    if (ctx.rank == 1) {
      rlimit old{};
      ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
      const rlimit low{static_cast<rlim_t>(highest_open_fd() + 1), old.rlim_max};
      ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
      std::vector<int> fillers;  // every free descriptor below the limit
      for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers.push_back(fd);
      EXPECT_ANY_THROW(comm.split(0, ctx.rank)) << "the child was built without a descriptor";
      for (int fd : fillers) ::close(fd);
      ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
      ctx.store->wait({"child-failed"}, 120s);
      return;
    }
    std::optional<Communicator> child = comm.split(0, ctx.rank);
    ASSERT_TRUE(child);
    const auto start = Clock::now();
    try {
      child->all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
      ADD_FAILURE() << "an all_reduce completed without rank 1";
    } catch (const PeerError& e) {
      EXPECT_EQ(e.peer(), 1) << e.what();
    }
    EXPECT_LT(Clock::now() - start, 10s);
    ctx.store->set("child-failed", std::string("1"));
  });
}

}  // namespace
}  // namespace loom
