// The algorithm chooser: the cost model's picks, the LOOM_ALGO rules, and their refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "selection_inputs.hpp"

namespace loom::algorithms {
namespace {

using namespace test_inputs;

TEST(Selection, SmallAllReducesTakeOneHopAndLargeOnesTheRing) {
  const auto in = one_host(4);
  EXPECT_NE(pick(in, Kind::all_reduce, 8), "ring");
  EXPECT_EQ(pick(in, Kind::all_reduce, 64 << 20), "ring");
}

// Bruck's log2 rounds beat the ring's n-1 hops for small blocks; large blocks pipeline through
// the ring, and device buffers never take Bruck's host scratch.
TEST(Selection, SmallAllGathersTakeBrucksRoundsAndLargeOnesTheRing) {
  for (bool oversubscribed : {false, true}) {
    auto in = one_host(8);
    in.ranks_per_core = oversubscribed ? 2 : 1;
    EXPECT_EQ(pick(in, Kind::all_gather, 16), "bruck") << oversubscribed;
    EXPECT_EQ(pick(in, Kind::all_gather, 16 << 20), "ring") << oversubscribed;
    EXPECT_EQ(pick(in, Kind::all_gather, 16, true), "ring") << oversubscribed;
  }
}

TEST(Selection, OneShotTakesHostBuffersOnly) {
  const auto in = one_host(2);
  EXPECT_NE(pick(in, Kind::all_reduce, 8, true), "one_shot");
  SelectionInputs forced = in;
  forced.overrides = "one_shot";
  EXPECT_EQ(pick(forced, Kind::all_reduce, 8, false), "one_shot");
  EXPECT_NE(pick(forced, Kind::all_reduce, 8, true), "one_shot");  // unfit: the model decides
}

TEST(Selection, HierarchicalWinsAcrossHostsWithSeveralRanksEachButNotOnUnevenOnes) {
  EXPECT_EQ(pick(hosts(2, 4), Kind::all_reduce, 64 << 20), "hierarchical");
  auto uneven = hosts(2, 2);
  uneven.hosts.back().pop_back();
  uneven.size = 3;
  EXPECT_NE(pick(uneven, Kind::all_reduce, 64 << 20), "hierarchical");
  EXPECT_NE(pick(one_host(4), Kind::all_reduce, 64 << 20), "hierarchical");
}

TEST(Selection, CostsFollowTheLinkBetweenHosts) {
  const Selector tcp(hosts(2, 1, TransportKind::tcp));
  const Selector rdma(hosts(2, 1, TransportKind::ibverbs));
  EXPECT_GT(tcp.choose(Kind::all_reduce, 1 << 20, false).predicted_us,
            rdma.choose(Kind::all_reduce, 1 << 20, false).predicted_us);
  const Selector shm(one_host(2));
  EXPECT_GT(tcp.choose(Kind::all_reduce, 1 << 20, false).predicted_us,
            shm.choose(Kind::all_reduce, 1 << 20, false).predicted_us);
}

TEST(Selection, RulesNameAnAlgorithmPerOperationAndSizeRange) {
  auto in = one_host(4);
  in.overrides = "allreduce:one_shot:0-64K,ring:64K-,broadcast:chain";
  EXPECT_EQ(pick(in, Kind::all_reduce, 1024), "one_shot");
  EXPECT_EQ(pick(in, Kind::all_reduce, (64 << 10) - 1), "one_shot");
  EXPECT_EQ(pick(in, Kind::all_reduce, 64 << 10), "ring");
  EXPECT_EQ(pick(in, Kind::broadcast, 1 << 20), "chain");
  EXPECT_TRUE(Selector(in).choose(Kind::all_reduce, 1024, false).forced);
  in.overrides = "ring";  // the old form: the all-reduce at every size
  EXPECT_EQ(pick(in, Kind::all_reduce, 8), "ring");
  in.overrides = "allreduce:ring:1M-";  // below the range the model decides
  EXPECT_NE(pick(in, Kind::all_reduce, 8), "ring");
  EXPECT_FALSE(Selector(in).choose(Kind::all_reduce, 8, false).forced);
}

TEST(Selection, BadRulesAreRefusedNamingTheRule) {
  for (const char* bad : {"allreduce:nosuch", "frobnicate:ring:0-1K", "ring:1K-1K", "ring:x-",
                          "ring:1K", "broadcast:ring", "allreduce:ring:0-1K:extra", ",", "ring@",
                          "ring@2K", "ring@lots", "recursive_doubling@64K:0-1M"}) {
    SCOPED_TRACE(bad);
    auto in = one_host(2);
    in.overrides = bad;
    try {
      Selector s(in);
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("LOOM_ALGO"), std::string::npos) << e.what();
    }
  }
  auto in = one_host(2);
  in.overrides = "broadcast:ring";
  try {
    Selector s(in);
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("chain"), std::string::npos) << e.what();
  }
}

// "ring@256K" sets the slice of an algorithm whose slice is a pipelining choice, never above the
// slot, and never where the algorithm sends whole slots (small or device calls).
TEST(Selection, ARuleMaySetTheSlice) {
  auto in = one_host(4);
  in.overrides = "allreduce:ring@64K:1M-,broadcast:chain@32K";
  EXPECT_EQ(Selector(in).choose(Kind::all_reduce, 16 << 20, false).slice, 64u << 10);
  EXPECT_EQ(Selector(in).choose(Kind::broadcast, 16 << 20, false).slice, 32u << 10);
  EXPECT_EQ(Selector(in).choose(Kind::all_reduce, 16 << 20, true).slice, 0u);  // device: whole
  in.overrides = "allreduce:ring@64M";
  EXPECT_EQ(Selector(in).choose(Kind::all_reduce, 16 << 20, false).slice, in.slot_bytes);
  EXPECT_EQ(Selector(in).choose(Kind::all_reduce, 8, false).slice, 0u);
  in.overrides.clear();
  EXPECT_NE(Selector(in).choose(Kind::all_reduce, 16 << 20, false).slice, 64u << 10);
}

