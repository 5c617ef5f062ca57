// The element rules every reduction kernel follows, in one place for the CPU (the scalar
// reference, the oracle of the tests) and the GPU (kernels/cuda, compiled by nvcc):
// - sum and prod of integers wrap (two's complement); avg divides the sum, truncating integers;
// - min and max propagate NaN (any NaN input gives NaN, unlike fmin), and order -0 below +0,
//   so the result never depends on the order in which ranks are combined.
// C is the compute type: f16 and bf16 are widened to float before they get here.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "loom/loom.hpp"

#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__ __forceinline__
#else
#define LOOM_HD inline
#endif

namespace loom::kernels {

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

// x op y; avg combines as sum (the division comes once, at the end).
template <ReduceOp OP, typename C>
LOOM_HD C combine(C x, C y) {
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

// Calls f.template operator()<StorageType>() for the dtype, with the storage types of f16 and
// bf16 given (the CPU's own bit containers, or CUDA's __half and __nv_bfloat16).
template <typename F16, typename BF16, typename F>
decltype(auto) dispatch_type(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::f32:
      return f.template operator()<float>();
    case DataType::f64:
      return f.template operator()<double>();
    case DataType::f16:
      return f.template operator()<F16>();
    case DataType::bf16:
      return f.template operator()<BF16>();
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

}  // namespace loom::kernels
