// CPU reduction kernels: SIMD on Google Highway with run-time dispatch (reduce.cpp), and a scalar
// reference (reduce_reference.cpp), the oracle of the tests. Element rules, identical in both:
// - sum and prod of integers wrap (two's complement); avg divides the sum, truncating for integers;
// - f16 and bf16 are computed in float32 and rounded back to nearest-even;
// - min and max propagate NaN (any NaN input gives NaN, unlike fmin), and order -0 below +0,
//   so the result never depends on the order in which ranks are combined.
// Buffers may be unaligned; dst may be the same pointer as a or b (no partial overlap).
#pragma once

#include <cstddef>
#include <cstdint>

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

// dst[i] = src[i] * scale, from f32 to f16 or bf16 (rounded to nearest even) or back, or f32 to
// f32: gradient compression. Other pairs raise InvalidArgument. dst must not overlap src.
void convert(void* dst, DataType to, const void* src, DataType from, std::size_t n,
             float scale = 1.0f);

// Outputs of at least this many bytes that alias no input are written with non-temporal stores:
// cached, they would only evict the inputs (measured in bench/kernels). Slices of the engine are
// smaller, so this applies only to large calls made outside the engine. Settable for benchmarks and
// tests.
inline constexpr std::size_t kDefaultStreamBytes = std::size_t{8} << 20;
void set_stream_threshold(std::size_t bytes);
std::size_t stream_threshold();

// memcpy whose stores bypass the caches (non-temporal), for copies into outputs too large to stay
// cached: the cache keeps what the next copy reads, and no line is read before it is written.
// dst must not overlap src.
void stream_copy(void* dst, const void* src, std::size_t bytes);

// memcpy, except where the destination lies a few bytes past the source within a page: glibc
// 2.36 copies 4-480 KiB with `rep movsb`, which on an AMD Zen 3 ran 15-20x slower when
// (dst - src) mod 4096 was 1-31 (64 KiB: 35 us against 1.8; a vector loop 1.9). A slot's data is
// page-aligned and a large malloc'd buffer starts 16 bytes into its page, so every slice copied
// out into such a buffer paid it. Those distances take a vector loop. dst must not overlap src.
void copy(void* dst, const void* src, std::size_t bytes);
inline constexpr std::size_t kAliasedCopyMinBytes = 1024;
// Whether (dst - src) mod 4096 is 1-63: the distances above, with margin.
inline bool copy_distance_aliases(const void* dst, const void* src) {
  const auto distance =
      (reinterpret_cast<std::uintptr_t>(dst) - reinterpret_cast<std::uintptr_t>(src)) & 4095;
  return distance != 0 && distance < 64;
}

// The SIMD target the kernels run on here ("AVX3", "AVX2", "NEON", ...), for logs and benchmarks.
const char* simd_target();

// The scalar reference: the same contract, one element at a time. The oracle for tests.
namespace reference {
void reduce(void* dst, const void* a, const void* b, std::size_t n, DataType dtype, ReduceOp op);
void reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n, DataType dtype,
                 ReduceOp op, int divisor);
void divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor);
void convert(void* dst, DataType to, const void* src, DataType from, std::size_t n, float scale);
}  // namespace reference

}  // namespace loom::kernels
