// Settings that must be the same on every rank (core/settings_agreement.hpp): where one rank's
// differ, every rank raises InvalidArgument at init naming the setting and who has which value,
// at once rather than at its timeout; a split whose members ask for different child settings
// raises on those members and leaves the parent working.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

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

// Ranks 0 and 2 split into a child that works; ranks 1 and 3 into one whose split must raise
// InvalidArgument, whose message `check` judges; every rank is done within 20 s (the timeout is
// the harness's 60), and the parent's all-reduce after it is exact.
void split_where_the_odd_ranks_fail(const std::function<Options(int)>& options_of,
                                    const std::function<void(int, const std::string&)>& check) {
  testing::run_ranks(4, [&](Communicator& comm) {
    const int r = comm.rank();
    const auto start = Clock::now();
    if (r % 2 == 0) {
      auto c = comm.split(0, r, options_of(r));
      ASSERT_TRUE(c);
      std::int64_t one = 1, total = 0;
      c->all_reduce(&one, &total, 1, DataType::i64, ReduceOp::sum);
      EXPECT_EQ(total, 2);
    } else {
      try {
        comm.split(1, r, options_of(r));
        ADD_FAILURE() << "rank " << r << ": the split went on";
      } catch (const InvalidArgument& e) {
        check(r, e.what());
      }
    }
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
    std::int64_t mine = r, total = 0;
    comm.all_reduce(&mine, &total, 1, DataType::i64, ReduceOp::sum);
    EXPECT_EQ(total, 6);
  });
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
  split_where_the_odd_ranks_fail(
      [](int r) {
        Options child;
        child.algorithm = r == 3 ? "allreduce:one_shot" : "allreduce:ring";
        return child;
      },
      [](int r, const std::string& what) {
        EXPECT_NE(what.find("split: rank " + std::to_string(r)), std::string::npos) << what;
        EXPECT_NE(what.find("LOOM_ALGO (Options::algorithm) differs"), std::string::npos) << what;
        // Each member knows its own value; the other's shows as another.
        const std::string own =
            r == 3 ? "'allreduce:one_shot' on rank 3" : "'allreduce:ring' on rank 1";
        EXPECT_NE(what.find(own), std::string::npos) << what;
        EXPECT_NE(what.find("'(another value)' on rank " + std::to_string(r == 3 ? 1 : 3)),
                  std::string::npos)
            << what;
      });
}

// A value init refuses on one rank alone (LOOM_SLOTS out of range, a malformed LOOM_ALGO rule):
// that rank raised at once and the others waited for it until their timeout. Now it joins them
// only to say so, and every rank raises InvalidArgument naming it and its error.
TEST(SettingsAgreement, OneRanksInvalidSettingsStopEveryRankAtInit) {
  for (const int bad : {1, 0}) {  // the harness serves the store: no rank waits for another
    testing::run_ranks_raw(3, [bad](testing::RankContext& ctx) {
      Options o;
      if (ctx.rank == bad) o.algorithm = "allreduce:no_such_algorithm";
      o.timeout = std::chrono::seconds(60);
      const auto start = Clock::now();
      try {
        Communicator comm(ctx.store, ctx.rank, ctx.size, o);
        ADD_FAILURE() << "rank " << ctx.rank << ": init went on beside invalid settings";
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("no_such_algorithm"), std::string::npos) << what;
        EXPECT_EQ(what.rfind("init: rank " + std::to_string(ctx.rank) + ": ", 0), 0u) << what;
        if (ctx.rank != bad) {
          EXPECT_NE(what.find("init: rank " + std::to_string(ctx.rank) + ": the settings of rank " +
                              std::to_string(bad) + " are invalid"),
                    std::string::npos)
              << what;
        }
      }
      EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
    });
  }
  testing::run_ranks_raw(2, [](testing::RankContext& ctx) {
    if (ctx.rank == 1) ::setenv("LOOM_SLOTS", "1", 1);
    if (ctx.rank == 0)
      expect_refused(ctx, {},
                     {"the settings of rank 1 are invalid: 'configuration: LOOM_SLOTS='1'"});
    else
      expect_refused(ctx, {}, {"init: rank 1: configuration: LOOM_SLOTS='1'"});
    ::unsetenv("LOOM_SLOTS");
  });
}

// The same through init() under env://, as torchrun and loomrun start ranks: rank 0 serves the
// store. Its peer's invalid LOOM_SLOTS reaches it in the records; its own makes it keep the
// store until its peer has read them, so that the peer raises the same InvalidArgument rather
// than a StoreError.
TEST(SettingsAgreement, OneRanksInvalidSettingsStopEveryRankThroughInit) {
  for (const int bad : {1, 0}) {
    const int port = testing::free_port();
    testing::run_ranks_raw(2, [bad, port](testing::RankContext& ctx) {
      ::setenv("RANK", std::to_string(ctx.rank).c_str(), 1);
      ::setenv("WORLD_SIZE", "2", 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      for (const char* name : {"LOOM_STORE_HOSTED", "LOOM_INIT_METHOD", "LOOM_RESTART_COUNT",
                               "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID"})
        ::unsetenv(name);
      if (ctx.rank == bad) ::setenv("LOOM_SLOTS", "1", 1);
      Options o;
      o.timeout = std::chrono::seconds(60);
      const auto start = Clock::now();
      try {
        Communicator comm = init(o);
        ADD_FAILURE() << "rank " << ctx.rank << ": init went on beside invalid settings";
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(ctx.rank == bad ? "init: rank " + std::to_string(bad) +
                                                  ": configuration: LOOM_SLOTS='1'"
                                            : "the settings of rank " + std::to_string(bad) +
                                                  " are invalid: 'configuration: LOOM_SLOTS='1'"),
                  std::string::npos)
            << what;
      }
      EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
    });
  }
}

