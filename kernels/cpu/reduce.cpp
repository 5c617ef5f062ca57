// The kernels the engine calls, on Google Highway: compiled once per SIMD target (SSE4, AVX2,
// AVX-512, NEON, SVE, ...) and chosen at run time for the machine (HWY_DYNAMIC_DISPATCH).
// Results are bit-identical to the scalar reference: the same element rules (element_ops.hpp),
// vectorised; the reference itself runs the tails shorter than a vector and the combinations
// with no vector form here (integer avg division, 8- and 64-bit integer products).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/reduce.cpp"
#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>  // must come before highway.h
#include <hwy/highway.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "cpu/half_simd-inl.h"
#include "cpu_kernels.hpp"
#include "element_ops.hpp"

// ---- Per target ---------------------------------------------------------------------------------
HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using detail::BFloat16;
using detail::data_type_of;
using detail::Half;

// How a storage type reaches vector lanes: natively, or widened to float (f16, bf16).
template <typename T>
struct Lanes {
  using D = hn::ScalableTag<T>;
  using DS = D;  // the storage lanes
  static hn::Vec<D> Load(D d, const std::byte* p) {
    return hn::LoadU(d, reinterpret_cast<const T*>(p));
  }
  static hn::Vec<DS> Narrow(D, hn::Vec<D> v) { return v; }
};
// f16 and bf16: 16-bit storage lanes, widened to float lanes (as many) and rounded back.
template <bool kBrainFloat>
struct HalfLanes {
  using D = hn::ScalableTag<float>;
  using DS = hn::Rebind<uint16_t, D>;
  static hn::Vec<D> Load(D d, const std::byte* p) {
    const auto bits = hn::LoadU(DS(), reinterpret_cast<const uint16_t*>(p));
    return kBrainFloat ? BF16ToF32(d, bits) : F16ToF32(d, bits);
  }
  static hn::Vec<DS> Narrow(D d, hn::Vec<D> v) {
    return kBrainFloat ? F32ToBF16(d, v) : F32ToF16(d, v);
  }
};
template <>
struct Lanes<Half> : HalfLanes<false> {};
template <>
struct Lanes<BFloat16> : HalfLanes<true> {};

// x op y on lanes, with the reference's rules: integers wrap; float min/max propagate NaN (x's
// first) and order -0 below +0.
template <ReduceOp kOp, class D, class V>
HWY_INLINE V Combine(D d, V x, V y) {
  (void)d;
  if constexpr (kOp == ReduceOp::sum || kOp == ReduceOp::avg) {
    return hn::Add(x, y);
  } else if constexpr (kOp == ReduceOp::prod) {
    return hn::Mul(x, y);
  } else if constexpr (hwy::IsFloat<hn::TFromD<D>>()) {
    const bool is_min = kOp == ReduceOp::min;
    // Equal values (+0 and -0 among them): the one with the sign bit for min, without for max.
    V r = hn::IfThenElse(hn::Eq(x, y), is_min ? hn::Or(x, y) : hn::And(x, y),
                         is_min ? hn::Min(x, y) : hn::Max(x, y));
    r = hn::IfThenElse(hn::IsNaN(y), y, r);
    return hn::IfThenElse(hn::IsNaN(x), x, r);
  } else {
    return kOp == ReduceOp::min ? hn::Min(x, y) : hn::Max(x, y);
  }
}

