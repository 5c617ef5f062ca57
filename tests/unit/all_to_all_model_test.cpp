// The model's all-to-all: what pairwise and the single copy cost where ranks outnumber cores, on
// the kernel's measured copy rate, and which blocks of an uneven call the single copy reads.
#include <gtest/gtest.h>

#include <cstdint>

#include "algorithms/algorithm_costs.hpp"
#include "selection_inputs.hpp"

namespace loom::algorithms {
namespace {

using namespace test_inputs;

// Rates the probe measured on a 2-vCPU Xeon: the kernel's copy 0.55x memcpy's.
MachineRates xeon_rates() {
  MachineRates r;
  r.copy_gbps = 14.3, r.reduce_gbps = 32.2, r.handover_us = 0.16, r.wake_us = 1.3;
  r.slice_us = 1.3, r.pipe_gbps = 8.0, r.core_cache_kib = 2048, r.cma_gbps = 7.8;
  return r;
}

// Ranks outnumbering cores take turns at them: every step of pairwise copies each byte in and
// out on a core that runs two ranks' copies, and waits for its partner to be switched in. Its
// price used to be one rank's work alone (4 ranks on 2 cores, 1 MiB: 125 us predicted, 280-800
// measured).
TEST(AllToAllModel, PairwiseCountsTheRanksSharingACore) {
  const auto in = shm_host(4, 2, xeon_rates());
  const LinkCost& m = in.costs.of(TransportKind::shm);
  const double block = 256 << 10, copy = 1.0 / 14.3e3;
  const double switch_us = m.slice_us + in.costs.wake_us;
  EXPECT_DOUBLE_EQ(pairwise_cost(in, 256 << 10, false),
                   3 * (m.alpha_us + 2 * block * copy * 2 + 1.0 * switch_us));
  // A core each: the pipe's rate, one rank's work.
  const auto alone = shm_host(2, 2, xeon_rates());
  const LinkCost& a = alone.costs.of(TransportKind::shm);
  EXPECT_DOUBLE_EQ(pairwise_cost(alone, 256 << 10, false), a.alpha_us + block * a.beta_us_per_byte);
}

// The single copy's copy is the kernel's, at the rate the probe measured for it, shared by the
// ranks on a core as pairwise's copies are.
TEST(AllToAllModel, TheSingleCopyIsPricedOnTheKernelsMeasuredRate) {
  auto in = shm_host(4, 2, xeon_rates());
  const double at_rate = single_copy_cost(in, 256 << 10, false);
  MachineRates faster = xeon_rates();
  faster.cma_gbps = 2 * 7.8;
  in.costs = CostModel::measured(faster, false);
  const double block = 256 << 10;
  EXPECT_NEAR(at_rate - single_copy_cost(in, 256 << 10, false),
              3 * block * (1 / 7.8e3 - 1 / 15.6e3) * 2, 1e-9);
  // Unmeasured: the shared-memory link's beta, as before.
  MachineRates none = xeon_rates();
  none.cma_gbps = 0;
  in.costs = CostModel::measured(none, false);
  EXPECT_EQ(in.costs.cma_us_per_byte, 0);
  EXPECT_GT(single_copy_cost(in, 256 << 10, false), 0);
}

// 4 ranks on 2 cores read blocks of 256 KiB (1 MiB a rank) where the kernel's one copy (0.55x
// memcpy's rate) costs less than the slots' two on the shared cores; from 1 MiB blocks the 4
// ranks' buffers outgrow the 32 MiB cache, where the slots stream past it. With a core each the
// slots, whose copies overlap, win at every size.
TEST(AllToAllModel, TheModelReadsLargeBlocksWhereRanksOutnumberCores) {
  const auto crowded = shm_host(4, 2, xeon_rates());
  EXPECT_EQ(pick(crowded, Kind::all_to_all, 4 << 10), "pairwise");
  EXPECT_EQ(pick(crowded, Kind::all_to_all, 256 << 10), "single_copy");
  EXPECT_EQ(pick(crowded, Kind::all_to_all, 4 << 20), "pairwise");
  const ReadRange reads = single_copy_reads(crowded);
  EXPECT_EQ(reads.from, std::size_t{256} << 10);
  EXPECT_EQ(reads.to, std::size_t{1} << 20);
  const auto alone = shm_host(2, 2, xeon_rates());
  for (std::size_t bytes : {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{16} << 20})
    EXPECT_EQ(pick(alone, Kind::all_to_all, bytes), "pairwise") << bytes;
  EXPECT_EQ(single_copy_reads(alone).from, SIZE_MAX);
}

// With a core each, the single copy reads a peer's freshly written pages at the rate the probe
// measured for that (cma_fresh_gbps): on this Xeon 10 GB/s, and the single copy took 42-48 us at
// 1 MiB a rank (blocks of 512 KiB) against pairwise's 97-99 (docs/results/issue63-2026-12-05).
// Measured so, it wins there; without that figure the old floor (1.2x the slots' beta) stands.
TEST(AllToAllModel, WithACoreEachTheFreshReadRateDecides) {
  MachineRates r = xeon_rates();
  r.cma_gbps = 11.2, r.cma_fresh_gbps = 10.1;
  const auto alone = shm_host(2, 2, r);
  for (std::size_t bytes : {std::size_t{256} << 10, std::size_t{512} << 10})
    EXPECT_EQ(pick(alone, Kind::all_to_all, bytes), "single_copy") << bytes;
  const LinkCost& m = alone.costs.of(TransportKind::shm);
  const double block = 512 << 10;
  const double fixed = 2 * m.alpha_us + 5.0;  // a core each: no switch
  EXPECT_NEAR(single_copy_cost(alone, 512 << 10, false), fixed + block / 10.1e3, 1e-6);
  MachineRates old = r;
  old.cma_fresh_gbps = 0;
  EXPECT_EQ(pick(shm_host(2, 2, old), Kind::all_to_all, 512 << 10), "pairwise");
  // Ranks outnumbering cores keep the rate they were priced on.
  EXPECT_DOUBLE_EQ(single_copy_cost(shm_host(4, 2, r), 256 << 10, false),
                   single_copy_cost(shm_host(4, 2, old), 256 << 10, false));
}

// all_to_all_v: no size is the same on every rank, so the single copy runs wherever it can and
// reads the blocks the model prices cheaper read (both ends of a block know its size); a rule
// naming it reads every block; elsewhere pairwise.
TEST(AllToAllModel, UnevenAllToAllsReadTheBlocksTheModelPricesCheaperRead) {
  const auto crowded = shm_host(4, 2, xeon_rates());
  const Selector::Choice c = Selector(crowded).choose(Kind::all_to_all_v, 0, false);
  EXPECT_EQ(c.algorithm->name, "single_copy");
  EXPECT_EQ(c.reads.from, single_copy_reads(crowded).from);
  EXPECT_EQ(c.reads.to, single_copy_reads(crowded).to);
  EXPECT_FALSE(c.reads.reads(4 << 10));
  EXPECT_TRUE(c.reads.reads(256 << 10));
  EXPECT_FALSE(c.reads.reads(1 << 20));
  auto forced = crowded;
  forced.overrides = "alltoallv:single_copy";
  const Selector::Choice f = Selector(forced).choose(Kind::all_to_all_v, 0, false);
  EXPECT_TRUE(f.forced);
  EXPECT_TRUE(f.reads.reads(1));
  auto unreadable = crowded;
  unreadable.reads_peers = false;
  EXPECT_EQ(pick(unreadable, Kind::all_to_all_v, 0), "pairwise");
  auto tcp = crowded;
  tcp.local = TransportKind::tcp;
  EXPECT_EQ(pick(tcp, Kind::all_to_all_v, 0), "pairwise");
  // The call of one size that chose the single copy reads every block.
  EXPECT_TRUE(Selector(crowded).choose(Kind::all_to_all, 256 << 10, false).reads.reads(1));
}

}  // namespace
}  // namespace loom::algorithms
