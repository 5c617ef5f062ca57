// A job writes each store key once: no two components, and no two ranks, produce the same key.
#include <gtest/gtest.h>

#include <vector>

#include "../support/key_audit.hpp"

namespace loom {
namespace {

// Ranks 0 and 1 share a pretend host (shared memory between them), rank 2 is alone on another
// (TCP to it); every pair connects.
TEST(KeyAudit, AJobOverSharedMemoryAndTcpSetsEachKeyOnce) {
  testing::RunOptions opts;
  opts.host_id = [](int rank, int) { return rank < 2 ? std::string("A") : std::string("B"); };
  testing::audit_keys(
      3,
      [](Communicator& comm) {
        std::vector<std::int32_t> v(100000, comm.rank() + 1);
        comm.all_reduce(v.data(), v.size(), DataType::i32, ReduceOp::sum);
        EXPECT_EQ(v.front(), 6);
        std::vector<std::int32_t> all(3 * 1000);
        comm.all_gather(v.data(), all.data(), 1000, DataType::i32);
        comm.broadcast(v.data(), v.size(), DataType::i32, 2);
        comm.barrier();
      },
      opts);
}

}  // namespace
}  // namespace loom
