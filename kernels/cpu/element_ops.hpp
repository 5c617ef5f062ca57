// Per-element operations shared by the reference and the vectorised kernels, so both compute
// bit-identical results.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "../common/element_rules.hpp"
#include "half.hpp"
#include "loom/loom.hpp"

namespace loom::kernels::detail {

// Storage types that compute in float32.
struct Half {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};

template <typename T>
struct Compute {
  using type = T;
  static T widen(T v) { return v; }
  static T narrow(T v) { return v; }
};
template <>
struct Compute<Half> {
  using type = float;
  static float widen(Half v) { return f16_to_f32(v.bits); }
  static Half narrow(float v) { return Half{f32_to_f16(v)}; }
};
template <>
struct Compute<BFloat16> {
  using type = float;
  static float widen(BFloat16 v) { return bf16_to_f32(v.bits); }
  static BFloat16 narrow(float v) { return BFloat16{f32_to_bf16(v)}; }
};

template <typename T>
inline T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
inline void store(void* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// x op y by the shared rules (../common/element_rules.hpp), the reduction chosen at run time.
template <typename C>
inline C apply(C x, C y, ReduceOp op) {
  return dispatch_op(op, [&]<ReduceOp OP>() { return combine<OP>(x, y); });
}

// The DataType whose storage type is T.
template <typename T>
constexpr DataType data_type_of() {
  if constexpr (std::is_same_v<T, float>) return DataType::f32;
  if constexpr (std::is_same_v<T, double>) return DataType::f64;
  if constexpr (std::is_same_v<T, Half>) return DataType::f16;
  if constexpr (std::is_same_v<T, BFloat16>) return DataType::bf16;
  if constexpr (std::is_same_v<T, std::int8_t>) return DataType::i8;
  if constexpr (std::is_same_v<T, std::uint8_t>) return DataType::u8;
  if constexpr (std::is_same_v<T, std::int32_t>) return DataType::i32;
  if constexpr (std::is_same_v<T, std::uint32_t>) return DataType::u32;
  if constexpr (std::is_same_v<T, std::int64_t>) return DataType::i64;
  return DataType::u64;
}

// Calls f.template operator()<StorageType>() for the dtype.
template <typename F>
decltype(auto) dispatch(DataType dtype, F&& f) {
  return dispatch_type<Half, BFloat16>(dtype, std::forward<F>(f));
}

// convert() takes f32 to or from f16 and bf16, and f32 to f32.
inline void check_convertible(DataType to, DataType from) {
  auto half = [](DataType t) { return t == DataType::f16 || t == DataType::bf16; };
  if (!((from == DataType::f32 && (half(to) || to == DataType::f32)) ||
        (to == DataType::f32 && half(from))))
    throw InvalidArgument("convert: only f32 <-> f16, f32 <-> bf16 and f32 -> f32 are supported");
}

}  // namespace loom::kernels::detail
