#include "core/topology.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "loom/store.hpp"
#include "store/keys.hpp"

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

// Pids are compared across the ranks of a host (shm liveness, shrink, the launcher's left-out
// list): only within one pid namespace do they name the same process. The namespace is part of
// the host's identity, and where LOOM_HOST_ID joins ranks of several pid namespaces into one host,
// their pids are not used (0) rather than taken for this namespace's processes.
TEST(Topology, PidsOfAnotherPidNamespaceAreNotUsed) {
  const std::string here = std::filesystem::read_symlink("/proc/self/ns/pid").string();
  EXPECT_NE(local_host_id().find(here), std::string::npos) << local_host_id();

  const std::string path =
      (std::filesystem::temp_directory_path() / ("loom-topology-" + std::to_string(::getpid())))
          .string();
  {
    FileStore store(path);
    // Ranks 1 and 2 on this host by LOOM_HOST_ID's word: 1 in another pid namespace, 2 in this.
    store.set(store::keys::topology(1), fmt::format("4242 2 - 0 - pid:[1]\nshared-host\n"));
    store.set(store::keys::topology(2), fmt::format("4343 2 - 0 - {}\nshared-host\n", here));
    ::setenv("LOOM_HOST_ID", "shared-host", 1);
    const Topology t = exchange_topology(store, 0, 3, std::chrono::seconds(10), "", "-", {}, "");
    ::unsetenv("LOOM_HOST_ID");
    ASSERT_EQ(t.pid_of_rank.size(), 3u);
    EXPECT_EQ(t.pid_of_rank[0], ::getpid());
    EXPECT_EQ(t.pid_of_rank[1], 0) << "a pid of another pid namespace was taken for one here";
    EXPECT_EQ(t.pid_of_rank[2], 4343);
    EXPECT_TRUE(t.same_host(0, 1));
  }
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".lock");
}

}  // namespace
}  // namespace loom::core
