// A stranger who cannot authenticate floods a job's store with idle connections and bad
// handshakes, on a host whose descriptor limit is the usual 1024: the job connects anew all the
// while, and finishes with the right results.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "../support/ranks.hpp"
#include "loom/store.hpp"
#include "store_wire.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using testing::RankContext;

constexpr int kJobRanks = 4;
constexpr int kIdleConnections = 2000;
const std::string kSecret = "flood-test-secret";

// Opens the idle connections, then makes bad handshakes until the job is over.
void flood(std::uint16_t port, Store& control) {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
  ASSERT_GE(limit.rlim_cur, static_cast<rlim_t>(kIdleConnections + 100));
  std::vector<int> idle;
  for (int i = 0; i < kIdleConnections; ++i) {
    const int fd = store_test::connect_raw(port);
    ASSERT_GE(fd, 0) << "connection " << i;
    idle.push_back(fd);
  }
  control.set("flooding", std::string("1"));
  const std::vector<std::uint8_t> garbage(64, 0xab);  // a response of the right size, wrong MAC
  int bad_handshakes = 0;
  while (!control.check({"job over"})[0]) {
    for (int i = 0; i < 50; ++i, ++bad_handshakes) {
      const int fd = store_test::connect_raw(port);
      ASSERT_GE(fd, 0);
      const base::Deadline deadline(1s);
      if (store_test::challenged(fd, deadline)) {
        store_test::send_bytes(fd, garbage.data(), garbage.size());
        std::uint8_t byte;
        EXPECT_NE(base::read_exact(fd, &byte, 1, deadline), base::IoResult::ok)
            << "a bad handshake got an answer";
      }
      ::close(fd);
    }
  }
  for (int fd : idle) ::close(fd);
  EXPECT_GT(bad_handshakes, 0);
  control.set("flood over", std::string("1"));
}

// Builds a new client, and a communicator on it, for each round: every round connects during
// the flood (its client, and its health monitor's clone).
void job(int rank, std::uint16_t port) {
  for (int round = 0; round < 3; ++round) {
    auto fresh = std::make_shared<TcpStore>("127.0.0.1", port, 60s, kSecret);
    auto store = std::make_shared<PrefixStore>("round" + std::to_string(round), fresh);
    Options options;
    options.timeout = 60s;
    Communicator comm(store, rank, kJobRanks, options);
    std::vector<float> x(4096, static_cast<float>(rank + 1 + round));
    comm.all_reduce(x.data(), x.size(), DataType::f32, ReduceOp::sum);
    const float expected = 10.0f + 4.0f * static_cast<float>(round);
    for (float v : x) ASSERT_EQ(v, expected) << "round " << round;
  }
}

TEST(StoreServer, AFourRankJobFinishesWhileAStrangerFloodsItsStore) {
  testing::RunOptions options;
  options.timeout = 150s;
  testing::run_ranks_raw(
      kJobRanks + 1,
      [](RankContext& ctx) {
        Store& control = *ctx.store;
        std::unique_ptr<StoreServer> server;
        if (ctx.rank == 0) {
          const rlimit usual{1024, 1024};
          ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &usual), 0);
          server = std::make_unique<StoreServer>("127.0.0.1", 0, kSecret);
          control.set("port", std::to_string(server->port()));
        }
        const auto port = static_cast<std::uint16_t>(std::stoi(control.get_string("port", 30s)));
        if (ctx.rank == kJobRanks) return flood(port, control);
        control.wait({"flooding"}, 60s);
        job(ctx.rank, port);
        control.set("finished/" + std::to_string(ctx.rank), std::string("1"));
        if (ctx.rank == 0) {  // the server stays up until the stranger is done with it
          control.wait({"finished/0", "finished/1", "finished/2", "finished/3"}, 90s);
          control.set("job over", std::string("1"));
          control.wait({"flood over"}, 30s);
        }
      },
      options);
}

}  // namespace
}  // namespace loom
