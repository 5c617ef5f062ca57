// The GPU side of a communicator: the communicator's stream, the ordering of each call against
// the user's stream with events (runtime.hpp), the data path and the memory shared with peers.
#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "base/logging.hpp"
#include "device/cuda_util.hpp"
#include "device/device.hpp"
#include "gpu/cuda_data_path.hpp"
#include "gpu/cuda_peer_memory.hpp"
#include "gpu/cuda_wait.hpp"
#include "gpu/runtime.hpp"

namespace loom::gpu {

using device::DeviceScope;
using device::error_text;

namespace {

// Events handed out on one thread and given back on another (issue on the caller's, end on the
// engine's, an ordering on whichever thread waits for a Work). Shared: a Work may outlive its
// communicator.
class EventPool : public std::enable_shared_from_this<EventPool> {
 public:
  EventPool(int rank, int device) : rank_(rank), device_(device) {}
  ~EventPool() {
    DeviceScope scope(device_);
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }
  cudaEvent_t take() {
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    DeviceScope scope(device_);
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), rank_, "cudaEventCreate");
    return e;
  }
  // An event whose last record every wait has taken already.
  void give(cudaEvent_t e) {
    std::lock_guard lock(mu_);
    free_.push_back(e);
  }

 private:
  int rank_;
  int device_;
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

class CudaRuntime final : public Runtime {
 public:
  CudaRuntime(int device, int rank, std::size_t slot, bool direct)
      : device_(device), rank_(rank), events_(std::make_shared<EventPool>(rank, device)) {
    DeviceScope scope(device);
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), rank, "cudaStreamCreate");
    const std::size_t scratch_bytes = 3 * std::max<std::size_t>(slot, 64 << 10);
    void* scratch = nullptr;
    check(cudaMalloc(&scratch, scratch_bytes), rank, "cudaMalloc of the staging buffers");
    scratch_ = static_cast<std::byte*>(scratch);
    path_ = std::make_unique<CudaPath>(rank, device, stream_, scratch_, scratch_bytes);
    if (direct) peers_ = std::make_unique<CudaPeerMemory>(rank, device, stream_);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device);
    base::log().info("rank {}: device buffers on device {} ({}, sm_{}{}); {}", rank, device,
                     prop.name, prop.major, prop.minor,
                     peers_ ? "this host's ranks share device memory directly (CUDA IPC)"
                            : "device buffers move through slots");
  }

  ~CudaRuntime() override {
    DeviceScope scope(device_);
    // A stream still waiting (for a peer that died) must not hang the process: give it a
    // moment, then leave what it uses to the process's end.
    const bool drained = drain(stream_, std::chrono::seconds(2));
    if (!drained)
      base::log().warn(
          "rank {}: the communicator's GPU stream did not finish; its buffers are "
          "left to the process's exit",
          rank_);
    if (peers_) peers_->set_stream_drained(drained);
    peers_.reset();
    path_.reset();
    if (drained) cudaFree(scratch_);
    cudaStreamDestroy(stream_);
    cudaGetLastError();
  }

  int device() const override { return device_; }

  void issue(algorithms::Collective& call) override {
    DeviceScope scope(device_);
    auto stream = static_cast<cudaStream_t>(call.stream);
    // A captured stream would record the ordering into a graph instead of running it.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
        capture != cudaStreamCaptureStatusNone)
      throw InvalidArgument(
          fmt::format("{}: rank {}: the stream is being captured into a CUDA graph; loom's calls "
                      "cannot be captured",
                      algorithms::to_string(call.kind), rank_));
    cudaGetLastError();
    cudaEvent_t ready = events_->take();
    const cudaError_t recorded = cudaEventRecord(ready, stream);
    if (recorded != cudaSuccess) {
      cudaGetLastError();
      events_->give(ready);
      throw InvalidArgument(fmt::format(
          "{}: rank {}: cannot order the call after the given stream (not a stream of device "
          "{}?): {}",
          algorithms::to_string(call.kind), rank_, device_, error_text(recorded)));
    }
    call.ready_event = ready;
  }

  algorithms::DataPath& begin(const algorithms::Collective& call,
                              algorithms::Engine& engine) override {
    // A blocking call runs on the caller's thread: its current device comes back at end().
    if (cudaGetDevice(&caller_device_) != cudaSuccess) caller_device_ = -1;
    check(cudaSetDevice(device_), rank_, "cudaSetDevice");
    // On the GPU: nothing on the host waits for the user's stream.
    check(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(call.ready_event), 0), rank_,
          "cudaStreamWaitEvent on the user's stream");
    path_->start(engine);
    return *path_;
  }

  algorithms::PeerMemory* peer_memory() override { return peers_.get(); }

  std::function<void()> end(const algorithms::Collective& call, bool ok) noexcept override {
    // The communicator's stream took the ready event's record when it waited for it.
    if (call.ready_event) events_->give(static_cast<cudaEvent_t>(call.ready_event));
    std::function<void()> order;
    if (ok) {
      cudaEvent_t done = nullptr;
      try {
        done = events_->take();
      } catch (const Error& e) {
        base::log().error("{}", e.what());
      }
      if (done != nullptr && cudaEventRecord(done, stream_) == cudaSuccess) {
        // Given back once no ordering can be asked for any more (the Work is gone).
        auto held = std::shared_ptr<CUevent_st>(
            done, [events = events_](cudaEvent_t e) { events->give(e); });
        order = [held, stream = static_cast<cudaStream_t>(call.stream)] {
          cudaStreamWaitEvent(stream, held.get(), 0);
        };
      } else {
        cudaGetLastError();
        if (done) events_->give(done);
        // The stream cannot be ordered: make the host wait instead, rather than release it
        // before the call is done.
        order = [stream = stream_] { cudaStreamSynchronize(stream); };
      }
    }
    if (caller_device_ >= 0 && caller_device_ != device_) cudaSetDevice(caller_device_);
    caller_device_ = -1;
    return order;
  }

 private:
  int device_;
  int rank_;
  std::shared_ptr<EventPool> events_;
  cudaStream_t stream_ = nullptr;
  std::byte* scratch_ = nullptr;
  std::unique_ptr<CudaPath> path_;
  std::unique_ptr<CudaPeerMemory> peers_;
  int caller_device_ = -1;  // the thread's device before begin()
};

}  // namespace

std::unique_ptr<Runtime> make_runtime(int device, int rank, std::size_t slot_bytes, bool direct) {
  if (device < 0 || device >= device::count())
    throw InvalidArgument(fmt::format("rank {}: device {} is not one of the {} visible", rank,
                                      device, device::count()));
  return std::make_unique<CudaRuntime>(device, rank, slot_bytes, direct);
}

}  // namespace loom::gpu
