// An emulation of the CUDA runtime on the CPU, for running Loom's GPU code paths where no GPU
// exists. It implements the subset of the runtime API that Loom and its tests call, with the
// semantics that decide correctness and liveness:
// - streams run their operations in order on a thread each; the legacy default stream waits
//   for (and is waited for by) the blocking streams; non-blocking streams are independent;
// - events, cudaStreamWaitEvent and cudaEventQuery capture "the most recent record" when called;
//   interprocess events live in shared memory, so another process can record and wait on them;
// - device memory is shared memory, so cudaIpcGetMemHandle / cudaIpcOpenMemHandle map it into
//   another process; the handle must name an allocation's base; memory from cudaMallocAsync
//   has no IPC handle, as pool memory has none by default;
// - kernels touching host memory that is not pinned or registered fail with an illegal address,
//   as they would on a GPU;
// - copies with pageable host memory are synchronous; allocation, freeing, registration and IPC
//   opening synchronise the device (the documented worst case), so a design that holds a stream
//   waiting for host progress deadlocks here too;
// - a wait that lasts longer than LOOM_CUDA_EMULATION_DEADLOCK_S (default 60) is reported as a
//   deadlock and aborts the process, so a test fails with the reason instead of hanging.
// What it does not model: time slicing between processes, memory bandwidth, hardware queues.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <utility>

namespace loom::cuda_emulation {

// A device range a kernel reads or writes: it must be device memory, IPC-mapped device memory,
// or pinned / registered host memory.
struct Access {
  const void* pointer;
  std::size_t bytes;
};

// What this process asked of the emulated runtime so far, for tests of how Loom uses it.
struct Counts {
  std::uint64_t ipc_memory_opens = 0;
  std::uint64_t ipc_event_opens = 0;
  std::uint64_t host_registrations = 0;
  std::uint64_t kernels = 0;
  std::uint64_t copies = 0;
};
Counts counts();

// Queues `body` on `stream` as a kernel: its accesses are checked at launch (an illegal one is
// the launch's error, sticky as on a GPU) and it runs in stream order.
cudaError_t launch(cudaStream_t stream, std::initializer_list<Access> accesses,
                   std::function<void()> body);

}  // namespace loom::cuda_emulation
