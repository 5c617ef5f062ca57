// The kernels the engine calls: loops specialised per dtype and op at compile time, which the
// compiler vectorises. Results are bit-identical to the reference (same element_ops).
#include <cstring>

#include "element_ops.hpp"
#include "reduce.hpp"

namespace loom::kernels {
namespace {

using namespace detail;

template <typename T, ReduceOp kOp, bool kDivide, bool kSecondOutput>
void loop(char* dst, char* dst2, const char* a, const char* b, std::size_t n, int divisor) {
  using K = Compute<T>;
  constexpr std::size_t w = sizeof(T);
  for (std::size_t i = 0; i < n; ++i) {
    auto r = apply(K::widen(load<T>(a + i * w)), K::widen(load<T>(b + i * w)), kOp);
    if constexpr (kDivide) r = divide_by(r, divisor);
    T out = K::narrow(r);
    store(dst + i * w, out);
    if constexpr (kSecondOutput) store(dst2 + i * w, out);
  }
}

template <typename T, bool kDivide, bool kSecondOutput>
void by_op(ReduceOp op, char* dst, char* dst2, const char* a, const char* b, std::size_t n,
           int divisor) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return loop<T, ReduceOp::sum, kDivide, kSecondOutput>(dst, dst2, a, b, n, divisor);
    case ReduceOp::prod:
      return loop<T, ReduceOp::prod, kDivide, kSecondOutput>(dst, dst2, a, b, n, divisor);
    case ReduceOp::min:
      return loop<T, ReduceOp::min, kDivide, kSecondOutput>(dst, dst2, a, b, n, divisor);
    case ReduceOp::max:
      return loop<T, ReduceOp::max, kDivide, kSecondOutput>(dst, dst2, a, b, n, divisor);
  }
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, std::size_t n, DataType dtype, ReduceOp op) {
  reduce_copy(dst, nullptr, a, b, n, dtype, op == ReduceOp::avg ? ReduceOp::sum : op, 1);
}

void reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n, DataType dtype,
                 ReduceOp op, int divisor) {
  auto* d = static_cast<char*>(dst);
  auto* d2 = static_cast<char*>(dst2);
  auto* x = static_cast<const char*>(a);
  auto* y = static_cast<const char*>(b);
  bool divide = op == ReduceOp::avg && divisor != 1;
  dispatch(dtype, [&]<typename T>() {
    if (divide) {
      if (d2)
        by_op<T, true, true>(op, d, d2, x, y, n, divisor);
      else
        by_op<T, true, false>(op, d, d2, x, y, n, divisor);
    } else {
      if (d2)
        by_op<T, false, true>(op, d, d2, x, y, n, divisor);
      else
        by_op<T, false, false>(op, d, d2, x, y, n, divisor);
    }
  });
}

void divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor) {
  if (divisor == 1) {
    if (dst != src) std::memmove(dst, src, n * size_of(dtype));
    return;
  }
  reference::divide(dst, src, n, dtype, divisor);
}

}  // namespace loom::kernels
