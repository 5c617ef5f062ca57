// A communicator's calls on GPU buffers: which device a call's buffers are on, and the GPU
// runtime that serves them. The runtime is made by the first call on device buffers, on its
// caller's thread; one communicator serves one device. Its own lock: calls are placed on the
// callers' threads while the queue's worker runs earlier ones.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "algorithms/collective.hpp"
#include "gpu/runtime.hpp"
#include "transports/cudaipc/cudaipc.hpp"

namespace loom::core {

class DeviceCalls {
 public:
  explicit DeviceCalls(int rank);

  // Once the transports exist, before the first call: this host's ranks reach each other's
  // device memory through `ipc` (owned by the transport table; null where CUDA IPC is not used),
  // read in place when `direct` (LOOM_CUDA_DIRECT); slot_bytes: the staging slots of a device
  // call's data path.
  void configure(transport::cudaipc::IpcTransport* ipc, bool direct, std::size_t slot_bytes);
  // Whether this process sees any GPU (without one every buffer is host memory).
  bool gpus() const { return gpus_; }
  // Whether device calls read the peers' memory in place (the direct rows of the algorithm table).
  bool peers_mapped() const { return ipc_ != nullptr && direct_; }
  // "cudaipc" or "host slots": how device buffers reach this host's peers.
  std::string route() const { return ipc_ ? "cudaipc" : "host slots"; }

  // Sets c.device: -1 for host buffers, else the GPU they are on, making the runtime for it on
  // the first such call. Raises InvalidArgument for buffers on two sides, a stream with host
  // buffers, or a second device. in_used/out_used: whether this rank reads 'in', writes 'out'.
  void place(algorithms::Collective& c, bool in_used, bool out_used);
  // The runtime serving `call`, or null for a call on host buffers.
  gpu::Runtime* runtime_of(const algorithms::Collective& call) {
    return call.device >= 0 ? runtime_.get() : nullptr;
  }
  // Ends the runtime (shutdown): no call runs any more.
  void close();

 private:
  const int rank_;
  const bool gpus_;
  std::size_t slot_bytes_ = 0;
  transport::cudaipc::IpcTransport* ipc_ = nullptr;
  bool direct_ = false;
  std::mutex mu_;  // runtime_'s making and ending
  std::unique_ptr<gpu::Runtime> runtime_;
};

}  // namespace loom::core
