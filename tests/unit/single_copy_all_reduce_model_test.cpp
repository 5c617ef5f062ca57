// The model's single-copy all-reduce: its price on the kernel's measured copy rates, and where it
// wins against the ring (the crossings measured on a 2-vCPU Xeon, docs/tuning.md).
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
  auto in = test_inputs::shm_host(ranks, cores, xeon_rates());
  in.cache_bytes = std::size_t{300} << 20;
  return in;
}

constexpr std::size_t MiB = std::size_t{1} << 20;

// Two rounds of messages and a system call per peer each way; the reads of the peers' fresh inputs
// at the probe's fresh rate, the writes of the rank's own block at its own-pages rate; one fold.
TEST(SingleCopyAllReduceModel, ReadsAtTheFreshRateWritesAtTheOwnPagesRate) {
  const auto in = shm_host(2, 2);
  const LinkCost& m = in.costs.of(TransportKind::shm);
  for (double bytes : {1.0 * MiB, 16.0 * MiB}) {
    const double block = bytes / 2;
    EXPECT_NEAR(single_copy_all_reduce_cost(in, static_cast<std::size_t>(bytes), false),
                2 * m.alpha_us + 2 * 5.0 + block / 7.47e3 + block / 8.41e3 + block / 22.69e3, 1e-6)
        << bytes;
  }
}

// 2 ranks with a core each, measured against the ring (in place 1.1-1.8x from 256 KiB to 64 MiB,
// out of place 1.0-1.4x up to 32 MiB and 0.87x at 64 MiB): the single copy from 1 to 32 MiB, the
// ring at 64 MiB, where every rank's input and output fill half the last-level cache, and at
// 64 KiB, where the two ran even.
TEST(SingleCopyAllReduceModel, TwoRanksWriteTheirBlocksIntoEachOther) {
  const auto in = shm_host(2, 2);
  EXPECT_NE(pick(in, Kind::all_reduce, 64 << 10), "single_copy");
  EXPECT_EQ(pick(in, Kind::all_reduce, 1 * MiB), "single_copy");
  EXPECT_EQ(pick(in, Kind::all_reduce, 4 * MiB), "single_copy");
  EXPECT_EQ(pick(in, Kind::all_reduce, 16 * MiB), "single_copy");
  EXPECT_EQ(pick(in, Kind::all_reduce, 32 * MiB), "single_copy");
  EXPECT_NE(pick(in, Kind::all_reduce, 64 * MiB), "single_copy");
}

// 4 ranks on 2 cores: the copies and folds of two ranks take turns at each core (measured
// 0.67-1.3x the ring at 256 KiB-64 MiB, no mode steadily ahead), so the model keeps the slots.
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