// The tuning table's rules choose below LOOM_ALGO's, for host buffers outside the windows only;
// a table that does not parse leaves the model to choose.
TEST(Selection, TheTuningTableChoosesBelowLoomAlgoForPlainHostBuffers) {
  auto in = one_host(4);
  in.tuned = "allreduce:ring@128K:0-1M,broadcast:chain@16K";
  in.tuned_from = "/tmp/table";
  const Selector s(in);
  const auto c = s.choose(Kind::all_reduce, 512 << 10, false);
  EXPECT_EQ(c.algorithm->name, "ring");
  EXPECT_EQ(c.slice, 128u << 10);
  EXPECT_TRUE(c.tuned);
  EXPECT_FALSE(c.forced);
  EXPECT_EQ(pick(in, Kind::all_reduce, 8), "ring");
  EXPECT_FALSE(s.choose(Kind::all_reduce, 4 << 20, false).tuned);          // outside its range
  EXPECT_FALSE(s.choose(Kind::all_reduce, 512 << 10, true).tuned);         // device buffers
  EXPECT_FALSE(s.choose(Kind::all_reduce, 512 << 10, false, true).tuned);  // in the windows
  EXPECT_EQ(pick(in, Kind::all_reduce, 512 << 10, false, true), "direct");
  EXPECT_TRUE(s.choose(Kind::broadcast, 1 << 20, false).tuned);
  in.overrides = "allreduce:recursive_doubling:0-1M";
  const auto user = Selector(in).choose(Kind::all_reduce, 8, false);
  EXPECT_EQ(user.algorithm->name, "recursive_doubling");
  EXPECT_TRUE(user.forced);
  EXPECT_FALSE(user.tuned);
  in.overrides.clear();
  in.tuned = "allreduce:warp_drive";
  EXPECT_NO_THROW(Selector{in});
  EXPECT_FALSE(Selector(in).choose(Kind::all_reduce, 8, false).tuned);
}

// Device buffers whose peers' memory is mapped here (CUDA IPC) take the direct rows of every
// collective, the uneven ones too, at any size; without the mapping, or across hosts, they go
// through the slots; host buffers never take the device-only rows; LOOM_ALGO overrides.
TEST(Selection, MappedDeviceBuffersTakeTheDirectRowsUnlessARuleNamesAnother) {
  const auto in = one_host(4);
  for (Kind k : {Kind::all_reduce, Kind::reduce_scatter, Kind::all_gather, Kind::broadcast,
                 Kind::reduce, Kind::gather, Kind::scatter, Kind::all_to_all, Kind::all_to_all_v,
                 Kind::all_gather_v, Kind::reduce_scatter_v})
    for (std::size_t bytes : {std::size_t{8}, std::size_t{64} << 20}) {
      EXPECT_EQ(pick(in, k, bytes, true, true), "direct") << rule_name(k) << " " << bytes;
      EXPECT_NE(pick(in, k, bytes, true, false), "direct") << rule_name(k) << " " << bytes;
      EXPECT_NE(pick(hosts(2, 2), k, bytes, true, true), "direct") << rule_name(k);
    }
  for (Kind k : {Kind::all_to_all_v, Kind::all_gather_v, Kind::reduce_scatter_v})
    EXPECT_NE(pick(in, k, 1 << 20, false, true), "direct") << rule_name(k);
  SelectionInputs forced = in;
  forced.overrides = "allreduce:ring";
  EXPECT_EQ(pick(forced, Kind::all_reduce, 1 << 20, true, true), "ring");
  const Selector s(in);
  const auto& table = algorithm_table();
  const auto direct_v = std::find_if(table.begin(), table.end(), [](const Algorithm& a) {
    return a.collective == Kind::all_gather_v && a.name == "direct";
  });
  ASSERT_NE(direct_v, table.end());
  EXPECT_STREQ(s.unfit(*direct_v, 8, true, false), "the peers' device memory is not mapped");
  EXPECT_STREQ(s.unfit(*direct_v, 8, false, true), "device buffers only");
}

TEST(Selection, EveryCollectiveHasAnAlgorithm) {
  const Selector s(hosts(2, 2));
  for (Kind k : {Kind::all_reduce, Kind::reduce_scatter, Kind::all_gather, Kind::broadcast,
                 Kind::reduce, Kind::barrier, Kind::send, Kind::recv})
    for (std::size_t bytes : {std::size_t{0}, std::size_t{8}, std::size_t{1} << 26})
      EXPECT_NE(s.choose(k, bytes, false).algorithm, nullptr) << rule_name(k) << " " << bytes;
}

TEST(Selection, SlicesStayWithinOneSlotAndAreWholePagesForLargeBuffers) {
  const Selector s(one_host(4));
  const auto c = s.choose(Kind::all_reduce, 64 << 20, false);
  EXPECT_GT(c.slice, 0u);
  EXPECT_LE(c.slice, s.inputs().slot_bytes);
  EXPECT_EQ(c.slice % 4096, 0u);
  EXPECT_EQ(s.choose(Kind::all_reduce, 64 << 20, true).slice, 0u);  // device: whole slots
}
}  // namespace
}  // namespace loom::algorithms
