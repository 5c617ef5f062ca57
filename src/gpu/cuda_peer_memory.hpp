// Device memory shared with the ranks of this host through CUDA IPC, for the direct path:
// - user buffers are shared by their allocation (cudaIpcGetMemHandle of its base, cached by
//   allocation and its id, as NCCL's user-buffer registration does); a peer maps an allocation
//   once (cudaIpcOpenMemHandle) and keeps the mapping until the allocation's id changes or the
//   mapping is the least recently used of too many;
// - signals are two interprocess events per rank, exported once; a peer's are opened once.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <map>
#include <utility>

#include "algorithms/peer_memory.hpp"

namespace loom::gpu {

class CudaPeerMemory final : public algorithms::PeerMemory {
 public:
  CudaPeerMemory(int rank, int device, cudaStream_t stream);
  ~CudaPeerMemory() override;
  CudaPeerMemory(const CudaPeerMemory&) = delete;
  CudaPeerMemory& operator=(const CudaPeerMemory&) = delete;

  std::optional<Range> share(const void* p, std::size_t bytes) override;
  void* map(int peer, const Range& range, std::size_t bytes) override;
  Signal record(Point point) override;
  void wait(int peer, const Signal& signal) override;

  // Whether teardown may close mappings (the stream finished: nothing in flight uses them).
  void set_stream_drained(bool drained) { drained_ = drained; }

 private:
  struct Exported {
    std::uint64_t id;
    cudaIpcMemHandle_t handle;
  };
  struct Mapping {
    std::uint64_t id;
    std::size_t bytes;
    void* base;
    std::uint64_t last_use;
  };
  void unmap(std::map<std::pair<int, std::uint64_t>, Mapping>::iterator it);

  int rank_;
  int device_;
  cudaStream_t stream_;
  bool drained_ = false;
  std::map<void*, Exported> exported_;  // by allocation base
  // A peer's allocations mapped here, by (peer, the allocation's base in the peer).
  std::map<std::pair<int, std::uint64_t>, Mapping> mapped_;
  std::uint64_t uses_ = 0;
  std::array<cudaEvent_t, 2> signals_{};
  std::array<Signal, 2> signal_handles_{};
  std::map<std::pair<int, std::array<std::uint8_t, 64>>, cudaEvent_t> peer_signals_;
};

}  // namespace loom::gpu
