// A TCP connection moving caller memory: a send read straight from the caller's buffer, a receive
// written straight into it, and the cases where it must not be: another call's message, a message
// already partly in its slot, a call ending early (settle_sends, unsteer). And the slot buffers:
// the one freed last is taken next, and frames are read ahead only up to the budget.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "transports/tcp/tcp_connection.hpp"

namespace loom::transport::tcp {
namespace {

constexpr std::size_t kSlotBytes = 64 << 10;
constexpr int kSlots = 4;
constexpr std::size_t kReadahead = kSlotBytes;

std::vector<std::byte> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return v;
}

class TcpCallerMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    a_fd_ = fds[0];
    a_ = std::make_unique<TcpConnection>(0, 1, std::vector<int>{fds[0]}, kSlotBytes, kSlots,
                                         kReadahead, "a");
    b_ = std::make_unique<TcpConnection>(1, 0, std::vector<int>{fds[1]}, kSlotBytes, kSlots,
                                         kReadahead, "b");
  }
  // The sender's socket holds a few KiB: a message of a slot leaves it in pieces, so that one
  // progress() of the receiver reads only its first part.
  void narrow_sender() {
    int small = 4096;
    ASSERT_EQ(::setsockopt(a_fd_, SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  }
  // Progress on both ends until `done` holds (or a second passes).
  template <class Done>
  bool pump(Done done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (!done()) {
      if (std::chrono::steady_clock::now() > until) return false;
      a_->progress();
      b_->progress();
    }
    return true;
  }
  void send_from(const std::vector<std::byte>& src, Tag tag) {
    ASSERT_NE(a_->try_acquire_send_slot(), nullptr);
    a_->post_send_from(src.data(), src.size(), tag);
  }
  // The next message b receives: in its slot (not at `steered`), with exactly the bytes of `want`.
  void expect_next_in_slot(const std::vector<std::byte>& want, const std::byte* steered) {
    ASSERT_TRUE(pump([&] { return b_->try_recv_slot().has_value(); }));
    const auto slot = *b_->try_recv_slot();
    EXPECT_NE(slot.data, steered);
    ASSERT_EQ(slot.bytes, want.size());
    EXPECT_EQ(std::memcmp(slot.data, want.data(), want.size()), 0);
    b_->release_recv_slot();
  }
  int a_fd_ = -1;
  std::unique_ptr<TcpConnection> a_, b_;
};

TEST_F(TcpCallerMemory, AnExpectedMessageLandsInTheSteeredBufferAndNoSlot) {
  ASSERT_TRUE(b_->moves_caller_memory());
  const Tag tag{42, 7};
  const auto src = pattern(kSlotBytes, 1);
  std::vector<std::byte> dst(kSlotBytes);
  ASSERT_TRUE(b_->steer_recv(0, dst.data(), dst.size(), tag));
  send_from(src, tag);
  ASSERT_TRUE(pump([&] { return b_->try_recv_slot().has_value() && a_->send_idle(); }));
  const auto slot = *b_->try_recv_slot();
  EXPECT_EQ(slot.data, dst.data());
  EXPECT_EQ(slot.bytes, src.size());
  EXPECT_EQ(slot.tag, tag);
  EXPECT_EQ(dst, src);
  b_->release_recv_slot();
}

TEST_F(TcpCallerMemory, AnotherCallsMessageOrSizeArrivesInItsSlotAndLeavesTheBufferAlone) {
  const Tag expected{42, 7}, other{43, 7};
  std::vector<std::byte> dst(kSlotBytes, std::byte{0x5a});
  const auto untouched = dst;
  // Steered for slots 0 and 1: the first message has another tag, the second another size.
  ASSERT_TRUE(b_->steer_recv(0, dst.data(), dst.size(), expected));
  ASSERT_TRUE(b_->steer_recv(1, dst.data(), dst.size(), expected));
  const auto first = pattern(kSlotBytes, 2), second = pattern(kSlotBytes / 2, 3);
  send_from(first, other);
  send_from(second, expected);
  for (const auto* sent : {&first, &second})
    ASSERT_NO_FATAL_FAILURE(expect_next_in_slot(*sent, dst.data()));
  EXPECT_EQ(dst, untouched);
}

TEST_F(TcpCallerMemory, ASteerAfterThePayloadStartedIsDeclinedAndTheSlotKeepsTheMessage) {
  const Tag tag{1, 1};
  narrow_sender();
  const auto src = pattern(kSlotBytes, 4);
  send_from(src, tag);
  b_->progress();  // the header and the payload's first bytes, into the slot
  ASSERT_FALSE(b_->try_recv_slot().has_value());
  std::vector<std::byte> dst(kSlotBytes);
  EXPECT_TRUE(b_->steer_recv(0, dst.data(), dst.size(), tag));  // too late: declined
  expect_next_in_slot(src, dst.data());
}

TEST_F(TcpCallerMemory, BeyondTheReceiveWindowASteerIsRefusedUntilSlotsAreReleased) {
  std::vector<std::byte> dst(16);
  EXPECT_FALSE(b_->steer_recv(kSlots, dst.data(), dst.size(), Tag{1, 1}));
  EXPECT_TRUE(b_->steer_recv(kSlots - 1, dst.data(), dst.size(), Tag{1, 1}));
}

TEST_F(TcpCallerMemory, SettledSendsNoLongerReadTheCallersBuffer) {
  const Tag tag{9, 9};
  narrow_sender();  // most of the messages wait in user space
  std::vector<std::vector<std::byte>> sources;
  for (int k = 0; k < kSlots; ++k) sources.push_back(pattern(kSlotBytes, 10 + k));
  const auto expected = sources;
  for (auto& s : sources) send_from(s, tag);
  EXPECT_FALSE(a_->send_idle());
  a_->settle_sends();
  for (auto& s : sources) std::fill(s.begin(), s.end(), std::byte{0});  // the caller reuses them
  for (const auto& want : expected) ASSERT_NO_FATAL_FAILURE(expect_next_in_slot(want, nullptr));
}

TEST_F(TcpCallerMemory, UnsteeringMidPayloadFinishesTheMessageInItsSlotWithEveryByte) {
  const Tag tag{5, 5};
  narrow_sender();
  std::vector<std::byte> dst(kSlotBytes);
  ASSERT_TRUE(b_->steer_recv(0, dst.data(), dst.size(), tag));
  const auto src = pattern(kSlotBytes, 20);
  send_from(src, tag);
  b_->progress();  // the payload's first bytes, into dst
  ASSERT_FALSE(b_->try_recv_slot().has_value());
  ASSERT_EQ(dst[0], src[0]);
  b_->unsteer();  // the call ends (fails) here: dst is the caller's again
  std::fill(dst.begin(), dst.end(), std::byte{0});
  ASSERT_NO_FATAL_FAILURE(expect_next_in_slot(src, dst.data()));
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](std::byte x) { return x == std::byte{0}; }));
}

