// GPU buffers in collectives. Nothing here needs CUDA headers: without CUDA (a build without a
// toolkit, or no device visible) every pointer is host memory and device calls are refused.
//
// A call on device buffers runs on the communicator's engine like any other; the GPU does its
// copies and reductions on the communicator's own stream. Ordering against the user's stream is
// done with events only, never with a kernel or a stream wait that holds for the host:
// - at issue, an event recorded on the user's stream marks the work the call must come after,
//   and the communicator's stream waits for it on the GPU;
// - at the end, an event recorded on the communicator's stream marks the call's GPU work, and
//   the user's stream waits for it: at once for a blocking call, when the Work is waited for
//   (or found done by test()) for an asynchronous one. A call that failed orders nothing after
//   it: its Work raises instead.
// So whatever the user queues behind an asynchronous call, nothing on the GPU waits for the host,
// and nothing can deadlock against the engine.
#pragma once

#include <functional>
#include <memory>

#include "algorithms/engine.hpp"
#include "base/config.hpp"

namespace loom::gpu {

// The GPU side of one communicator, bound to one device.
class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual int device() const = 0;
  // The caller's thread, in issue order: marks the call's place in call.stream. Raises
  // InvalidArgument (nothing queued) when the stream cannot take it.
  virtual void issue(algorithms::Collective& call) = 0;
  // The engine's thread: orders the communicator's stream after the call's place; returns the
  // call's data path.
  virtual algorithms::DataPath& begin(const algorithms::Collective& call,
                                      algorithms::Engine& engine) = 0;
  // Device memory shared with the ranks of this host (the direct path); null when it cannot be.
  virtual algorithms::PeerMemory* peer_memory() = 0;
  // The engine's thread, after the call. ok: returns what orders a stream after the call (the
  // user's, or another) and may be called from any thread, any number of times; after a
  // failure returns nothing.
  virtual std::function<void()> end(const algorithms::Collective& call, bool ok) noexcept = 0;
};

// The runtime of a communicator whose device calls use `device`; `slot_bytes`: a slot of its host
// connections (the staging buffers hold a few). `direct`: the ranks of this host share device
// memory (CUDA IPC) and LOOM_CUDA_DIRECT allows it, so the direct path may serve calls among them.
std::unique_ptr<Runtime> make_runtime(int device, int rank, std::size_t slot_bytes, bool direct);

}  // namespace loom::gpu
