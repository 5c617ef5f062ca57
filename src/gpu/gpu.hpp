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

#include "algorithms/collective.hpp"
#include "core/config.hpp"
#include "loom/store.hpp"
#include "transports/transport.hpp"

namespace loom::gpu {

// Whether this build has CUDA support.
bool built();
// Visible devices: 0 without CUDA support or a driver (cached after the first call).
int device_count();
// Device or managed memory: its device's ordinal; host memory: -1. Free without devices.
int device_of(const void* p);
// For logs: "CUDA runtime 13.0, 1 device(s): NVIDIA H100 (sm_90)", or why there is none.
std::string describe();

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
std::unique_ptr<Runtime> make_runtime(int device, int rank, const core::Config& config);

// Same-host peers with device buffers: slot FIFOs in device memory shared through CUDA IPC.
// Null without CUDA support or devices.
class IpcTransport : public transport::Transport {
 public:
  // The caller's thread, before the first device call is queued: allocates and exports this
  // rank's device FIFOs (allocations must not wait behind a stream that a call holds).
  virtual void prepare(int device) = 0;
};
std::unique_ptr<IpcTransport> make_ipc_transport(Store& store, int rank, std::uint64_t job_token,
                                                 const core::Config& config, std::vector<int> pids,
                                                 std::vector<bool> local_peers);

}  // namespace loom::gpu
