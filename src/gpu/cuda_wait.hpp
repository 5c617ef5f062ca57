// Raising CUDA failures as Loom errors, and waiting for the GPU from the host without blocking
// past a call's deadline.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "base/deadline.hpp"
#include "base/halt.hpp"
#include "transports/transport.hpp"

namespace loom::gpu {

// Raises Error naming the rank, the operation and CUDA's reason unless e is cudaSuccess.
void check(cudaError_t e, int rank, const char* what);

// Waits for `event`: a short spin, then 20 us sleeps, with the halt checked and `moving`
// connections kept moving meanwhile; TimeoutError past the deadline.
void wait_event(cudaEvent_t event, const base::Deadline& deadline, const base::Halt& halt,
                const std::vector<transport::Connection*>& moving, int rank,
                const std::string& context, const char* what);

// Lets `stream` finish for at most `limit`, ignoring its errors: for teardown, where a stream
// waiting on a dead peer must not hang the process. Returns whether it finished.
bool drain(cudaStream_t stream, std::chrono::milliseconds limit) noexcept;

}  // namespace loom::gpu
