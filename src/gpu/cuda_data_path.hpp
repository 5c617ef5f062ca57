// The data path of calls on device buffers: copies (cudaMemcpyAsync: the copy engines) and the
// reduction kernels of kernels/cuda on the communicator's stream. Host slots (shared memory,
// TCP staging, RDMA buffers) are pinned when a connection is first used, so copies to and from
// them are DMA and kernels read and write them in place; a region that cannot be pinned is
// staged through device buffers instead.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "algorithms/engine.hpp"

namespace loom::gpu {

class CudaPath final : public algorithms::DataPath {
 public:
  // scratch: device memory for staging, in three parts of scratch_bytes / 3.
  CudaPath(int rank, int device, cudaStream_t stream, std::byte* scratch,
           std::size_t scratch_bytes);
  ~CudaPath() override;
  CudaPath(const CudaPath&) = delete;
  CudaPath& operator=(const CudaPath&) = delete;

  // The call about to run: its deadline, halt and connections, for complete()'s waits.
  void start(algorithms::Engine& engine) { engine_ = &engine; }
  void attach(transport::Connection& connection) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n,
                   DataType dtype, ReduceOp op, int divisor) override;
  void divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor) override;
  void complete() override;

 private:
  struct Region {
    std::byte* base;
    std::size_t bytes;
    bool pinned;         // registered here: unregistered at the end
    bool kernels_reach;  // kernels may take its host pointers
  };
  const Region* region_of(const void* p) const;
  bool staged_operand(const void* p) const;
  template <typename Launch>
  void staged(void* dst, void* dst2, const void* a, const void* b, std::size_t n, std::size_t elem,
              Launch&& launch);

  int rank_;
  int device_;
  cudaStream_t stream_;
  cudaEvent_t done_ = nullptr;
  std::byte* scratch_;
  std::size_t part_;
  bool host_pointers_reach_;  // the device takes registered host pointers as they are
  algorithms::Engine* engine_ = nullptr;
  std::vector<Region> regions_;
};

}  // namespace loom::gpu
