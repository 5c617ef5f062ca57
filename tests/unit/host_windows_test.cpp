// A peer's range in a shared window comes from the peer's message: it must lie in the window the
// peer shared, compared without a sum that could wrap, and hold what the call touches.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "base/shared_file.hpp"
#include "core/host_windows.hpp"
#include "loom/loom.hpp"

namespace loom::core {
namespace {

// The range a peer sends: window number, offset and size (HostWindows' encoding).
algorithms::PeerMemory::Range range(std::uint64_t window, std::uint64_t offset,
                                    std::uint64_t bytes) {
  algorithms::PeerMemory::Range r;
  const std::uint64_t words[3] = {window, offset, bytes};
  std::memcpy(r.bytes.data(), words, sizeof words);
  return r;
}

class Windows : public ::testing::Test {
 protected:
  void SetUp() override {
    int err = 0;
    std::vector<base::SharedFile> peers(2);
    peers[1] = base::SharedFile::create(4096, &err);  // stands for rank 1's window, mapped here
    ASSERT_TRUE(peers[1].valid()) << err;
    auto own = std::make_shared<base::SharedFile>(base::SharedFile::create(4096, &err));
    ASSERT_TRUE(own->valid()) << err;
    windows_.add(0, HostWindows::Window{own, std::move(peers)});
  }
  HostWindows windows_{2, ""};
};

// The engine asks any() before it offers the windows to a call's dispatch: false until a shared
// window is added (a window no peer mapped does not count), then true for good.
TEST(WindowsShared, OnlyAWindowThePeersMappedCountsAndItCountsForGood) {
  int err = 0;
  HostWindows windows(2, "");
  EXPECT_FALSE(windows.any());
  auto alone = std::make_shared<base::SharedFile>(base::SharedFile::create(4096, &err));
  ASSERT_TRUE(alone->valid()) << err;
  windows.add(0, HostWindows::Window{alone, {}});
  EXPECT_FALSE(windows.any());
  std::vector<base::SharedFile> peers(2);
  peers[1] = base::SharedFile::create(4096, &err);
  auto own = std::make_shared<base::SharedFile>(base::SharedFile::create(4096, &err));
  ASSERT_TRUE(peers[1].valid() && own->valid()) << err;
  windows.add(1, HostWindows::Window{own, std::move(peers)});
  EXPECT_TRUE(windows.any());
  windows.remove(1);
  EXPECT_TRUE(windows.any());
  EXPECT_EQ(windows.next_number(), 0u);
  EXPECT_EQ(windows.next_number(), 1u);
  EXPECT_EQ(HostWindows(1, "one rank").why_not_shared(), "one rank");
}

TEST_F(Windows, ARangeInsideTheWindowMaps) {
  EXPECT_NE(windows_.map(1, range(0, 1024, 2048), 2048), nullptr);
  EXPECT_NE(windows_.map(1, range(0, 0, 4096), 100), nullptr);
}

TEST_F(Windows, AnOffsetWhoseSumWithTheSizeWrapsIsRefused) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  // offset + bytes = 16 modulo 2^64: inside the window by the sum, far outside by the offset.
  EXPECT_THROW(windows_.map(1, range(0, kMax - 15, 32), 32), PeerError);
  EXPECT_THROW(windows_.map(1, range(0, 8, kMax - 3), 16), PeerError);
}

TEST_F(Windows, ARangeSmallerThanWhatTheCallTouchesIsRefused) {
  EXPECT_THROW(windows_.map(1, range(0, 0, 64), 65), PeerError);
  EXPECT_THROW(windows_.map(1, range(0, 4000, 97), 97), PeerError);  // past the window's end
  EXPECT_THROW(windows_.map(1, range(7, 0, 64), 64), PeerError);     // no such window
  EXPECT_THROW(windows_.map(0, range(0, 0, 64), 64), PeerError);     // this rank: none mapped
}

}  // namespace
}  // namespace loom::core
