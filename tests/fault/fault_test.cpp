// Failures end in named errors within bounded time, never in a hang.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "../support/ranks.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using testing::RankContext;
using testing::run_ranks;
using testing::run_ranks_raw;

TEST(Fault, RankThatNeverJoinsMakesOthersTimeOutNamingIt) {
  testing::RunOptions opts;
  opts.timeout = 60s;
  run_ranks_raw(
      3,
      [](RankContext& ctx) {
        if (ctx.rank == 2) return;  // never joins
        Options o;
        o.timeout = 2s;
        auto start = std::chrono::steady_clock::now();
        try {
          Communicator comm(ctx.store, ctx.rank, ctx.size, o);
          ADD_FAILURE() << "joined without rank 2";
        } catch (const TimeoutError& e) {
          std::string what = e.what();
          EXPECT_NE(what.find("init"), std::string::npos) << what;
          EXPECT_NE(what.find("rank(s) 2"), std::string::npos) << what;
          EXPECT_NE(what.find("rank " + std::to_string(ctx.rank)), std::string::npos) << what;
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
      },
      opts);
}

TEST(Fault, PeerThatStopsCallingMakesOthersTimeOutNamingIt) {
  run_ranks_raw(3, [](RankContext& ctx) {
    Options o;
    o.timeout = 2s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    comm.barrier();
    if (ctx.rank == 1) {
      // Stays alive but never calls the all-reduce: the others must time out, not hang.
      std::this_thread::sleep_for(4s);
      return;
    }
    float x = 1;
    // The first rank to time out aborts its connections; a rank waiting on it then fails at once
    // with PeerError rather than at its own deadline. Either way the error names the call.
    try {
      comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
      ADD_FAILURE() << "all_reduce finished without rank 1";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("all_reduce #"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
    } catch (const PeerError& e) {
      EXPECT_NE(std::string(e.what()).find("all_reduce #"), std::string::npos) << e.what();
    }
    // The communicator is now unusable and says why.
    EXPECT_THROW(comm.barrier(), PeerError);
  });
}

TEST(Fault, DeadPeerRaisesPeerErrorOnSurvivorsOnEveryTransport) {
  for (const char* transport : {"tcp", "shm"}) {
    SCOPED_TRACE(transport);
    run_ranks_raw(3, [transport](RankContext& ctx) {
      Options o;
      o.timeout = 30s;
      o.transport = transport;
      Communicator comm(ctx.store, ctx.rank, ctx.size, o);
      float x = 1;
      comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum);  // connections are up
      if (ctx.rank == 2) {
        ctx.store->add("done", 1);
        ::_exit(0);  // dies without a word
      }
      auto start = std::chrono::steady_clock::now();
      std::vector<float> big(1 << 20, 1.0f);
      EXPECT_THROW(
          comm.all_reduce(big.data(), big.data(), big.size(), DataType::f32, ReduceOp::sum),
          PeerError);
      EXPECT_LT(std::chrono::steady_clock::now() - start, 10s)
          << "survivors waited instead of seeing the dead peer";
    });
  }
}

TEST(Fault, DifferentCountsRaiseCollectiveMismatch) {
  for (const char* transport : {"tcp", "shm"}) {
    SCOPED_TRACE(transport);
    testing::RunOptions opts;
    opts.options.transport = transport;
    run_ranks(
        2,
        [](Communicator& comm) {
          std::vector<float> buf(16, 1.0f);
          std::size_t count = comm.rank() == 0 ? 8 : 16;
          try {
            comm.all_reduce(buf.data(), buf.data(), count, DataType::f32, ReduceOp::sum);
            ADD_FAILURE() << "mismatched all_reduce succeeded";
          } catch (const CollectiveMismatch& e) {
            std::string what = e.what();
            EXPECT_NE(what.find("all_reduce #0"), std::string::npos) << what;
            EXPECT_NE(what.find("mismatch"), std::string::npos) << what;
          }
        },
        opts);
  }
}

TEST(Fault, SmallAgainstLargeCountIsAMismatchNotAHang) {
  // Over shared memory the small call travels through the inline channel and the large one
  // through the slots: the rank that receives the other kind must still see a mismatch. The
  // large call's rank may instead see its peer close the connection after that peer failed.
  for (const char* transport : {"tcp", "shm"}) {
    SCOPED_TRACE(transport);
    testing::RunOptions opts;
    opts.options.transport = transport;
    opts.options.timeout = 30s;
    run_ranks(
        2,
        [](Communicator& comm) {
          std::vector<float> buf(1 << 20, 1.0f);
          const bool small = comm.rank() == 0;
          auto start = std::chrono::steady_clock::now();
          try {
            comm.all_reduce(buf.data(), buf.data(), small ? 8 : buf.size(), DataType::f32,
                            ReduceOp::sum);
            ADD_FAILURE() << "mismatched all_reduce succeeded";
          } catch (const CollectiveMismatch& e) {
            EXPECT_NE(std::string(e.what()).find("all_reduce #0"), std::string::npos) << e.what();
          } catch (const PeerError& e) {
            EXPECT_FALSE(small) << e.what();
          }
          EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
        },
        opts);
  }
}

TEST(Fault, AbortFromAnotherThreadEndsAWaitingCallAtOnce) {
  for (const char* transport : {"tcp", "shm"}) {
    SCOPED_TRACE(transport);
    testing::RunOptions opts;
    opts.options.transport = transport;
    opts.options.timeout = 60s;
    run_ranks_raw(
        2,
        [&opts](RankContext& ctx) {
          Communicator comm(ctx.store, ctx.rank, ctx.size, opts.options);
          comm.barrier();
          float x = 1;
          auto start = std::chrono::steady_clock::now();
          if (ctx.rank == 0) {
            // Rank 1 never calls: only abort() can end this wait before the 60 s timeout.
            std::thread aborter([&] {
              std::this_thread::sleep_for(300ms);
              comm.abort();
            });
            EXPECT_THROW(comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum), Aborted);
            aborter.join();
            EXPECT_THROW(comm.barrier(), Aborted);  // and every later call
            ctx.store->set("aborted", std::string("1"));
          } else {
            ctx.store->get("aborted", 30s);
            // Rank 0 may have sent its part of this call before it was aborted, so this one can
            // complete; the next cannot. The aborted rank closed its connections: this rank
            // fails at once, not at 60 s.
            try {
              comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
            } catch (const PeerError&) {
            }
            EXPECT_THROW(comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum), PeerError);
          }
          EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
        },
        opts);
  }
}

TEST(Fault, WorkWaitWithShortTimeoutRaisesTimeoutError) {
  run_ranks(2, [](Communicator& comm) {
    float x = 1;
    if (comm.rank() == 1) std::this_thread::sleep_for(1500ms);
    Work w = comm.all_reduce_async(&x, &x, 1, DataType::f32, ReduceOp::sum);
    if (comm.rank() == 0) {
      EXPECT_THROW(w.wait(100ms), TimeoutError);
    }
    w.wait(30s);
    EXPECT_EQ(x, 2.0f);
  });
}

}  // namespace
}  // namespace loom
