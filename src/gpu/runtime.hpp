// GPU buffers in collectives. Nothing here needs CUDA headers: without CUDA (a build without a
// toolkit, or no device visible) every pointer is host memory and device calls are refused.
//
// A call on device buffers runs on the communicator's engine like any other; the GPU does its
// copies and reductions on the engine's own stream. The user's stream is ordered around it
// without blocking the caller: an event recorded on the stream at issue marks the work the call
// must wait for, and a small kernel queued behind it holds the stream until the engine marks the
// call done in a host-mapped flag (or until the timeout, so a dead job never hangs the GPU).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/engine.hpp"
#include "base/config.hpp"

namespace loom::gpu {

// The GPU side of one communicator, bound to one device.
class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual int device() const = 0;
  // The caller's thread, in issue order: marks the call's place in call.stream and, for an
  // asynchronous call, holds the stream behind it (a blocking call returns when it is done, so
  // what the caller queues next is behind it anyway). Raises InvalidArgument (nothing queued)
  // when the stream cannot take it.
  virtual void issue(algorithms::Collective& call, bool hold_stream) = 0;
  // The engine's thread: waits for the stream's work before the call; the call's data path.
  virtual algorithms::DataPath& begin(const algorithms::Collective& call,
                                      algorithms::Engine& engine) = 0;
  // The engine's thread, after the call, failed or not: lets the stream go on.
  virtual void end(const algorithms::Collective& call, bool ok) noexcept = 0;
};

// The runtime of a communicator whose device calls use `device` (its staging buffers are sized
// from config's slots).
std::unique_ptr<Runtime> make_runtime(int device, int rank, const base::Config& config);

}  // namespace loom::gpu
