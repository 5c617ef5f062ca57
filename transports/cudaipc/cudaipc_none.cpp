// The build without CUDA: no device transport.
#include "transports/cudaipc/cudaipc.hpp"

namespace loom::transport::cudaipc {

std::unique_ptr<IpcTransport> make_transport(const Setup&, std::vector<int>, std::vector<bool>) {
  return nullptr;
}

}  // namespace loom::transport::cudaipc
