// The CUDA side of the engine: device detection, the data path on the GPU (copies and the
// kernels of kernels/cuda on the engine's stream, host slots staged through device buffers),
// and the ordering of each call against the user's stream.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "base/logging.hpp"
#include "device/cuda_util.hpp"
#include "device/device.hpp"
#include "gpu/runtime.hpp"
#include "kernels/cuda/cuda_kernels.cuh"

namespace loom::gpu {
using device::DeviceScope;
using device::error_text;

namespace {

void check(cudaError_t e, int rank, const char* what) {
  if (e != cudaSuccess)
    throw Error(fmt::format("cuda: rank {}: {} failed: {}", rank, what, error_text(e)));
}

// Waits for `event` without blocking past the deadline: a short spin, then 20 us sleeps, with
// the halt checked and the call's connections kept moving meanwhile.
void wait_event(cudaEvent_t event, const base::Deadline& deadline, const base::Halt& halt,
                const std::vector<transport::Connection*>& moving, int rank,
                const std::string& context, const char* what) {
  const auto spin_until = base::Clock::now() + std::chrono::microseconds(50);
  for (;;) {
    const cudaError_t state = cudaEventQuery(event);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady)
      throw Error(
          fmt::format("{}: rank {}: {} failed: {}", context, rank, what, error_text(state)));
    if (halt.triggered()) halt.raise(fmt::format("{}: rank {}", context, rank));
    for (transport::Connection* c : moving) c->progress();
    if (base::Clock::now() < spin_until) continue;
    if (deadline.expired())
      throw TimeoutError(fmt::format("{}: rank {}: timed out waiting for {}", context, rank, what));
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

class CudaPath final : public algorithms::DataPath {
 public:
  CudaPath(int rank, cudaStream_t stream, cudaEvent_t done, std::byte* scratch,
           std::size_t scratch_bytes)
      : rank_(rank), stream_(stream), done_(done), scratch_(scratch), part_(scratch_bytes / 3) {}

  void start(algorithms::Engine& engine) { engine_ = &engine; }
  void attach(transport::Connection& connection) override {
    for (const auto& r : connection.host_regions()) host_.push_back(r);
  }

  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), rank_, "cudaMemcpyAsync");
  }

  void reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n,
                   DataType dtype, ReduceOp op, int divisor) override {
    staged(dst, dst2, a, b, n, size_of(dtype),
           [&](void* d, void* d2, const void* x, const void* y, std::size_t m) {
             check(kernels::cuda::reduce_copy(d, d2, x, y, m, dtype, op, divisor, stream_), rank_,
                   "the reduce kernel's launch");
           });
  }

  void divide(void* dst, const void* src, std::size_t n, DataType dtype, int divisor) override {
    staged(dst, nullptr, src, src, n, size_of(dtype),
           [&](void* d, void*, const void* x, const void*, std::size_t m) {
             check(kernels::cuda::divide(d, x, m, dtype, divisor, stream_), rank_,
                   "the divide kernel's launch");
           });
  }

  void complete() override {
    check(cudaEventRecord(done_, stream_), rank_, "cudaEventRecord");
    wait_event(done_, engine_->deadline(), engine_->halt(), engine_->used(), rank_,
               engine_->call().describe(), "the GPU's copies and reductions");
  }

 private:
  bool host(const void* p) const {
    auto* b = static_cast<const std::byte*>(p);
    return std::any_of(host_.begin(), host_.end(), [b](const transport::Connection::Region& r) {
      auto* base = static_cast<const std::byte*>(r.base);
      return b >= base && b < base + r.bytes;
    });
  }

  // Runs launch(dst, dst2, a, b, count) on device memory: operands in host slots are copied
  // into the staging buffers first, results for host slots are copied out after, in parts of
  // one staging buffer.
  template <typename Launch>
  void staged(void* dst, void* dst2, const void* a, const void* b, std::size_t n, std::size_t elem,
              Launch&& launch) {
    const bool a_host = host(a), b_host = b != a && host(b);
    const bool dst_host = host(dst), dst2_host = dst2 && host(dst2);
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

  int rank_;
  cudaStream_t stream_;
  cudaEvent_t done_;
  std::byte* scratch_;
  std::size_t part_;
  algorithms::Engine* engine_ = nullptr;
  std::vector<transport::Connection::Region> host_;
};

