// The build without CUDA: no device transport.
#include "transports/cudaipc/cudaipc.hpp"

namespace loom::transport::cudaipc {

std::unique_ptr<IpcTransport> make_transport(Store&, int, std::uint64_t, const base::LinkConfig&,
                                             const base::Pacing&, std::vector<int>,
                                             std::vector<bool>) {
  return nullptr;
}

}  // namespace loom::transport::cudaipc
