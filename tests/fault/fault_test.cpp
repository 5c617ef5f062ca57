// Failures end in named errors within bounded time, never in a hang.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <thread>
#include <vector>

#include "../support/ranks.hpp"
#include "../support/transports.hpp"
#include "base/auth.hpp"
#include "base/socket_io.hpp"
#include "base/tcp_connect.hpp"
#include "store/keys.hpp"

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
  for (const char* transport : loom::testing::kTransports) {
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

// A member that dies before it calls create_group: the others, waiting for its settings, see
// its process gone (it ran on this host) and raise PeerError naming it, not a wait until the
// child's timeout.
TEST(Fault, ADeadMemberEndsTheOthersCreateGroup) {
  run_ranks_raw(3, [](RankContext& ctx) {
    Options o;
    o.timeout = 60s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    float x = 1;
    comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
    if (ctx.rank == 2) {
      ctx.store->add("done", 1);
      ::_exit(0);  // dies without a word
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      (void)comm.create_group(std::vector<int>{0, 1, 2}, o);
      ADD_FAILURE() << "the group was made without its dead member";
    } catch (const PeerError& e) {
      EXPECT_EQ(e.peer(), 2) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 20s)
        << "the members waited for the dead one until the child's timeout";
  });
}

TEST(Fault, DifferentCountsRaiseCollectiveMismatch) {
  for (const char* transport : loom::testing::kTransports) {
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
  for (const char* transport : loom::testing::kTransports) {
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
  for (const char* transport : loom::testing::kTransports) {
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

TEST(Auth, IntrudersOnADataPortAreRejectedAndTheJobCarriesOn) {
  testing::RunOptions opts;
  opts.options.transport.emplace("tcp");
  opts.options.secret.emplace("job-secret");
  opts.options.timeout = 30s;
  run_ranks_raw(
      2,
      [&opts](RankContext& ctx) {
        Communicator comm(ctx.store, ctx.rank, ctx.size, opts.options);
        if (ctx.rank == 0) {
          // Before the first call connects the ranks, knock on rank 1's data port: with
          // garbage, and with a well-formed handshake under the wrong secret.
          const std::string address = ctx.store->get_string(
              "loom/" + store::keys::generation_prefix("", 1) + "/" + store::keys::tcp_address(1),
              10s);
          const auto colon = address.rfind(':');
          const auto port = static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1)));
          std::vector<int> intruders;
          for (int k = 0; k < 2; ++k) {
            std::string error;
            base::Deadline deadline(5s);
            int fd = base::connect_tcp(address.substr(0, colon), port, deadline, error);
            ASSERT_GE(fd, 0) << error;
            std::vector<std::uint8_t> bytes(32, 0x41);  // something like a hello...
            if (k == 1) {                               // ...and a response under another secret
              base::Handshake wrong("loom-data", "not-the-secret");
              base::Challenge fake;
              fake.secret_required = true;
              auto reply = wrong.respond(fake, "x");
              bytes.insert(bytes.end(), reply.bytes.begin(), reply.bytes.end());
            }
            base::write_exact(fd, bytes.data(), bytes.size(), deadline);
            ::shutdown(fd, SHUT_WR);  // nothing more is coming
            intruders.push_back(fd);
          }
          ctx.store->set("knocked", std::string("1"));
          for (int fd : intruders) {  // the challenge, then the door closes
            std::array<std::uint8_t, base::Challenge::kBytes + 1> got{};
            base::Deadline deadline(20s);
            EXPECT_EQ(base::read_exact(fd, got.data(), got.size(), deadline),
                      base::IoResult::closed);
            ::close(fd);
          }
        } else {
          ctx.store->get("knocked", 10s);
        }
        std::vector<float> v(1000, 1.0f);
        comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum);
        EXPECT_EQ(v[999], 2.0f);
      },
      opts);
}

TEST(Auth, RanksWithDifferentSecretsDoNotConnect) {
  run_ranks_raw(2, [](RankContext& ctx) {
    Options o;
    o.transport.emplace("tcp");
    o.timeout = 5s;
    o.secret.emplace(ctx.rank == 0 ? "one" : "other");
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    float x = 1;
    auto start = std::chrono::steady_clock::now();
    try {
      comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
      ADD_FAILURE() << "ranks with different secrets exchanged data";
    } catch (const PeerError& e) {
      EXPECT_NE(std::string(e.what()).find("secret"), std::string::npos) << e.what();
    } catch (const TimeoutError&) {  // the accepting side keeps waiting for a genuine peer
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  });
}

// Rank 1 deviates from the others at collective #2 in one way; every rank must raise
// CollectiveMismatch naming both calls, at the latest in its next call (a rank that only sends
// in a broadcast cannot know sooner), and none may hang.
struct MismatchCase {
  const char* name;
  const char* rank1_calls;  // what rank 1's call #2 is described as
  const char* others_call;  // what the others' call #2 is described as
};

class Mismatch : public ::testing::TestWithParam<std::tuple<MismatchCase, const char*>> {};

void deviating_call(Communicator& comm, const std::string& kind, bool deviate) {
  std::vector<float> buf(1024, 1.0f);
  if (kind == "op")
    deviate ? comm.broadcast(buf.data(), buf.size(), DataType::f32, 0)
            : comm.all_reduce(buf.data(), buf.size(), DataType::f32, ReduceOp::sum);
  else if (kind == "dtype")
    comm.all_reduce(buf.data(), deviate ? buf.size() / 2 : buf.size(),
                    deviate ? DataType::f64 : DataType::f32, ReduceOp::sum);
  else if (kind == "count")
    comm.all_reduce(buf.data(), deviate ? 1000 : 1024, DataType::f32, ReduceOp::sum);
  else if (kind == "root")
    comm.broadcast(buf.data(), buf.size(), DataType::f32, deviate ? 1 : 0);
  else if (kind == "reduce_op")
    comm.all_reduce(buf.data(), buf.size(), DataType::f32, deviate ? ReduceOp::max : ReduceOp::sum);
  else if (kind == "skip")  // rank 1 skips the all-reduce and goes on to the barrier
    deviate ? comm.barrier()
            : comm.all_reduce(buf.data(), buf.size(), DataType::f32, ReduceOp::sum);
}

TEST_P(Mismatch, EveryRankRaisesCollectiveMismatchNamingBothCalls) {
  const auto& [c, transport] = GetParam();
  testing::RunOptions opts;
  opts.options.transport.emplace(transport);
  opts.options.timeout = 30s;
  const std::string kind = c.name;
  const std::string rank1 = c.rank1_calls, others = c.others_call;
  testing::run_ranks(
      3,
      [&](Communicator& comm) {
        float x = 1;
        comm.all_reduce(&x, 1, DataType::f32, ReduceOp::sum);  // #0
        comm.barrier();                                        // #1
        const auto start = std::chrono::steady_clock::now();
        try {
          deviating_call(comm, kind, comm.rank() == 1);  // #2
          comm.barrier();
          ADD_FAILURE() << "rank " << comm.rank() << ": the mismatch went unnoticed";
        } catch (const CollectiveMismatch& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("rank 1 called " + rank1), std::string::npos) << what;
          EXPECT_NE(what.find(others), std::string::npos) << what;
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
      },
      opts);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, Mismatch,
    ::testing::Combine(
        ::testing::Values(MismatchCase{"op", "broadcast(f32 x 1024, root 0) as collective #2",
                                       "called all_reduce(f32 x 1024, sum) as collective #2"},
                          MismatchCase{"dtype", "all_reduce(f64 x 512, sum) as collective #2",
                                       "called all_reduce(f32 x 1024, sum) as collective #2"},
                          MismatchCase{"count", "all_reduce(f32 x 1000, sum) as collective #2",
                                       "called all_reduce(f32 x 1024, sum) as collective #2"},
                          MismatchCase{"root", "broadcast(f32 x 1024, root 1) as collective #2",
                                       "called broadcast(f32 x 1024, root 0) as collective #2"},
                          MismatchCase{"reduce_op", "all_reduce(f32 x 1024, max) as collective #2",
                                       "called all_reduce(f32 x 1024, sum) as collective #2"},
                          MismatchCase{"skip", "barrier() as collective #2",
                                       "called all_reduce(f32 x 1024, sum) as collective #2"}),
        loom::testing::transports()),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_" + std::get<1>(info.param);
    });

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