template <typename T, ReduceOp kOp, bool kDivide>
void Loop(std::byte* dst, std::byte* dst2, const std::byte* a, const std::byte* b, std::size_t n,
          int divisor) {
  using L = Lanes<T>;
  const typename L::D d;
  const typename L::DS ds;
  using S = hn::TFromD<typename L::DS>;
  const std::size_t lanes = hn::Lanes(d);
  const auto div = hn::Set(d, static_cast<hn::TFromD<typename L::D>>(divisor));
  constexpr std::size_t w = sizeof(T);
  const std::size_t vbytes = lanes * w;
  // Stream() wants aligned vectors of at least 16 bytes (it writes 16 from a smaller one): the
  // reference runs up to the first aligned element.
  const bool stream = dst2 == nullptr && n * w >= stream_threshold() && dst != a && dst != b &&
                      vbytes >= 16 && reinterpret_cast<std::uintptr_t>(dst) % w == 0;
  std::size_t i = 0;
  if (stream) {
    const std::size_t misaligned = reinterpret_cast<std::uintptr_t>(dst) % vbytes;
    i = misaligned ? (vbytes - misaligned) / w : 0;
    reference::reduce_copy(dst, nullptr, a, b, i, data_type_of<T>(), kOp, divisor);
    for (; i + lanes <= n; i += lanes) {
      auto r = Combine<kOp>(d, L::Load(d, a + i * w), L::Load(d, b + i * w));
      if constexpr (kDivide) r = hn::Div(r, div);
      hn::Stream(L::Narrow(d, r), ds, reinterpret_cast<S*>(dst + i * w));
    }
    hwy::FlushStream();
  } else {
    for (; i + 2 * lanes <= n; i += 2 * lanes) {
      auto r0 = Combine<kOp>(d, L::Load(d, a + i * w), L::Load(d, b + i * w));
      auto r1 = Combine<kOp>(d, L::Load(d, a + (i + lanes) * w), L::Load(d, b + (i + lanes) * w));
      if constexpr (kDivide) r0 = hn::Div(r0, div), r1 = hn::Div(r1, div);
      const auto s0 = L::Narrow(d, r0);
      const auto s1 = L::Narrow(d, r1);
      hn::StoreU(s0, ds, reinterpret_cast<S*>(dst + i * w));
      hn::StoreU(s1, ds, reinterpret_cast<S*>(dst + (i + lanes) * w));
      if (dst2) {
        hn::StoreU(s0, ds, reinterpret_cast<S*>(dst2 + i * w));
        hn::StoreU(s1, ds, reinterpret_cast<S*>(dst2 + (i + lanes) * w));
      }
    }
  }
  // The tail, shorter than a vector (or two): never a read past the end.
  reference::reduce_copy(dst + i * w, dst2 ? dst2 + i * w : nullptr, a + i * w, b + i * w, n - i,
                         data_type_of<T>(), kOp, divisor);
}

// Which (type, op) pairs have a vector form; the others run the reference.
template <typename T, ReduceOp kOp>
constexpr bool kVectorised =
    !(std::is_integral_v<T> && kOp == ReduceOp::prod && (sizeof(T) == 1 || sizeof(T) == 8)) &&
    !(std::is_integral_v<T> && kOp == ReduceOp::avg);

template <typename T, ReduceOp kOp>
void ByDivide(std::byte* dst, std::byte* dst2, const std::byte* a, const std::byte* b,
              std::size_t n, int divisor) {
  if constexpr (!kVectorised<T, kOp>) {
    reference::reduce_copy(dst, dst2, a, b, n, data_type_of<T>(), kOp, divisor);
  } else if constexpr (kOp == ReduceOp::avg) {
    if (divisor != 1)
      Loop<T, kOp, true>(dst, dst2, a, b, n, divisor);
    else
      Loop<T, kOp, false>(dst, dst2, a, b, n, divisor);
  } else {
    Loop<T, kOp, false>(dst, dst2, a, b, n, divisor);
  }
}

void ReduceCopy(void* dst, void* dst2, const void* a, const void* b, std::size_t n, DataType dtype,
                ReduceOp op, int divisor) {
  auto* d = static_cast<std::byte*>(dst);
  auto* d2 = static_cast<std::byte*>(dst2);
  auto* x = static_cast<const std::byte*>(a);
  auto* y = static_cast<const std::byte*>(b);
  detail::dispatch(dtype, [&]<typename T>() {
    switch (op) {
      case ReduceOp::sum:
        return ByDivide<T, ReduceOp::sum>(d, d2, x, y, n, divisor);
      case ReduceOp::avg:
        return ByDivide<T, ReduceOp::avg>(d, d2, x, y, n, divisor);
      case ReduceOp::prod:
        return ByDivide<T, ReduceOp::prod>(d, d2, x, y, n, divisor);
      case ReduceOp::min:
        return ByDivide<T, ReduceOp::min>(d, d2, x, y, n, divisor);
      case ReduceOp::max:
        return ByDivide<T, ReduceOp::max>(d, d2, x, y, n, divisor);
    }
  });
}

