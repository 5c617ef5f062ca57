// A /dev/shm that fills in the middle of a job: the shared-memory slots take their pages as
// messages first reach them, so the call that runs out is the first whose messages reach pages
// that do not fit, possibly long after the job started. That call must fail on every rank within
// seconds with an error naming the cause (the rank that could not reserve, /dev/shm), never
// SIGBUS or hang, and the job must leave nothing in /dev/shm.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "../support/all_to_all_check.hpp"
#include "../support/child.hpp"
#include "../support/ranks.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;

TEST(DevShmFull, ALargerCallThatDoesNotFitFailsOnEveryRankAndLeavesNothingBehind) {
  // With a core each, a slot's first message reserves the span small messages move along
  // (2 x L2 / slots): 12 directions x 8 slots of it do not fit 2 MiB, and the small calls fail.
  if (std::thread::hardware_concurrency() >= 4) GTEST_SKIP() << "4 ranks have a core each here";
  const int code = testing::in_child([] {
    if (!testing::own_dev_shm("2m")) return 77;
    testing::RunOptions opts;
    opts.timeout = 60s;
    opts.options.transport = "shm";
    opts.options.algorithm = "alltoall:pairwise";  // through the slots (not the single copy)
    opts.options.timeout = 20s;
    testing::run_ranks(
        4,
        [](Communicator& comm) {
          // 4 KiB blocks take a page of each slot they pass through: they fit.
          for (int i = 0; i < 10; ++i) testing::check_all_to_all(comm, DataType::u8, 4096, false);
          // 1 MiB blocks reach further into every slot, to each of 3 peers from every rank: 12
          // directions x 8 slots of 128 KiB slices or more do not fit.
          std::vector<std::byte> in(4 << 20), out(4 << 20);
          const auto started = std::chrono::steady_clock::now();
          try {
            for (int i = 0; i < 4; ++i)
              comm.all_to_all(in.data(), out.data(), 1 << 20, DataType::u8);
            ADD_FAILURE() << "4 ranks' 1 MiB blocks fit a /dev/shm of 2 MiB";
          } catch (const PeerError& e) {
            // Every rank names the cause: the failing rank's error reaches its peers.
            const std::string what = e.what();
            EXPECT_NE(what.find("all_to_all"), std::string::npos) << what;
            EXPECT_NE(what.find("cannot reserve"), std::string::npos) << what;
            EXPECT_NE(what.find("/dev/shm"), std::string::npos) << what;
          }
          EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
        },
        opts);
    if (testing::dev_shm_used() != 0) {
      std::fprintf(stderr, "the job left %zu bytes in /dev/shm\n", testing::dev_shm_used());
      return 1;
    }
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  if (code == 77) GTEST_SKIP() << "mount namespaces are not permitted here";
  EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace loom
