// Communicator::shrink: after a rank dies, the survivors build a communicator of themselves and
// go on, without a restart.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "../support/ranks.hpp"
#include "../support/transports.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using testing::RankContext;

std::int64_t sum_of_ranks_plus_one(Communicator& comm, std::int64_t mine) {
  std::int64_t v = mine;
  comm.all_reduce(&v, 1, DataType::i64, ReduceOp::sum);
  return v;
}

// Runs collectives until the victim's death reaches this rank.
void run_until_peer_error(Communicator& comm, int victim) {
  std::vector<std::int32_t> buf(1 << 16, 1);
  try {
    for (;;) comm.all_reduce(buf.data(), buf.size(), DataType::i32, ReduceOp::sum);
  } catch (const PeerError& e) {
    EXPECT_EQ(e.peer(), victim) << e.what();
  }
}

// Every rank joins; then `victim` dies and the others run collectives until its death reaches
// them. Returns the halted communicator the survivors shrink.
Communicator join_then_lose(RankContext& ctx, int victim) {
  Options o;
  o.timeout = 60s;
  Communicator comm(ctx.store, ctx.rank, ctx.size, o);
  comm.barrier();
  if (ctx.rank == victim) testing::die_by_sigkill(ctx);
  run_until_peer_error(comm, victim);
  return comm;
}

class Shrink : public ::testing::TestWithParam<std::string> {};

TEST_P(Shrink, SurvivorsOfAKilledRankGoOnRenumberedInTheirOrder) {
  const std::string transport = GetParam();
  constexpr int kVictim = 2;
  testing::RunOptions opts;
  opts.may_die = {kVictim};
  testing::run_ranks_raw(
      4,
      [&](RankContext& ctx) {
        Options o;
        o.timeout = 60s;
        o.transport.emplace(transport);
        Communicator comm(ctx.store, ctx.rank, ctx.size, o);
        EXPECT_EQ(sum_of_ranks_plus_one(comm, ctx.rank + 1), 10);
        if (ctx.rank == kVictim) {
          std::thread([&ctx] {
            std::this_thread::sleep_for(20ms);
            testing::die_by_sigkill(ctx);
          }).detach();
          std::vector<std::int32_t> buf(1 << 16, 1);
          for (;;) comm.all_reduce(buf.data(), buf.size(), DataType::i32, ReduceOp::sum);
        }
        run_until_peer_error(comm, kVictim);

        const auto started = std::chrono::steady_clock::now();
        Communicator survivors = comm.shrink(30s);
        // Every rank not known to have failed joined: no waiting for the timeout.
        EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
        ASSERT_EQ(survivors.size(), 3);
        EXPECT_EQ(survivors.rank(), ctx.rank < kVictim ? ctx.rank : ctx.rank - 1);
        // Exact: 1 + 2 + 4, the survivors' old ranks plus one.
        EXPECT_EQ(sum_of_ranks_plus_one(survivors, ctx.rank + 1), 7);
        std::vector<std::int64_t> gathered(3);
        const std::int64_t mine = ctx.rank;
        survivors.all_gather(&mine, gathered.data(), 1, DataType::i64);
        EXPECT_EQ(gathered, (std::vector<std::int64_t>{0, 1, 3}));
        // An average divides by the survivors, at a latency-bound size and a pipelined one
        // (DDP averages its gradient buckets so): (1 + 2 + 4) / 3.
        for (std::size_t n : {std::size_t{3}, std::size_t{85002}}) {
          std::vector<float> values(n, static_cast<float>(ctx.rank + 1));
          survivors.all_reduce(values.data(), n, DataType::f32, ReduceOp::avg);
          EXPECT_FLOAT_EQ(values.front(), 7.0f / 3.0f) << n << " values";
          EXPECT_FLOAT_EQ(values.back(), 7.0f / 3.0f) << n << " values";
        }
        survivors.barrier();
        // The old communicator stays unusable, naming the dead rank.
        EXPECT_THROW(comm.barrier(), PeerError);
        survivors.destroy();
      },
      opts);
}

