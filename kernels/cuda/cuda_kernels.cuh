// CUDA reduction kernels, launched on a given stream. Host code includes this header with any
// C++ compiler: it needs only the CUDA runtime's C API header.
//
// The element rules are the CPU kernels' (kernels/cpu/reduce.hpp). Pointers are anything the
// device can address: device memory, managed memory, or host memory registered as mapped
// (pinned slots). dst may be the same pointer as a or b (no partial overlap). When every pointer
// sits at the same offset from a 16-byte boundary the kernels use 16-byte loads and stores
// after a short scalar head; otherwise they go element by element (still coalesced).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "loom/loom.hpp"

namespace loom::kernels::cuda {

// r = a[i] op b[i], divided by `divisor` when op is avg (divisor 1: a plain sum), written to dst
// and, when dst2 is not null, to dst2 in the same pass. Returns the launch's error.
cudaError_t reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n,
                        DataType dtype, ReduceOp op, int divisor, cudaStream_t stream);
// dst[i] = src[i] / divisor.
cudaError_t divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor,
                   cudaStream_t stream);
}  // namespace loom::kernels::cuda
