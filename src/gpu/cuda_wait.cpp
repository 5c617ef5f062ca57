#include "gpu/cuda_wait.hpp"

#include <thread>

#include <fmt/format.h>

#include "device/cuda_util.hpp"

namespace loom::gpu {

using device::error_text;

void check(cudaError_t e, int rank, const char* what) {
  if (e != cudaSuccess)
    throw Error(fmt::format("cuda: rank {}: {} failed: {}", rank, what, error_text(e)));
}

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

bool drain(cudaStream_t stream, std::chrono::milliseconds limit) noexcept {
  const auto until = base::Clock::now() + limit;
  cudaError_t state;
  while ((state = cudaStreamQuery(stream)) == cudaErrorNotReady && base::Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  cudaGetLastError();
  return state != cudaErrorNotReady;
}

}  // namespace loom::gpu
