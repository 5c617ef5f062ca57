// The reduce and reduce-copy kernels: grid-stride loops over 16-byte vectors (four in flight per
// thread, loaded before any is stored, so a thread keeps several memory requests open), a
// scalar head up to the first 16-byte boundary and a scalar tail.
#include <algorithm>

#include "cuda_kernels.cuh"
#include "element_ops.cuh"

namespace loom::kernels::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;
constexpr std::size_t kNoVector = ~std::size_t{0};

// Binary operation of one call; `b` is read only by binary ops.
template <typename T, ReduceOp OP>
struct ReduceFn {
  int divisor;
  __device__ __forceinline__ T operator()(T a, T b) const {
    return reduce_element<T, OP>(a, b, divisor);
  }
};
template <typename T>
struct DivideFn {
  int divisor;
  __device__ __forceinline__ T operator()(T a, T) const { return divide_element(a, divisor); }
};

template <typename T, typename Fn>
__device__ __forceinline__ uint4 apply_vector(uint4 va, uint4 vb, const Fn& fn) {
  constexpr int kPer = 16 / sizeof(T);
  T x[kPer], y[kPer];
  memcpy(x, &va, 16);
  memcpy(y, &vb, 16);
#pragma unroll
  for (int k = 0; k < kPer; ++k) x[k] = fn(x[k], y[k]);
  uint4 r;
  memcpy(&r, x, 16);
  return r;
}

// Element i, outside the vector path.
template <typename T, typename Fn>
__device__ __forceinline__ void apply_element(T* dst, T* dst2, const T* a, const T* b,
                                              std::size_t i, const Fn& fn) {
  const T r = fn(a[i], b[i]);
  dst[i] = r;
  if (dst2) dst2[i] = r;
}

// head: elements before the 16-byte-aligned middle (kNoVector: no vector path at all).
template <typename T, typename Fn>
__global__ void __launch_bounds__(kThreads, 2)
    map_kernel(T* dst, T* dst2, const T* a, const T* b, std::size_t n, std::size_t head, Fn fn) {
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t threads = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  if (head == kNoVector) {
    for (std::size_t i = tid; i < n; i += threads) apply_element(dst, dst2, a, b, i, fn);
    return;
  }
  constexpr std::size_t kPer = 16 / sizeof(T);
  const std::size_t nvec = (n - head) / kPer;
  const std::size_t vec_end = head + nvec * kPer;
  // Head and tail: at most 2 * kPer - 2 elements, taken by the first threads.
  if (tid < head) apply_element(dst, dst2, a, b, tid, fn);
  if (tid < n - vec_end) apply_element(dst, dst2, a, b, vec_end + tid, fn);
  const uint4* va = reinterpret_cast<const uint4*>(a + head);
  const uint4* vb = reinterpret_cast<const uint4*>(b + head);
  uint4* vd = reinterpret_cast<uint4*>(dst + head);
  uint4* vd2 = dst2 ? reinterpret_cast<uint4*>(dst2 + head) : nullptr;
  std::size_t i = tid;
  for (; i + (kUnroll - 1) * threads < nvec; i += kUnroll * threads) {
    uint4 x[kUnroll], y[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      x[k] = va[i + k * threads];
      y[k] = vb[i + k * threads];
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const uint4 r = apply_vector<T>(x[k], y[k], fn);
      vd[i + k * threads] = r;
      if (vd2) vd2[i + k * threads] = r;
    }
  }
  for (; i < nvec; i += threads) {
    const uint4 x = va[i], y = vb[i];  // whole-vector loads before the element view
    const uint4 r = apply_vector<T>(x, y, fn);
    vd[i] = r;
    if (vd2) vd2[i] = r;
  }
}

// Blocks for n elements: enough to fill the device, capped so that each thread loops a few times.
int blocks_for(std::size_t n, std::size_t per_thread) {
  static thread_local int device = -1, sms = 0;
  int current = 0;
  cudaGetDevice(&current);
  if (current != device) {
    device = current;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
      sms = 32;
  }
  const std::size_t wanted = (n + per_thread * kThreads - 1) / (per_thread * kThreads);
  return static_cast<int>(std::clamp<std::size_t>(wanted, 1, static_cast<std::size_t>(sms) * 4));
}

// The scalar head that brings every pointer to a 16-byte boundary, or kNoVector when they sit
// at different offsets (or are not even element-aligned).
template <typename T>
std::size_t vector_head(std::size_t n, const void* dst, const void* dst2, const void* a,
                        const void* b) {
  const auto off = reinterpret_cast<std::uintptr_t>(a) % 16;
  for (const void* p : {dst, dst2, b})
    if (p && reinterpret_cast<std::uintptr_t>(p) % 16 != off) return kNoVector;
  if (off % sizeof(T) != 0) return kNoVector;
  const std::size_t head = ((16 - off) % 16) / sizeof(T);
  return head < n ? head : kNoVector;
}

template <typename T, typename Fn>
cudaError_t launch(void* dst, void* dst2, const void* a, const void* b, std::size_t n, Fn fn,
                   cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const std::size_t head = vector_head<T>(n, dst, dst2, a, b);
  const std::size_t per_thread = head == kNoVector ? 1 : kUnroll * (16 / sizeof(T));
  map_kernel<T, Fn><<<blocks_for(n, per_thread), kThreads, 0, stream>>>(
      static_cast<T*>(dst), static_cast<T*>(dst2), static_cast<const T*>(a),
      static_cast<const T*>(b), n, head, fn);
  return cudaGetLastError();
}

}  // namespace

cudaError_t reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n,
                        DataType dtype, ReduceOp op, int divisor, cudaStream_t stream) {
  return dispatch_type(dtype, [&]<typename T>() {
    return dispatch_op(op, [&]<ReduceOp OP>() {
      return launch<T>(dst, dst2, a, b, n, ReduceFn<T, OP>{divisor}, stream);
    });
  });
}

cudaError_t divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor,
                   cudaStream_t stream) {
  return dispatch_type(dtype, [&]<typename T>() {
    return launch<T>(dst, nullptr, src, src, n, DivideFn<T>{divisor}, stream);
  });
}

}  // namespace loom::kernels::cuda
