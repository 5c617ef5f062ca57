#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::bench {

template <typename T>
void plain_add(T* __restrict c, const T* __restrict a, const T* __restrict b, std::size_t n);

}  // namespace loom::bench
