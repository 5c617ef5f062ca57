// f16 and bf16 conversions: every f16 round-trips; float -> f16 agrees with the compiler's own
// _Float16 conversion; bf16 rounds to nearest even and keeps NaN.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "kernels/cpu/half.hpp"

namespace loom::kernels {
namespace {

TEST(HalfConversion, EveryF16RoundTripsThroughFloat) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << h;
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << "f16 bits " << h << " = " << f;
  }
}

#if defined(__FLT16_MAX__)
TEST(HalfConversion, FloatToF16MatchesTheCompiler) {
  std::mt19937 rng(11);
  for (int i = 0; i < 2000000; ++i) {
    std::uint32_t bits = rng();
    // Bias towards the f16 range so rounding, subnormal and overflow cases are all common.
    if (i % 2) bits = (bits & 0x807fffffu) | ((100u + (bits >> 24) % 50u) << 23);
    float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) continue;
    std::uint16_t expect = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(f32_to_f16(f), expect) << std::hexfloat << f;
  }
}
#endif

TEST(HalfConversion, F16EdgeCases) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bffu);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bffu);  // below the midpoint to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00u);  // ties to even: overflows to inf
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00u);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001u);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000u);  // tie to even: zero
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000u);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
}

TEST(HalfConversion, Bf16RoundsToNearestEvenAndKeepsNan) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80u);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80u);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82u);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81u);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80u);  // max float rounds to inf
  std::uint16_t nan = f32_to_bf16(std::bit_cast<float>(0x7f800001u));  // NaN with a low payload
  EXPECT_TRUE(std::isnan(bf16_to_f32(nan)));
  for (std::uint32_t h = 0; h < 65536; ++h) {
    float f = bf16_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h);
  }
}

}  // namespace
}  // namespace loom::kernels
