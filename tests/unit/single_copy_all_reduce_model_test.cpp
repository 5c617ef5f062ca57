// The model's single-copy all-reduce: its price on the kernel's measured read rates, and where
// it wins against the ring (the crossings measured on a 2-vCPU Xeon, docs/tuning.md).
#include <gtest/gtest.h>

#include "algorithms/algorithm_costs.hpp"
#include "selection_inputs.hpp"

namespace loom::algorithms {
namespace {

using namespace test_inputs;

// What the init probe measured on the 2-vCPU Xeon (a 2 MiB L2 per core, a reported 300 MiB L3)
// where the crossings were measured.
MachineRates xeon_rates() {
  MachineRates r;
  r.copy_gbps = 13.46, r.reduce_gbps = 22.69, r.handover_us = 0.14, r.wake_us = 1.49;
  r.slice_us = 0.545, r.pipe_gbps = 5.98, r.core_cache_kib = 2048;
  r.cma_gbps = 8.41, r.cma_fresh_gbps = 7.47;
  return r;
}

SelectionInputs shm_host(int ranks, int cores) {
  auto in = one_host(ranks);
  in.costs = CostModel::measured(xeon_rates(), false);
  in.cores = cores;
  in.ranks_per_core = (ranks + cores - 1) / cores;
  in.reads_peers = true;
  in.cache_bytes = std::size_t{300} << 20;
  return in;
}

constexpr std::size_t MiB = std::size_t{1} << 20;

// A block beyond a core's cache is read at the probe's 4 MiB rate, twice (the peers' inputs,
// then their finished blocks), and folded once.
TEST(SingleCopyAllReduceModel, ABlockBeyondACoresCacheIsReadAtTheSharedCachesRate) {
  const auto in = shm_host(2, 2);
  const LinkCost& m = in.costs.of(TransportKind::shm);
  const double block = 8.0 * MiB;
  EXPECT_NEAR(single_copy_all_reduce_cost(in, 16 * MiB, false),
              3 * m.alpha_us + 2 * 5.0 + 2 * block / 8.41e3 + block / 22.69e3, 1e-6);
}

// A block within half a core's cache is read out of the writer's cache (the fresh read), and
// each line the fold writes is first taken back from the peer that read it in the last call: the
// fold at 4x its reduction.
TEST(SingleCopyAllReduceModel, ASmallBlockPaysTheLinesItsPeersStillHold) {
  auto in = shm_host(2, 2);
  const LinkCost& m = in.costs.of(TransportKind::shm);
  const double block = 0.5 * MiB;
  EXPECT_NEAR(single_copy_all_reduce_cost(in, 1 * MiB, false),
              3 * m.alpha_us + 2 * 5.0 + 2 * block / 7.47e3 + 4 * block / 22.69e3, 1e-6);
  // The ring at 1 MiB whatever fresh read the probe measured (6.6-10.7 GB/s from launch to launch
  // on the Xeon; at 2 MiB, where the two measured even, either may win).
  MachineRates fast = xeon_rates();
  fast.cma_fresh_gbps = 10.7;
  in.costs = CostModel::measured(fast, false);
  EXPECT_NE(pick(in, Kind::all_reduce, 1 * MiB), "single_copy");
}

// 2 ranks with a core each, measured against the ring: the ring up to 2 MiB (the single copy
// 0.6-0.85x at 1 MiB, even at 2), the single copy at 4 and 16 MiB (1.1-1.3x), the ring at 64 MiB
// (the single copy 0.8-1.0x).
TEST(SingleCopyAllReduceModel, TwoRanksReadEachOtherBetweenTheCoresAndTheSharedCache) {
  const auto in = shm_host(2, 2);
  EXPECT_NE(pick(in, Kind::all_reduce, 1 * MiB), "single_copy");
  EXPECT_NE(pick(in, Kind::all_reduce, 2 * MiB), "single_copy");
  EXPECT_EQ(pick(in, Kind::all_reduce, 4 * MiB), "single_copy");
  EXPECT_EQ(pick(in, Kind::all_reduce, 16 * MiB), "single_copy");
  EXPECT_NE(pick(in, Kind::all_reduce, 64 * MiB), "single_copy");
}

// 4 ranks on 2 cores: the reads and folds of two ranks take turns at each core (measured 0.8-1.05x
// the ring at 1-16 MiB), so the model keeps the slots.
TEST(SingleCopyAllReduceModel, RanksOutnumberingCoresKeepTheSlots) {
  const auto in = shm_host(4, 2);
  for (std::size_t bytes : {1 * MiB, 4 * MiB, 16 * MiB})
    EXPECT_NE(pick(in, Kind::all_reduce, bytes), "single_copy") << bytes;
}

// Only one host over shared memory whose ranks may all read each other, and host buffers.
TEST(SingleCopyAllReduceModel, OnlyWhereEveryRankReadsItsPeersOnOneHost) {
  auto refused = shm_host(2, 2);
  refused.reads_peers = false;
  EXPECT_NE(pick(refused, Kind::all_reduce, 16 * MiB), "single_copy");
  auto two_hosts = hosts(2, 2);
  two_hosts.reads_peers = true;
  EXPECT_NE(pick(two_hosts, Kind::all_reduce, 16 * MiB), "single_copy");
  EXPECT_NE(pick(shm_host(2, 2), Kind::all_reduce, 16 * MiB, true), "single_copy");
}

}  // namespace
}  // namespace loom::algorithms
