// Communicator::estimate over real ranks: the same answer on every rank, what LOOM_ALGO forces,
// the source of its figures (the init probe, or the defaults without it), kept by a split.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../support/ranks.hpp"
#include "loom/loom.hpp"

namespace loom {
namespace {

using testing::run_ranks;

// Every rank's estimates of a few calls, as words to compare across ranks.
std::vector<std::uint64_t> estimate_words(const Communicator& comm) {
  std::vector<std::uint64_t> words;
  for (Operation op : {Operation::all_reduce, Operation::all_gather, Operation::broadcast,
                       Operation::all_to_all, Operation::gather})
    for (std::size_t bytes : {std::size_t{8}, std::size_t{64} << 10, std::size_t{16} << 20}) {
      const Estimate e = comm.estimate(op, bytes);
      std::uint64_t us_bits = 0;
      std::memcpy(&us_bits, &e.microseconds, sizeof(us_bits));
      words.push_back(std::hash<std::string>{}(e.algorithm));
      words.push_back(e.slice_bytes);
      words.push_back(us_bits);
    }
  return words;
}

void expect_same_on_every_rank(Communicator& comm, const std::vector<std::uint64_t>& mine) {
  std::vector<std::uint64_t> all(mine.size() * static_cast<std::size_t>(comm.size()));
  comm.all_gather(mine.data(), all.data(), mine.size(), DataType::u64);
  for (int r = 0; r < comm.size(); ++r)
    for (std::size_t i = 0; i < mine.size(); ++i)
      ASSERT_EQ(all[static_cast<std::size_t>(r) * mine.size() + i], mine[i])
          << "rank " << comm.rank() << " and rank " << r << " differ at estimate word " << i;
}

TEST(CostModel, EstimatesAreMeasuredAndTheSameOnEveryRank) {
  run_ranks(3, [](Communicator& comm) {
    const Estimate small = comm.estimate(Operation::all_reduce, 8);
    const Estimate large = comm.estimate(Operation::all_reduce, std::size_t{64} << 20);
    EXPECT_EQ(small.model, "measured at init");
    EXPECT_NE(small.algorithm, "ring");  // a latency-bound size takes one of the short paths
    EXPECT_EQ(large.algorithm, "ring");
    EXPECT_GT(large.slice_bytes, 0u);
    EXPECT_GT(small.microseconds, 0);
    EXPECT_GT(large.microseconds, 100 * small.microseconds);
    EXPECT_FALSE(large.forced);
    expect_same_on_every_rank(comm, estimate_words(comm));
    // A split keeps its parent's figures.
    auto child = comm.split(comm.rank() % 2, comm.rank());
    ASSERT_TRUE(child.has_value());
    EXPECT_EQ(child->estimate(Operation::all_reduce, 8).model, "measured at init");
    expect_same_on_every_rank(*child, estimate_words(*child));
  });
}

TEST(CostModel, ALoomAlgoRuleIsWhatTheEstimateNames) {
  testing::RunOptions opts;
  opts.options.algorithm = "allreduce:ring:0-1M,alltoall:pairwise";
  run_ranks(
      2,
      [](Communicator& comm) {
        const Estimate forced = comm.estimate(Operation::all_reduce, 8);
        EXPECT_EQ(forced.algorithm, "ring");
        EXPECT_TRUE(forced.forced);
        EXPECT_FALSE(comm.estimate(Operation::all_reduce, std::size_t{4} << 20).forced);
        EXPECT_EQ(comm.estimate(Operation::all_to_all, 1 << 20).algorithm, "pairwise");
        EXPECT_THROW(comm.estimate(static_cast<Operation>(200), 8), InvalidArgument);
      },
      opts);
}

TEST(CostModel, WithoutTheProbeTheModelRunsOnItsDefaults) {
  ::setenv("LOOM_PROBE_US", "0", 1);
  run_ranks(2, [](Communicator& comm) {
    EXPECT_EQ(comm.estimate(Operation::all_reduce, 8).model, "defaults");
    expect_same_on_every_rank(comm, estimate_words(comm));
  });
  ::unsetenv("LOOM_PROBE_US");
}

}  // namespace
}  // namespace loom
