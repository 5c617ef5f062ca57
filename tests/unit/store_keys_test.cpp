// Every store key is built in src/store/keys.cpp: no two builders, spaces or indices give the
// same key, and each key starts with its component's space.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "store/keys.hpp"

namespace loom {
namespace {

namespace keys = store::keys;
using keys::Space;

TEST(StoreKeys, NoTwoBuildersOrIndicesGiveTheSameKey) {
  std::map<std::string, std::string> seen;  // key -> who built it
  auto add = [&](const std::string& key, const std::string& who) {
    auto [it, added] = seen.emplace(key, who);
    EXPECT_TRUE(added) << "'" << key << "' built by " << who << " and by " << it->second;
  };
  for (const std::string attempt : {"", "attempt0", "attempt1"})
    for (int r = 0; r < 9; ++r) add(keys::generation(attempt, r), "generation " + attempt);
  add(keys::job_token(), "job_token");
  add(keys::abort_record(), "abort_record");
  add(keys::stalls(), "stalls");
  for (int r = 0; r < 9; ++r) {
    add(keys::topology(r), "topology");
    add(keys::settings_refused(r), "settings_refused");
    add(keys::heartbeat(r), "heartbeat");
    add(keys::abort_seen(r), "abort_seen");
    add(keys::progress(r), "progress");
    add(keys::tcp_address(r), "tcp_address");
    for (int p = 0; p < 9; ++p) {
      if (p == r) continue;
      add(keys::cudaipc_handle(r, p), "cudaipc_handle");
      add(keys::ib_record(r, p), "ib_record");
      add(keys::ib_ready(r, p), "ib_ready");
      if (r < p) {
        add(keys::shm_segment(Space::shm, r, p), "shm_segment(shm)");
        add(keys::shm_segment(Space::cudaipc_control, r, p), "shm_segment(cudaipc_control)");
      }
    }
    for (std::uint64_t split = 0; split < 3; ++split) {
      add(keys::split_request(split, r), "split_request");
      add(keys::split_space(split, r), "split_space");
      add(keys::shrink_joined(split, r), "shrink_joined");
    }
    add(keys::launcher_left_out(fmt::format("a1b2-0-{}", r)), "launcher_left_out");
    for (const std::string run : {"a", "b"})
      for (std::int64_t round = 1; round < 3; ++round) {
        add(keys::rendezvous_node(run, round, r), "rendezvous_node");
        add(keys::rendezvous_heartbeat(run, round, r), "rendezvous_heartbeat");
        add(keys::rendezvous_done(run, round, r), "rendezvous_done");
      }
  }
  add(keys::launcher_attempt(), "launcher_attempt");
  for (std::uint64_t round = 0; round < 3; ++round) {
    add(keys::shrink_members(round), "shrink_members");
    add(keys::shrink_space(round), "shrink_space");
  }
  for (const std::string run : {"a", "b"}) {
    add(keys::rendezvous_seeded(run), "rendezvous_seeded");
    add(keys::rendezvous_round(run), "rendezvous_round");
    for (std::int64_t round = 1; round < 3; ++round) {
      add(keys::rendezvous_joined(run, round), "rendezvous_joined");
      add(keys::rendezvous_closed(run, round), "rendezvous_closed");
      add(keys::rendezvous_outcome(run, round), "rendezvous_outcome");
      add(keys::rendezvous_restarts(run, round), "rendezvous_restarts");
      add(keys::rendezvous_master(run, round), "rendezvous_master");
      add(keys::rendezvous_left(run, round), "rendezvous_left");
    }
  }
}

TEST(StoreKeys, EveryKeyStartsWithItsComponentsSpaceAndSpacesAreDistinct) {
  std::set<std::string> names;
  for (Space s : {Space::communicator, Space::topology, Space::failure, Space::health, Space::tcp,
                  Space::shm, Space::cudaipc_control, Space::cudaipc, Space::ibverbs, Space::split,
                  Space::shrink, Space::rendezvous, Space::launcher})
    EXPECT_TRUE(names.insert(std::string(keys::name(s))).second) << keys::name(s);
  auto starts = [](const std::string& key, Space s) {
    return key.rfind(std::string(keys::name(s)) + "/", 0) == 0;
  };
  EXPECT_TRUE(starts(keys::tcp_address(3), Space::tcp));
  EXPECT_TRUE(starts(keys::shm_segment(Space::shm, 0, 1), Space::shm));
  EXPECT_TRUE(starts(keys::shm_segment(Space::cudaipc_control, 0, 1), Space::cudaipc_control));
  EXPECT_TRUE(starts(keys::cudaipc_handle(0, 1), Space::cudaipc));
  EXPECT_TRUE(starts(keys::ib_record(0, 1), Space::ibverbs));
  EXPECT_TRUE(starts(keys::heartbeat(0), Space::health));
  EXPECT_TRUE(starts(keys::abort_record(), Space::failure));
  EXPECT_TRUE(starts(keys::abort_seen(0), Space::failure));
  EXPECT_TRUE(starts(keys::topology(0), Space::topology));
  EXPECT_TRUE(starts(keys::settings_refused(0), Space::topology));
  EXPECT_TRUE(starts(keys::job_token(), Space::communicator));
  EXPECT_TRUE(starts(keys::shrink_members(0), Space::shrink));
  EXPECT_TRUE(starts(keys::launcher_left_out("a1b2-0-1"), Space::launcher));
  EXPECT_TRUE(starts(keys::launcher_attempt(), Space::launcher));
}

}  // namespace
}  // namespace loom
