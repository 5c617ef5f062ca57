// The probe's figures: the init probe itself, and the record a rank's figures travel in.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>

#include "algorithms/machine_rates.hpp"
#include "base/process_memory.hpp"
#include "core/machine_probe.hpp"

namespace loom::algorithms {
namespace {

// The probe's figures travel in the topology record as text: every field survives the trip, and a
// field the reader does not know, a bad number or a missing one leaves 0 (not measured).
TEST(MeasuredModel, RatesSurviveTheirRecordAndBadFieldsReadAsNotMeasured) {
  MachineRates r;
  r.copy_gbps = 41.5, r.reduce_gbps = 20.25, r.handover_us = 0.125, r.wake_us = 6.5;
  r.loopback_us = 12.75, r.loopback_gbps = 3.5, r.segment_bytes = 65459, r.cma_gbps = 7.75;
  const MachineRates back = MachineRates::decode(r.encode());
  EXPECT_EQ(back.encode(), r.encode());
  EXPECT_DOUBLE_EQ(back.handover_us, 0.125);
  EXPECT_DOUBLE_EQ(back.cma_gbps, 7.75);
  const MachineRates bad =
      MachineRates::decode("copy_gbps=x reduce_gbps=-3 wake_us=7 future=1 junk");
  EXPECT_EQ(bad.copy_gbps, 0);
  EXPECT_EQ(bad.reduce_gbps, 0);
  EXPECT_EQ(bad.wake_us, 7);
  EXPECT_EQ(MachineRates::decode("").encode(), MachineRates{}.encode());
}

// Within a host the better figure wins (rates larger, times smaller), across hosts the worse;
// an unmeasured 0 never wins either way.
TEST(MeasuredModel, BetterAndWorsePickPerFieldAndIgnoreUnmeasured) {
  MachineRates a, b;
  a.copy_gbps = 40, a.wake_us = 5, a.handover_us = 0;
  b.copy_gbps = 30, b.wake_us = 8, b.handover_us = 0.2;
  const MachineRates best = MachineRates::better(a, b), worst = MachineRates::worse(a, b);
  EXPECT_EQ(best.copy_gbps, 40);
  EXPECT_EQ(best.wake_us, 5);
  EXPECT_EQ(worst.copy_gbps, 30);
  EXPECT_EQ(worst.wake_us, 8);
  EXPECT_EQ(best.handover_us, 0.2);
  EXPECT_EQ(worst.handover_us, 0.2);
}

// The init probe measures every part it is asked for and stops near its budget: a part that hung
// would hang every init (the bound here is for a hang, not a speed).
TEST(MachineProbe, MeasuresEveryPartAndEnds) {
  const auto t0 = std::chrono::steady_clock::now();
  const MachineRates r = core::probe_machine(std::chrono::milliseconds(10), true);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_GT(r.copy_gbps, 0);
  EXPECT_GT(r.reduce_gbps, 0);
  EXPECT_GT(r.wake_us, 0);
  EXPECT_GT(r.loopback_us, 0);
  EXPECT_GT(r.loopback_gbps, 0);
  EXPECT_GT(r.segment_bytes, 0);
  EXPECT_GE(r.handover_us, 0);  // 0 where the two threads shared a core
  // 0 where another process held the host's pipe lock; both or neither.
  EXPECT_EQ(r.slice_us > 0, r.pipe_gbps > 0);
  const MachineRates shm = core::probe_machine(std::chrono::milliseconds(1), false);
  EXPECT_EQ(shm.loopback_gbps, 0);
  // The kernel's copy of a process's pages, where this process may read its own.
  EXPECT_EQ(shm.cma_gbps > 0, base::cross_memory_attach_available());
  EXPECT_EQ(r.cma_gbps, 0);  // TCP alone never reads its peers' memory
}

// The pipe fits both of its figures where its slices were not disturbed, and reports neither
// where every slice was (it then measured the sharing of a core, not the ring). It ends near its
// budget and grace either way (the bound is for a hang, not a speed). A host loaded by other
// tests may disturb a pipe for its whole grace (the release suite on 2 cores once disturbed three
// in a row): pipes start again for up to 2 s, and none fitting in all that time is a failure.
TEST(MachineProbe, TheSlicePipeFitsASliceAndARate) {
  const auto t0 = std::chrono::steady_clock::now();
  core::SlicePipe p;
  std::ostringstream attempts;  // each pipe's best trials, small and large slices, for the message
  while (p.slice_us == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2)) {
    p = core::slice_pipe(std::chrono::milliseconds(5), std::chrono::milliseconds(500), 1e9);
    attempts << ' ' << p.small_best_us << '/' << p.large_best_us;
  }
  EXPECT_GT(p.slice_us, 0) << "best small/large trials (us) of each pipe:" << attempts.str();
  EXPECT_GT(p.gbps, 0);
  const core::SlicePipe disturbed =
      core::slice_pipe(std::chrono::milliseconds(5), std::chrono::milliseconds(5), 0.0);
  EXPECT_EQ(disturbed.slice_us, 0);
  EXPECT_EQ(disturbed.gbps, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
}
}  // namespace
}  // namespace loom::algorithms