class CudaRuntime final : public Runtime {
 public:
  CudaRuntime(int device, int rank, const base::Config& config)
      : device_(device), rank_(rank), timeout_(config.timeout) {
    DeviceScope scope(device);
    // Everything is allocated here, before the first call holds a user stream: allocations may
    // wait for the device's queued work, which a held stream would never finish.
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), rank, "cudaStreamCreate");
    check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), rank, "cudaEventCreate");
    void* flag = nullptr;
    check(cudaHostAlloc(&flag, 64, cudaHostAllocMapped | cudaHostAllocPortable), rank,
          "cudaHostAlloc of the completion flag");
    flag_ = static_cast<std::uint64_t*>(flag);
    *flag_ = 0;
    void* mapped = nullptr;
    check(cudaHostGetDevicePointer(&mapped, flag, 0), rank, "cudaHostGetDevicePointer");
    flag_device_ = static_cast<std::uint64_t*>(mapped);
    const std::size_t slot = config.buffer_bytes / static_cast<std::size_t>(config.slots);
    const std::size_t scratch_bytes = 3 * std::max<std::size_t>(slot, 64 << 10);
    void* scratch = nullptr;
    check(cudaMalloc(&scratch, scratch_bytes), rank, "cudaMalloc of the staging buffers");
    scratch_ = static_cast<std::byte*>(scratch);
    for (int i = 0; i < 8; ++i) free_events_.push_back(new_event());
    path_ = std::make_unique<CudaPath>(rank, stream_, done_, scratch_, scratch_bytes);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device);
    base::log().info("rank {}: device buffers on device {} ({}, sm_{}{})", rank, device, prop.name,
                     prop.major, prop.minor);
  }

  ~CudaRuntime() override {
    DeviceScope scope(device_);
    // Streams still held (calls that never ran) go on; the flag itself stays mapped for the
    // life of the process, since a user stream may poll it after this communicator is gone.
    std::atomic_ref<std::uint64_t>(*flag_).store(~std::uint64_t{0}, std::memory_order_release);
    drain();
    cudaFree(scratch_);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    cudaEventDestroy(done_);
    cudaStreamDestroy(stream_);
  }

  int device() const override { return device_; }

  void issue(algorithms::Collective& call, bool hold_stream) override {
    std::lock_guard lock(mu_);
    DeviceScope scope(device_);
    if (free_events_.empty()) free_events_.push_back(new_event());
    cudaEvent_t ready = free_events_.back();
    auto stream = static_cast<cudaStream_t>(call.stream);
    // A captured stream would record the ordering into a graph instead of running it.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
        capture != cudaStreamCaptureStatusNone)
      throw InvalidArgument(
          fmt::format("{}: rank {}: the stream is being captured into a CUDA "
                      "graph; loom's calls cannot be captured",
                      algorithms::to_string(call.kind), rank_));
    cudaGetLastError();
    const cudaError_t recorded = cudaEventRecord(ready, stream);
    if (recorded != cudaSuccess)
      throw InvalidArgument(fmt::format(
          "{}: rank {}: cannot order the call after the given stream (not a stream of device "
          "{}?): {}",
          algorithms::to_string(call.kind), rank_, device_, error_text(recorded)));
    const std::uint64_t seq = issued_ + 1;
    const auto timeout_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_).count());
    if (hold_stream)
      check(kernels::cuda::wait_flag(flag_device_, seq, timeout_ns, stream), rank_,
            "the stream-wait kernel's launch");
    free_events_.pop_back();
    issued_ = seq;
    call.ready_event = ready;
    call.device_seq = seq;
  }

  algorithms::DataPath& begin(const algorithms::Collective& call,
                              algorithms::Engine& engine) override {
    // A blocking call runs on the caller's thread: its current device comes back at end().
    if (cudaGetDevice(&caller_device_) != cudaSuccess) caller_device_ = -1;
    check(cudaSetDevice(device_), rank_, "cudaSetDevice");
    const base::Deadline deadline(timeout_);
    wait_event(static_cast<cudaEvent_t>(call.ready_event), deadline, engine.halt(), {}, rank_,
               call.describe(), "the stream's work before the call");
    path_->start(engine);
    return *path_;
  }

  void end(const algorithms::Collective& call, bool ok) noexcept override {
    if (!ok) drain();  // kernels of the failed call may still run
    {
      std::lock_guard lock(mu_);
      free_events_.push_back(static_cast<cudaEvent_t>(call.ready_event));
    }
    // A failed call releases every held stream: the communicator is unusable after it.
    std::atomic_ref<std::uint64_t>(*flag_).store(ok ? call.device_seq : ~std::uint64_t{0},
                                                 std::memory_order_release);
    if (caller_device_ >= 0 && caller_device_ != device_) cudaSetDevice(caller_device_);
    caller_device_ = -1;
  }

 private:
  // Lets the engine's stream finish, within reason (one second), ignoring its errors.
  void drain() noexcept {
    cudaEventRecord(done_, stream_);
    for (int i = 0; i < 50000 && cudaEventQuery(done_) == cudaErrorNotReady; ++i)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    cudaGetLastError();
  }

  cudaEvent_t new_event() {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), rank_, "cudaEventCreate");
    return e;
  }

  int device_;
  int rank_;
  std::chrono::milliseconds timeout_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  std::uint64_t* flag_ = nullptr;  // host side: the last device call done (all ones: failed)
  std::uint64_t* flag_device_ = nullptr;
  std::byte* scratch_ = nullptr;
  std::unique_ptr<CudaPath> path_;
  std::mutex mu_;  // free_events_ (issue on the caller's thread, end on the engine's)
  std::vector<cudaEvent_t> free_events_;
  std::uint64_t issued_ = 0;
  int caller_device_ = -1;  // the thread's device before begin()
};

}  // namespace

std::unique_ptr<Runtime> make_runtime(int device, int rank, const base::Config& config) {
  if (device < 0 || device >= device::count())
    throw InvalidArgument(fmt::format("rank {}: device {} is not one of the {} visible", rank,
                                      device, device::count()));
  return std::make_unique<CudaRuntime>(device, rank, config);
}

}  // namespace loom::gpu
