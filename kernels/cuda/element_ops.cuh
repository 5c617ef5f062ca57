// Per-element operations of the CUDA kernels, callable from device and host code, so that the
// host build (g++, no GPU) can check them against the CPU reference element by element.
// The rules are the CPU kernels' (kernels/cpu/reduce.hpp): integers wrap, avg truncates for
// integers, f16 and bf16 compute in float32 and round to nearest-even, min and max propagate
// NaN and order -0 below +0.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "loom/loom.hpp"

#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__ __forceinline__
#else
#define LOOM_HD inline
#endif

namespace loom::kernels::cuda {

// Storage type -> compute type: f16 and bf16 widen to float.
template <typename T>
struct Compute {
  using type = T;
  LOOM_HD static T widen(T v) { return v; }
  LOOM_HD static T narrow(T v) { return v; }
};
template <>
struct Compute<__half> {
  using type = float;
  LOOM_HD static float widen(__half v) { return __half2float(v); }
  LOOM_HD static __half narrow(float v) { return __float2half_rn(v); }
};
template <>
struct Compute<__nv_bfloat16> {
  using type = float;
  LOOM_HD static float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
  LOOM_HD static __nv_bfloat16 narrow(float v) { return __float2bfloat16_rn(v); }
};

template <typename F>
LOOM_HD bool sign_bit(F x) {
  if constexpr (sizeof(F) == 4) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    return (u >> 31) != 0;
  } else {
    std::uint64_t u;
    std::memcpy(&u, &x, 8);
    return (u >> 63) != 0;
  }
}

// x op y in the compute type C; avg reduces as sum (the division comes once, at the end).
template <ReduceOp OP, typename C>
LOOM_HD C apply(C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    if constexpr (OP == ReduceOp::sum || OP == ReduceOp::avg) {
      return x + y;
    } else if constexpr (OP == ReduceOp::prod) {
      return x * y;
    } else if constexpr (OP == ReduceOp::min) {
      if (x != x) return x;
      if (y != y) return y;
      if (x == y) return sign_bit(x) ? x : y;
      return x < y ? x : y;
    } else {
      if (x != x) return x;
      if (y != y) return y;
      if (x == y) return sign_bit(x) ? y : x;
      return x > y ? x : y;
    }
  } else {
    using U = std::make_unsigned_t<C>;
    using Wide = std::common_type_t<U, unsigned>;  // narrow types must not multiply as int
    if constexpr (OP == ReduceOp::sum || OP == ReduceOp::avg) {
      return static_cast<C>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
    } else if constexpr (OP == ReduceOp::prod) {
      return static_cast<C>(static_cast<U>(static_cast<Wide>(static_cast<U>(x)) *
                                           static_cast<Wide>(static_cast<U>(y))));
    } else if constexpr (OP == ReduceOp::min) {
      return x < y ? x : y;
    } else {
      return x > y ? x : y;
    }
  }
}

template <typename C>
LOOM_HD C divide_by(C x, int divisor) {
  if constexpr (std::is_floating_point_v<C>) {
    return x / static_cast<C>(divisor);
  } else if constexpr (std::is_signed_v<C>) {
    return static_cast<C>(static_cast<long long>(x) / divisor);
  } else {
    return static_cast<C>(static_cast<unsigned long long>(x) / static_cast<unsigned>(divisor));
  }
}

// One element of reduce_copy: a op b, divided by `divisor` when OP is avg and divisor > 1.
template <typename T, ReduceOp OP>
LOOM_HD T reduce_element(T a, T b, int divisor) {
  using K = Compute<T>;
  auto r = apply<OP>(K::widen(a), K::widen(b));
  if constexpr (OP == ReduceOp::avg) {
    if (divisor > 1) r = divide_by(r, divisor);
  }
  return K::narrow(r);
}

template <typename T>
LOOM_HD T divide_element(T x, int divisor) {
  using K = Compute<T>;
  return K::narrow(divide_by(K::widen(x), divisor));
}

// Calls f.template operator()<StorageType>() for the dtype.
template <typename F>
decltype(auto) dispatch_type(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::f32:
      return f.template operator()<float>();
    case DataType::f64:
      return f.template operator()<double>();
    case DataType::f16:
      return f.template operator()<__half>();
    case DataType::bf16:
      return f.template operator()<__nv_bfloat16>();
    case DataType::i8:
      return f.template operator()<std::int8_t>();
    case DataType::u8:
      return f.template operator()<std::uint8_t>();
    case DataType::i32:
      return f.template operator()<std::int32_t>();
    case DataType::u32:
      return f.template operator()<std::uint32_t>();
    case DataType::i64:
      return f.template operator()<std::int64_t>();
    case DataType::u64:
      return f.template operator()<std::uint64_t>();
  }
  return f.template operator()<std::uint8_t>();
}

// Calls f.template operator()<Op>() for the reduction.
template <typename F>
decltype(auto) dispatch_op(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::sum:
      return f.template operator()<ReduceOp::sum>();
    case ReduceOp::prod:
      return f.template operator()<ReduceOp::prod>();
    case ReduceOp::min:
      return f.template operator()<ReduceOp::min>();
    case ReduceOp::max:
      return f.template operator()<ReduceOp::max>();
    case ReduceOp::avg:
      return f.template operator()<ReduceOp::avg>();
  }
  return f.template operator()<ReduceOp::sum>();
}

}  // namespace loom::kernels::cuda
