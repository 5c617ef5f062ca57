#include "gpu/cuda_peer_memory.hpp"

#include <cstring>

#include <fmt/format.h>

#include "base/logging.hpp"
#include "device/cuda_util.hpp"
#include "gpu/cuda_wait.hpp"
#include "gpu/driver_api.hpp"

namespace loom::gpu {

using device::DeviceScope;
using device::error_text;

namespace {

// A mapping cache this large holds every buffer a training loop passes; beyond it the least
// recently used mapping is closed.
constexpr std::size_t kMaxMappings = 256;

// Range::bytes: the handle, then the allocation's base (in the owner), size and id, and the
// offset of the shared range in it.
struct RangeLayout {
  cudaIpcMemHandle_t handle;
  std::uint64_t base;
  std::uint64_t allocation_bytes;
  std::uint64_t id;
  std::uint64_t offset;
};
static_assert(sizeof(RangeLayout) <= sizeof(algorithms::PeerMemory::Range::bytes));
static_assert(sizeof(cudaIpcEventHandle_t) <= sizeof(algorithms::PeerMemory::Signal::bytes));

}  // namespace

CudaPeerMemory::CudaPeerMemory(int rank, int device, cudaStream_t stream)
    : rank_(rank), device_(device), stream_(stream) {
  DeviceScope scope(device);
  for (std::size_t i = 0; i < signals_.size(); ++i) {
    check(cudaEventCreateWithFlags(&signals_[i], cudaEventInterprocess | cudaEventDisableTiming),
          rank, "cudaEventCreate of an interprocess signal");
    cudaIpcEventHandle_t handle{};
    check(cudaIpcGetEventHandle(&handle, signals_[i]), rank, "cudaIpcGetEventHandle");
    std::memcpy(signal_handles_[i].bytes.data(), &handle, sizeof(handle));
  }
}

CudaPeerMemory::~CudaPeerMemory() {
  DeviceScope scope(device_);
  // A stream that did not finish (it waits for a peer that died) may still read the mappings;
  // closing them would also wait for it. They go with the process then.
  if (drained_)
    for (auto& [key, m] : mapped_) cudaIpcCloseMemHandle(m.base);
  for (auto& [key, event] : peer_signals_) cudaEventDestroy(event);
  for (cudaEvent_t e : signals_) cudaEventDestroy(e);
  cudaGetLastError();
}

std::optional<CudaPeerMemory::Range> CudaPeerMemory::share(const void* p, std::size_t bytes) {
  const auto allocation = driver::allocation_of(p);
  if (!allocation) return std::nullopt;  // not device memory the driver can name
  auto* base = static_cast<std::byte*>(allocation->base);
  const auto offset = static_cast<std::size_t>(static_cast<const std::byte*>(p) - base);
  if (offset + bytes > allocation->bytes) return std::nullopt;  // spans allocations
  auto it = exported_.find(allocation->base);
  if (it == exported_.end() || it->second.id != allocation->id) {
    cudaIpcMemHandle_t handle{};
    // Pool (cudaMallocAsync) and virtual-memory allocations have no IPC handle: slots then.
    if (cudaIpcGetMemHandle(&handle, allocation->base) != cudaSuccess) {
      cudaGetLastError();
      return std::nullopt;
    }
    it = exported_.insert_or_assign(allocation->base, Exported{allocation->id, handle}).first;
  }
  RangeLayout layout{it->second.handle, reinterpret_cast<std::uint64_t>(allocation->base),
                     allocation->bytes, allocation->id, offset};
  Range range;
  std::memcpy(range.bytes.data(), &layout, sizeof(layout));
  return range;
}

void* CudaPeerMemory::map(int peer, const Range& range, std::size_t bytes) {
  RangeLayout layout;
  std::memcpy(&layout, range.bytes.data(), sizeof(layout));
  if (layout.offset > layout.allocation_bytes || bytes > layout.allocation_bytes - layout.offset)
    throw PeerError(fmt::format("cudaipc: rank {} with rank {}: the peer's buffer lies outside "
                                "its allocation ({} bytes at offset {} of {})",
                                rank_, peer, bytes, layout.offset, layout.allocation_bytes),
                    peer);
  const auto key = std::make_pair(peer, layout.base);
  auto it = mapped_.find(key);
  if (it != mapped_.end() &&
      (it->second.id != layout.id || it->second.bytes != layout.allocation_bytes))
    unmap(it), it = mapped_.end();  // the peer freed that allocation and made another there
  if (it == mapped_.end()) {
    if (mapped_.size() >= kMaxMappings) {
      auto oldest = mapped_.begin();
      for (auto m = mapped_.begin(); m != mapped_.end(); ++m)
        if (m->second.last_use < oldest->second.last_use) oldest = m;
      unmap(oldest);
    }
    void* base = nullptr;
    const cudaError_t e =
        cudaIpcOpenMemHandle(&base, layout.handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw PeerError(fmt::format("cudaipc: rank {} with rank {}: cannot map the peer's device "
                                  "buffer: {} (GPUs without peer access? LOOM_CUDA_IPC=0 stages "
                                  "through host memory instead)",
                                  rank_, peer, error_text(e)),
                      peer);
    }
    it = mapped_.emplace(key, Mapping{layout.id, layout.allocation_bytes, base, 0}).first;
  }
  it->second.last_use = ++uses_;
  return static_cast<std::byte*>(it->second.base) + layout.offset;
}

void CudaPeerMemory::unmap(std::map<std::pair<int, std::uint64_t>, Mapping>::iterator it) {
  // What the stream queued may still read it.
  if (!drain(stream_, std::chrono::seconds(10)))
    throw Error(
        fmt::format("cudaipc: rank {}: the communicator's stream did not finish within "
                    "10 s: cannot close a peer's mapping",
                    rank_));
  cudaIpcCloseMemHandle(it->second.base);
  cudaGetLastError();
  mapped_.erase(it);
}

CudaPeerMemory::Signal CudaPeerMemory::record(Point point) {
  const auto i = static_cast<std::size_t>(point);
  check(cudaEventRecord(signals_[i], stream_), rank_, "cudaEventRecord of a signal");
  return signal_handles_[i];
}

void CudaPeerMemory::wait(int peer, const Signal& signal) {
  const auto key = std::make_pair(peer, signal.bytes);
  auto it = peer_signals_.find(key);
  if (it == peer_signals_.end()) {
    cudaIpcEventHandle_t handle{};
    std::memcpy(&handle, signal.bytes.data(), sizeof(handle));
    cudaEvent_t event = nullptr;
    const cudaError_t e = cudaIpcOpenEventHandle(&event, handle);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw PeerError(fmt::format("cudaipc: rank {} with rank {}: cannot open the peer's event: {}",
                                  rank_, peer, error_text(e)),
                      peer);
    }
    it = peer_signals_.emplace(key, event).first;
  }
  check(cudaStreamWaitEvent(stream_, it->second, 0), rank_, "cudaStreamWaitEvent on a peer");
}

}  // namespace loom::gpu
