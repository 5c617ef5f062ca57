// CPU reduction kernels. Element rules, identical in every implementation:
// - sum and prod of integers wrap (two's complement); avg divides the sum, truncating for integers;
// - f16 and bf16 are computed in float32 and rounded back to nearest-even;
// - min and max propagate NaN (any NaN input gives NaN, unlike fmin), and order -0 below +0,
//   so the result never depends on the order in which ranks are combined.
// Buffers may be unaligned; dst may be the same pointer as a or b (no partial overlap).
#pragma once

#include <cstddef>

#include "loom/loom.hpp"

namespace loom::kernels {

// dst[i] = a[i] op b[i]; avg reduces as sum (divide once with divide()).
void reduce(void* dst, const void* a, const void* b, std::size_t n, DataType dtype, ReduceOp op);
// Fused last step of a reduction: r = a[i] op b[i], divided by `divisor` when op is avg, written
// to dst and, when dst2 is not null, to dst2 in the same pass.
void reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n, DataType dtype,
                 ReduceOp op, int divisor);
// dst[i] = src[i] / divisor (avg over a reduction that was summed).
void divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor);

// The scalar reference: the same contract, one element at a time. The oracle for tests.
namespace reference {
void reduce(void* dst, const void* a, const void* b, std::size_t n, DataType dtype, ReduceOp op);
void reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n, DataType dtype,
                 ReduceOp op, int divisor);
void divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor);
}  // namespace reference

}  // namespace loom::kernels
