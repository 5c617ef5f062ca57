// The InfiniBand transport's logic that needs no RDMA device: connection records, the
// registration cache, the slot credits, and the choice of port where there is none.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <random>
#include <set>

#include "transports/ibverbs/connection_record.hpp"
#include "transports/ibverbs/ib_device.hpp"
#include "transports/ibverbs/registration_cache.hpp"
#include "transports/ibverbs/slot_credits.hpp"

namespace loom::transport::ibverbs {
namespace {

ConnectionRecord sample(bool ethernet) {
  ConnectionRecord r;
  r.lid = ethernet ? 0 : 0x1234;
  r.ethernet = ethernet;
  for (std::size_t i = 0; i < 16; ++i) r.gid[i] = static_cast<std::uint8_t>(ethernet ? i + 1 : 0);
  r.qpn = 0xabcde;
  r.psn = 0x654321;
  r.mtu = 5;
  r.slots_addr = 0x7f00'1234'5000;
  r.slots_rkey = 0xdeadbeef;
  r.slot_stride = 512 * 1024 + 64;
  r.slots = 8;
  return r;
}

TEST(IbConnectionRecord, RoundTripsForInfiniBandAndRoce) {
  for (bool ethernet : {false, true}) {
    const ConnectionRecord r = sample(ethernet);
    std::string why;
    auto back = decode(encode(r), &why);
    ASSERT_TRUE(back) << why;
    EXPECT_EQ(*back, r);
  }
}

TEST(IbConnectionRecord, RefusesMalformedRecords) {
  std::string why;
  const std::string good = encode(sample(false));
  EXPECT_FALSE(decode(good.substr(0, good.size() - 1), &why));
  EXPECT_NE(why.find("bytes"), std::string::npos) << why;
  std::string bad = good;
  bad[0] ^= 1;
  EXPECT_FALSE(decode(bad, &why));
  EXPECT_NE(why.find("magic"), std::string::npos) << why;
  bad = good;
  bad[4] = 9;
  EXPECT_FALSE(decode(bad, &why));
  EXPECT_NE(why.find("version"), std::string::npos) << why;
  auto with = [](auto change) {
    ConnectionRecord r = sample(false);
    change(r);
    return encode(r);
  };
  EXPECT_FALSE(decode(with([](ConnectionRecord& r) { r.qpn = 0; }), &why));
  EXPECT_FALSE(decode(with([](ConnectionRecord& r) { r.psn = 1u << 24; }), &why));
  EXPECT_FALSE(decode(with([](ConnectionRecord& r) { r.mtu = 7; }), &why));
  EXPECT_FALSE(decode(with([](ConnectionRecord& r) { r.slots = 0; }), &why));
  EXPECT_FALSE(decode(with([](ConnectionRecord& r) { r.lid = 0; }), &why));
  EXPECT_NE(why.find("LID"), std::string::npos) << why;
  EXPECT_FALSE(decode(with([](ConnectionRecord& r) {
                        r.ethernet = true;
                        r.gid = {};
                      }),
                      &why));
  EXPECT_NE(why.find("GID"), std::string::npos) << why;
}

// A registrar that records what it was asked, with fake keys.
struct FakeRegistrar {
  std::vector<std::pair<std::uintptr_t, std::size_t>> registered;
  std::multiset<void*> live;
  int next = 1;
  RegistrationCache::Register reg() {
    return [this](void* addr, std::size_t bytes) {
      registered.emplace_back(reinterpret_cast<std::uintptr_t>(addr), bytes);
      void* handle = reinterpret_cast<void*>(static_cast<std::uintptr_t>(next++));
      live.insert(handle);
      return Registration{handle, static_cast<std::uint32_t>(next),
                          static_cast<std::uint32_t>(next + 1000), 0, 0};
    };
  }
  RegistrationCache::Deregister dereg() {
    return [this](const Registration& r) {
      auto it = live.find(r.handle);
      ASSERT_NE(it, live.end()) << "deregistered twice";
      live.erase(it);
    };
  }
};

TEST(IbRegistrationCache, WidensToPagesAndServesSubrangesFromOneRegistration) {
  FakeRegistrar fake;
  RegistrationCache cache(fake.reg(), fake.dereg(), 4);
  auto* base = reinterpret_cast<std::byte*>(std::uintptr_t{0x100000});
  Registration a = cache.acquire(base + 100, 5000);
  ASSERT_EQ(fake.registered.size(), 1u);
  EXPECT_EQ(fake.registered[0].first, 0x100000u);
  EXPECT_EQ(fake.registered[0].second, 8192u);        // [0x100064, 0x1013ec) widened to two pages
  Registration b = cache.acquire(base + 4096, 4096);  // inside: no new registration
  EXPECT_EQ(b.handle, a.handle);
  EXPECT_EQ(cache.hits(), 1u);
  Registration c = cache.acquire(base + 8000, 400);  // crosses the end: a new one
  EXPECT_NE(c.handle, a.handle);
  EXPECT_EQ(cache.misses(), 2u);
  cache.release(a);
  cache.release(b);
  cache.release(c);
  EXPECT_THROW(cache.release(c), std::logic_error);
}

TEST(IbRegistrationCache, EvictsTheLeastRecentlyUsedIdleEntryOnly) {
  FakeRegistrar fake;
  RegistrationCache cache(fake.reg(), fake.dereg(), 2);
  auto page = [](int i) { return reinterpret_cast<void*>(std::uintptr_t{0x200000} + i * 0x10000); };
  Registration r0 = cache.acquire(page(0), 64);  // held throughout
  Registration r1 = cache.acquire(page(1), 64);
  cache.release(r1);
  Registration r2 = cache.acquire(page(2), 64);  // full: r1 (idle) goes, r0 (held) stays
  EXPECT_EQ(cache.entries(), 2u);
  EXPECT_EQ(fake.live.count(r1.handle), 0u);
  EXPECT_EQ(fake.live.count(r0.handle), 1u);
  // Everything held: the cache grows past its bound rather than pull a registration in use.
  Registration r3 = cache.acquire(page(3), 64);
  EXPECT_EQ(cache.entries(), 3u);
  for (auto* r : {&r0, &r2, &r3}) cache.release(*r);
}

TEST(IbRegistrationCache, InvalidateDropsIdleOverlapsAndRefusesHeldOnes) {
  FakeRegistrar fake;
  {
    RegistrationCache cache(fake.reg(), fake.dereg(), 8);
    auto* base = reinterpret_cast<std::byte*>(std::uintptr_t{0x300000});
    Registration held = cache.acquire(base, 4096);
    Registration idle = cache.acquire(base + 0x10000, 4096);
    cache.release(idle);
    EXPECT_THROW(cache.invalidate(base, 16), std::logic_error);
    cache.invalidate(base + 0x10000, 16);
    EXPECT_EQ(fake.live.count(idle.handle), 0u);
    EXPECT_EQ(cache.entries(), 1u);
    // The same address again: registered afresh (the memory may have been reallocated).
    Registration again = cache.acquire(base + 0x10000, 16);
    EXPECT_NE(again.handle, idle.handle);
    cache.release(again);
    cache.release(held);
  }
  EXPECT_TRUE(fake.live.empty()) << "the destructor deregisters everything";
}

TEST(IbSlotCredits, TheWindowNeedsBothTheCreditAndTheLocalCompletion) {
  SlotCredits sender(4), receiver(4);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(sender.can_post());
    EXPECT_EQ(sender.next_slot(), static_cast<std::uint64_t>(i));
    ASSERT_TRUE(receiver.received(sender.next_immediate()));
    sender.posted();
  }
  EXPECT_FALSE(sender.can_post());  // four in flight
  ASSERT_TRUE(receiver.has_message());
  EXPECT_EQ(receiver.oldest_slot(), 0u);
  const std::uint32_t credit = receiver.release();
  EXPECT_NE(credit & SlotCredits::kCreditFlag, 0u);
  ASSERT_TRUE(sender.credit(credit));
  EXPECT_FALSE(sender.can_post()) << "slot 0's write has not completed locally";
  ASSERT_TRUE(sender.write_completed());
  EXPECT_TRUE(sender.can_post());
  EXPECT_EQ(sender.next_slot(), 0u);
}

TEST(IbSlotCredits, RefusesWhatBreaksTheProtocol) {
  SlotCredits s(4);
  EXPECT_FALSE(s.write_completed()) << "nothing was posted";
  EXPECT_FALSE(s.credit(SlotCredits::kCreditFlag | 1)) << "a credit for a message never sent";
  SlotCredits r(4);
  EXPECT_FALSE(r.received(1)) << "message 1 before message 0";
  EXPECT_FALSE(r.received(SlotCredits::kCreditFlag)) << "a credit is not a message";
  EXPECT_TRUE(r.received(0));
}

TEST(IbSlotCredits, CountsWidenAcrossThe31BitWrap) {
  constexpr std::uint64_t kWrap = std::uint64_t{1} << 31;
  EXPECT_EQ(SlotCredits::widen(0, 5), 5u);
  EXPECT_EQ(SlotCredits::widen(kWrap - 3, 2), kWrap + 2);  // the 31 bits wrapped
  EXPECT_EQ(SlotCredits::widen(5 * kWrap + 7, 7), 5 * kWrap + 7);
  EXPECT_EQ(SlotCredits::widen(5 * kWrap + 7, SlotCredits::kCreditFlag | 9), 5 * kWrap + 9);
  // The release immediates of a receiver past the wrap widen back to its totals.
  SlotCredits receiver(2);
  std::uint64_t known = 0;
  for (std::uint64_t m = 0; m < 5; ++m) {
    ASSERT_TRUE(receiver.received(static_cast<std::uint32_t>(m)));
    known = SlotCredits::widen(known, receiver.release());
    EXPECT_EQ(known, m + 1);
  }
}

TEST(IbSlotCredits, RandomInterleavingsDeliverInOrderWithoutReusingABusySlot) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    const std::uint64_t slots = 1 + rng() % 8;
    SlotCredits sender(slots), receiver(slots);
    std::deque<std::uint32_t> wire, credits;  // writes in flight, credits in flight
    std::deque<std::uint64_t> unfinished;     // writes not yet completed locally
    std::vector<int> busy(slots, 0);          // messages occupying each receiver slot
    std::uint64_t delivered = 0;
    const std::uint64_t total = 2000;
    while (delivered < total) {
      switch (rng() % 5) {
        case 0:
          if (sender.can_post() && sender.posted_count() < total) {
            ASSERT_EQ(busy[sender.next_slot()], 0) << "slot reused while the receiver holds it";
            busy[sender.next_slot()] = 1;
            wire.push_back(sender.next_immediate());
            unfinished.push_back(sender.posted_count());
            sender.posted();
          }
          break;
        case 1:
          if (!wire.empty()) {
            ASSERT_TRUE(receiver.received(wire.front()));
            wire.pop_front();
          }
          break;
        case 2:
          if (receiver.has_message()) {
            busy[receiver.oldest_slot()] = 0;
            credits.push_back(receiver.release());
            ++delivered;
          }
          break;
        case 3:
          if (!credits.empty()) {
            ASSERT_TRUE(sender.credit(credits.front()));
            credits.pop_front();
          }
          break;
        case 4:
          if (!unfinished.empty()) {
            ASSERT_TRUE(sender.write_completed());
            unfinished.pop_front();
          }
          break;
      }
    }
  }
}

TEST(IbDevice, DisabledByEnvironment) {
  ::setenv("LOOM_IB_DISABLE", "1", 1);
  std::string why;
  EXPECT_FALSE(choose_port(why));
  EXPECT_NE(why.find("LOOM_IB_DISABLE"), std::string::npos) << why;
  ::unsetenv("LOOM_IB_DISABLE");
}

TEST(IbDevice, NoDeviceGivesTheReason) {
  std::error_code ec;
  if (std::filesystem::exists("/sys/class/infiniband", ec) &&
      !std::filesystem::is_empty("/sys/class/infiniband", ec))
    GTEST_SKIP() << "this machine has RDMA devices";
  std::string why;
  EXPECT_FALSE(choose_port(why));
  EXPECT_FALSE(why.empty());
  EXPECT_TRUE(why.find("no RDMA device") != std::string::npos ||
              why.find("no InfiniBand support") != std::string::npos ||
              why.find("cannot list") != std::string::npos)
      << why;
}

}  // namespace
}  // namespace loom::transport::ibverbs