INSTANTIATE_TEST_SUITE_P(Transports, Shrink, loom::testing::transports());

TEST(ShrinkMembership, ARankJoiningAfterTheTimeoutIsLeftOutAndTold) {
  constexpr int kVictim = 2, kLate = 3;
  testing::RunOptions opts;
  opts.may_die = {kVictim};
  testing::run_ranks_raw(
      4,
      [&](RankContext& ctx) {
        Communicator comm = join_then_lose(ctx, kVictim);
        if (ctx.rank == kLate) {
          ctx.store->get("shrunk", 60s);  // the others have fixed their members by now
          try {
            comm.shrink(30s);
            ADD_FAILURE() << "a rank joining after the members were fixed was admitted";
          } catch (const PeerError& e) {
            EXPECT_NE(std::string(e.what()).find("joined after the survivors were fixed"),
                      std::string::npos)
                << e.what();
          }
          return;
        }
        const auto started = std::chrono::steady_clock::now();
        Communicator survivors = comm.shrink(1s);
        EXPECT_GE(std::chrono::steady_clock::now() - started, 900ms);  // waited for rank 3
        ASSERT_EQ(survivors.size(), 2);
        EXPECT_EQ(sum_of_ranks_plus_one(survivors, ctx.rank + 1), 3);
        if (ctx.rank == 0) ctx.store->set("shrunk", Bytes{1});
        survivors.destroy();
      },
      opts);
}

TEST(ShrinkMembership, ARankDyingAfterTheFailureIsNotWaitedForOnItsHost) {
  // Rank 2's death halts the communicator; rank 3 dies after it, before it could shrink: no
  // record names it, but its process is gone, so the others do not wait out the timeout.
  constexpr int kVictim = 2, kSecond = 3;
  testing::RunOptions opts;
  opts.may_die = {kVictim, kSecond};
  testing::run_ranks_raw(
      4,
      [&](RankContext& ctx) {
        Communicator comm = join_then_lose(ctx, kVictim);
        if (ctx.rank == kSecond) testing::die_by_sigkill(ctx);
        const auto started = std::chrono::steady_clock::now();
        Communicator survivors = comm.shrink(60s);
        EXPECT_LT(std::chrono::steady_clock::now() - started, 20s);
        ASSERT_EQ(survivors.size(), 2);
        EXPECT_EQ(survivors.rank(), ctx.rank);
        EXPECT_EQ(sum_of_ranks_plus_one(survivors, ctx.rank + 1), 3);
        survivors.destroy();
      },
      opts);
}

TEST(ShrinkMembership, OnAHealthyCommunicatorEveryRankGoesOnAndBothWork) {
  testing::run_ranks(3, [](Communicator& comm) {
    Communicator copy = comm.shrink();
    EXPECT_EQ(copy.size(), 3);
    EXPECT_EQ(copy.rank(), comm.rank());
    EXPECT_EQ(sum_of_ranks_plus_one(copy, comm.rank() + 1), 6);
    EXPECT_EQ(sum_of_ranks_plus_one(comm, comm.rank() + 1), 6);
    EXPECT_THROW(comm.shrink(0ms), InvalidArgument);
    EXPECT_EQ(sum_of_ranks_plus_one(comm, 1), 3);  // the refused call damaged nothing
    copy.destroy();
  });
}

TEST(ShrinkMembership, RanksExcludedAreNotWaitedForEvenWhenTheyLive) {
  testing::run_ranks(4, [](Communicator& comm) {
    const std::vector<int> exclude{1, 3};
    if (comm.rank() == 1 || comm.rank() == 3) return;  // alive, but not calling shrink
    EXPECT_THROW(comm.shrink(std::vector<int>{comm.rank()}), InvalidArgument);
    EXPECT_THROW(comm.shrink(std::vector<int>{4}), InvalidArgument);
    const auto started = std::chrono::steady_clock::now();
    Communicator survivors = comm.shrink(exclude, 30s);
    EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
    ASSERT_EQ(survivors.size(), 2);
    EXPECT_EQ(survivors.rank(), comm.rank() / 2);
    EXPECT_EQ(sum_of_ranks_plus_one(survivors, comm.rank() + 1), 4);  // 1 + 3
    survivors.destroy();
  });
}

