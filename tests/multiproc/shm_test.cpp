// Shared-memory segments: selected for peers on one host, and never left behind in /dev/shm.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../support/ranks.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using testing::RankContext;
using testing::run_ranks_raw;
using testing::segments_of;

TEST(SharedMemory, IsChosenOnOneHostAndSegmentsAreGoneAfterNormalExit) {
  run_ranks_raw(4, [](RankContext& ctx) {
    {
      Communicator comm(ctx.store, ctx.rank, ctx.size);
      EXPECT_NE(comm.describe().find("shm to rank(s)"), std::string::npos) << comm.describe();
      std::vector<float> v(1 << 20, 1.0f);
      comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum);
      EXPECT_EQ(v[12345], 4.0f);
      // After the second barrier every rank has finished the first, and so mapped the segments
      // that the first one opened.
      comm.barrier();
      comm.barrier();
      // Every segment was unlinked as soon as both sides had mapped it.
      EXPECT_EQ(segments_of(*ctx.store), std::vector<std::string>{});
    }
    EXPECT_EQ(segments_of(*ctx.store), std::vector<std::string>{});
  });
}

TEST(SharedMemory, SegmentsAreGoneAfterAPeerIsKilled) {
  testing::RunOptions opts;
  opts.may_die = {1};
  run_ranks_raw(
      3,
      [](RankContext& ctx) {
        Options o;
        o.timeout = 20s;
        Communicator comm(ctx.store, ctx.rank, ctx.size, o);
        std::vector<float> v(1 << 18, 1.0f);
        comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum);
        if (ctx.rank == 1) {
          ctx.store->add("done", 1);
          ::kill(::getpid(), SIGKILL);
        }
        EXPECT_THROW(comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum), PeerError);
        comm.destroy();
        EXPECT_EQ(segments_of(*ctx.store), std::vector<std::string>{});
      },
      opts);
}

TEST(SharedMemory, SegmentsAreGoneAfterAbort) {
  run_ranks_raw(3, [](RankContext& ctx) {
    Options o;
    o.timeout = 20s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    std::vector<float> v(1 << 18, 1.0f);
    comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum);
    auto start = std::chrono::steady_clock::now();
    if (ctx.rank == 1) {
      comm.abort();
      EXPECT_THROW(comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum), Aborted);
    } else {
      EXPECT_THROW(comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum), PeerError);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    comm.destroy();
    EXPECT_EQ(segments_of(*ctx.store), std::vector<std::string>{});
  });
}

TEST(SharedMemory, TransportTcpAndShmDisableKeepPeersOnTcp) {
  testing::RunOptions opts;
  opts.options.transport = "tcp";
  testing::run_ranks(
      2,
      [](Communicator& comm) {
        EXPECT_EQ(comm.describe().find("shm to"), std::string::npos) << comm.describe();
        float x = 1;
        comm.all_reduce(&x, 1, DataType::f32, ReduceOp::sum);
        EXPECT_EQ(x, 2.0f);
      },
      opts);
}

TEST(SharedMemory, DifferentHostIdsMeanNoSharedMemory) {
  run_ranks_raw(2, [](RankContext& ctx) {
    ::setenv("LOOM_HOST_ID", ctx.rank == 0 ? "host-a" : "host-b", 1);
    Communicator comm(ctx.store, ctx.rank, ctx.size);
    EXPECT_NE(comm.describe().find("tcp to rank(s)"), std::string::npos) << comm.describe();
    EXPECT_EQ(comm.describe().find("shm to"), std::string::npos) << comm.describe();
    float x = 1;
    comm.all_reduce(&x, 1, DataType::f32, ReduceOp::sum);
    EXPECT_EQ(x, 2.0f);
    Options forced;
    forced.transport = "shm";
    forced.store_prefix = "forced";
    EXPECT_THROW(Communicator(ctx.store, ctx.rank, ctx.size, forced), InvalidArgument);
  });
}

TEST(SharedMemory, EightRanksOnTwoCoresShareTheCpuInsteadOfSpinning) {
  run_ranks_raw(8, [](RankContext& ctx) {
    Communicator comm(ctx.store, ctx.rank, ctx.size);
    comm.barrier();
    rusage before{}, after{};
    ::getrusage(RUSAGE_SELF, &before);
    auto start = std::chrono::steady_clock::now();
    double x = 1;
    for (int i = 0; i < 1000; ++i) comm.all_reduce(&x, 1, DataType::f64, ReduceOp::max);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ::getrusage(RUSAGE_SELF, &after);
    auto seconds = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6;
    };
    const double cpu = seconds(after.ru_utime) - seconds(before.ru_utime) +
                       seconds(after.ru_stime) - seconds(before.ru_stime);
    const double cores = std::max(1u, std::thread::hardware_concurrency());
    const double share = wall * std::min(1.0, cores / ctx.size);
    // Bounded spinning: a rank uses about its share of the cores, never a whole core throughout.
    EXPECT_LT(cpu, 1.5 * share + 0.05) << "cpu " << cpu << " s over " << wall << " s wall";
    EXPECT_LT(wall, 60.0);
    EXPECT_EQ(x, 1.0);
  });
}

}  // namespace
}  // namespace loom
