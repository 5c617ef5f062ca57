// The contract of transport.hpp, checked the same way over every transport of this machine: a
// connection is a FIFO of slots (and, where it has one, an inline FIFO) that delivers every size
// in order with its tag, raises PeerError when the peer dies, and wakes a sleeper when the peer
// posts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../support/ranks.hpp"
#include "../support/transports.hpp"
#include "base/config.hpp"
#include "base/deadline.hpp"
#include "base/halt.hpp"
#include "transports/shm/shm_transport.hpp"
#include "transports/tcp/tcp_transport.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using testing::RankContext;
using transport::Connection;
using transport::Tag;

constexpr std::uint64_t kToken = 0x70c0ffee;

base::LinkConfig small_config() {
  base::LinkConfig c;
  c.buffer_bytes = 64 << 10;
  c.slots = 4;
  c.sockets_per_peer = 1;
  return c;
}

// Both ranks' transports of one kind, built as the communicator builds them.
std::unique_ptr<transport::Transport> make(const std::string& kind, RankContext& ctx) {
  const base::LinkConfig config = small_config();
  const base::Pacing pacing;
  if (kind == "tcp")
    return std::make_unique<transport::tcp::TcpTransport>(
        transport::Setup{*ctx.store, ctx.rank, ctx.size, kToken, config, pacing}, "127.0.0.1");
  ctx.store->set("pid/" + std::to_string(ctx.rank), std::to_string(::getpid()));
  std::vector<int> pids;
  for (int r = 0; r < ctx.size; ++r)
    pids.push_back(std::stoi(ctx.store->get_string("pid/" + std::to_string(r), 30s)));
  return std::make_unique<transport::shm::ShmTransport>(
      transport::Setup{*ctx.store, ctx.rank, ctx.size, kToken, config, pacing}, pids);
}

std::byte pattern(std::size_t message, std::size_t i) {
  return static_cast<std::byte>((message * 31 + i) % 251);
}

// Drives the connection until `ready` holds; fails the test at the deadline instead of hanging.
template <typename Ready>
void drive(Connection& c, Ready&& ready, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!ready()) {
    if (c.progress()) continue;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "waited 10 s for " << what;
    c.prepare_sleep();
    if (!ready()) c.sleep(5);
  }
}

class TransportContract : public ::testing::TestWithParam<std::string> {};

TEST_P(TransportContract, DeliversEverySizeInOrderWithItsTagThroughMoreMessagesThanSlots) {
  testing::run_ranks_raw(2, [](RankContext& ctx) {
    auto t = make(GetParam(), ctx);
    base::Halt halt;
    Connection& c = t->connect(1 - ctx.rank, base::Deadline(30s), halt);
    const std::size_t slot = c.slot_bytes();
    ASSERT_GT(slot, 0u);
    std::vector<std::size_t> sizes = {0, 1, 7, slot - 1, slot};
    for (int i = 0; i < 12; ++i) sizes.push_back((static_cast<std::size_t>(i) * 4099) % slot);
    if (ctx.rank == 0) {
      for (std::size_t m = 0; m < sizes.size(); ++m) {
        std::byte* p = nullptr;
        drive(
            c, [&] { return (p = c.try_acquire_send_slot()) != nullptr; }, "a send slot");
        EXPECT_EQ(c.try_acquire_send_slot(), p) << "acquiring again before posting moved on";
        for (std::size_t i = 0; i < sizes[m]; ++i) p[i] = pattern(m, i);
        c.post_send(sizes[m], Tag{m, sizes[m]});
      }
      drive(
          c, [&] { return c.send_idle(); }, "the sends to be handed over");
      ctx.store->get("received", 30s);  // the peer has read everything before this side closes
      return;
    }
    for (std::size_t m = 0; m < sizes.size(); ++m) {
      std::optional<transport::RecvSlot> s;
      drive(
          c, [&] { return (s = c.try_recv_slot()).has_value(); }, "a message");
      ASSERT_TRUE(s.has_value());
      ASSERT_EQ(s->bytes, sizes[m]) << "message " << m;
      EXPECT_EQ(s->tag, (Tag{m, sizes[m]})) << "message " << m;
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < s->bytes; ++i) wrong += s->data[i] != pattern(m, i);
      EXPECT_EQ(wrong, 0u) << "message " << m << " of " << sizes[m] << " bytes";
      c.release_recv_slot();
    }
    ctx.store->set("received", std::string("1"));
  });
}

