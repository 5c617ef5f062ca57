// The reduction kernels: the engine's kernels against the scalar reference, bit for bit, and the
// reference against the element rules written out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include <hwy/targets.h>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/half.hpp"

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

// Runs `body` once on every SIMD target this machine supports (AVX-512, AVX2, SSE4, ... here),
// so that a machine of one kind tests the code paths the others take.
void for_each_target(const std::function<void(const char*)>& body) {
  for (std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const char* name = simd_target();
    EXPECT_STREQ(name, hwy::TargetName(target));
    SCOPED_TRACE(name);
    body(name);
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Compares reduce_copy (with and without a second output) and in-place reduce against the
// reference for one dtype, op and length, with a, b and dst each at its own byte offset. The
// buffers live as long as the checker: thousands of calls reuse them.
class ReferenceCheck {
 public:
  void run(DataType t, ReduceOp op, std::size_t n, std::size_t offset,
           const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
    const std::size_t elem = size_of(t), bytes = n * elem;
    const std::size_t oa = offset, ob = (offset * 7 + 3) % 64, od = (offset * 13 + 5) % 64;
    for (auto* v : {&sa_, &sb_, &unchanged_, &got_, &got2_, &want_}) v->resize(bytes + 65);
    if (n > 0) {  // memcpy of null is undefined, even for 0 bytes
      std::memcpy(sa_.data() + oa, a.data(), bytes);
      std::memcpy(sb_.data() + ob, b.data(), bytes);
      std::memcpy(unchanged_.data() + oa, a.data(), bytes);
    }
    // A guard byte after each output catches writes past the end.
    got_[od + bytes] = got2_[oa + bytes] = std::byte{0x77};
    const int divisor = 3;
    reduce_copy(got_.data() + od, got2_.data() + oa, sa_.data() + oa, sb_.data() + ob, n, t, op,
                divisor);
    reference::reduce_copy(want_.data() + od, nullptr, sa_.data() + oa, sb_.data() + ob, n, t, op,
                           divisor);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(same(t, got_.data() + od + i * elem, want_.data() + od + i * elem))
          << to_string(t) << " " << to_string(op) << " n=" << n << " offset=" << offset
          << " i=" << i;
      ASSERT_EQ(std::memcmp(got_.data() + od + i * elem, got2_.data() + oa + i * elem, elem), 0);
    }
    ASSERT_EQ(got_[od + bytes], std::byte{0x77}) << "wrote past the end";
    ASSERT_EQ(got2_[oa + bytes], std::byte{0x77}) << "wrote past the end of the second output";
    // In place: dst is a (avg reduces as sum in reduce()).
    reduce(sa_.data() + oa, sa_.data() + oa, sb_.data() + ob, n, t, op);
    reference::reduce(want_.data() + od, unchanged_.data() + oa, sb_.data() + ob, n, t, op);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_TRUE(same(t, sa_.data() + oa + i * elem, want_.data() + od + i * elem))
          << "in place " << to_string(t) << " " << to_string(op) << " n=" << n << " i=" << i;
  }

 private:
  std::vector<std::byte> sa_, sb_, unchanged_, got_, got2_, want_;
};

// One instance per SIMD target this machine supports (AVX-512, AVX2, SSE4, ... here), so that a
// machine of one kind tests the code paths the others take.
class KernelsOnTarget : public ::testing::TestWithParam<std::int64_t> {
 protected:
  void SetUp() override {
    hwy::SetSupportedTargetsForTest(GetParam());
    ASSERT_STREQ(simd_target(), hwy::TargetName(GetParam()));
  }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

TEST_P(KernelsOnTarget, MatchTheReferenceForEveryDtypeOpLengthAndAlignment) {
  std::mt19937 rng(7);
  ReferenceCheck check;
  for (DataType t : kTypes) {
    const auto a = random_input(t, 257, rng);
    const auto b = random_input(t, 257, rng);
    for (ReduceOp op : kOps)
      for (std::size_t n = 0; n <= 257; ++n)
        for (std::size_t offset = 0; offset < 64; ++offset) {
          check.run(t, op, n, offset, a, b);
          if (HasFatalFailure()) return;
        }
  }
}

TEST_P(KernelsOnTarget, ConvertMatchesTheReference) {
  std::mt19937 rng(9);
  const auto f32 = random_input(DataType::f32, 1000, rng);
  for (DataType half : {DataType::f16, DataType::bf16})
    for (std::size_t n : {0u, 1u, 7u, 64u, 999u})
      for (float scale : {1.0f, 0.25f, 1.0f / 3.0f}) {
        std::vector<std::byte> got(n * 4 + 8), want(n * 4 + 8), back(n * 4 + 8),
            back_want(n * 4 + 8);
        convert(got.data(), half, f32.data(), DataType::f32, n, scale);
        reference::convert(want.data(), half, f32.data(), DataType::f32, n, scale);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_TRUE(same(half, got.data() + 2 * i, want.data() + 2 * i))
              << to_string(half) << " n=" << n << " i=" << i;
        convert(back.data(), DataType::f32, got.data(), half, n, 2.0f);
        reference::convert(back_want.data(), DataType::f32, got.data(), half, n, 2.0f);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_TRUE(same(DataType::f32, back.data() + 4 * i, back_want.data() + 4 * i));
      }
  std::vector<std::byte> x(8);
  EXPECT_THROW(convert(x.data(), DataType::i32, x.data() + 4, DataType::f32, 1), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Targets, KernelsOnTarget,
                         ::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()),
                         [](const auto& info) { return std::string(hwy::TargetName(info.param)); });

TEST(Kernels, MatchTheReferenceOnAMebiElementBuffer) {
  // Long runs of whole vectors, at two alignments, on the target this machine dispatches to
  // (the lengths above cover every target's vector and tail logic).
  const std::size_t n = (std::size_t{1} << 20) + 13;
  std::mt19937 rng(11);
  ReferenceCheck check;
  for (DataType t : kTypes) {
    const auto a = random_input(t, n, rng);
    const auto b = random_input(t, n, rng);
    for (ReduceOp op : kOps)
      for (std::size_t offset : {0u, 33u}) {
        check.run(t, op, n, offset, a, b);
        if (::testing::Test::HasFatalFailure()) return;
      }
  }
}

// stream_copy: every byte, for every length around the vector sizes and every misalignment of
// either end, on every target; nothing written before or past the destination.
TEST(Kernels, StreamCopyCopiesEveryByteAtEveryLengthAndAlignment) {
  for_each_target([](const char* target) {
    std::mt19937 rng(11);
    // 64-byte aligned, so that every offset below is every alignment a vector store can meet.
    alignas(64) static std::byte src[4096 + 128], dst[4096 + 256];
    for (auto& b : src) b = static_cast<std::byte>(rng());
    for (std::size_t bytes : {0u, 1u, 15u, 63u, 64u, 255u, 256u, 257u, 1000u, 4096u})
      for (std::size_t src_off : {0u, 1u, 33u})
        for (std::size_t dst_off = 0; dst_off < 64; ++dst_off) {
          std::fill(std::begin(dst), std::end(dst), std::byte{0x77});
          stream_copy(dst + 64 + dst_off, src + src_off, bytes);
          ASSERT_EQ(std::memcmp(dst + 64 + dst_off, src + src_off, bytes), 0)
              << target << " bytes " << bytes << " offsets " << src_off << "/" << dst_off;
          for (std::size_t i = 0; i < 64 + dst_off; ++i)
            ASSERT_EQ(dst[i], std::byte{0x77}) << target << ": wrote before the destination";
          for (std::size_t i = 64 + dst_off + bytes; i < sizeof dst; ++i)
            ASSERT_EQ(dst[i], std::byte{0x77}) << target << ": wrote past the destination";
        }
  });
}

// copy: the vector loop takes destinations 1-63 bytes past the source within a page (where
// memcpy's `rep movsb` crawled), memcpy the rest; every byte either way, on every target, and
// nothing written outside the destination.
TEST(Kernels, CopyCopiesEveryByteAtEveryPageDistance) {
  EXPECT_FALSE(
      copy_distance_aliases(reinterpret_cast<void*>(4096 + 16), reinterpret_cast<void*>(16)));
  EXPECT_TRUE(
      copy_distance_aliases(reinterpret_cast<void*>(4096 + 16), reinterpret_cast<void*>(0)));
  EXPECT_TRUE(
      copy_distance_aliases(reinterpret_cast<void*>(8192 + 63), reinterpret_cast<void*>(0)));
  EXPECT_FALSE(
      copy_distance_aliases(reinterpret_cast<void*>(8192 + 64), reinterpret_cast<void*>(0)));
  EXPECT_FALSE(copy_distance_aliases(reinterpret_cast<void*>(4096), reinterpret_cast<void*>(16)));
  for_each_target([](const char* target) {
    std::mt19937 rng(13);
    alignas(4096) static std::byte src[3 * 4096], dst[5 * 4096];
    for (auto& b : src) b = static_cast<std::byte>(rng());
    for (std::size_t bytes : {0u, 1000u, 1024u, 1025u, 4096u + 7u, 2u * 4096u + 63u})
      for (std::size_t src_off : {0u, 16u, 100u})
        for (std::size_t distance : {0u, 1u, 8u, 16u, 31u, 32u, 63u, 64u, 65u, 4080u}) {
          std::byte* to = dst + 4096 + (src_off + distance) % 4096;
          std::fill(std::begin(dst), std::end(dst), std::byte{0x77});
          loom::kernels::copy(to, src + src_off, bytes);
          ASSERT_EQ(std::memcmp(to, src + src_off, bytes), 0)
              << target << " bytes " << bytes << " source offset " << src_off << " distance "
              << distance;
          for (std::byte* p = dst; p < to; ++p)
            ASSERT_EQ(*p, std::byte{0x77}) << target << ": wrote before the destination";
          for (std::byte* p = to + bytes; p < std::end(dst); ++p)
            ASSERT_EQ(*p, std::byte{0x77}) << target << ": wrote past the destination";
        }
  });
}

TEST(Kernels, LargeOutputsMatchTheReferenceWhenStreamed) {
  // 16 MiB of f32 and of bf16 outputs, not aliasing the inputs: the streaming path.
  for_each_target([](const char*) {
    std::mt19937 rng(5);
    for (DataType t : {DataType::f32, DataType::bf16}) {
      const std::size_t n = (std::size_t{16} << 20) / size_of(t) + 5;
      const auto a = random_input(t, n, rng);
      const auto b = random_input(t, n, rng);
      for (std::size_t offset : {0u, 2u, 36u}) {
        std::vector<std::byte> got(n * size_of(t) + 64), want(got.size());
        reduce_copy(got.data() + offset, nullptr, a.data(), b.data(), n, t, ReduceOp::sum, 1);
        reference::reduce_copy(want.data() + offset, nullptr, a.data(), b.data(), n, t,
                               ReduceOp::sum, 1);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_TRUE(
              same(t, got.data() + offset + i * size_of(t), want.data() + offset + i * size_of(t)))
              << to_string(t) << " offset " << offset << " i=" << i;
      }
    }
  });
}

TEST(Kernels, HalfTypesConvertEveryValueLikeTheReference) {
  // Every f16 and bf16 bit pattern against a spread of second operands: sums and products
  // reach every rounding case, overflow to inf, subnormal results and NaNs of both inputs.
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  for_each_target([&](const char*) {
    for (DataType t : {DataType::f16, DataType::bf16}) {
      auto from = [t](float f) { return t == DataType::f16 ? f32_to_f16(f) : f32_to_bf16(f); };
      for (float other : {0.0f, -0.0f, 1.0f, -1.5f, 3.0e-3f, 7.77e4f, 1.0e-7f, 0.33333f, 2049.0f,
                          std::numeric_limits<float>::infinity(), std::nanf("")}) {
        std::vector<std::uint16_t> b(all.size(), from(other)), got(all.size()), want(all.size());
        for (ReduceOp op : kOps) {
          reduce_copy(got.data(), nullptr, all.data(), b.data(), all.size(), t, op, 3);
          reference::reduce_copy(want.data(), nullptr, all.data(), b.data(), all.size(), t, op, 3);
          for (std::size_t i = 0; i < all.size(); ++i)
            ASSERT_TRUE(same(t, reinterpret_cast<const std::byte*>(&got[i]),
                             reinterpret_cast<const std::byte*>(&want[i])))
                << to_string(t) << " " << to_string(op) << " x=" << std::hex << i << " y=" << b[i]
                << " got " << got[i] << " want " << want[i];
        }
      }
    }
  });
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
  for_each_target([](const char*) {
    std::mt19937 rng(3);
    for (DataType t : kTypes)
      for (std::size_t n : {0u, 1u, 101u, 1000u}) {
        auto v = random_input(t, n, rng);
        std::vector<std::byte> got(v.size()), want(v.size());
        divide(got.data(), v.data(), n, t, 7);
        reference::divide(want.data(), v.data(), n, t, 7);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_TRUE(same(t, got.data() + i * size_of(t), want.data() + i * size_of(t)))
              << to_string(t) << " " << i;
      }
  });
}

}  // namespace
}  // namespace loom::kernels
