#include "gpu/cuda_data_path.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "base/logging.hpp"
#include "device/cuda_util.hpp"
#include "gpu/cuda_wait.hpp"
#include "kernels/cuda/cuda_kernels.cuh"

namespace loom::gpu {

using device::DeviceScope;
using device::error_text;

CudaPath::CudaPath(int rank, int device, cudaStream_t stream, std::byte* scratch,
                   std::size_t scratch_bytes)
    : rank_(rank), device_(device), stream_(stream), scratch_(scratch), part_(scratch_bytes / 3) {
  check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), rank, "cudaEventCreate");
  int reach = 0;
  if (cudaDeviceGetAttribute(&reach, cudaDevAttrCanUseHostPointerForRegisteredMem, device) !=
      cudaSuccess)
    reach = 0, cudaGetLastError();
  host_pointers_reach_ = reach != 0;
}

CudaPath::~CudaPath() {
  DeviceScope scope(device_);
  for (const Region& r : regions_)
    if (r.pinned) cudaHostUnregister(r.base);
  cudaGetLastError();
  cudaEventDestroy(done_);
}

void CudaPath::attach(transport::Connection& connection) {
  for (const auto& r : connection.host_regions()) {
    auto* start = static_cast<std::byte*>(r.base);
    if (region_of(start) != nullptr) continue;  // a connection attached before shares it
    // Pinned host memory moves by DMA without the driver's bounce buffers, and kernels reach it
    // through its host pointer. Nothing holds a user's stream here, so the implicit
    // synchronisation of cudaHostRegister waits for nothing that waits for us.
    const cudaError_t e =
        cudaHostRegister(start, r.bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
    if (e != cudaSuccess) {
      cudaGetLastError();
      base::log().info("rank {}: cannot pin {} bytes of host slots ({}): staging them instead",
                       rank_, r.bytes, error_text(e));
    }
    regions_.push_back(
        Region{start, r.bytes, e == cudaSuccess, e == cudaSuccess && host_pointers_reach_});
  }
}

const CudaPath::Region* CudaPath::region_of(const void* p) const {
  auto* b = static_cast<const std::byte*>(p);
  for (const Region& r : regions_)
    if (b >= r.base && b < r.base + r.bytes) return &r;
  return nullptr;
}

// Host memory a kernel cannot take as it is.
bool CudaPath::staged_operand(const void* p) const {
  const Region* r = p ? region_of(p) : nullptr;
  return r != nullptr && !r->kernels_reach;
}

void CudaPath::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), rank_, "cudaMemcpyAsync");
}

void CudaPath::reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n,
                           DataType dtype, ReduceOp op, int divisor) {
  staged(dst, dst2, a, b, n, size_of(dtype),
         [&](void* d, void* d2, const void* x, const void* y, std::size_t m) {
           check(kernels::cuda::reduce_copy(d, d2, x, y, m, dtype, op, divisor, stream_), rank_,
                 "the reduce kernel's launch");
         });
}

void CudaPath::divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor) {
  staged(dst, nullptr, src, src, n, size_of(dtype),
         [&](void* d, void*, const void* x, const void*, std::size_t m) {
           check(kernels::cuda::divide(d, x, m, dtype, divisor, stream_), rank_,
                 "the divide kernel's launch");
         });
}

void CudaPath::complete() {
  check(cudaEventRecord(done_, stream_), rank_, "cudaEventRecord");
  wait_event(done_, engine_->deadline(), engine_->halt(), engine_->used(), rank_,
             engine_->call().describe(), "the GPU's copies and reductions");
}

// Runs launch(dst, dst2, a, b, count) on memory kernels reach: operands in host memory they do
// not reach are copied into the staging buffers first, results for it copied out after, in parts
// of one staging buffer.
template <typename Launch>
void CudaPath::staged(void* dst, void* dst2, const void* a, const void* b, std::size_t n,
                      std::size_t elem, Launch&& launch) {
  const bool a_host = staged_operand(a), b_host = b != a && staged_operand(b);
  const bool dst_host = staged_operand(dst), dst2_host = staged_operand(dst2);
  if (!a_host && !b_host && !dst_host && !dst2_host) return launch(dst, dst2, a, b, n);
  auto in_at = [elem](const void* p, std::size_t i) -> const void* {
    return static_cast<const std::byte*>(p) + i * elem;
  };
  auto out_at = [elem](void* p, std::size_t i) -> void* {
    return static_cast<std::byte*>(p) + i * elem;
  };
  std::byte* stage_a = scratch_;
  std::byte* stage_b = scratch_ + part_;
  std::byte* stage_out = scratch_ + 2 * part_;
  const std::size_t step = std::max<std::size_t>(1, part_ / elem);
  for (std::size_t off = 0; off < n; off += step) {
    const std::size_t m = std::min(step, n - off), bytes = m * elem;
    const void* x = in_at(a, off);
    const void* y = in_at(b, off);
    if (a_host) copy(stage_a, x, bytes), x = stage_a;
    if (b == a) y = x;
    if (b_host) copy(stage_b, y, bytes), y = stage_b;
    void* d = dst_host ? stage_out : out_at(dst, off);
    void* d2 = dst2 && !dst2_host ? out_at(dst2, off) : nullptr;
    launch(d, d2, x, y, m);
    if (dst_host) copy(out_at(dst, off), stage_out, bytes);
    if (dst2_host) copy(out_at(dst2, off), d, bytes);
  }
}

}  // namespace loom::gpu