TEST(ShrinkMembership, SurvivorsOnFewerLauncherNodesThanTheMinimumDoNotGoOn) {
  // Ranks 0 and 1 as if on one loomrun's node, 2 and 3 on another's, in a job of --nnodes 2:N.
  // Both nodes' shrink goes on; node A's ranks alone (node B's cut off: they never join) are
  // refused on each of them, and the communicator they shrank still works for all four.
  testing::run_ranks_raw(4, [&](RankContext& ctx) {
    const std::string node = ctx.rank < 2 ? "nodea" : "nodeb";
    ::setenv("LOOM_WORKER_ID", (node + "-0-" + std::to_string(ctx.rank)).c_str(), 1);
    ::setenv("LOOM_MIN_NODES", "2", 1);
    Options o;
    o.timeout = 60s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    Communicator both = comm.shrink(30s);
    EXPECT_EQ(both.size(), 4);
    EXPECT_EQ(sum_of_ranks_plus_one(both, ctx.rank + 1), 10);
    if (ctx.rank >= 2) {
      ctx.store->get("refused", 60s);  // node B stays away from the second shrink
      EXPECT_EQ(sum_of_ranks_plus_one(both, ctx.rank + 1), 10);
      both.destroy();
      return;
    }
    try {
      both.shrink(3s);
      ADD_FAILURE() << "the ranks of one node went on below the minimum of two nodes";
    } catch (const PeerError& e) {
      EXPECT_NE(std::string(e.what()).find("run on 1 of the launcher's nodes, fewer than the "
                                           "job's minimum of 2"),
                std::string::npos)
          << e.what();
    }
    ctx.store->add("refused-count", 1);
    if (ctx.rank == 0) {
      while (ctx.store->add("refused-count", 0) < 2) std::this_thread::sleep_for(10ms);
      ctx.store->set("refused", Bytes{1});
    }
    EXPECT_EQ(sum_of_ranks_plus_one(both, ctx.rank + 1), 10);  // the refused shrink damaged nothing
    both.destroy();
  });
}

// A watchdog's pattern: abort() the communicator, then shrink() it. The aborting rank's record
// named itself as the failed rank, so the others did not wait for it and fixed the members
// without it whenever it joined after them; it is alive and joins like any other now.
TEST(ShrinkMembership, ARankThatAbortedItselfIsWaitedFor) {
  testing::run_ranks_raw(3, [&](RankContext& ctx) {
    Options o;
    o.timeout = 60s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    comm.barrier();
    if (ctx.rank == 2) {
      comm.abort();
      ctx.store->get("others-saw-it", 60s);
      std::this_thread::sleep_for(1s);  // joins the shrink well after the others
    } else {
      std::vector<std::int32_t> buf(1 << 12, 1);
      try {
        for (;;) comm.all_reduce(buf.data(), buf.size(), DataType::i32, ReduceOp::sum);
      } catch (const PeerError& e) {
        EXPECT_EQ(e.peer(), 2) << e.what();
      }
      ctx.store->add("saw-abort", 1);
      if (ctx.rank == 0) {
        while (ctx.store->add("saw-abort", 0) < 2) std::this_thread::sleep_for(10ms);
        ctx.store->set("others-saw-it", Bytes{1});
      }
    }
    Communicator next = comm.shrink(20s);
    EXPECT_EQ(next.size(), 3) << "the rank that aborted was left out";
    EXPECT_EQ(sum_of_ranks_plus_one(next, ctx.rank + 1), 6);
    next.destroy();
  });
}

