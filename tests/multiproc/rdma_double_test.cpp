// The communicator's RDMA path on a machine without an RDMA device: a double stands in for the
// port and its transport (core/rdma_factory.hpp), a TCP transport in a key space of its own that
// reports itself as ibverbs. Two ranks on two pretend hosts (LOOM_HOST_ID) reach each other
// through it, in the communicator and in the children of split and shrink.
//
// The verbs transport took the job token that seals its connection records from the store's
// `communicator/job_token`, which only a top-level communicator writes: in every child it waited
// for the whole LOOM_TIMEOUT, then the child ran without RDMA (and every split and shrink on an
// RDMA host took LOOM_TIMEOUT). The transport now gets the communicator's own token.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../support/ranks.hpp"
#include "core/rdma_factory.hpp"
#include "loom/store.hpp"
#include "transports/tcp/tcp_transport.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The tokens the double's transports were made with, in order (this process).
std::vector<std::uint64_t> tokens;
// Makes the double refuse (as a port that cannot be opened) from the n-th transport on; -1: never.
int refuse_from = -1;

class RdmaDouble final : public transport::Transport {
 public:
  // A TCP transport in a key space of its own, made as the real one is (transports/setup.hpp).
  explicit RdmaDouble(const transport::Setup& setup)
      : store_(std::make_shared<PrefixStore>("rdma-double",
                                             std::shared_ptr<Store>(&setup.store, [](Store*) {}))),
        tcp_({*store_, setup.rank, setup.size, setup.token, setup.link, setup.pacing},
             "127.0.0.1") {}
  transport::TransportKind kind_to(int) const override { return transport::TransportKind::ibverbs; }
  transport::Connection& connect(int peer, const base::Deadline& deadline,
                                 const base::Halt& halt) override {
    return tcp_.connect(peer, deadline, halt);
  }
  void abort() override { tcp_.abort(); }
  void serve_connecting_peers(int timeout_ms) override { tcp_.serve_connecting_peers(timeout_ms); }

 private:
  std::shared_ptr<Store> store_;
  transport::tcp::TcpTransport tcp_;
};

void install_double() {
  core::RdmaFactory factory;
  factory.choose_port = [](std::string& why) {
    why = "the test's double";
    transport::ibverbs::PortChoice port;
    port.device = "double0";
    return std::optional<transport::ibverbs::PortChoice>(port);
  };
  factory.make =
      [](const transport::Setup& setup,
         const transport::ibverbs::PortChoice&) -> std::unique_ptr<transport::Transport> {
    if (refuse_from >= 0 && static_cast<int>(tokens.size()) >= refuse_from)
      throw Error("double0: cannot open the device (the test's refusal)");
    tokens.push_back(setup.token);
    return std::make_unique<RdmaDouble>(setup);
  };
  core::set_rdma_factory(std::move(factory));
}

testing::RunOptions two_hosts() {
  testing::RunOptions run;
  run.options.timeout = 60s;  // what a child's wait for a token that never comes would take
  run.timeout = 180s;
  run.host_id = [](int rank, int) { return "pretend-host-" + std::to_string(rank); };
  return run;
}

std::int64_t sum_over(Communicator& comm, std::int64_t mine) {
  std::int64_t total = 0;
  comm.all_reduce(&mine, &total, 1, DataType::i64, ReduceOp::sum);
  return total;
}

// The child's token is the same on both members, and not the parent's.
void expect_own_token(Communicator& child, std::uint64_t parent) {
  ASSERT_FALSE(tokens.empty());
  const std::uint64_t mine = tokens.back();
  std::uint64_t both[2] = {0, 0};
  child.all_gather(&mine, both, 1, DataType::u64);
  EXPECT_EQ(both[0], both[1]) << "the members sealed their records under different tokens";
  EXPECT_NE(mine, parent);
}

TEST(RdmaDouble, SplitAndShrinkOpenRdmaAtOnceWithTheChildsOwnToken) {
  testing::RunOptions run = two_hosts();
  run.options.transport = "auto";
  // Installed in each rank's process before its communicator (the harness forks first).
  const auto body = [](Communicator& comm) {
    ASSERT_EQ(tokens.size(), 1u) << "the communicator made no RDMA transport";
    const std::uint64_t parent = tokens[0];
    EXPECT_NE(comm.describe().find("ibverbs to rank(s)"), std::string::npos) << comm.describe();
    EXPECT_EQ(sum_over(comm, comm.rank() + 1), 3);

    auto started = Clock::now();
    auto child = comm.split(0, comm.rank());
    ASSERT_TRUE(child);
    EXPECT_LT(Clock::now() - started, 10s) << "split waited for a job token";
    ASSERT_EQ(tokens.size(), 2u) << "the child made no RDMA transport";
    EXPECT_NE(child->describe().find("ibverbs to rank(s)"), std::string::npos) << child->describe();
    EXPECT_EQ(sum_over(*child, 10), 20);
    expect_own_token(*child, parent);

    started = Clock::now();
    Communicator shrunk = comm.shrink();
    EXPECT_LT(Clock::now() - started, 10s) << "shrink waited for a job token";
    ASSERT_EQ(tokens.size(), 3u) << "the shrink's communicator made no RDMA transport";
    EXPECT_NE(shrunk.describe().find("ibverbs to rank(s)"), std::string::npos) << shrunk.describe();
    EXPECT_EQ(sum_over(shrunk, 100), 200);
    expect_own_token(shrunk, parent);
  };
  testing::run_ranks_raw(
      2,
      [&](testing::RankContext& ctx) {
        install_double();
        ::setenv("LOOM_HOST_ID", run.host_id(ctx.rank, ctx.size).c_str(), 1);
        Communicator comm(ctx.store, ctx.rank, ctx.size, run.options);
        body(comm);
      },
      run);
}

// A member that cannot open RDMA for its child, where the parent used it, fails its part of the
// child: its peer, which reaches it by RDMA, learns so at once. It went on by TCP to that peer,
// and the peer waited for it on RDMA until LOOM_TIMEOUT.
TEST(RdmaDouble, AMemberWhoseChildCannotOpenRdmaFailsItsPeersAtOnce) {
  testing::RunOptions run = two_hosts();
  run.options.transport = "auto";
  testing::run_ranks_raw(
      2,
      [&](testing::RankContext& ctx) {
        install_double();
        if (ctx.rank == 1) refuse_from = 1;  // the parent's transport opens, the child's not
        ::setenv("LOOM_HOST_ID", run.host_id(ctx.rank, ctx.size).c_str(), 1);
        Communicator comm(ctx.store, ctx.rank, ctx.size, run.options);
        EXPECT_EQ(sum_over(comm, 1), 2);
        if (ctx.rank == 1) {
          try {
            comm.split(0, ctx.rank);
            ADD_FAILURE() << "the child was built without RDMA";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("the child cannot"), std::string::npos)
                << e.what();
          }
          ctx.store->wait({"peer-failed"}, 120s);
          return;
        }
        auto child = comm.split(0, ctx.rank);
        ASSERT_TRUE(child);
        const auto started = Clock::now();
        try {
          sum_over(*child, 1);
          ADD_FAILURE() << "a call completed without rank 1";
        } catch (const PeerError& e) {
          EXPECT_EQ(e.peer(), 1) << e.what();
        }
        EXPECT_LT(Clock::now() - started, 10s);
        ctx.store->set("peer-failed", std::string("1"));
      },
      run);
}

}  // namespace
}  // namespace loom
