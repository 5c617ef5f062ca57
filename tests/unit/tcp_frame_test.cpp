// The TCP frame layout: every frame is a whole number of 64-byte lines, and a payload lies in the
// stream at its source's offset in a line (one that fits the first line with the header follows
// it at once), so that the kernel's copies into and out of its pages keep source and destination
// in step; a slot receives a payload at that offset too. The raw stream is read off a socketpair.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "loom/loom.hpp"
#include "transports/tcp/tcp_connection.hpp"

namespace loom::transport::tcp {
namespace {

constexpr std::size_t kSlotBytes = 64 << 10;
constexpr int kSlots = 4;

struct Pair {
  int fds[2] = {-1, -1};
  Pair() {
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::abort();
    int big = 1 << 20;
    ::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    ::setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  }
  ~Pair() {
    if (fds[1] >= 0) ::close(fds[1]);
  }
};

// A source of `bytes` at `offset` bytes past a page, filled with a pattern.
struct Source {
  explicit Source(std::size_t bytes, std::size_t offset, unsigned seed)
      : base(static_cast<std::byte*>(std::aligned_alloc(4096, 2 * 4096 + bytes / 4096 * 4096))),
        data(base + offset),
        size(bytes) {
    for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::byte>((i * 7 + seed) & 0xff);
  }
  ~Source() { std::free(base); }
  std::byte* base;
  std::byte* data;
  std::size_t size;
};

// Everything the peer wrote so far.
std::vector<std::byte> drain(int fd) {
  std::vector<std::byte> out;
  std::byte buf[1 << 16];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  return out;
}

TEST(TcpFrame, FramesAreWholeLinesAndPayloadsLieAtTheirSourcesOffsetInALine) {
  Pair pair;
  TcpConnection conn(0, 1, {pair.fds[0]}, kSlotBytes, kSlots, kSlotBytes, "peer");
  struct Case {
    std::size_t bytes, offset;
  };
  const std::vector<Case> cases = {{0, 0},       {1, 16},     {40, 0},        {41, 16},
                                   {41, 0},      {100, 17},   {4096, 16},     {4096, 0},
                                   {4096, 24},   {65536, 63}, {12345, 4000},  {kSlotBytes, 8},
                                   {3000, 4095}, {64, 40},    {kSlotBytes, 0}};
  std::size_t at = 0;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const Source src(cases[k].bytes, cases[k].offset, static_cast<unsigned>(k));
    ASSERT_NE(conn.try_acquire_send_slot(), nullptr);
    conn.post_send_from(src.data, src.size, Tag{k, 1});
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!conn.send_idle() && std::chrono::steady_clock::now() < until) conn.progress();
    ASSERT_TRUE(conn.send_idle());
    const std::vector<std::byte> stream = drain(pair.fds[1]);
    SCOPED_TRACE(testing::Message()
                 << cases[k].bytes << " bytes from " << cases[k].offset << " past a page");
    ASSERT_GE(stream.size(), sizeof(FrameHeader));
    FrameHeader h;
    std::memcpy(&h, stream.data(), sizeof h);
    ASSERT_TRUE(frame_header_valid(h, kSlotBytes));
    ASSERT_EQ(h.bytes, cases[k].bytes);
    EXPECT_EQ(h.tag_word, k);
    const std::size_t head = sizeof(FrameHeader) + frame_lead(h);
    ASSERT_EQ(stream.size(), head + h.bytes + frame_tail(frame_lead(h), h.bytes));
    EXPECT_EQ(stream.size() % kFrameAlign, 0u);
    // The frame starts on a line of the stream (every frame before it is whole lines).
    EXPECT_EQ(at % kFrameAlign, 0u);
    if (cases[k].bytes <= kFrameAlign - sizeof(FrameHeader))
      EXPECT_EQ(head, sizeof(FrameHeader));  // read with the header, in one call
    else
      EXPECT_EQ(head % kFrameAlign, cases[k].offset % kFrameAlign);
    EXPECT_EQ(std::memcmp(stream.data() + head, src.data, src.size), 0);
    for (std::size_t i = sizeof(FrameHeader); i < head; ++i) EXPECT_EQ(stream[i], std::byte{0});
    at += stream.size();
  }
}

TEST(TcpFrame, ASlotReceivesAPayloadAtItsSourcesOffsetInALine) {
  Pair pair;
  TcpConnection sender(0, 1, {pair.fds[0]}, kSlotBytes, kSlots, kSlotBytes, "b");
  pair.fds[0] = -1;
  TcpConnection receiver(1, 0, {pair.fds[1]}, kSlotBytes, kSlots, kSlotBytes, "a");
  pair.fds[1] = -1;
  for (std::size_t offset : {0u, 8u, 16u, 33u, 63u, 64u, 100u, 4000u}) {
    SCOPED_TRACE(testing::Message() << "source " << offset << " bytes past a page");
    const Source src(20000, offset, static_cast<unsigned>(offset));
    ASSERT_NE(sender.try_acquire_send_slot(), nullptr);
    sender.post_send_from(src.data, src.size, Tag{offset, 2});
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::optional<RecvSlot> slot;
    while (!(slot = receiver.try_recv_slot()) && std::chrono::steady_clock::now() < until) {
      sender.progress();
      receiver.progress();
    }
    ASSERT_TRUE(slot.has_value());
    ASSERT_EQ(slot->bytes, src.size);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(slot->data) % kFrameAlign, offset % kFrameAlign);
    EXPECT_EQ(std::memcmp(slot->data, src.data, src.size), 0);
    receiver.release_recv_slot();
  }
}

TEST(TcpFrame, AHeaderWhoseLeadIsNotWithinALineIsRefused) {
  FrameHeader h{100, (100u ^ kFrameMagic) + 63u, 0, 0};
  EXPECT_TRUE(frame_header_valid(h, kSlotBytes));
  EXPECT_EQ(frame_lead(h), 63u);
  h.check = (100u ^ kFrameMagic) + 64u;
  EXPECT_FALSE(frame_header_valid(h, kSlotBytes));
  h.check = (100u ^ kFrameMagic) - 1u;
  EXPECT_FALSE(frame_header_valid(h, kSlotBytes));
  // And a stream carrying one is a PeerError, not a slot.
  Pair pair;
  TcpConnection receiver(1, 0, {pair.fds[0]}, kSlotBytes, kSlots, kSlotBytes, "a");
  pair.fds[0] = -1;
  std::byte line[kFrameAlign] = {};
  std::memcpy(line, &h, sizeof h);
  ASSERT_EQ(::send(pair.fds[1], line, sizeof line, 0), static_cast<ssize_t>(sizeof line));
  EXPECT_THROW(
      {
        for (int i = 0; i < 100; ++i) receiver.progress();
      },
      PeerError);
}

}  // namespace
}  // namespace loom::transport::tcp
