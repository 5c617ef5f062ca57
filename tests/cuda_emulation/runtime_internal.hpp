// The emulated runtime's inside, shared by its files: the opaque types, the process-wide state,
// streams, allocations and shared segments.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <cuda.h>

#include "emulation.hpp"

// The runtime's opaque types, defined here.
struct CUstream_st {
  unsigned flags = 0;
  bool legacy = false;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> ops;
  std::atomic<std::uint64_t> enqueued{0};
  std::atomic<std::uint64_t> completed{0};
  bool stopping = false;
  std::thread worker;
  int pins = 0;  // under State::mu: waiters elsewhere holding this pointer; freed at 0
};

// Shared between processes for interprocess events.
struct EventState {
  std::atomic<std::uint64_t> recorded;
  std::atomic<std::uint64_t> completed;
  std::atomic<std::int64_t> time_ns;  // of the latest completed record
};

struct CUevent_st {
  unsigned flags = 0;
  EventState* state = nullptr;
  std::string shm_name;  // interprocess events
  bool owner = true;
};

namespace loom::cuda_emulation {

using Clock = std::chrono::steady_clock;

enum class Memory { device, device_ipc, host_pinned, host_registered };

struct Allocation {
  std::size_t bytes;
  Memory kind;
  std::string shm_name;  // device memory: its segment
  std::uint64_t id;
  bool exportable = true;  // cudaMallocAsync memory has no IPC handle
};

struct State {
  std::mutex mu;  // everything below
  std::map<std::uintptr_t, Allocation> allocations;
  std::set<CUstream_st*> streams;
  CUstream_st* legacy = nullptr;
  std::condition_variable unpinned;  // a stream's pins fell
  std::uint64_t next_id = 1;
  std::set<std::string> owned_segments;  // unlinked at exit
  std::atomic<int> sticky{0};            // cudaError_t of a failed kernel, kept until exit
  Counts counts;                         // under mu
};

extern thread_local cudaError_t last_error;
extern thread_local int current_device;

State& state();
cudaError_t fail(cudaError_t e);
cudaError_t sticky_or(cudaError_t e);
int device_count();
double deadlock_seconds();
std::int64_t now_ns();
void run_stream(CUstream_st* s);
CUstream_st* new_stream(unsigned flags, bool legacy);
CUstream_st* legacy_stream();
CUstream_st* resolve(cudaStream_t s);
bool blocking(const CUstream_st* s);
void enqueue(cudaStream_t stream, std::function<void()> op);
void synchronize(CUstream_st* s, const char* what);
void synchronize_device(const char* what);
void unpin(CUstream_st* s);
void retire(CUstream_st* s);
const Allocation* find(const void* p, std::uintptr_t* base = nullptr);
bool device_accessible(const void* p, std::size_t bytes);
bool pageable(const void* p);
std::string segment_name(const char* kind);
void* map_segment(const std::string& name, std::size_t bytes, bool create);
void unlink_owned_segments();
void own_segment(const std::string& name);
void disown_segment(const std::string& name);
CUresult address_range(CUdeviceptr* base, size_t* size, CUdeviceptr p);
CUresult pointer_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr p);
void count(std::uint64_t Counts::*which);

// Waits until ready() (polling: other processes change what it reads), or reports a deadlock.
template <typename Ready>
void wait_until(Ready&& ready, const char* what) {
  const auto start = Clock::now();
  for (unsigned i = 0; !ready(); ++i) {
    if (Clock::now() - start > std::chrono::duration<double>(deadlock_seconds())) {
      std::fprintf(stderr,
                   "loom CUDA emulation: %s has waited %.0f s: a deadlock (the GPU would hang "
                   "here)\n",
                   what, deadlock_seconds());
      std::abort();
    }
    if (i < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(i < 1000 ? 20 : 200));
  }
}

// IPC handles: "LEMU", the segment's name, its size.
struct HandleBytes {
  char magic[4];
  char name[44];
  std::uint64_t bytes;
  std::uint64_t id;
};
static_assert(sizeof(HandleBytes) <= CUDA_IPC_HANDLE_SIZE);

}  // namespace loom::cuda_emulation
