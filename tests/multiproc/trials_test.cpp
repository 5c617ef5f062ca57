// The trials (algorithms/trials.hpp) over real ranks: more ranks than cores over shared memory,
// all-to-alls of two sizes interleaved, synchronous and not, each call checked element by element
// through both schedules of each trial and the winner after it. Ranks that kept different winners
// would send one schedule's messages into the other's and fail the call (a trial judged on each
// rank's own times alone failed so in 3 of 3 runs).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <thread>

#include "../support/all_to_all_check.hpp"
#include "../support/kill_trial.hpp"
#include "../support/ranks.hpp"
#include "algorithms/trials.hpp"
#include "base/process_memory.hpp"

namespace loom {
namespace {

using testing::check_all_to_all;
using testing::run_ranks;

// More ranks than cores, at least 4 (0: this machine has too many cores for the test).
int crowded_world() {
  const int world = std::max(4, static_cast<int>(std::thread::hardware_concurrency()) + 1);
  return world <= 8 ? world : 0;
}

TEST(Trials, RanksOnSharedCoresMeasureBothSchedulesAndKeepTheSameWinner) {
  if (crowded_world() == 0) GTEST_SKIP() << "over 8 ranks to outnumber this machine's cores";
  if (!base::cross_memory_attach_available())
    GTEST_SKIP() << "process_vm_readv is refused here: no single copy to measure against";
  testing::RunOptions opts;
  opts.options.transport = "shm";
  opts.options.timeout = std::chrono::seconds(60);
  run_ranks(
      crowded_world(),
      [](Communicator& comm) {
        // Enough calls of each size for its trial and a few after it.
        using algorithms::Trials;
        constexpr int kCalls = Trials::kMostWarm + Trials::kRivalWarm + 2 * Trials::kCounted + 4;
        const std::uint64_t before = Trials::judged();
        for (int call = 0; call < kCalls; ++call) {
          SCOPED_TRACE(call);
          check_all_to_all(comm, DataType::i32, 70001, call % 3 == 0);
          check_all_to_all(comm, DataType::u8, 33333, false);
        }
        EXPECT_EQ(Trials::judged() - before, 2u) << "one trial for each size";
      },
      opts);
}

// A rank SIGKILLed 30 ms into a loop of 1 MiB-block all-to-alls, with nothing forced: on 4 ranks
// and 2 cores such a call took 1.2-1.9 ms, so the kill lands within the size's trial (23 calls
// and the swap) or soon after it. Every survivor raises PeerError naming it within seconds.
TEST(Trials, ARankDyingMidTrialIsNamedOnEverySurvivor) {
  if (std::thread::hardware_concurrency() >= 4) GTEST_SKIP() << "4 ranks have a core each here";
  if (!base::cross_memory_attach_available())
    GTEST_SKIP() << "process_vm_readv is refused here: no single copy to measure against";
  testing::all_to_all_kill_trial("", false);
}

// A rule names the schedule: nothing is tried, where it would be without the rule.
TEST(Trials, LoomAlgoNamesTheScheduleInstead) {
  if (crowded_world() == 0) GTEST_SKIP() << "over 8 ranks to outnumber this machine's cores";
  testing::RunOptions opts;
  opts.options.transport = "shm";
  opts.options.algorithm = "alltoall:pairwise";
  run_ranks(
      crowded_world(),
      [](Communicator& comm) {
        const std::uint64_t before = algorithms::Trials::judged();
        for (int call = 0; call < 2 * algorithms::Trials::kMostWarm + 8; ++call)
          check_all_to_all(comm, DataType::f32, 4099, false);
        EXPECT_EQ(algorithms::Trials::judged(), before);
      },
      opts);
}

}  // namespace
}  // namespace loom
