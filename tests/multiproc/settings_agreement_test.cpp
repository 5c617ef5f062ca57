// Settings that must be the same on every rank (core/settings_agreement.hpp): where one rank's
// differ, every rank raises InvalidArgument at init naming the setting and who has which value,
// at once rather than at its timeout; a split whose members ask for different child settings
// raises on those members and leaves the parent working.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <string>

#include "../support/ranks.hpp"
#include "loom/loom.hpp"

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;

// Builds a communicator with `options`, expecting InvalidArgument whose message holds each of
// `words`, well before the timeout (60 s) a hang would take.
void expect_refused(testing::RankContext& ctx, Options options,
                    const std::vector<std::string>& words) {
  options.timeout = std::chrono::seconds(60);
  const auto start = Clock::now();
  try {
    Communicator comm(ctx.store, ctx.rank, ctx.size, options);
    ADD_FAILURE() << "rank " << ctx.rank << ": init accepted settings that differ";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("init: rank " + std::to_string(ctx.rank)), std::string::npos) << what;
    for (const auto& w : words) EXPECT_NE(what.find(w), std::string::npos) << w << " in " << what;
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
}

// Rank 1 names another all-reduce: with 3 ranks the two schedules' messages differ in size, and
// the job failed with "the ranks disagree on the call's counts"; other pairs of schedules would
// hang or reduce wrong data.
TEST(SettingsAgreement, AlgorithmRulesThatDifferAreRefusedAtInitOnEveryRank) {
  testing::run_ranks_raw(3, [](testing::RankContext& ctx) {
    Options o;
    o.algorithm = ctx.rank == 1 ? "allreduce:recursive_doubling" : "allreduce:ring";
    expect_refused(ctx, o,
                   {"LOOM_ALGO (Options::algorithm) differs between ranks",
                    "'allreduce:ring' on ranks 0,2", "'allreduce:recursive_doubling' on rank 1"});
  });
}

// One rank over TCP and the other over shared memory waited for each other's segments and
// sockets until the timeout; slots of other sizes failed at the first call.
TEST(SettingsAgreement, TransportOrSlotsThatDifferAreRefusedAtInit) {
  testing::run_ranks_raw(2, [](testing::RankContext& ctx) {
    Options o;
    o.transport = ctx.rank == 0 ? "tcp" : "auto";
    expect_refused(ctx, o, {"the transport", "'tcp' on rank 0; 'auto' on rank 1"});
  });
  testing::run_ranks_raw(2, [](testing::RankContext& ctx) {
    Options o;
    o.slots = ctx.rank == 0 ? 4 : 8;
    expect_refused(ctx, o, {"LOOM_SLOTS (Options::slots)", "'4' on rank 0; '8' on rank 1"});
  });
}

// LOOM_TRIALS travels in the environment: one rank without trials would run the model's choice
// where its peers measure the runner-up.
TEST(SettingsAgreement, TrialsThatDifferAreRefusedAtInit) {
  testing::run_ranks_raw(2, [](testing::RankContext& ctx) {
    if (ctx.rank == 1) ::setenv("LOOM_TRIALS", "0", 1);
    expect_refused(ctx, {}, {"LOOM_TRIALS differs", "'1' on rank 0; '0' on rank 1"});
    ::unsetenv("LOOM_TRIALS");
  });
}

// Ranks 1 and 3 form one child and ask for different rules: both raise, naming the setting, this
// rank's value and the parent's ranks; ranks 0 and 2 agree and get theirs; the parent works on.
TEST(SettingsAgreement, ASplitWhoseMembersDifferRaisesOnThemAndTheParentWorksOn) {
  testing::run_ranks(4, [](Communicator& comm) {
    const int r = comm.rank();
    Options child;
    child.algorithm = r == 3 ? "allreduce:one_shot" : "allreduce:ring";
    if (r % 2 == 0) {
      auto c = comm.split(0, r, child);
      ASSERT_TRUE(c);
      std::int64_t one = 1, total = 0;
      c->all_reduce(&one, &total, 1, DataType::i64, ReduceOp::sum);
      EXPECT_EQ(total, 2);
    } else {
      try {
        comm.split(1, r, child);
        ADD_FAILURE() << "rank " << r << ": the split accepted members whose settings differ";
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("split: rank " + std::to_string(r)), std::string::npos) << what;
        EXPECT_NE(what.find("LOOM_ALGO (Options::algorithm) differs"), std::string::npos) << what;
        // Each member knows its own value; the other's shows as another.
        const std::string own =
            r == 3 ? "'allreduce:one_shot' on rank 3" : "'allreduce:ring' on rank 1";
        EXPECT_NE(what.find(own), std::string::npos) << what;
        EXPECT_NE(what.find("'(another value)' on rank " + std::to_string(r == 3 ? 1 : 3)),
                  std::string::npos)
            << what;
      }
    }
    std::int64_t mine = r, total = 0;
    comm.all_reduce(&mine, &total, 1, DataType::i64, ReduceOp::sum);
    EXPECT_EQ(total, 6);
  });
}

}  // namespace
}  // namespace loom
