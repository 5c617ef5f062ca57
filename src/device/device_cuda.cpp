// Device detection with the CUDA runtime.
#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "device/cuda_util.hpp"
#include "device/device.hpp"

namespace loom::device {

bool built() {
  return true;
}

int count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    cudaGetLastError();
    return n;
  }();
  return count;
}

int of(const void* p) {
  if (p == nullptr || count() == 0) return -1;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? attr.device : -1;
}

std::string describe() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::string text = fmt::format("CUDA runtime {}.{}", runtime / 1000, runtime % 1000 / 10);
  if (count() == 0) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    cudaGetLastError();
    return text +
           fmt::format(", no device visible ({})", e == cudaSuccess ? "none found" : error_text(e));
  }
  text += fmt::format(", driver {}.{}, {} device(s):", driver / 1000, driver % 1000 / 10, count());
  for (int d = 0; d < count(); ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess)
      text += fmt::format(" {} {} (sm_{}{})", d, prop.name, prop.major, prop.minor);
  }
  return text;
}

}  // namespace loom::device
