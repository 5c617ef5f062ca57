// IEEE binary16 and bfloat16 <-> float32, round-to-nearest-even, NaN kept NaN (made quiet).
#pragma once

#include <bit>
#include <cstdint>

namespace loom::kernels {

inline float f16_to_f32(std::uint16_t h) {
  std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float.
    float magnitude = static_cast<float>(mant) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

inline std::uint16_t f32_to_f16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  std::uint32_t sign = (bits >> 16) & 0x8000u;
  bits &= 0x7fffffffu;
  std::uint16_t out;
  if (bits >= 0x47800000u) {  // |value| >= 65536, inf or NaN: all exponent bits set
    out = bits > 0x7f800000u ? static_cast<std::uint16_t>(0x7e00u | ((bits >> 13) & 0x3ffu))
                             : 0x7c00u;
  } else if (bits < 0x38800000u) {
    // The result is subnormal or zero: adding 0.5f aligns the 10 mantissa bits at the bottom of
    // the float, and the FPU's own round-to-nearest-even does the rounding.
    float aligned = std::bit_cast<float>(bits) + 0.5f;
    out = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(aligned) - 0x3f000000u);
  } else {
    std::uint32_t odd = (bits >> 13) & 1u;
    bits += 0xc8000fffu + odd;  // rebias the exponent (-112 << 23) and add the rounding bias
    out = static_cast<std::uint16_t>(bits >> 13);
  }
  return static_cast<std::uint16_t>(out | sign);
}

inline float bf16_to_f32(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

inline std::uint16_t f32_to_bf16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

}  // namespace loom::kernels
