// Small pieces of the CUDA runtime's use shared by src/gpu and transports/cudaipc (CUDA builds
// only).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include <fmt/format.h>

namespace loom::device {

// "invalid argument (cudaErrorInvalidValue)" for messages.
inline std::string error_text(cudaError_t e) {
  return fmt::format("{} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
}

// Makes `device` current on this thread and restores the previous one on exit: the thread may
// be the user's.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    int now = -1;
    if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_)
      cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace loom::device
