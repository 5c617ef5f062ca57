// Collectives over the InfiniBand verbs transport: every rank on a host of its own (LOOM_HOST_ID),
// so that peers are reached through the RDMA port (an HCA loops back to itself). Skipped, with the
// reason, where the machine has no RDMA device.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "../support/ranks.hpp"
#include "verify/patterns.hpp"

namespace loom {
namespace {

std::string why_no_rdma() {
  std::error_code ec;
  if (!std::filesystem::exists("/sys/class/infiniband", ec) ||
      std::filesystem::is_empty("/sys/class/infiniband", ec))
    return "no RDMA device on this machine (/sys/class/infiniband is empty)";
  return {};
}

TEST(IbCollectives, EveryReductionOverRdmaMatchesTheReference) {
  if (auto why = why_no_rdma(); !why.empty()) GTEST_SKIP() << why;
  testing::RunOptions options;
  options.host_id = [](int rank, int) { return "ib-host-" + std::to_string(rank); };
  testing::run_ranks(
      3,
      [](Communicator& comm) {
        ASSERT_NE(comm.describe().find("ibverbs to rank(s)"), std::string::npos) << comm.describe();
        for (DataType t : {DataType::f32, DataType::bf16, DataType::i64, DataType::u8})
          for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::avg})
            for (std::size_t count : {std::size_t{1}, std::size_t{4093}, std::size_t{1} << 20}) {
              std::vector<std::byte> in(count * size_of(t)), out(count * size_of(t));
              verify::fill(in.data(), count, comm.rank(), t, op);
              comm.all_reduce(in.data(), out.data(), count, t, op);
              auto want = verify::expected_reduction(0, count, comm.size(), t, op);
              EXPECT_EQ(verify::count_wrong(out.data(), want.data(), count, t), 0u)
                  << to_string(t) << " " << to_string(op) << " " << count;
            }
        std::vector<std::int32_t> block(1000, comm.rank()), all(3000);
        comm.all_gather(block.data(), all.data(), 1000, DataType::i32);
        for (int r = 0; r < 3; ++r) EXPECT_EQ(all[static_cast<std::size_t>(r) * 1000], r);
      },
      options);
}

}  // namespace
}  // namespace loom
