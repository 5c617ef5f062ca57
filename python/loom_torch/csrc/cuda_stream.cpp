#include "cuda_stream.hpp"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

// c10::Stream::native_handle() came with PyTorch 2.2.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
#define LOOM_TORCH_STREAM_HANDLES 1
#else
#define LOOM_TORCH_STREAM_HANDLES 0
#endif

namespace loom_torch::cuda {

bool supported() {
  return LOOM_TORCH_STREAM_HANDLES && LOOM_TORCH_LIBLOOM_CUDA;
}

std::string why_unsupported() {
  if (!LOOM_TORCH_STREAM_HANDLES)
    return "CUDA tensors need PyTorch 2.2 or later with this backend (PyTorch " TORCH_VERSION
           " is running)";
  return "this libloom was built without CUDA (configure Loom with a CUDA toolkit)";
}

std::optional<c10::Stream> current_stream(const at::Tensor& t) {
  if (!t.is_cuda()) return std::nullopt;
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t.device());
}

loom::CudaStream handle(const std::optional<c10::Stream>& stream) {
#if LOOM_TORCH_STREAM_HANDLES
  if (stream) return static_cast<loom::CudaStream>(stream->native_handle());
#else
  (void)stream;
#endif
  return nullptr;
}

}  // namespace loom_torch::cuda
