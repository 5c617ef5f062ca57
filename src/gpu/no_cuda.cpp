// The build without a CUDA toolkit: all memory is host memory, device calls are refused.
#include <fmt/format.h>

#include "gpu/gpu.hpp"

namespace loom::gpu {

bool built() {
  return false;
}
int device_count() {
  return 0;
}
int device_of(const void*) {
  return -1;
}
std::string describe() {
  return "no CUDA support in this build";
}

std::unique_ptr<Runtime> make_runtime(int device, int rank, const core::Config&) {
  throw InvalidArgument(
      fmt::format("rank {}: device {} buffers need CUDA support: this build of loom has none "
                  "(configure with a CUDA toolkit, LOOM_CUDA=ON)",
                  rank, device));
}

std::unique_ptr<IpcTransport> make_ipc_transport(Store&, int, std::uint64_t, const core::Config&,
                                                 std::vector<int>, std::vector<bool>) {
  return nullptr;
}

}  // namespace loom::gpu
