// The limit the kernels are measured against: c[i] = a[i] + b[i] as plain C++, built with
// -O3 -march=native (see CMakeLists.txt), so the compiler vectorises it for this very machine.
#include "plain_add.hpp"

namespace loom::bench {

template <typename T>
void plain_add(T* __restrict c, const T* __restrict a, const T* __restrict b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}
template void plain_add<float>(float*, const float*, const float*, std::size_t);
template void plain_add<double>(double*, const double*, const double*, std::size_t);
template void plain_add<std::int32_t>(std::int32_t*, const std::int32_t*, const std::int32_t*,
                                      std::size_t);

}  // namespace loom::bench
