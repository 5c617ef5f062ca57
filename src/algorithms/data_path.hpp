// Where a call's data is copied and reduced: on the CPU for host buffers, on a GPU (kernels on a
// stream) for device buffers. The primitives and algorithms move bytes only through this, so
// one engine serves both; a GPU path queues work and complete() waits for it before a slot the
// work wrote is posted or a slot it read is released.
#pragma once

#include <cstddef>

#include "kernels/cpu/cpu_kernels.hpp"
#include "loom/loom.hpp"
#include "transports/transport.hpp"

namespace loom::algorithms {

class DataPath {
 public:
  virtual ~DataPath() = default;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // A copy that need not stay cached (large calls): host memory streams past the caches.
  virtual void copy_streaming(void* dst, const void* src, std::size_t bytes) {
    copy(dst, src, bytes);
  }
  // r = a op b (divided by `divisor` for avg), to dst and, unless null, dst2
  // (kernels::reduce_copy).
  virtual void reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n,
                           DataType dtype, ReduceOp op, int divisor) = 0;
  virtual void divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor) = 0;
  // Returns once everything queued so far is done.
  virtual void complete() = 0;
  // dst = a op b with avg reducing as sum.
  void reduce(void* dst, const void* a, const void* b, std::size_t n, DataType dtype, ReduceOp op) {
    reduce_copy(dst, nullptr, a, b, n, dtype, op == ReduceOp::avg ? ReduceOp::sum : op, 1);
  }
  // Tells the path about a connection it will use (a GPU path learns which memory is host
  // slots, to stage it).
  virtual void attach(transport::Connection&) {}
};

// Host buffers: the SIMD kernels, synchronously.
class HostDataPath final : public DataPath {
 public:
  void copy(void* dst, const void* src, std::size_t bytes) override {
    kernels::copy(dst, src, bytes);
  }
  void copy_streaming(void* dst, const void* src, std::size_t bytes) override {
    kernels::stream_copy(dst, src, bytes);
  }
  void reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n,
                   DataType dtype, ReduceOp op, int divisor) override {
    kernels::reduce_copy(dst, dst2, a, b, n, dtype, op, divisor);
  }
  void divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor) override {
    kernels::divide(dst, src, n, dtype, divisor);
  }
  void complete() override {}
};

}  // namespace loom::algorithms
