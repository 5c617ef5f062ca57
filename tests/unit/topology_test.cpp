#include "core/topology.hpp"

#include <gtest/gtest.h>

namespace loom::core {
namespace {

Topology hosts_of(std::vector<std::string> host_of_rank, std::vector<int> cores_of_rank) {
  Topology t;
  t.host_of_rank = std::move(host_of_rank);
  t.cores_of_rank = std::move(cores_of_rank);
  return t;
}

// The most crowded host decides, rounding up: 3 ranks on 2 cores put 2 on one of them.
TEST(Topology, RanksPerCoreIsTheMostCrowdedHost) {
  EXPECT_EQ(hosts_of({"a", "a"}, {2, 2}).ranks_per_core(), 1);
  EXPECT_EQ(hosts_of({"a", "a", "a"}, {2, 2, 2}).ranks_per_core(), 2);
  EXPECT_EQ(hosts_of({"a", "a", "a", "a"}, {2, 2, 2, 2}).ranks_per_core(), 2);
  EXPECT_EQ(hosts_of(std::vector<std::string>(8, "a"), std::vector<int>(8, 2)).ranks_per_core(), 4);
  EXPECT_EQ(hosts_of({"a", "a", "b", "b", "b", "b"}, {4, 4, 2, 2, 2, 2}).ranks_per_core(), 2);
  EXPECT_FALSE(hosts_of({"a", "a"}, {2, 2}).any_host_oversubscribed());
  EXPECT_TRUE(hosts_of({"a", "a", "a"}, {2, 2, 2}).any_host_oversubscribed());
  // A host that reports no cores counts one.
  EXPECT_EQ(hosts_of({"a", "a"}, {0, 0}).ranks_per_core(), 2);
}

}  // namespace
}  // namespace loom::core
