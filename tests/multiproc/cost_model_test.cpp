// Communicator::estimate over real ranks: the same answer on every rank, what LOOM_ALGO forces,
// the source of its figures (the init probe, or the defaults without it), kept by a split.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "../support/ranks.hpp"
#include "../support/scoped_env.hpp"
#include "core/tuning_table.hpp"
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
    // A bandwidth-bound size takes a path that moves the bytes once per rank: the ring, in
    // slices, or the single copy where the probe found the peer's pages read faster than the
    // slots carry (under load the probe may measure either; the defaults' choice is pinned in
    // WithoutTheProbeTheModelRunsOnItsDefaults).
    EXPECT_TRUE(large.algorithm == "ring" || large.algorithm == "single_copy") << large.algorithm;
    if (large.algorithm == "ring") {
      EXPECT_GT(large.slice_bytes, 0u);
    }
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
  const testing::ScopedEnv no_probe("LOOM_PROBE_US", "0");
  run_ranks(2, [](Communicator& comm) {
    EXPECT_EQ(comm.estimate(Operation::all_reduce, 8).model, "defaults");
    const Estimate large = comm.estimate(Operation::all_reduce, std::size_t{64} << 20);
    EXPECT_EQ(large.algorithm, "ring");
    EXPECT_GT(large.slice_bytes, 0u);
    expect_same_on_every_rank(comm, estimate_words(comm));
  });
}

// A tuning table entry for this machine, transport and shape chooses on every rank, as rank 0
// read it; LOOM_ALGO still wins; entries for another shape do not apply; a split into the same
// shape keeps it, and the calls it chooses compute the exact sums.
TEST(CostModel, ATuningTableEntryChoosesForItsShape) {
  const std::string path =
      ::testing::TempDir() + "/tune-" + std::to_string(::getpid()) + "/tune.txt";
  const core::MachineKey here = core::this_machine();
  core::write_tuning_entry(path, {here, "shm", "2x1", "allreduce:ring@64K:0-1M"});
  core::write_tuning_entry(path, {here, "shm", "3x1", "allreduce:one_shot"});
  testing::RunOptions opts;
  opts.options.tuning_file = path;
  run_ranks(
      2,
      [](Communicator& comm) {
        EXPECT_EQ(comm.tuning_key(), "shm 2x1");
        const Estimate small = comm.estimate(Operation::all_reduce, 8);
        EXPECT_EQ(small.algorithm, "ring");
        EXPECT_TRUE(small.tuned);
        EXPECT_FALSE(small.forced);
        const Estimate mid = comm.estimate(Operation::all_reduce, 512 << 10);
        EXPECT_EQ(mid.slice_bytes, 64u << 10);
        EXPECT_FALSE(comm.estimate(Operation::all_reduce, std::size_t{4} << 20).tuned);
        expect_same_on_every_rank(comm, estimate_words(comm));
        std::vector<std::int32_t> v(128 << 10);
        std::iota(v.begin(), v.end(), comm.rank());
        comm.all_reduce(v.data(), v.size(), DataType::i32, ReduceOp::sum);
        for (std::size_t i = 0; i < v.size(); ++i)
          ASSERT_EQ(v[i], 2 * static_cast<std::int32_t>(i) + 1) << i;
        auto child = comm.split(0, comm.rank());
        ASSERT_TRUE(child.has_value());
        EXPECT_TRUE(child->estimate(Operation::all_reduce, 8).tuned);
        // A child of one rank has another shape: the model alone.
        auto alone = comm.split(comm.rank(), 0);
        ASSERT_TRUE(alone.has_value());
        EXPECT_FALSE(alone->estimate(Operation::all_reduce, 8).tuned);
      },
      opts);
  opts.options.algorithm = "allreduce:one_shot:0-64K";
  run_ranks(
      2,
      [](Communicator& comm) {
        const Estimate e = comm.estimate(Operation::all_reduce, 8);
        EXPECT_EQ(e.algorithm, "one_shot");
        EXPECT_TRUE(e.forced);
        EXPECT_FALSE(e.tuned);
        EXPECT_TRUE(comm.estimate(Operation::all_reduce, 512 << 10).tuned);
      },
      opts);
  opts.options.algorithm.reset();
  opts.options.tuning_file = "off";
  run_ranks(
      2, [](Communicator& comm) { EXPECT_FALSE(comm.estimate(Operation::all_reduce, 8).tuned); },
      opts);
}

// split() with options: the child takes the rules, slots and timeout it is given, the parent
// keeps its own; what a child cannot change is refused on every member (after the split's
// exchange, which tells the others), leaving the parent usable.
TEST(CostModel, ASplitTakesTheOptionsItIsGiven) {
  run_ranks(2, [](Communicator& comm) {
    Options rules;
    rules.algorithm = "allreduce:ring@32K";
    rules.buffer_bytes = std::size_t{1} << 20;
    auto child = comm.split(0, comm.rank(), rules);
    ASSERT_TRUE(child.has_value());
    const Estimate e = child->estimate(Operation::all_reduce, std::size_t{8} << 20);
    EXPECT_TRUE(e.forced);
    EXPECT_EQ(e.slice_bytes, 32u << 10);
    EXPECT_NE(child->describe().find("8 x 128 KiB slots"), std::string::npos) << child->describe();
    EXPECT_FALSE(comm.estimate(Operation::all_reduce, std::size_t{8} << 20).forced);
    std::vector<std::int64_t> v(1 << 20, comm.rank() + 1);
    child->all_reduce(v.data(), v.size(), DataType::i64, ReduceOp::sum);
    EXPECT_EQ(v.front(), 3);
    EXPECT_EQ(v.back(), 3);
    for (auto bad : {&Options::transport, &Options::tuning_file, &Options::secret}) {
      Options o;
      o.*bad = "tcp";
      try {
        comm.split(0, comm.rank(), o);
        ADD_FAILURE() << "accepted";
      } catch (const InvalidArgument& err) {
        EXPECT_NE(std::string(err.what()).find("split: rank"), std::string::npos) << err.what();
      }
    }
    Options rule;
    rule.algorithm = "allreduce:nosuch";
    EXPECT_THROW(comm.split(0, comm.rank(), rule), InvalidArgument);
    std::int64_t x = 1;
    comm.all_reduce(&x, 1, DataType::i64, ReduceOp::sum);
    EXPECT_EQ(x, 2);
  });
}

}  // namespace
}  // namespace loom