// dst = src * scale with f32 on one side (check_convertible has run).
template <typename S, typename D>
void ConvertLoop(std::byte* dst, const std::byte* src, std::size_t n, float scale) {
  using LS = Lanes<S>;
  using LD = Lanes<D>;
  const typename LS::D d;  // float lanes on both sides
  const typename LD::DS ds;
  using Out = hn::TFromD<typename LD::DS>;
  const std::size_t lanes = hn::Lanes(d);
  const auto k = hn::Set(d, scale);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(LD::Narrow(d, hn::Mul(LS::Load(d, src + i * sizeof(S)), k)), ds,
               reinterpret_cast<Out*>(dst + i * sizeof(D)));
  reference::convert(dst + i * sizeof(D), data_type_of<D>(), src + i * sizeof(S), data_type_of<S>(),
                     n - i, scale);
}

void Convert(void* dst, DataType to, const void* src, DataType from, std::size_t n, float scale) {
  auto* d = static_cast<std::byte*>(dst);
  auto* s = static_cast<const std::byte*>(src);
  if (from == DataType::f32) {
    if (to == DataType::f16) return ConvertLoop<float, Half>(d, s, n, scale);
    if (to == DataType::bf16) return ConvertLoop<float, BFloat16>(d, s, n, scale);
    return ConvertLoop<float, float>(d, s, n, scale);
  }
  if (from == DataType::f16) return ConvertLoop<Half, float>(d, s, n, scale);
  return ConvertLoop<BFloat16, float>(d, s, n, scale);
}

const char* TargetName() {
  return hwy::TargetName(HWY_TARGET);
}

// memcpy with non-temporal stores from the first aligned vector of dst on.
void StreamCopy(void* dst, const void* src, std::size_t bytes) {
  const hn::ScalableTag<uint8_t> d;
  const std::size_t lanes = hn::Lanes(d);
  auto* out = static_cast<uint8_t*>(dst);
  const auto* in = static_cast<const uint8_t*>(src);
  if (lanes < 16 || bytes < 4 * lanes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const std::size_t misaligned = reinterpret_cast<std::uintptr_t>(out) % lanes;
  std::size_t i = misaligned ? lanes - misaligned : 0;
  std::memcpy(out, in, i);
  for (; i + 2 * lanes <= bytes; i += 2 * lanes) {
    const auto v0 = hn::LoadU(d, in + i);
    const auto v1 = hn::LoadU(d, in + i + lanes);
    hn::Stream(v0, d, out + i);
    hn::Stream(v1, d, out + i + lanes);
  }
  hwy::FlushStream();
  std::memcpy(out + i, in + i, bytes - i);
}

// memcpy on vectors, for the copies whose distance memcpy handles slowly (kernels::copy).
void VectorCopy(void* dst, const void* src, std::size_t bytes) {
  const hn::ScalableTag<uint8_t> d;
  const std::size_t lanes = hn::Lanes(d);
  auto* out = static_cast<uint8_t*>(dst);
  const auto* in = static_cast<const uint8_t*>(src);
  std::size_t i = 0;
  for (; i + 2 * lanes <= bytes; i += 2 * lanes) {
    const auto v0 = hn::LoadU(d, in + i);
    const auto v1 = hn::LoadU(d, in + i + lanes);
    hn::StoreU(v0, d, out + i);
    hn::StoreU(v1, d, out + i + lanes);
  }
  std::memcpy(out + i, in + i, bytes - i);
}

// dst = src / divisor, for floats on vectors (integers: the reference).
template <typename T>
void DivideLoop(std::byte* dst, const std::byte* src, std::size_t n, int divisor) {
  std::size_t i = 0;
  if constexpr (!std::is_integral_v<T>) {
    using L = Lanes<T>;
    const typename L::D d;
    const typename L::DS ds;
    using S = hn::TFromD<typename L::DS>;
    const std::size_t lanes = hn::Lanes(d);
    const auto div = hn::Set(d, static_cast<hn::TFromD<typename L::D>>(divisor));
    for (; i + lanes <= n; i += lanes)
      hn::StoreU(L::Narrow(d, hn::Div(L::Load(d, src + i * sizeof(T)), div)), ds,
                 reinterpret_cast<S*>(dst + i * sizeof(T)));
  }
  reference::divide(dst + i * sizeof(T), src + i * sizeof(T), n - i, data_type_of<T>(), divisor);
}

void Divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor) {
  detail::dispatch(dtype, [&]<typename T>() {
    DivideLoop<T>(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), n, divisor);
  });
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