TEST_F(TcpCallerMemory, EachMessageTakesTheSlotBufferReleasedLast) {
  const Tag tag{3, 3};
  std::vector<const std::byte*> places;
  for (unsigned k = 0; k < 3; ++k) {
    const auto src = pattern(kSlotBytes / 2, 30 + k);
    ASSERT_NE(a_->try_acquire_send_slot(), nullptr);
    a_->post_send_from(src.data(), src.size(), tag);
    ASSERT_TRUE(pump([&] { return b_->try_recv_slot().has_value() && a_->send_idle(); }));
    const auto slot = *b_->try_recv_slot();
    ASSERT_EQ(slot.bytes, src.size());
    EXPECT_EQ(std::memcmp(slot.data, src.data(), src.size()), 0);
    // The buffer it lies in (a payload is placed at its source's offset in a 64-byte line).
    const auto at = reinterpret_cast<std::uintptr_t>(slot.data);
    places.push_back(reinterpret_cast<const std::byte*>(at - at % kFrameAlign));
    b_->release_recv_slot();
  }
  // One buffer, again and again, not a turn through all four.
  EXPECT_EQ(places[1], places[0]);
  EXPECT_EQ(places[2], places[0]);
  // The sender's slots too: the slot acquired after a message is written out is the same one.
  std::byte* first = a_->try_acquire_send_slot();
  ASSERT_NE(first, nullptr);
  a_->post_send(16, tag);
  ASSERT_TRUE(pump([&] { return a_->send_idle(); }));
  EXPECT_EQ(a_->try_acquire_send_slot(), first);
}

TEST_F(TcpCallerMemory, FramesAheadOfTheOldestStopAtTheBudgetAndFollowOnceItIsReleased) {
  const Tag tag{4, 4};
  const std::size_t bytes = kReadahead / 2;
  std::vector<std::vector<std::byte>> sources;
  for (unsigned k = 0; k < kSlots; ++k) sources.push_back(pattern(bytes, 40 + k));
  for (const auto& src : sources) send_from(src, tag);
  // Everything sent is in b's socket; b reads the oldest and, within the budget, the next one.
  ASSERT_TRUE(pump([&] { return a_->send_idle() && b_->try_recv_slot().has_value(); }));
  for (int k = 0; k < 100; ++k) b_->progress();
  // The third frame is beyond the budget, still in the kernel: it can be steered.
  std::vector<std::byte> dst(bytes);
  ASSERT_TRUE(b_->steer_recv(2, dst.data(), dst.size(), tag));
  for (unsigned k = 0; k < kSlots; ++k) {
    ASSERT_TRUE(pump([&] { return b_->try_recv_slot().has_value(); })) << "frame " << k;
    const auto slot = *b_->try_recv_slot();
    ASSERT_EQ(slot.bytes, bytes);
    EXPECT_EQ(std::memcmp(slot.data, sources[k].data(), bytes), 0) << "frame " << k;
    EXPECT_EQ(slot.data == dst.data(), k == 2) << "frame " << k;
    b_->release_recv_slot();
  }
}

}  // namespace
}  // namespace loom::transport::tcp