// A rank that destroyed its communicator on purpose (its part of the job done) will never join
// a shrink of it: the others waited for it the whole timeout, as for a rank that might still.
TEST(ShrinkMembership, ARankThatDestroyedItsCommunicatorIsNotWaitedFor) {
  testing::run_ranks_raw(3, [&](RankContext& ctx) {
    Options o;
    o.timeout = 60s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    comm.barrier();
    if (ctx.rank == 2) {
      comm.destroy();
      ctx.store->set("destroyed", Bytes{1});
      ctx.store->get("shrunk", 60s);
      return;
    }
    ctx.store->get("destroyed", 60s);
    const auto started = std::chrono::steady_clock::now();
    Communicator next = comm.shrink(20s);
    EXPECT_LT(std::chrono::steady_clock::now() - started, 5s) << "waited for the departed rank";
    EXPECT_EQ(next.size(), 2);
    EXPECT_EQ(sum_of_ranks_plus_one(next, ctx.rank + 1), 3);
    if (ctx.rank == 0) ctx.store->set("shrunk", Bytes{1});
    next.destroy();
  });
}

// A rank left out of a shrink of a split's subset may be healthy in the job: it is not named to
// the launcher (LOOM_LEFT_OUT_DIR, which loomrun watches to stop such ranks). A shrink of the
// whole job still names its left-out ranks.
TEST(ShrinkMembership, ARankLeftOutOfASubsetIsNotNamedToTheLauncher) {
  const std::string dir = "/tmp/loom-left-out-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  testing::run_ranks_raw(4, [&](RankContext& ctx) {
    ::setenv("LOOM_LEFT_OUT_DIR", dir.c_str(), 1);
    Options o;
    o.timeout = 60s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    auto pair = comm.split(ctx.rank / 2, ctx.rank);  // {0, 1} and {2, 3}
    ASSERT_TRUE(pair);
    if (ctx.rank == 1) {  // busy elsewhere: misses the subset's shrink
      ctx.store->get("subset-shrunk", 60s);
    } else if (ctx.rank == 0) {
      Communicator alone = pair->shrink(1s);
      EXPECT_EQ(alone.size(), 1);
      ctx.store->set("subset-shrunk", Bytes{1});
    }
    EXPECT_EQ(sum_of_ranks_plus_one(comm, 1), 4);  // rank 1 is healthy in the job
    if (ctx.rank == 0) {
      std::size_t named = 0;
      for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++named;
      EXPECT_EQ(named, 0u) << "a rank left out of a subset was named to the launcher";
    }
    comm.barrier();
  });
  std::filesystem::remove_all(dir);
}

// The node-count guard needs every member's LOOM_WORKER_ID: a wrapper that clears the
// environment (env -i, a container launcher) left it off in silence. The shrink still goes on
// (without the launcher's names there is no count to trust), and says the guard was not applied.
TEST(ShrinkMembership, AMinimumThatCannotBeCheckedIsSaidSo) {
  testing::run_ranks_raw(2, [&](RankContext& ctx) {
    ::setenv("LOOM_MIN_NODES", "2", 1);
    if (ctx.rank == 0) ::setenv("LOOM_WORKER_ID", "nodea-0-0", 1);  // rank 1's was cleared
    Options o;
    o.timeout = 60s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    // The log goes to stderr: into a file of this rank's while it shrinks.
    const std::string path =
        "/tmp/loom-shrink-log-" + std::to_string(::getpid()) + "-" + std::to_string(ctx.rank);
    const int saved = ::dup(2), file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(file, 0);
    ::dup2(file, 2);
    Communicator next = comm.shrink(30s);
    ::dup2(saved, 2);
    ::close(file), ::close(saved);
    EXPECT_EQ(sum_of_ranks_plus_one(next, ctx.rank + 1), 3);  // it went on
    std::ifstream in(path);
    const std::string logs(std::istreambuf_iterator<char>(in), {});
    std::filesystem::remove(path);
    EXPECT_NE(logs.find("LOOM_MIN_NODES=2 is not checked: rank 1 has no LOOM_WORKER_ID"),
              std::string::npos)
        << logs;
    next.destroy();
  });
}

}  // namespace
}  // namespace loom
