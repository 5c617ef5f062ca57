// The CUDA IPC transport as the communicator sees it, without CUDA headers: null without CUDA
// support or a visible device.
#pragma once

#include <memory>
#include <vector>

#include "base/config.hpp"
#include "loom/store.hpp"
#include "transports/setup.hpp"
#include "transports/transport.hpp"

namespace loom::transport::cudaipc {

// Same-host peers with device buffers: slot FIFOs in device memory shared through CUDA IPC.
class IpcTransport : public Transport {
 public:
  // The caller's thread, before the first device call is queued: allocates and exports this
  // rank's device FIFOs.
  virtual void prepare(int device) = 0;
};

// pids: every rank's process id; local_peers[r]: rank r is on this host (the only ones this
// transport serves). Null without a GPU, or in a build without CUDA.
std::unique_ptr<IpcTransport> make_transport(const Setup& setup, std::vector<int> pids,
                                             std::vector<bool> local_peers);

}  // namespace loom::transport::cudaipc
