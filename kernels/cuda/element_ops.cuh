// Per-element operations of the CUDA kernels, callable from device and host code, so that the
// host build (g++, no GPU) can check them against the CPU reference element by element. The
// rules themselves are shared with the CPU (../common/element_rules.hpp); here f16 and bf16
// widen to float32 and round back to nearest-even through cuda_fp16.h and cuda_bf16.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <utility>

#include "../common/element_rules.hpp"

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

// One element of reduce_copy: a op b, divided by `divisor` when OP is avg and divisor > 1.
template <typename T, ReduceOp OP>
LOOM_HD T reduce_element(T a, T b, int divisor) {
  using K = Compute<T>;
  auto r = combine<OP>(K::widen(a), K::widen(b));
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
  return kernels::dispatch_type<__half, __nv_bfloat16>(dtype, std::forward<F>(f));
}

}  // namespace loom::kernels::cuda
