// The scalar reference: one element at a time, dispatching on dtype and op per element.
#include "cpu_kernels.hpp"
#include "element_ops.hpp"

namespace loom::kernels::reference {

using namespace detail;

void reduce(void* dst, const void* a, const void* b, std::size_t n, DataType dtype, ReduceOp op) {
  reduce_copy(dst, nullptr, a, b, n, dtype, op == ReduceOp::avg ? ReduceOp::sum : op, 1);
}

void reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n, DataType dtype,
                 ReduceOp op, int divisor) {
  dispatch(dtype, [&]<typename T>() {
    using K = Compute<T>;
    const std::size_t w = sizeof(T);
    for (std::size_t i = 0; i < n; ++i) {
      auto x = K::widen(load<T>(static_cast<const char*>(a) + i * w));
      auto y = K::widen(load<T>(static_cast<const char*>(b) + i * w));
      auto r = apply(x, y, op);
      if (op == ReduceOp::avg) r = divide_by(r, divisor);
      T out = K::narrow(r);
      store(static_cast<char*>(dst) + i * w, out);
      if (dst2) store(static_cast<char*>(dst2) + i * w, out);
    }
  });
}

void divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor) {
  dispatch(dtype, [&]<typename T>() {
    using K = Compute<T>;
    const std::size_t w = sizeof(T);
    for (std::size_t i = 0; i < n; ++i) {
      auto x = K::widen(load<T>(static_cast<const char*>(src) + i * w));
      store(static_cast<char*>(dst) + i * w, K::narrow(divide_by(x, divisor)));
    }
  });
}

void convert(void* dst, DataType to, const void* src, DataType from, std::size_t n, float scale) {
  check_convertible(to, from);
  dispatch(from, [&]<typename S>() {
    dispatch(to, [&]<typename D>() {
      if constexpr (std::is_same_v<typename Compute<S>::type, float> &&
                    std::is_same_v<typename Compute<D>::type, float>) {
        for (std::size_t i = 0; i < n; ++i) {
          float x = Compute<S>::widen(load<S>(static_cast<const char*>(src) + i * sizeof(S)));
          store(static_cast<char*>(dst) + i * sizeof(D), Compute<D>::narrow(x * scale));
        }
      }
    });
  });
}

}  // namespace loom::kernels::reference
