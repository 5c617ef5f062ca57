// f16 and bf16 <-> f32 on SIMD vectors, bit-identical to half.hpp (round to nearest even, NaN
// kept NaN and made quiet, subnormals kept). A Highway per-target header: included once per
// target by reduce.cpp, hence the toggled include guard.
#if defined(LOOM_KERNELS_HALF_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOOM_KERNELS_HALF_SIMD_INL_H_
#undef LOOM_KERNELS_HALF_SIMD_INL_H_
#else
#define LOOM_KERNELS_HALF_SIMD_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace loom::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// x86 has exact conversion instructions from AVX2 on (F16C, round to nearest even); elsewhere,
// and for bf16 (whose AVX-512 instruction flushes subnormals), the integer forms below.
#undef LOOM_HARDWARE_F16
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
#define LOOM_HARDWARE_F16 1
#else
#define LOOM_HARDWARE_F16 0
#endif

// df: float lanes; d16: uint16_t lanes, as many.
template <class DF, class D16 = hn::Rebind<uint16_t, DF>>
HWY_INLINE hn::Vec<DF> F16ToF32(DF df, hn::Vec<D16> h) {
#if LOOM_HARDWARE_F16
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::BitCast(dh, h));
#else
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::PromoteTo(du, h);
  const auto sign = hn::ShiftLeft<16>(hn::And(bits, hn::Set(du, 0x8000u)));
  const auto exp = hn::And(hn::ShiftRight<10>(bits), hn::Set(du, 0x1fu));
  const auto mant = hn::And(bits, hn::Set(du, 0x3ffu));
  const auto normal =
      hn::Or(hn::ShiftLeft<23>(hn::Add(exp, hn::Set(du, 112u))), hn::ShiftLeft<13>(mant));
  const auto inf_nan = hn::Or(hn::Set(du, 0x7f800000u), hn::ShiftLeft<13>(mant));
  // Zero or subnormal: mant * 2^-24 is exact in float.
  const auto tiny =
      hn::BitCast(du, hn::Mul(hn::ConvertTo(df, hn::BitCast(di, mant)), hn::Set(df, 0x1p-24f)));
  const auto e = hn::BitCast(di, exp);
  auto r = hn::IfThenElse(hn::RebindMask(du, hn::Eq(e, hn::Set(di, 31))), inf_nan, normal);
  r = hn::IfThenElse(hn::RebindMask(du, hn::Eq(e, hn::Zero(di))), tiny, r);
  return hn::BitCast(df, hn::Or(r, sign));
#endif
}

template <class DF, class D16 = hn::Rebind<uint16_t, DF>>
HWY_INLINE hn::Vec<D16> F32ToF16(DF df, hn::Vec<DF> v) {
  const D16 d16;
#if LOOM_HARDWARE_F16
  (void)df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::BitCast(d16, hn::DemoteTo(dh, v));
#else
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::BitCast(du, v);
  const auto sign = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 0x8000u));
  const auto abs = hn::And(bits, hn::Set(du, 0x7fffffffu));
  const auto abs_i = hn::BitCast(di, abs);  // below 2^31: signed comparisons are exact
  // |v| >= 65536, inf or NaN.
  const auto nan = hn::Or(hn::Set(du, 0x7e00u), hn::And(hn::ShiftRight<13>(abs), hn::Set(du, 0x3ffu)));
  const auto big = hn::IfThenElse(hn::RebindMask(du, hn::Gt(abs_i, hn::Set(di, 0x7f800000))), nan,
                                   hn::Set(du, 0x7c00u));
  // Subnormal or zero result: adding 0.5f aligns the mantissa, the FPU rounds to nearest even.
  const auto small = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, abs), hn::Set(df, 0.5f))),
                             hn::Set(du, 0x3f000000u));
  // Normal: rebias the exponent (-112 << 23, wrapping) and add the rounding bias.
  const auto odd = hn::And(hn::ShiftRight<13>(abs), hn::Set(du, 1u));
  const auto normal = hn::ShiftRight<13>(hn::Add(hn::Add(abs, hn::Set(du, 0xc8000fffu)), odd));
  auto r = hn::IfThenElse(hn::RebindMask(du, hn::Lt(abs_i, hn::Set(di, 0x38800000))), small, normal);
  r = hn::IfThenElse(hn::RebindMask(du, hn::Gt(abs_i, hn::Set(di, 0x477fffff))), big, r);
  r = hn::Or(r, sign);
  return hn::DemoteTo(d16, hn::BitCast(di, r));  // every value fits 16 bits: no saturation
#endif
}

template <class DF, class D16 = hn::Rebind<uint16_t, DF>>
HWY_INLINE hn::Vec<DF> BF16ToF32(DF df, hn::Vec<D16> h) {
  const hn::RebindToUnsigned<DF> du;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, h)));
}

template <class DF, class D16 = hn::Rebind<uint16_t, DF>>
HWY_INLINE hn::Vec<D16> F32ToBF16(DF df, hn::Vec<DF> v) {
  (void)df;
  const D16 d16;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::BitCast(du, v);
  const auto high = hn::ShiftRight<16>(bits);
  const auto rounded = hn::ShiftRight<16>(
      hn::Add(bits, hn::Add(hn::Set(du, 0x7fffu), hn::And(high, hn::Set(du, 1u)))));
  const auto r = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Or(high, hn::Set(du, 0x40u)),
                                rounded);
  return hn::DemoteTo(d16, hn::BitCast(di, r));
}

}  // namespace loom::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // LOOM_KERNELS_HALF_SIMD_INL_H_
