// SIGKILL one rank in the middle of a collective, again and again: every survivor raises
// PeerError naming the dead rank within 5 s, none hangs, nothing is left in /dev/shm.
//   LOOM_KILL_TRIALS=N   trials per case (default 5)
//   LOOM_KILL_REPORT=F   append "world,op,transport,trial,victim,worst detection ms" per trial
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "../support/ranks.hpp"
#include "../support/transports.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using testing::RankContext;

std::int64_t now_ms() {  // CLOCK_MONOTONIC: comparable across the processes of one machine
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int trials() {
  const char* v = std::getenv("LOOM_KILL_TRIALS");
  return v ? std::max(1, std::atoi(v)) : 5;
}

using Case = std::tuple<int, std::string, std::string>;  // world, op, transport

class KillTrials : public ::testing::TestWithParam<Case> {};

TEST_P(KillTrials, SurvivorsRaisePeerErrorNamingTheDeadRankWithinFiveSeconds) {
  const auto [world, op, transport] = GetParam();
  for (int trial = 0; trial < trials(); ++trial) {
    SCOPED_TRACE(fmt::format("trial {}", trial));
    // Rank 0 hosts the store and collects the results, so another rank dies: the last one, or
    // one in the middle, in turn.
    const int victim = trial % 2 == 0 ? world - 1 : std::max(1, world / 2);
    testing::RunOptions opts;
    opts.timeout = 60s;
    opts.may_die = {victim};
    testing::run_ranks_raw(
        world,
        [&, victim](RankContext& ctx) {
          Options o;
          o.timeout = 60s;  // far beyond the 5 s allowed: a survivor must not need it
          o.transport.emplace(transport);
          // The single-copy all-reduce reads and writes its peers' memory: a survivor must blame
          // the dead rank, not a peer that left the call when it learnt of the death first.
          if (op == "single_copy_all_reduce") o.algorithm = "single_copy";
          Communicator comm(ctx.store, ctx.rank, ctx.size, o);
          std::vector<float> buf(1 << 18, 1.0f);
          auto step = [&] {
            if (op == "all_reduce" || op == "single_copy_all_reduce")
              comm.all_reduce(buf.data(), buf.size(), DataType::f32, ReduceOp::sum);
            else if (op == "broadcast")
              comm.broadcast(buf.data(), buf.size(), DataType::f32, 0);
            else
              comm.barrier();
          };
          step();  // every connection the op needs is up
          if (ctx.rank == victim) {
            // Die in the middle of whatever the loop is doing, a little later each trial.
            std::thread killer([&ctx, trial] {
              std::this_thread::sleep_for(std::chrono::milliseconds(5 + 7 * (trial % 8)));
              ctx.store->add("done", 1);  // the harness's count of finished ranks
              ctx.store->set("died_at", std::to_string(now_ms()));
              ::kill(::getpid(), SIGKILL);
            });
            for (;;) step();
          }
          std::int64_t caught_at = 0;
          try {
            for (int i = 0; i < 1000000; ++i) step();
            ADD_FAILURE() << "rank " << ctx.rank << " never noticed rank " << victim << " die";
          } catch (const PeerError& e) {
            caught_at = now_ms();
            EXPECT_EQ(e.peer(), victim) << e.what();
            EXPECT_NE(std::string(e.what()).find(fmt::format("rank {} on host", victim)),
                      std::string::npos)
                << e.what();
          } catch (const std::exception& e) {
            ADD_FAILURE() << "rank " << ctx.rank << " raised " << typeid(e).name() << ": "
                          << e.what();
          }
          const std::int64_t died_at = std::stoll(ctx.store->get_string("died_at", 30s));
          const std::int64_t detection = caught_at - died_at;
          EXPECT_LT(detection, 5000) << "rank " << ctx.rank << " took " << detection << " ms";
          ctx.store->set(fmt::format("detection/{}", ctx.rank), std::to_string(detection));
          comm.destroy();
          if (ctx.rank != 0) return;
          std::int64_t worst = 0;
          for (int r = 0; r < ctx.size; ++r)
            if (r != victim)
              worst = std::max<std::int64_t>(
                  worst, std::stoll(ctx.store->get_string(fmt::format("detection/{}", r), 30s)));
          EXPECT_EQ(testing::segments_of(*ctx.store), std::vector<std::string>{});
          if (const char* report = std::getenv("LOOM_KILL_REPORT"))
            std::ofstream(report, std::ios::app) << fmt::format("{},{},{},{},{},{}\n", ctx.size, op,
                                                                transport, trial, victim, worst);
        },
        opts);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, KillTrials,
                         ::testing::Combine(::testing::Values(2, 4, 8),
                                            ::testing::Values("all_reduce", "broadcast", "barrier"),
                                            loom::testing::transports()),
                         [](const auto& info) {
                           return fmt::format("{}_{}_world{}", std::get<1>(info.param),
                                              std::get<2>(info.param), std::get<0>(info.param));
                         });

INSTANTIATE_TEST_SUITE_P(OneCopy, KillTrials,
                         ::testing::Combine(::testing::Values(2, 4, 8),
                                            ::testing::Values("single_copy_all_reduce"),
                                            ::testing::Values("shm")),
                         [](const auto& info) {
                           return fmt::format("shm_world{}", std::get<0>(info.param));
                         });

}  // namespace
}  // namespace loom
