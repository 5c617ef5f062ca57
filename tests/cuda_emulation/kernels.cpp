// kernels/cuda's launchers on the emulated runtime: the CPU kernels, run in stream order.
#include "emulation.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cuda/cuda_kernels.cuh"

namespace loom::kernels::cuda {

using cuda_emulation::Access;
using cuda_emulation::launch;

cudaError_t reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n,
                        DataType dtype, ReduceOp op, int divisor, cudaStream_t stream) {
  const std::size_t bytes = n * size_of(dtype);
  return launch(stream, {{dst, bytes}, {dst2, bytes}, {a, bytes}, {b, bytes}},
                [=] { kernels::reduce_copy(dst, dst2, a, b, n, dtype, op, divisor); });
}

cudaError_t divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor,
                   cudaStream_t stream) {
  const std::size_t bytes = n * size_of(dtype);
  return launch(stream, {{dst, bytes}, {src, bytes}},
                [=] { kernels::divide(dst, src, n, dtype, divisor); });
}

}  // namespace loom::kernels::cuda
