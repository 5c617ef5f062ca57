// The cost model on measured figures: the predictions and slices that follow from them.
#include <gtest/gtest.h>

#include <string>

#include "selection_inputs.hpp"

namespace loom::algorithms {
namespace {

using namespace test_inputs;

// The model on measured figures: shared memory's cost per byte follows the copy and reduction
// rates (a rank copies 1.5 and reduces 0.5 of each byte through its busiest link), a hop the
// hand-over; TCP takes loopback's figures only when every rank is on one host; what was not
// measured keeps its default.
TEST(MeasuredModel, TheModelFollowsTheMeasuredRates) {
  MachineRates r;
  r.copy_gbps = 30, r.reduce_gbps = 10, r.handover_us = 0.25, r.wake_us = 4;
  r.loopback_us = 15, r.loopback_gbps = 2;
  const CostModel defaults = CostModel::defaults();
  const CostModel m = CostModel::measured(r, true);
  const LinkCost& shm = m.of(TransportKind::shm);
  EXPECT_DOUBLE_EQ(shm.beta_us_per_byte, 1.5 / 30e3 + 0.5 / 10e3);
  EXPECT_DOUBLE_EQ(shm.alpha_us, 0.25);
  EXPECT_DOUBLE_EQ(m.wake_us, 4);
  EXPECT_DOUBLE_EQ(m.of(TransportKind::tcp).alpha_us, 15);
  // Each rank copies its bytes into the kernel and out of it (a stream overlaps the two on two
  // cores).
  EXPECT_DOUBLE_EQ(m.of(TransportKind::tcp).beta_us_per_byte, 2.0 / 2e3 + 0.5 / 10e3);
  EXPECT_EQ(m.source, "measured at init");
  const CostModel across = CostModel::measured(r, false);
  EXPECT_DOUBLE_EQ(across.of(TransportKind::tcp).alpha_us,
                   defaults.of(TransportKind::tcp).alpha_us);
  EXPECT_DOUBLE_EQ(across.of(TransportKind::ibverbs).alpha_us,
                   defaults.of(TransportKind::ibverbs).alpha_us);
  const CostModel none = CostModel::measured(MachineRates{}, true);
  EXPECT_EQ(none.source, "defaults");
  EXPECT_DOUBLE_EQ(none.of(TransportKind::shm).beta_us_per_byte,
                   defaults.of(TransportKind::shm).beta_us_per_byte);
}

// A slower measured machine predicts longer calls, and its wake-up cost sets the slices of ranks
// that outnumber their cores: a dearer wake-up, fewer and larger slices.
TEST(MeasuredModel, PredictionsAndSlicesMoveWithTheFigures) {
  MachineRates fast, slow;
  fast.copy_gbps = 40, fast.reduce_gbps = 20, fast.handover_us = 0.1, fast.wake_us = 2;
  slow = fast;
  slow.copy_gbps = 5, slow.reduce_gbps = 2.5, slow.wake_us = 50;
  auto in_fast = one_host(4), in_slow = one_host(4);
  in_fast.ranks_per_core = in_slow.ranks_per_core = 2;
  in_fast.costs = CostModel::measured(fast, true);
  in_slow.costs = CostModel::measured(slow, true);
  const auto f = Selector(in_fast).choose(Kind::all_reduce, 64 << 20, false);
  const auto s = Selector(in_slow).choose(Kind::all_reduce, 64 << 20, false);
  EXPECT_GT(s.predicted_us, 4 * f.predicted_us);
  EXPECT_GT(s.slice, f.slice);
}

// The pipe ran the ring's own work, so its figures replace those built from the parts: a slice
// costs what it measured, a hop half of that (one hand-over of two), a byte its rate scaled from
// copy-and-reduce to the ring's mix, and a slice stays within an eighth of a core's cache.
TEST(MeasuredModel, ThePipesFiguresReplaceTheParts) {
  const MachineRates r = zen4_rates();
  const CostModel model = CostModel::measured(r, true);
  const LinkCost& shm = model.of(TransportKind::shm);
  EXPECT_DOUBLE_EQ(shm.slice_us, 2.0);
  EXPECT_DOUBLE_EQ(shm.alpha_us, 1.0);
  const double parts = 1.5 / 48e3 + 0.5 / 46e3, copy_and_reduce = 1.0 / 48e3 + 1.0 / 46e3;
  EXPECT_DOUBLE_EQ(shm.beta_us_per_byte, 1.0 / 17e3 * parts / copy_and_reduce);
  EXPECT_DOUBLE_EQ(shm.slice_cap_bytes, 128 << 10);
  EXPECT_FALSE(shm.stages_wait);
  EXPECT_TRUE(model.of(TransportKind::tcp).stages_wait);
  // A hand-over dearer than half the slice stands.
  MachineRates slow_handover = r;
  slow_handover.handover_us = 1.5;
  EXPECT_DOUBLE_EQ(CostModel::measured(slow_handover, true).of(TransportKind::shm).alpha_us, 1.5);
  // Rates from a record that predates the pipe keep the parts' figures.
  MachineRates old = r;
  old.slice_us = old.pipe_gbps = old.core_cache_kib = 0;
  const CostModel old_model = CostModel::measured(old, true);
  const LinkCost& parts_only = old_model.of(TransportKind::shm);
  EXPECT_DOUBLE_EQ(parts_only.beta_us_per_byte, parts);
  EXPECT_DOUBLE_EQ(parts_only.slice_us, 0.1);
  EXPECT_DOUBLE_EQ(parts_only.slice_cap_bytes, 0);
}

// Over shared memory every rank copies and reduces its own bytes at every step, so no stage waits
// on a small slice to start: ranks with a core each take the largest slice that stays in the
// core's cache at every size. Ranks outnumbering cores do wait on each other, and there slices
// follow the pipeline's square root again; TCP's always do.
TEST(MeasuredModel, SharedMemorySlicesFillTheCacheUnlessRanksOutnumberCores) {
  for (int n : {2, 4, 8}) {
    auto in = one_host(n);
    in.costs = CostModel::measured(zen4_rates(), true);
    for (std::size_t bytes : {std::size_t{4} << 20, std::size_t{64} << 20})
      EXPECT_EQ(Selector(in).choose(Kind::all_reduce, bytes, false).slice, 128u << 10)
          << n << " ranks, " << bytes << " B";
    in.ranks_per_core = 2;
    in.overrides = "allreduce:ring";  // halving-doubling's steps take larger halves
    if (n > 2) {                      // 2 ranks' single stage still takes the cap at 1 MiB
      EXPECT_LT(Selector(in).choose(Kind::all_reduce, 1 << 20, false).slice, 128u << 10)
          << n << " ranks";
    }
  }
  // Over TCP stages wait: the ring's slices grow with the call (below any cache cap).
  auto tcp = one_host(2);
  tcp.local = TransportKind::tcp;
  tcp.overrides = "allreduce:ring";
  MachineRates r = zen4_rates();
  r.loopback_us = 15, r.loopback_gbps = 2, r.core_cache_kib = 0;
  tcp.costs = CostModel::measured(r, true);
  const auto small = Selector(tcp).choose(Kind::all_reduce, 1 << 20, false).slice;
  const auto large = Selector(tcp).choose(Kind::all_reduce, 64 << 20, false).slice;
  EXPECT_LT(small, large);
}

// The ring moves a block in rounds of half the FIFO's slots, each round paying its hand-overs:
// over shared memory, where the pipeline's slice would leave a last round partly filled and a
// slice within the cache's cap spares it, the block goes in whole rounds. Where none does (the
// cap is too small), the pipeline's slice stands.
TEST(MeasuredModel, SharedMemoryRingSlicesFillWholeRounds) {
  for (int n : {4, 8}) {
    auto in = one_host(n);
    in.costs = CostModel::measured(zen4_rates(), true);
    in.ranks_per_core = n / 2;
    in.overrides = "allreduce:ring";
    const std::size_t per_round = ring_round_slots(in.slots);
    for (std::size_t bytes = std::size_t{1} << 20; bytes <= std::size_t{64} << 20; bytes *= 2) {
      const std::size_t slice = Selector(in).choose(Kind::all_reduce, bytes, false).slice;
      const std::size_t block = bytes / static_cast<std::size_t>(n), chunk = per_round * slice;
      ASSERT_GT(slice, 0u);
      EXPECT_LE(slice, 128u << 10) << n << " ranks, " << bytes << " B";
      // Either the rounds are whole (each slice rounded up to a page, which the last round
      // gives back) or no slice within the cap makes them so.
      const std::size_t rounds = (block + chunk - 1) / chunk, last = block - (rounds - 1) * chunk;
      const bool whole = last + rounds * per_round * 4096 > chunk;
      const bool cap_too_small = block > (rounds - 1) * per_round * (128u << 10);
      EXPECT_TRUE(whole || rounds == 1 || cap_too_small)
          << n << " ranks, " << bytes << " B: " << slice << " B slices, last round " << last;
    }
  }
  // 4 ranks on 2 cores at 2 MiB: a block of 512 KiB, one round of four 128 KiB slices (the
  // pipeline's square root alone gave 84-92 KiB: a round and 40% of another).
  auto four = one_host(4);
  four.costs = CostModel::measured(zen4_rates(), true);
  four.ranks_per_core = 2;
  four.overrides = "allreduce:ring";
  EXPECT_EQ(Selector(four).choose(Kind::all_reduce, 2 << 20, false).slice, 128u << 10);
  // Over TCP the kernel moves the bytes and stages wait: no widening.
  auto tcp = four;
  tcp.local = TransportKind::tcp;
  MachineRates r = zen4_rates();
  r.loopback_us = 8, r.loopback_gbps = 7;
  tcp.costs = CostModel::measured(r, true);
  EXPECT_LT(Selector(tcp).choose(Kind::all_reduce, 2 << 20, false).slice, 128u << 10);
}

// TCP on loopback copies each slice into the kernel and out again on the same host: its slices
// stay within an eighth of a core's cache, and ranks sharing a core share that where the segment
// was not measured (4 ranks on 2 cores measured 64 KiB slices 1.3x faster than 128 KiB at 64 MiB,
// two segments and a few bytes; with segments: LoopbackFramesFillWholeSegments...). Shared memory
// keeps its cap.
TEST(MeasuredModel, LoopbackSlicesShareTheCoreCache) {
  MachineRates r = zen4_rates();
  r.loopback_us = 8, r.loopback_gbps = 7;
  for (int per_core : {1, 2, 4}) {
    auto tcp = one_host(2 * per_core);
    tcp.local = TransportKind::tcp;
    tcp.costs = CostModel::measured(r, true);
    tcp.ranks_per_core = per_core;
    EXPECT_EQ(Selector(tcp).choose(Kind::all_reduce, 64 << 20, false).slice,
              (128u << 10) / per_core)
        << per_core << " ranks a core";
    auto shm = tcp;
    shm.local = TransportKind::shm;
    EXPECT_EQ(Selector(shm).choose(Kind::all_reduce, 64 << 20, false).slice, 128u << 10)
        << per_core << " ranks a core";
  }
  // With a core per rank, a block that fits a slot goes as one frame: the kernel streams it.
  auto two = one_host(2);
  two.local = TransportKind::tcp;
  two.costs = CostModel::measured(r, true);
  two.overrides = "allreduce:ring";
  EXPECT_EQ(Selector(two).choose(Kind::all_reduce, 1 << 20, false).slice, 512u << 10);
  EXPECT_EQ(Selector(two).choose(Kind::all_reduce, 4 << 20, false).slice, 128u << 10);
  // Oversubscribed, the cap outright, where the pipeline's square root would take less.
  auto four = one_host(4);
  four.local = TransportKind::tcp;
  four.costs = CostModel::measured(r, true);
  four.overrides = "allreduce:ring";
  four.ranks_per_core = 2;
  EXPECT_EQ(Selector(four).choose(Kind::all_reduce, 1 << 20, false).slice, 64u << 10);
  // Between hosts nothing was measured, and a NIC moves the bytes: ranks sharing cores change
  // neither the choice nor the slice.
  auto across = hosts(2, 2);
  across.costs = CostModel::measured(r, false);
  across.ranks_per_core = 2;
  for (std::size_t bytes : {std::size_t{8}, std::size_t{1} << 20, std::size_t{64} << 20}) {
    const auto one = Selector(across).choose(Kind::all_reduce, bytes, false);
    auto crowded = across;
    crowded.ranks_per_core = 4;
    const auto more = Selector(crowded).choose(Kind::all_reduce, bytes, false);
    EXPECT_EQ(one.algorithm, more.algorithm) << bytes << " B";
    EXPECT_EQ(one.slice, more.slice) << bytes << " B";
    EXPECT_DOUBLE_EQ(one.predicted_us, more.predicted_us) << bytes << " B";
  }
}

// Oversubscribed over TCP, one-shot's messages come one after another: recursive doubling wins
// the small calls there; over shared memory, and with a core per rank, one-shot keeps them.
TEST(MeasuredModel, OneShotOverTcpSerialisesWhenRanksOutnumberCores) {
  MachineRates r = zen4_rates();
  r.loopback_us = 8, r.loopback_gbps = 7;
  auto tcp = one_host(4);
  tcp.local = TransportKind::tcp;
  tcp.costs = CostModel::measured(r, true);
  EXPECT_EQ(pick(tcp, Kind::all_reduce, 8), "one_shot");
  tcp.ranks_per_core = 2;
  for (std::size_t bytes : {std::size_t{8}, std::size_t{64} << 10})
    EXPECT_EQ(pick(tcp, Kind::all_reduce, bytes), "recursive_doubling") << bytes << " B";
  auto shm = tcp;
  shm.local = TransportKind::shm;
  EXPECT_EQ(pick(shm, Kind::all_reduce, 8), "one_shot");
  auto three = one_host(3);
  three.local = TransportKind::tcp;
  three.costs = tcp.costs;
  three.ranks_per_core = 2;
  EXPECT_EQ(pick(three, Kind::all_reduce, 8), "recursive_doubling");
}

// Halving-doubling moves the ring's bytes in 2 log2(p) hops instead of 2(n-1): with ranks
// outnumbering cores it takes the mid sizes while its first step's footprint (the half over TCP;
// over shared memory, where the ranks copy every byte themselves, the half read and the half
// written) fits the share of a core's cache each of the core's ranks has (over TCP, the cache over
// the others on the core); beyond, the ring's blocks do. At 3 ranks its fold (a whole buffer in
// and out) costs more than the hops it saves, unless the folding ranks have a core each and the
// kernel's copies on the two sides run at once (loopback TCP, 3 ranks on 2 cores): then it takes
// the sizes above recursive doubling's until its step outgrows the cache.
TEST(MeasuredModel, HalvingDoublingTakesMidSizesWhileItsStepsFitTheCoresCache) {
  MachineRates r = zen4_rates();  // 1 MiB of L2 a core
  r.loopback_us = 8, r.loopback_gbps = 7;
  struct Case {
    TransportKind kind;
    int ranks;
    std::size_t fits, spills;
  };
  const Case cases[] = {{TransportKind::tcp, 4, 2 << 20, 4 << 20},
                        {TransportKind::tcp, 8, 512 << 10, 1 << 20},
                        {TransportKind::shm, 4, 512 << 10, 1 << 20},
                        {TransportKind::shm, 8, 256 << 10, 512 << 10}};
  for (const Case& c : cases) {
    auto in = one_host(c.ranks);
    in.local = c.kind;
    in.ranks_per_core = c.ranks / 2;
    in.costs = CostModel::measured(r, true);
    EXPECT_EQ(pick(in, Kind::all_reduce, c.fits), "halving_doubling") << c.ranks << " ranks";
    EXPECT_EQ(pick(in, Kind::all_reduce, c.spills), "ring") << c.ranks << " ranks";
    EXPECT_EQ(pick(in, Kind::all_reduce, 64 << 20), "ring") << c.ranks << " ranks";
    EXPECT_NE(pick(in, Kind::all_reduce, c.fits, true), "halving_doubling") << "device buffers";
  }
  for (TransportKind kind : {TransportKind::shm, TransportKind::tcp}) {
    auto three = one_host(3);
    three.local = kind;
    three.ranks_per_core = 2;
    three.costs = CostModel::measured(r, true);
    for (std::size_t bytes = 8; bytes <= (std::size_t{64} << 20); bytes *= 4)
      EXPECT_NE(pick(three, Kind::all_reduce, bytes), "halving_doubling") << bytes << " B";
  }
  auto three = one_host(3);
  three.local = TransportKind::tcp;
  three.ranks_per_core = 2;
  three.cores = 2;
  three.costs = CostModel::measured(r, true);
  EXPECT_EQ(pick(three, Kind::all_reduce, 256 << 10), "recursive_doubling");
  EXPECT_EQ(pick(three, Kind::all_reduce, 1 << 20), "halving_doubling");
  EXPECT_EQ(pick(three, Kind::all_reduce, 2 << 20), "halving_doubling");
  EXPECT_EQ(pick(three, Kind::all_reduce, 4 << 20), "ring");
  // The same 3 ranks on one core: the fold's two sides take turns, and it stays whole.
  three.cores = 1, three.ranks_per_core = 3;
  for (std::size_t bytes = 8; bytes <= (std::size_t{64} << 20); bytes *= 4)
    EXPECT_NE(pick(three, Kind::all_reduce, bytes), "halving_doubling") << bytes << " B";
}

// With a core per rank over loopback TCP, a block of a few slots goes in whole-slot frames, one a
// round, while the ranks' inputs and outputs fill at most half the last-level cache (2 ranks on a
// 32 MiB L3: 1.5-3 MiB 1.01-1.18x the cap's slices four a round); beyond it, and with ranks
// sharing cores or over shared memory, the rounds stay the FIFO's.
TEST(MeasuredModel, LoopbackBlocksOfAFewSlotsGoOneFrameARoundWhileTheyFitTheCache) {
  MachineRates r = zen4_rates();
  r.loopback_us = 8, r.loopback_gbps = 7;
  auto two = loopback_on_two_cores(r, 2);
  two.cache_bytes = std::size_t{32} << 20;
  const auto at = [](const SelectionInputs& in, std::size_t bytes) {
    return Selector(in).choose(Kind::all_reduce, bytes, false);
  };
  EXPECT_EQ(at(two, 1 << 20).round_slices, 0u);  // one frame: one round already
  for (std::size_t bytes : {std::size_t{1536} << 10, std::size_t{2} << 20, std::size_t{3} << 20}) {
    EXPECT_EQ(at(two, bytes).algorithm->name, "ring") << bytes << " B";
    EXPECT_EQ(at(two, bytes).slice, two.slot_bytes) << bytes << " B";
    EXPECT_EQ(at(two, bytes).round_slices, 1u) << bytes << " B";
  }
  EXPECT_EQ(at(two, 4 << 20).round_slices, 0u);
  EXPECT_LT(at(two, 4 << 20).slice, two.slot_bytes);
  auto larger_cache = two;
  larger_cache.cache_bytes = std::size_t{64} << 20;
  EXPECT_EQ(at(larger_cache, 4 << 20).round_slices, 1u);
  // A rule's slice keeps the FIFO's rounds.
  auto forced = two;
  forced.overrides = "allreduce:ring@248K";
  EXPECT_EQ(at(forced, 2 << 20).round_slices, 0u);
  auto shm = two;
  shm.local = TransportKind::shm;
  EXPECT_EQ(at(shm, 2 << 20).round_slices, 0u);
  auto four = loopback_on_two_cores(r, 4);
  EXPECT_EQ(at(four, 4 << 20).round_slices, 0u);
}

// Recursive doubling posts its whole buffer at once; over loopback TCP where the ranks exchanging
// outnumber the cores, each frame after the first is a hand-over of its own. On a core of 512 KiB
// of L2 (this Zen 3's rates as init measured them) the share of the cache cuts its buffer into
// 32 KiB frames at 4 ranks and 16 KiB at 8: it keeps the calls of one frame, and
// halving-doubling takes those of two. At 3 ranks its exchanges run between 2 ranks with a core
// each, and it keeps the call.
TEST(MeasuredModel, RecursiveDoublingPaysForEachFrameOfItsBufferOnCrowdedLoopback) {
  MachineRates r;
  r.copy_gbps = 8.97, r.reduce_gbps = 26.4, r.wake_us = 3.7, r.core_cache_kib = 512;
  r.loopback_us = 13.3, r.loopback_gbps = 3.18, r.segment_bytes = 65459;
  const auto tcp = [&](int ranks) { return loopback_on_two_cores(r, ranks); };
  EXPECT_EQ(pick(tcp(4), Kind::all_reduce, 32 << 10), "recursive_doubling");
  EXPECT_EQ(pick(tcp(4), Kind::all_reduce, 40 << 10), "halving_doubling");
  EXPECT_EQ(pick(tcp(4), Kind::all_reduce, 64 << 10), "halving_doubling");
  EXPECT_EQ(pick(tcp(8), Kind::all_reduce, 16 << 10), "recursive_doubling");
  EXPECT_EQ(pick(tcp(8), Kind::all_reduce, 32 << 10), "halving_doubling");
  for (std::size_t bytes : {std::size_t{32} << 10, std::size_t{64} << 10})
    EXPECT_EQ(pick(tcp(3), Kind::all_reduce, bytes), "recursive_doubling") << bytes << " B";
  // Without a measured segment (TCP between hosts, or no probe) frames are not counted.
  r.segment_bytes = 0;
  EXPECT_EQ(pick(tcp(4), Kind::all_reduce, 40 << 10), "recursive_doubling");
}

// Halving-doubling's slices take the share of a core's cache where its exchanging ranks outnumber
// the cores (4 ranks on 2 cores), but no less than one whole segment: a slice hands a core over
// whatever its size. At 3 ranks the two exchanging have a core each and take the whole cap, as the
// ring does. On a 512 KiB L2 (a 64 KiB cap): 60 KiB (one segment) at 3, 4 and 8 ranks, where the
// share would be 32 KiB at 4 and 16 KiB at 8.
TEST(MeasuredModel, HalvingDoublingTakesACrowdedShareOfAtLeastOneSegment) {
  MachineRates r;
  r.copy_gbps = 8.97, r.reduce_gbps = 26.4, r.wake_us = 3.7, r.core_cache_kib = 512;
  r.loopback_us = 13.3, r.loopback_gbps = 3.18, r.segment_bytes = 65459;
  auto three = loopback_on_two_cores(r, 3), four = loopback_on_two_cores(r, 4),
       eight = loopback_on_two_cores(r, 8);
  three.overrides = four.overrides = eight.overrides = "allreduce:halving_doubling";
  EXPECT_EQ(Selector(three).choose(Kind::all_reduce, 1 << 20, false).slice, 60u << 10);
  EXPECT_EQ(Selector(four).choose(Kind::all_reduce, 1 << 20, false).slice, 60u << 10);
  EXPECT_EQ(Selector(eight).choose(Kind::all_reduce, 512 << 10, false).slice, 60u << 10);
  // Segments unmeasured: the share.
  MachineRates unmeasured = r;
  unmeasured.segment_bytes = 0;
  auto four_unmeasured = loopback_on_two_cores(unmeasured, 4);
  four_unmeasured.overrides = "allreduce:halving_doubling";
  EXPECT_EQ(Selector(four_unmeasured).choose(Kind::all_reduce, 1 << 20, false).slice, 32u << 10);
}

// Over loopback TCP a frame that ends in a partly filled segment costs another hop, and where the
// ranks working at once outnumber the cores a wake-up: slices fill whole segments, and recursive
// doubling's whole buffer of 64 KiB (a segment and 77 bytes) loses to halving-doubling's halves at
// 4 ranks on 2 cores. At 3 ranks its exchange runs between 2 ranks, a core each, and it keeps the
// call; with a core per rank only the ring's slices change.
TEST(MeasuredModel, LoopbackFramesFillWholeSegments) {
  MachineRates r = zen4_rates();
  r.loopback_us = 8, r.loopback_gbps = 7;
  const auto tcp = [&](int ranks, double segment_bytes) {
    MachineRates with = r;
    with.segment_bytes = segment_bytes;
    return loopback_on_two_cores(with, ranks);
  };
  constexpr double kSegment = 65483 - 24;  // loopback's MSS less a frame's header
  // The ring takes the core's whole cap (128 KiB of a 1 MiB L2) cut to whole segments: two,
  // 124 KiB; halving-doubling the share of the 2 ranks on a core, 64 KiB: one segment, 60 KiB.
  auto ring4 = tcp(4, kSegment), halving4 = tcp(4, kSegment);
  ring4.overrides = "allreduce:ring";
  halving4.overrides = "allreduce:halving_doubling";
  EXPECT_EQ(Selector(ring4).choose(Kind::all_reduce, 64 << 20, false).slice, 124u << 10);
  EXPECT_EQ(Selector(halving4).choose(Kind::all_reduce, 4 << 20, false).slice, 60u << 10);
  // Unmeasured segments: the share, whole (a cap of 128 KiB would spill a segment).
  auto unmeasured = tcp(4, 0);
  unmeasured.overrides = "allreduce:ring";
  EXPECT_EQ(Selector(unmeasured).choose(Kind::all_reduce, 64 << 20, false).slice, 64u << 10);
  // A core's 2 MiB: four segments, 252 KiB.
  MachineRates larger = r;
  larger.core_cache_kib = 2048, larger.segment_bytes = kSegment;
  ring4.costs = CostModel::measured(larger, true);
  EXPECT_EQ(Selector(ring4).choose(Kind::all_reduce, 64 << 20, false).slice, 252u << 10);

  EXPECT_EQ(pick(tcp(4, kSegment), Kind::all_reduce, 64 << 10), "halving_doubling");
  EXPECT_EQ(pick(tcp(4, 0), Kind::all_reduce, 64 << 10), "recursive_doubling");
  EXPECT_EQ(pick(tcp(8, kSegment), Kind::all_reduce, 64 << 10), "halving_doubling");
  EXPECT_EQ(pick(tcp(3, kSegment), Kind::all_reduce, 64 << 10), "recursive_doubling");
  EXPECT_EQ(pick(tcp(4, kSegment), Kind::all_reduce, 64 << 20), "ring");
  EXPECT_EQ(pick(tcp(4, kSegment), Kind::all_reduce, 8), "recursive_doubling");
  // An empty call has no frame to split: priced as without the segment, not as 0 / 0.
  for (int ranks : {3, 4, 8}) {
    const auto a = Selector(tcp(ranks, kSegment)).choose(Kind::all_reduce, 0, false);
    const auto b = Selector(tcp(ranks, 0)).choose(Kind::all_reduce, 0, false);
    EXPECT_EQ(a.algorithm, b.algorithm) << ranks << " ranks";
    EXPECT_DOUBLE_EQ(a.predicted_us, b.predicted_us) << ranks << " ranks";
  }
  // A core per rank: the same choices as without the segment; the ring's slices, once a rank's
  // part outgrows one frame, fill whole segments too (the cap's 128 KiB: two, 124 KiB), and a
  // part that fits a frame still goes whole.
  for (std::size_t bytes :
       {std::size_t{8}, std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{64} << 20}) {
    auto with = tcp(2, kSegment), without = tcp(2, 0);
    with.ranks_per_core = without.ranks_per_core = 1;
    const auto a = Selector(with).choose(Kind::all_reduce, bytes, false);
    const auto b = Selector(without).choose(Kind::all_reduce, bytes, false);
    EXPECT_EQ(a.algorithm, b.algorithm) << bytes << " B";
    if (bytes == std::size_t{64} << 20) {
      EXPECT_EQ(a.algorithm->name, "ring");
      EXPECT_EQ(a.slice, 124u << 10);
      EXPECT_EQ(b.slice, 128u << 10);
    } else {
      EXPECT_EQ(a.slice, b.slice) << bytes << " B";
      EXPECT_DOUBLE_EQ(a.predicted_us, b.predicted_us) << bytes << " B";
    }
  }
}

// Recursive doubling and one-shot reduce the whole buffer at each hop, where the ring reduces half
// of what it moves: on 2 ranks with a core each, the ring wins from about a slice's latency
// upward (one-shot and recursive doubling beat it 1.2-1.9x slower before this was priced, by
// loom-tune), and one hop still wins the small calls. A GPU's reduction is not priced.
TEST(MeasuredModel, WholeBufferReductionsArePriced) {
  auto in = one_host(2);
  in.costs = CostModel::measured(zen4_rates(), true);
  EXPECT_NE(pick(in, Kind::all_reduce, 8 << 10), "ring");
  for (std::size_t bytes : {std::size_t{256} << 10, std::size_t{1} << 20, std::size_t{2} << 20})
    EXPECT_EQ(pick(in, Kind::all_reduce, bytes), "ring") << bytes << " B";
  const Selector selector(in);
  const Algorithm* doubling = nullptr;
  for (const Algorithm& a : algorithm_table())
    if (a.collective == Kind::all_reduce && a.name == "recursive_doubling") doubling = &a;
  ASSERT_NE(doubling, nullptr);
  const double host = doubling->cost(in, 1 << 20, false),
               device = doubling->cost(in, 1 << 20, true);
  EXPECT_NEAR(host - device, 0.5 * (1 << 20) / 46e3, 1e-6);
}

// Buffers in Communicator::alloc's windows: an all-to-all in place copies each peer's block once,
// where pairwise copies it in and out of a slot, so in place wins at every size past a few
// messages' latency. Rates as measured on a Zen 4 with reductions faster than copies, where
// pricing the rank's own block in place alone (and not in pairwise) chose pairwise at 1 MiB.
TEST(MeasuredModel, AllToAllsInWindowsRunInPlace) {
  MachineRates r;
  r.copy_gbps = 13.5, r.reduce_gbps = 20, r.handover_us = 0.3, r.wake_us = 5;
  for (int n : {2, 4}) {
    auto in = one_host(n);
    in.ranks_per_core = n > 2 ? 2 : 1;
    in.costs = CostModel::measured(r, true);
    for (std::size_t bytes :
         {std::size_t{256} << 10, std::size_t{1} << 20, std::size_t{16} << 20}) {
      EXPECT_EQ(pick(in, Kind::all_to_all, bytes, false, true), "direct")
          << n << " ranks, " << bytes << " B";
      EXPECT_NE(pick(in, Kind::all_to_all, bytes), "direct");
    }
  }
}
}  // namespace
}  // namespace loom::algorithms
