// Communicator::split: groups by color, ordered by key then rank; nested splits; calls on parent
// and child interleaved; a child that fails while its parent works on; a parent destroyed first.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../support/ranks.hpp"
#include "../support/transports.hpp"
#include "loom/store.hpp"

namespace loom {
namespace {

using testing::run_ranks;

std::int64_t sum_over(Communicator& comm, std::int64_t mine) {
  std::int64_t total = 0;
  comm.all_reduce(&mine, &total, 1, DataType::i64, ReduceOp::sum);
  return total;
}

class Split : public ::testing::TestWithParam<std::tuple<int, std::string>> {
 protected:
  testing::RunOptions run_options() const {
    testing::RunOptions o;
    o.options.transport = std::get<1>(GetParam());
    return o;
  }
};

// Even and odd ranks, each group ordered backwards by its key; the parent's and the children's
// calls interleaved.
TEST_P(Split, ColorsGroupRanksOrderedByKeyAndCallsInterleave) {
  run_ranks(
      std::get<0>(GetParam()),
      [](Communicator& comm) {
        const int n = comm.size(), r = comm.rank();
        auto child = comm.split(r % 2, -r);
        ASSERT_TRUE(child.has_value());
        const int members = (n + 1 - r % 2) / 2;
        EXPECT_EQ(child->size(), members);
        // Keys reverse the order: the highest parent rank of the color is rank 0.
        const int position = (r - r % 2) / 2;
        EXPECT_EQ(child->rank(), members - 1 - position);
        for (int round = 0; round < 3; ++round) {
          std::int64_t expected = 0;
          for (int q = r % 2; q < n; q += 2) expected += q + round;
          EXPECT_EQ(sum_over(*child, r + round), expected);
          EXPECT_EQ(sum_over(comm, 1), n);
          std::vector<std::int32_t> all(static_cast<std::size_t>(child->size()));
          const std::int32_t mine = r;
          child->all_gather(&mine, all.data(), 1, DataType::i32);
          for (int c = 0; c < child->size(); ++c)
            EXPECT_EQ(all[static_cast<std::size_t>(c)], r % 2 + 2 * (members - 1 - c));
        }
      },
      run_options());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Split,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                                            loom::testing::transports()),
                         [](const auto& info) {
                           return std::get<1>(info.param) + "_world" +
                                  std::to_string(std::get<0>(info.param));
                         });

TEST(SplitLayouts, ARankAloneANegativeColorAndNestedSplits) {
  run_ranks(5, [](Communicator& comm) {
    const int r = comm.rank();
    // Rank 0 alone; rank 4 in no group; ranks 1..3 together.
    auto child = comm.split(r == 0 ? 7 : r == 4 ? -1 : 3, 0);
    if (r == 4) {
      EXPECT_FALSE(child.has_value());
      return;
    }
    ASSERT_TRUE(child.has_value());
    if (r == 0) {
      EXPECT_EQ(child->size(), 1);
      EXPECT_EQ(sum_over(*child, 5), 5);
      return;
    }
    EXPECT_EQ(child->size(), 3);
    EXPECT_EQ(child->rank(), r - 1);
    EXPECT_EQ(sum_over(*child, r), 6);
    // A split of the split: {1, 3} and {2}.
    auto grandchild = child->split(r == 2 ? 1 : 0, 0);
    ASSERT_TRUE(grandchild.has_value());
    EXPECT_EQ(grandchild->size(), r == 2 ? 1 : 2);
    EXPECT_EQ(sum_over(*grandchild, r), r == 2 ? 2 : 4);
    EXPECT_EQ(sum_over(*child, 1), 3);  // the middle generation still works
  });
}

// Rank 2 aborts its child (ranks 1..3 of the parent): the child's other ranks fail naming it by
// both ranks, while every rank's parent goes on working.
TEST(SplitFailure, AChildFailingNamesItsRankInBothAndTheParentWorksOn) {
  run_ranks(4, [](Communicator& comm) {
    const int r = comm.rank();
    auto child = comm.split(r == 0 ? 0 : 1, 0);
    ASSERT_TRUE(child.has_value());
    if (r > 0) {
      EXPECT_EQ(sum_over(*child, 1), 3);
      if (r == 2) {
        child->abort();
      } else {
        try {
          sum_over(*child, 1);
          ADD_FAILURE() << "the child's call succeeded without rank 2";
        } catch (const PeerError& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("rank 1 (rank 2 of the parent)"), std::string::npos) << what;
        }
      }
    }
    for (int i = 0; i < 3; ++i) EXPECT_EQ(sum_over(comm, 1), 4);
  });
}