// ---- Dispatch -----------------------------------------------------------------------------------
#if HWY_ONCE
namespace loom::kernels {

namespace {
std::atomic<std::size_t> stream_bytes{kDefaultStreamBytes};

// LOOM_AVX512_DISABLE=1 keeps the kernels off AVX-512, to measure what an AVX2 machine would get.
[[maybe_unused]] const bool avx512_disabled = [] {
  const char* v = std::getenv("LOOM_AVX512_DISABLE");
  if (v == nullptr || std::strcmp(v, "1") != 0) return false;
  std::int64_t avx512 = HWY_AVX3 | HWY_AVX3_DL;
#ifdef HWY_AVX3_ZEN4
  avx512 |= HWY_AVX3_ZEN4;
#endif
#ifdef HWY_AVX3_SPR
  avx512 |= HWY_AVX3_SPR;
#endif
  hwy::DisableTargets(avx512);
  return true;
}();
}  // namespace
void set_stream_threshold(std::size_t bytes) {
  stream_bytes.store(bytes, std::memory_order_relaxed);
}
std::size_t stream_threshold() {
  return stream_bytes.load(std::memory_order_relaxed);
}

HWY_EXPORT(ReduceCopy);
HWY_EXPORT(Divide);
HWY_EXPORT(TargetName);
HWY_EXPORT(Convert);
HWY_EXPORT(StreamCopy);
HWY_EXPORT(VectorCopy);

void reduce(void* dst, const void* a, const void* b, std::size_t n, DataType dtype, ReduceOp op) {
  HWY_DYNAMIC_DISPATCH(ReduceCopy)
  (dst, nullptr, a, b, n, dtype, op == ReduceOp::avg ? ReduceOp::sum : op, 1);
}

void reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n, DataType dtype,
                 ReduceOp op, int divisor) {
  HWY_DYNAMIC_DISPATCH(ReduceCopy)(dst, dst2, a, b, n, dtype, op, divisor);
}

void divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor) {
  if (divisor == 1) {
    if (dst != src) copy(dst, src, n * size_of(dtype));
    return;
  }
  HWY_DYNAMIC_DISPATCH(Divide)(dst, src, n, dtype, divisor);
}

void convert(void* dst, DataType to, const void* src, DataType from, std::size_t n, float scale) {
  detail::check_convertible(to, from);
  HWY_DYNAMIC_DISPATCH(Convert)(dst, to, src, from, n, scale);
}

const char* simd_target() {
  return HWY_DYNAMIC_DISPATCH(TargetName)();
}

void stream_copy(void* dst, const void* src, std::size_t bytes) {
  HWY_DYNAMIC_DISPATCH(StreamCopy)(dst, src, bytes);
}

void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes >= kAliasedCopyMinBytes && copy_distance_aliases(dst, src))
    HWY_DYNAMIC_DISPATCH(VectorCopy)(dst, src, bytes);
  else if (bytes > 0)
    std::memcpy(dst, src, bytes);
}

}  // namespace loom::kernels
#endif
