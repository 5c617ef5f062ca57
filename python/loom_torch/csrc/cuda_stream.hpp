// CUDA tensors: Loom's device path, ordered on PyTorch's current stream of the tensor's device.
// Needs PyTorch 2.2 or later (c10::Stream::native_handle) and a libloom built with CUDA.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Stream.h>
#include <loom/loom.hpp>

#include <optional>
#include <string>

namespace loom_torch::cuda {

bool supported();
std::string why_unsupported();
// The current stream of t's device when t is a CUDA tensor, captured where the call is issued.
std::optional<c10::Stream> current_stream(const at::Tensor& t);
loom::CudaStream handle(const std::optional<c10::Stream>& stream);

}  // namespace loom_torch::cuda
