// The algorithm chooser: the cost model's picks, the LOOM_ALGO rules, and their refusals.
#include <gtest/gtest.h>

#include <string>

#include "algorithms/selection.hpp"

namespace loom::algorithms {
namespace {

using transport::TransportKind;

SelectionInputs one_host(int n) {
  SelectionInputs in;
  in.size = n;
  in.hosts.emplace_back();
  for (int r = 0; r < n; ++r) in.hosts.back().push_back(r);
  return in;
}

SelectionInputs hosts(int count, int per_host, TransportKind remote = TransportKind::tcp) {
  SelectionInputs in;
  in.size = count * per_host;
  for (int h = 0; h < count; ++h) {
    in.hosts.emplace_back();
    for (int l = 0; l < per_host; ++l) in.hosts.back().push_back(h * per_host + l);
  }
  in.remote = remote;
  return in;
}

std::string_view pick(const SelectionInputs& in, Kind kind, std::size_t bytes,
                      bool device = false) {
  return Selector(in).choose(kind, bytes, device).algorithm->name;
}

TEST(Selection, SmallAllReducesTakeOneHopAndLargeOnesTheRing) {
  const auto in = one_host(4);
  EXPECT_NE(pick(in, Kind::all_reduce, 8), "ring");
  EXPECT_EQ(pick(in, Kind::all_reduce, 64 << 20), "ring");
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
                          "ring:1K", "broadcast:ring", "allreduce:ring:0-1K:extra", ","}) {
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
