// The reduction kernels: the engine's kernels against the scalar reference, bit for bit, and the
// reference against the element rules written out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "half.hpp"
#include "reduce.hpp"

namespace loom::kernels {
namespace {

constexpr DataType kTypes[] = {DataType::f32, DataType::f64, DataType::f16, DataType::bf16,
                               DataType::i8,  DataType::u8,  DataType::i32, DataType::u32,
                               DataType::i64, DataType::u64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                             ReduceOp::avg};

// Random bytes with special values mixed in for float types: NaN, +-inf, +-0, subnormals.
std::vector<std::byte> random_input(DataType t, std::size_t n, std::mt19937& rng) {
  std::vector<std::byte> v(n * size_of(t));
  for (auto& b : v) b = static_cast<std::byte>(rng());
  auto special = [&](std::size_t i, double x) {
    switch (t) {
      case DataType::f32: {
        float f = static_cast<float>(x);
        std::memcpy(&v[i * 4], &f, 4);
        break;
      }
      case DataType::f64:
        std::memcpy(&v[i * 8], &x, 8);
        break;
      case DataType::f16: {
        auto h = f32_to_f16(static_cast<float>(x));
        std::memcpy(&v[i * 2], &h, 2);
        break;
      }
      case DataType::bf16: {
        auto h = f32_to_bf16(static_cast<float>(x));
        std::memcpy(&v[i * 2], &h, 2);
        break;
      }
      default:
        break;
    }
  };
  const double specials[] = {std::nan(""), INFINITY, -INFINITY, 0.0, -0.0,
                             1e-40,        -1e-310,  65504.0,   1.0, -2.5};
  for (std::size_t i = 0; i < n; i += 3) special(i, specials[(i / 3) % 10]);
  return v;
}

// Bitwise equality, except that any NaN equals any NaN (payloads may differ by path).
bool same(DataType t, const std::byte* a, const std::byte* b) {
  auto nan = [&](const std::byte* p) {
    switch (t) {
      case DataType::f32: {
        float f;
        std::memcpy(&f, p, 4);
        return std::isnan(f);
      }
      case DataType::f64: {
        double f;
        std::memcpy(&f, p, 8);
        return std::isnan(f);
      }
      case DataType::f16: {
        std::uint16_t h;
        std::memcpy(&h, p, 2);
        return std::isnan(f16_to_f32(h));
      }
      case DataType::bf16: {
        std::uint16_t h;
        std::memcpy(&h, p, 2);
        return std::isnan(bf16_to_f32(h));
      }
      default:
        return false;
    }
  };
  if (nan(a) || nan(b)) return nan(a) && nan(b);
  return std::memcmp(a, b, size_of(t)) == 0;
}

TEST(Kernels, MatchTheReferenceForEveryDtypeOpLengthAndAlignment) {
  std::mt19937 rng(7);
  for (DataType t : kTypes)
    for (ReduceOp op : kOps)
      for (std::size_t n :
           {0u, 1u, 2u, 3u, 7u, 8u, 15u, 16u, 17u, 31u, 33u, 63u, 64u, 65u, 257u, 4099u}) {
        const std::size_t elem = size_of(t);
        auto a = random_input(t, n, rng);
        auto b = random_input(t, n, rng);
        for (std::size_t offset : {0u, 1u, 3u, 13u}) {
          // Unaligned copies of the inputs and outputs, with a guard byte after each output.
          std::vector<std::byte> sa(n * elem + offset + 1), sb(n * elem + offset + 1);
          std::copy(a.begin(), a.end(), sa.begin() + static_cast<std::ptrdiff_t>(offset));
          std::copy(b.begin(), b.end(), sb.begin() + static_cast<std::ptrdiff_t>(offset));
          std::vector<std::byte> got(n * elem + offset + 1, std::byte{0x77}), got2 = got,
                                                                              want = got;
          const int divisor = 3;
          reduce_copy(got.data() + offset, got2.data() + offset, sa.data() + offset,
                      sb.data() + offset, n, t, op, divisor);
          reference::reduce_copy(want.data() + offset, nullptr, sa.data() + offset,
                                 sb.data() + offset, n, t, op, divisor);
          for (std::size_t i = 0; i < n; ++i) {
            ASSERT_TRUE(same(t, got.data() + offset + i * elem, want.data() + offset + i * elem))
                << to_string(t) << " " << to_string(op) << " n=" << n << " offset=" << offset
                << " i=" << i;
            ASSERT_EQ(
                std::memcmp(got.data() + offset + i * elem, got2.data() + offset + i * elem, elem),
                0);
          }
          ASSERT_EQ(got.back(), std::byte{0x77}) << "wrote past the end";
          // In place: dst is a.
          std::vector<std::byte> inplace = sa;
          reduce(inplace.data() + offset, inplace.data() + offset, sb.data() + offset, n, t, op);
          reference::reduce(want.data() + offset, sa.data() + offset, sb.data() + offset, n, t, op);
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_TRUE(
                same(t, inplace.data() + offset + i * elem, want.data() + offset + i * elem))
                << "in place " << to_string(t) << " " << to_string(op) << " i=" << i;
        }
      }
}

template <typename T>
T run(ReduceOp op, T a, T b, DataType t, int divisor = 1) {
  T out;
  reference::reduce_copy(&out, nullptr, &a, &b, 1, t, op, divisor);
  return out;
}

TEST(Kernels, MinAndMaxPropagateNanAndOrderSignedZeros) {
  const float nan = std::nanf(""), inf = INFINITY;
  EXPECT_TRUE(std::isnan(run(ReduceOp::min, nan, 1.0f, DataType::f32)));
  EXPECT_TRUE(std::isnan(run(ReduceOp::min, 1.0f, nan, DataType::f32)));
  EXPECT_TRUE(std::isnan(run(ReduceOp::max, 1.0f, nan, DataType::f32)));
  EXPECT_TRUE(std::signbit(run(ReduceOp::min, 0.0f, -0.0f, DataType::f32)));
  EXPECT_TRUE(std::signbit(run(ReduceOp::min, -0.0f, 0.0f, DataType::f32)));
  EXPECT_FALSE(std::signbit(run(ReduceOp::max, -0.0f, 0.0f, DataType::f32)));
  EXPECT_EQ(run(ReduceOp::min, -inf, 3.0f, DataType::f32), -inf);
  EXPECT_EQ(run(ReduceOp::max, 2.0, inf * 1.0, DataType::f64), INFINITY);
  EXPECT_TRUE(std::isnan(run(ReduceOp::sum, inf, -inf, DataType::f32)));
}

TEST(Kernels, IntegersWrapAndAverageTruncates) {
  EXPECT_EQ(run<std::int8_t>(ReduceOp::sum, 100, 100, DataType::i8), static_cast<std::int8_t>(-56));
  EXPECT_EQ(run<std::uint8_t>(ReduceOp::prod, 16, 17, DataType::u8), static_cast<std::uint8_t>(16));
  EXPECT_EQ(run<std::int64_t>(ReduceOp::sum, INT64_MAX, 1, DataType::i64), INT64_MIN);
  EXPECT_EQ(run<std::int32_t>(ReduceOp::prod, -3, 5, DataType::i32), -15);
  EXPECT_EQ(run<std::int32_t>(ReduceOp::avg, -7, 0, DataType::i32, 2), -3);
  EXPECT_EQ(run<std::uint32_t>(ReduceOp::avg, 7, 0, DataType::u32, 2), 3u);
  EXPECT_EQ(run<std::int8_t>(ReduceOp::min, -128, 127, DataType::i8), -128);
  EXPECT_EQ(run<std::uint64_t>(ReduceOp::max, UINT64_MAX, 0, DataType::u64), UINT64_MAX);
  // An average over more ranks than the type can count.
  EXPECT_EQ(run<std::int8_t>(ReduceOp::avg, 100, 100, DataType::i8, 200), 0);
}

TEST(Kernels, HalfPrecisionReducesInFloatAndRoundsOnce) {
  // 2048 + 1 is not representable in f16: round to nearest even gives 2048.
  std::uint16_t a = f32_to_f16(2048.0f), b = f32_to_f16(1.0f);
  EXPECT_EQ(f16_to_f32(run(ReduceOp::sum, a, b, DataType::f16)), 2048.0f);
  // 65504 + 65504 overflows to inf.
  std::uint16_t m = f32_to_f16(65504.0f);
  EXPECT_EQ(f16_to_f32(run(ReduceOp::sum, m, m, DataType::f16)), INFINITY);
  std::uint16_t x = f32_to_bf16(3.0e38f);
  EXPECT_EQ(bf16_to_f32(run(ReduceOp::sum, x, x, DataType::bf16)), INFINITY);
  std::uint16_t third = f32_to_bf16(1.0f);
  EXPECT_EQ(bf16_to_f32(run(ReduceOp::avg, third, third, DataType::bf16, 3)),
            bf16_to_f32(f32_to_bf16(2.0f / 3.0f)));
}

TEST(Kernels, DivideMatchesTheReference) {
  std::mt19937 rng(3);
  for (DataType t : kTypes) {
    auto v = random_input(t, 101, rng);
    std::vector<std::byte> got(v.size()), want(v.size());
    divide(got.data(), v.data(), 101, t, 7);
    reference::divide(want.data(), v.data(), 101, t, 7);
    for (std::size_t i = 0; i < 101; ++i)
      ASSERT_TRUE(same(t, got.data() + i * size_of(t), want.data() + i * size_of(t)))
          << to_string(t) << " " << i;
  }
}

}  // namespace
}  // namespace loom::kernels