TEST(SplitLifetime, AChildOutlivesItsParent) {
  run_ranks(3, [](Communicator& comm) {
    auto child = comm.split(0, comm.rank());
    ASSERT_TRUE(child.has_value());
    comm.destroy();
    EXPECT_EQ(sum_over(*child, 2), 6);
    EXPECT_THROW(comm.barrier(), InvalidArgument);
  });
}

// create_group: the members alone make the child, ranked in the order listed; the other ranks
// do not call it, and groups of the same members made one after another are each their own.
TEST(CreateGroup, TheMembersAloneInTheirOrderAndAgain) {
  run_ranks(4, [](Communicator& comm) {
    const int r = comm.rank();
    if (r == 1) {  // in no group: it goes on with the parent only
      EXPECT_EQ(sum_over(comm, 1), 4);
      return;
    }
    const std::vector<int> members{3, 0, 2};
    Communicator child = comm.create_group(members);
    EXPECT_EQ(child.size(), 3);
    EXPECT_EQ(child.rank(), r == 3 ? 0 : r == 0 ? 1 : 2);
    EXPECT_EQ(sum_over(child, r), 5);
    Communicator again = comm.create_group(members);
    EXPECT_EQ(sum_over(again, 1), 3);
    EXPECT_EQ(sum_over(child, 1), 3);
    // Refused before anything else: a list without this rank, a rank twice, one outside.
    EXPECT_THROW(comm.create_group(std::vector<int>{1}), InvalidArgument);
    EXPECT_THROW(comm.create_group(std::vector<int>{r, r}), InvalidArgument);
    EXPECT_THROW(comm.create_group(std::vector<int>{r, 4}), InvalidArgument);
    EXPECT_EQ(sum_over(comm, 1), 4);
  });
}

// set_timeout: a later call waits the new time, not the one the communicator was made with.
TEST(SetTimeout, ALaterCallWaitsTheNewTime) {
  run_ranks(2, [](Communicator& comm) {
    EXPECT_THROW(comm.set_timeout(std::chrono::milliseconds(0)), InvalidArgument);
    comm.set_timeout(std::chrono::milliseconds(500));
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(sum_over(comm, 1), TimeoutError);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  });
}

// The address in describe()'s "tcp at IP:port".
std::string tcp_ip(const std::string& described) {
  const auto at = described.find("tcp at ");
  if (at == std::string::npos) return "";
  const auto start = at + 7;
  return described.substr(start, described.find(':', start) - start);
}

// A file:// store gives no route to follow, so TCP listens on loopback only where the launcher's
// LOCAL_WORLD_SIZE says every rank is on this host. A child took its parent's LOCAL_WORLD_SIZE
// (the parent's ranks on this host) as its own: a child spanning hosts but with no more ranks
// than that listened on 127.0.0.1, where its peers on the other hosts dialled their own
// loopback. 4 ranks on two pretend hosts (LOOM_HOST_ID), 2 on each: the child of ranks 0 and 2
// spans both and listens where its parent does; the child of one host's ranks may use loopback.
TEST(SplitAcrossHosts, AChildSpanningHostsListensWhereItsParentDoes) {
  const std::string path = "/tmp/loom-split-file-store-" + std::to_string(::getpid());
  testing::RunOptions run;
  run.timeout = std::chrono::seconds(120);
  testing::run_ranks_raw(
      4,
      [&](testing::RankContext& ctx) {
        ::setenv("LOOM_HOST_ID", ctx.rank < 2 ? "pretend-host-a" : "pretend-host-b", 1);
        ::setenv("LOCAL_WORLD_SIZE", "2", 1);
        Options o;
        o.transport = "tcp";
        o.timeout = std::chrono::seconds(60);
        Communicator comm(std::make_shared<FileStore>(path), ctx.rank, ctx.size, o);
        const std::string parent = tcp_ip(comm.describe());
        auto across = comm.split(ctx.rank % 2, ctx.rank);  // {0, 2} and {1, 3}: both hosts
        ASSERT_TRUE(across);
        EXPECT_EQ(tcp_ip(across->describe()), parent) << across->describe();
        EXPECT_EQ(sum_over(*across, ctx.rank), ctx.rank % 2 == 0 ? 2 : 4);
        auto within = comm.split(ctx.rank / 2, ctx.rank);  // {0, 1} and {2, 3}: one host each
        ASSERT_TRUE(within);
        EXPECT_EQ(sum_over(*within, 1), 2);
      },
      run);
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
}

}  // namespace
}  // namespace loom
