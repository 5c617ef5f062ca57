// The routing of the transport table on its own, with transports that only say they were asked:
// the first route that reaches a peer carries it, in the order given; TCP takes the rest; device
// buffers ask the device routes first and fall back to the host routes; an abort reaches every
// transport; every route waits for its peers by serving TCP's connecting peers.
#include "transports/transport_table.hpp"

#include <gtest/gtest.h>

#include <string>

#include "base/deadline.hpp"
#include "base/halt.hpp"

namespace loom::transport {
namespace {

// What connect() threw: which transport was asked, for which peer.
struct Asked {
  std::string name;
  int peer;
};

class Named final : public Transport {
 public:
  Named(std::string name, TransportKind kind, int* aborts, int* served = nullptr)
      : name_(std::move(name)), kind_(kind), aborts_(aborts), served_(served) {}
  TransportKind kind_to(int) const override { return kind_; }
  Connection& connect(int peer, const base::Deadline&, const base::Halt&) override {
    throw Asked{name_, peer};
  }
  void abort() override { ++*aborts_; }
  void serve_connecting_peers(int) override {
    if (served_) ++*served_;
  }
  void set_connect_wait(std::function<void(int)> wait) override { wait_ = std::move(wait); }
  void wait_for_a_peer() { wait_(1); }

 private:
  std::string name_;
  TransportKind kind_;
  int* aborts_;
  int* served_;
  std::function<void(int)> wait_ = [](int) {};
};

struct TransportTableTest : ::testing::Test {
  int aborts = 0, served = 0;
  Named* shm = nullptr;
  std::unique_ptr<TransportTable> table;
  base::Halt halt;

  // 5 ranks, this one 0: shm reaches 1 and 2, rdma 3 and (also) 2, device memory 1; tcp the rest.
  void SetUp() override {
    auto shm_t = std::make_unique<Named>("shm", TransportKind::shm, &aborts);
    shm = shm_t.get();
    std::vector<TransportTable::Route> routes;
    routes.push_back({std::move(shm_t), {false, true, true, false, false}});
    routes.push_back({std::make_unique<Named>("rdma", TransportKind::ibverbs, &aborts),
                      {false, false, true, true, false}});
    routes.push_back({std::make_unique<Named>("ipc", TransportKind::cudaipc, &aborts),
                      {false, true, false, false, false},
                      TransportTable::Buffers::device});
    table = std::make_unique<TransportTable>(
        std::make_unique<Named>("tcp", TransportKind::tcp, &aborts, &served), std::move(routes));
  }
  std::string host(int peer) { return asked(peer, false); }
  std::string device(int peer) { return asked(peer, true); }
  std::string asked(int peer, bool on_device) {
    const base::Deadline deadline(std::chrono::seconds(1));
    try {
      if (on_device)
        table->connect_device(peer, deadline, halt);
      else
        table->connect(peer, deadline, halt);
    } catch (const Asked& a) {
      EXPECT_EQ(a.peer, peer);
      return a.name;
    }
    return "none";
  }
};

TEST_F(TransportTableTest, TheFirstRouteThatReachesAPeerCarriesItAndTcpTheRest) {
  EXPECT_EQ(host(1), "shm");
  EXPECT_EQ(host(2), "shm");  // ahead of rdma, which reaches it too
  EXPECT_EQ(host(3), "rdma");
  EXPECT_EQ(host(4), "tcp");
  EXPECT_EQ(table->kind_to(2), TransportKind::shm);
  EXPECT_EQ(table->kind_to(3), TransportKind::ibverbs);
  EXPECT_EQ(table->kind_to(4), TransportKind::tcp);
  EXPECT_EQ(table->kind_to(1), TransportKind::shm);  // host buffers never take the device route
}

TEST_F(TransportTableTest, DeviceBuffersAskTheDeviceRoutesFirstThenTheHostRoutes) {
  EXPECT_EQ(device(1), "ipc");
  EXPECT_EQ(device(2), "shm");
  EXPECT_EQ(device(3), "rdma");
  EXPECT_EQ(device(4), "tcp");
}

TEST_F(TransportTableTest, AnAbortReachesEveryTransportAndRoutesWaitByServingTcp) {
  table->abort();
  EXPECT_EQ(aborts, 4);
  shm->wait_for_a_peer();
  EXPECT_EQ(served, 1);
  table->serve_connecting_peers(1);
  EXPECT_EQ(served, 2);
}

}  // namespace
}  // namespace loom::transport