// A split where rank 3 passes an option no child may have: rank 3 raised alone and every other
// rank waited in the split's exchange until its timeout. Now the exchange tells them: rank 3
// raises its own error, rank 1 (its child's other member) raises naming it, ranks 0 and 2 get
// their child, and the parent works on.
TEST(SettingsAgreement, ASplitWithOneMembersOptionsInvalidStopsOnlyItsChild) {
  split_where_the_odd_ranks_fail(
      [](int r) {
        Options child;
        if (r == 3) child.slots = 1;
        return child;
      },
      [](int r, const std::string& what) {
        EXPECT_NE(what.find(r == 3 ? "split: rank 3: configuration: slots 1"
                                   : "the options of rank(s) 3 of the parent were invalid"),
                  std::string::npos)
            << what;
      });
}

// create_group with one member's options invalid, or two members' settings different: every
// member raises InvalidArgument naming the member and the setting, at once rather than at the
// timeout; the parent goes on, and the group counts alike on every member, so that the next
// create_group of the same ranks works.
void create_group_refused(int odd_rank, const Options& odd, const std::string& named) {
  testing::run_ranks(3, [&](Communicator& comm) {
    const int r = comm.rank();
    const std::vector<int> members = {0, 1, 2};
    Options child = r == odd_rank ? odd : Options{};
    child.timeout = std::chrono::seconds(60);
    const auto start = Clock::now();
    try {
      (void)comm.create_group(members, child);
      ADD_FAILURE() << "rank " << r << ": the group was made";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
      const std::string odd_named = "rank " + std::to_string(odd_rank);
      const std::string what = e.what();
      // The others' messages name the odd member beyond their own prefix ("create_group: rank r").
      const std::size_t own_prefix = what.find(':', what.find(':') + 1);
      if (r != odd_rank) {
        EXPECT_NE(what.find(odd_named, own_prefix), std::string::npos) << what;
      }
    }
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
    Communicator again = comm.create_group(members, {});
    std::int64_t mine = r, total = 0;
    again.all_reduce(&mine, &total, 1, DataType::i64, ReduceOp::sum);
    EXPECT_EQ(total, 3);
    comm.all_reduce(&mine, &total, 1, DataType::i64, ReduceOp::sum);
    EXPECT_EQ(total, 3);
  });
}

TEST(SettingsAgreement, ACreateGroupWithOneMembersOptionsInvalidFailsOnEveryMemberAtOnce) {
  Options odd;
  odd.algorithm = "allreduce:no_such_algorithm";
  create_group_refused(2, odd, "no_such_algorithm");
}

TEST(SettingsAgreement, ACreateGroupWhoseMembersSettingsDifferFailsOnEveryMember) {
  Options odd;
  odd.algorithm = "allreduce:ring";
  create_group_refused(1, odd, "LOOM_ALGO");
}

// A member that does not call create_group in time: the others raise TimeoutError naming it at
// the child's timeout; calling later, it raises TimeoutError too; their parent goes on, and the
// next create_group of the same ranks meets on every member.
TEST(SettingsAgreement, ACreateGroupAMemberComesTooLateTimesOutOnEveryMember) {
  testing::run_ranks(3, [](Communicator& comm) {
    const int r = comm.rank();
    const std::vector<int> members = {0, 1, 2};
    Options child;
    child.timeout = std::chrono::seconds(3);
    comm.barrier();
    if (r != 2) {
      try {
        (void)comm.create_group(members, child);
        ADD_FAILURE() << "rank " << r << ": the group was made without rank 2";
      } catch (const TimeoutError& e) {
        // Rank 1 may come so late (a loaded host) that rank 0 gave up on it too.
        const std::string what = e.what();
        EXPECT_TRUE(what.find("2 of the parent did not") != std::string::npos ||
                    what.find("rank 1 of the parent came too late") != std::string::npos)
            << what;
      }
    }
    comm.barrier();
    if (r == 2) {
      try {
        (void)comm.create_group(members, child);
        ADD_FAILURE() << "rank 2: the group was made after the others gave up";
      } catch (const TimeoutError& e) {
        EXPECT_NE(std::string(e.what()).find("rank 2 of the parent came too late"),
                  std::string::npos)
            << e.what();
      }
    }
    std::int64_t mine = r, total = 0;
    comm.all_reduce(&mine, &total, 1, DataType::i64, ReduceOp::sum);
    EXPECT_EQ(total, 3);
    Communicator again = comm.create_group(members, {});
    total = 0;
    again.all_reduce(&mine, &total, 1, DataType::i64, ReduceOp::sum);
    EXPECT_EQ(total, 3);
  });
}

}  // namespace
}  // namespace loom
