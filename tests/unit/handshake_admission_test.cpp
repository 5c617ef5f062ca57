// Who may start a handshake with the store server when many connections await authentication.
#include <gtest/gtest.h>

#include <chrono>

#include "store/handshake_admission.hpp"

namespace loom::store {
namespace {

using namespace std::chrono_literals;
using Clock = HandshakeAdmission::Clock;

TEST(HandshakeAdmission, AFullAddressEvictsItsOldestOnlyOnceThatHadASecond) {
  HandshakeAdmission admission({100, 2, 1000ms});
  const auto t0 = Clock::now();
  admission.add(1, "a", t0);
  admission.add(2, "a", t0 + 10ms);
  EXPECT_FALSE(admission.decide("a", t0 + 500ms).admit);
  EXPECT_TRUE(admission.decide("b", t0 + 500ms).admit);  // another address is not held up
  const auto later = admission.decide("a", t0 + 1000ms);
  EXPECT_TRUE(later.admit);
  EXPECT_EQ(later.evict, 1u);
  admission.remove(1);
  EXPECT_EQ(admission.from("a"), 1u);
  EXPECT_FALSE(admission.decide("a", t0 + 1000ms).evict.has_value());
}

TEST(HandshakeAdmission, WhenAllAreTakenTheOldestOfAnyAddressMakesRoom) {
  HandshakeAdmission admission({3, 3, 1000ms});
  const auto t0 = Clock::now();
  admission.add(1, "a", t0);
  admission.add(2, "b", t0 + 100ms);
  admission.add(3, "c", t0 + 200ms);
  EXPECT_FALSE(admission.decide("d", t0 + 900ms).admit);
  const auto d = admission.decide("d", t0 + 1050ms);
  EXPECT_TRUE(d.admit);
  EXPECT_EQ(d.evict, 1u);
  admission.remove(2);
  const auto e = admission.decide("e", t0 + 1050ms);
  EXPECT_TRUE(e.admit);
  EXPECT_FALSE(e.evict.has_value());
  EXPECT_EQ(admission.size(), 2u);
}

}  // namespace
}  // namespace loom::store
