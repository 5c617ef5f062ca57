// The build without a CUDA toolkit: all memory is host memory, device calls are refused.
#include <fmt/format.h>

#include "gpu/runtime.hpp"

namespace loom::gpu {

std::unique_ptr<Runtime> make_runtime(int device, int rank, std::size_t, bool) {
  throw InvalidArgument(
      fmt::format("rank {}: device {} buffers need CUDA support: this build of loom has none "
                  "(configure with a CUDA toolkit, LOOM_CUDA=ON)",
                  rank, device));
}

}  // namespace loom::gpu