TEST_P(TransportContract, TheInlineChannelKeepsItsOwnOrderBesideTheSlots) {
  testing::run_ranks_raw(2, [](RankContext& ctx) {
    auto t = make(GetParam(), ctx);
    base::Halt halt;
    Connection& c = t->connect(1 - ctx.rank, base::Deadline(30s), halt);
    if (c.inline_capacity() == 0) {
      EXPECT_THROW(c.release_inline(), std::logic_error);
      return;  // this transport has none: the engine never uses it
    }
    // Few enough that neither FIFO fills while the receiver drains the other one first.
    constexpr std::size_t kMessages = 6;
    if (ctx.rank == 0) {
      for (std::size_t m = 0; m < kMessages; ++m) {
        const bool small = m % 2 == 0;
        std::byte* p = nullptr;
        drive(
            c,
            [&] {
              return (p = small ? c.try_acquire_inline() : c.try_acquire_send_slot()) != nullptr;
            },
            "room to send");
        ASSERT_NE(p, nullptr);
        const std::size_t bytes = small ? c.inline_capacity() : 100;
        std::memset(p, static_cast<int>(m), bytes);
        small ? c.post_inline(bytes, Tag{m, bytes}) : c.post_send(bytes, Tag{m, bytes});
      }
      drive(
          c, [&] { return c.send_idle(); }, "the sends to be handed over");
      ctx.store->get("received", 30s);
      return;
    }
    for (std::size_t m = 0; m < kMessages; m += 2) {  // every inline message first, in order
      std::optional<transport::RecvSlot> s;
      drive(
          c, [&] { return (s = c.try_recv_inline()).has_value(); }, "an inline message");
      EXPECT_EQ(s->tag.word, m);
      EXPECT_EQ(s->bytes, c.inline_capacity());
      EXPECT_EQ(s->data[s->bytes - 1], static_cast<std::byte>(m));
      c.release_inline();
    }
    for (std::size_t m = 1; m < kMessages; m += 2) {
      std::optional<transport::RecvSlot> s;
      drive(
          c, [&] { return (s = c.try_recv_slot()).has_value(); }, "a slot message");
      EXPECT_EQ(s->tag.word, m);
      EXPECT_EQ(s->data[99], static_cast<std::byte>(m));
      c.release_recv_slot();
    }
    ctx.store->set("received", std::string("1"));
  });
}

TEST_P(TransportContract, APeerThatDiesIsAPeerErrorWithinSeconds) {
  testing::RunOptions opts;
  opts.may_die = {1};
  testing::run_ranks_raw(
      2,
      [](RankContext& ctx) {
        auto t = make(GetParam(), ctx);
        base::Halt halt;
        Connection& c = t->connect(1 - ctx.rank, base::Deadline(30s), halt);
        if (ctx.rank == 1) {
          ctx.store->add("done", 1);  // the harness's count of finished ranks
          ::_exit(0);                 // no destructor runs: as a crash leaves it
        }
        const auto start = std::chrono::steady_clock::now();
        try {
          for (;;) {
            if (c.try_recv_slot()) c.release_recv_slot();
            if (!c.progress()) {
              c.prepare_sleep();
              c.sleep(5);
            }
            ASSERT_LT(std::chrono::steady_clock::now() - start, 10s) << "the dead peer went unseen";
          }
        } catch (const PeerError& e) {
          EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << e.what();
          EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
        }
      },
      opts);
}

TEST_P(TransportContract, ASleeperWakesWhenThePeerPosts) {
  testing::run_ranks_raw(2, [](RankContext& ctx) {
    auto t = make(GetParam(), ctx);
    base::Halt halt;
    Connection& c = t->connect(1 - ctx.rank, base::Deadline(30s), halt);
    if (ctx.rank == 0) {
      ctx.store->get("sleeping", 30s);
      std::this_thread::sleep_for(100ms);
      std::byte* p = nullptr;
      drive(
          c, [&] { return (p = c.try_acquire_send_slot()) != nullptr; }, "a send slot");
      c.post_send(8, Tag{1, 8});
      drive(
          c, [&] { return c.send_idle(); }, "the send to be handed over");
      ctx.store->get("received", 30s);
      return;
    }
    c.prepare_sleep();
    ASSERT_FALSE(c.try_recv_slot().has_value());
    ctx.store->set("sleeping", std::string("1"));
    const auto start = std::chrono::steady_clock::now();
    c.sleep(10000);  // the post must end it long before its timeout
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    drive(
        c, [&] { return c.try_recv_slot().has_value(); }, "the message");
    c.release_recv_slot();
    ctx.store->set("received", std::string("1"));
  });
}

// Another thread of the rank ends its sleep on a connection (a send or receive joining the
// worker's batch): a sleep already begun, and one that begins after the wake (it returns at
// once). TCP's own sleep cannot be ended so (sleep_wakeable() is false): a batch's waiter sleeps
// in poll() instead, where the eventfd of algorithms/batch_wake.hpp wakes it.
TEST_P(TransportContract, AnotherThreadOfTheRankEndsItsSleep) {
  if (GetParam() == std::string("tcp"))
    GTEST_SKIP() << "tcp's sleep cannot be ended from another thread; a batch's waiter polls its "
                    "descriptors and BatchWake's eventfd instead (BatchWake's own test)";
  testing::run_ranks_raw(2, [](RankContext& ctx) {
    auto t = make(GetParam(), ctx);
    base::Halt halt;
    Connection& c = t->connect(1 - ctx.rank, base::Deadline(30s), halt);
    if (ctx.rank == 0) {
      ctx.store->get("woken", 30s);
      return;
    }
    c.prepare_sleep();
    std::thread other([&] {
      std::this_thread::sleep_for(100ms);
      c.wake_sleep();
    });
    auto start = std::chrono::steady_clock::now();
    c.sleep(20000);  // the wake must end it long before its timeout
    other.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
    c.prepare_sleep();
    c.wake_sleep();
    start = std::chrono::steady_clock::now();
    c.sleep(20000);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
    ctx.store->set("woken", std::string("1"));
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportContract, loom::testing::transports(),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace loom
