// The emulated CUDA runtime (see emulation.hpp for what it models and what it does not).
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
};

namespace {

// Shared between processes for interprocess events.
struct EventState {
  std::atomic<std::uint64_t> recorded;
  std::atomic<std::uint64_t> completed;
  std::atomic<std::int64_t> time_ns;  // of the latest completed record
};

}  // namespace

struct CUevent_st {
  unsigned flags = 0;
  EventState* state = nullptr;
  std::string shm_name;  // interprocess events
  bool owner = true;
};

namespace loom::cuda_emulation {
namespace {

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
  std::uint64_t next_id = 1;
  std::set<std::string> owned_segments;  // unlinked at exit
  std::atomic<int> sticky{0};            // cudaError_t of a failed kernel, kept until exit
  Counts counts;                         // under mu
};

State& state() {
  static State* s = new State();  // never destroyed: stream threads may outlive static teardown
  return *s;
}

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}
cudaError_t sticky_or(cudaError_t e) {
  const int s = state().sticky.load();
  return s != 0 ? fail(static_cast<cudaError_t>(s)) : e;
}

int device_count() {
  static const int n = [] {
    const char* v = std::getenv("LOOM_EMULATED_GPUS");
    return v ? std::max(0, std::atoi(v)) : 1;
  }();
  return n;
}

double deadlock_seconds() {
  static const double s = [] {
    const char* v = std::getenv("LOOM_CUDA_EMULATION_DEADLOCK_S");
    return v ? std::atof(v) : 60.0;
  }();
  return s;
}

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

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

void run_stream(CUstream_st* s) {
  for (;;) {
    std::function<void()> op;
    {
      std::unique_lock lock(s->mu);
      s->cv.wait(lock, [s] { return s->stopping || !s->ops.empty(); });
      if (s->ops.empty()) return;
      op = std::move(s->ops.front());
      s->ops.pop_front();
    }
    op();
    s->completed.fetch_add(1);
  }
}

CUstream_st* new_stream(unsigned flags, bool legacy) {
  auto* s = new CUstream_st();
  s->flags = flags;
  s->legacy = legacy;
  s->worker = std::thread(run_stream, s);
  std::lock_guard lock(state().mu);
  state().streams.insert(s);
  return s;
}

CUstream_st* legacy_stream() {
  static CUstream_st* legacy = [] {
    CUstream_st* s = new_stream(cudaStreamDefault, true);
    std::lock_guard lock(state().mu);
    state().legacy = s;
    return s;
  }();
  return legacy;
}

CUstream_st* resolve(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return legacy_stream();
  return s;
}

bool blocking(const CUstream_st* s) {
  return !s->legacy && (s->flags & cudaStreamNonBlocking) == 0;
}

// Queues op on stream in order, with the legacy stream's implicit synchronisation.
void enqueue(cudaStream_t stream, std::function<void()> op) {
  CUstream_st* s = resolve(stream);
  std::vector<std::pair<CUstream_st*, std::uint64_t>> before;
  {
    std::lock_guard lock(state().mu);
    if (s->legacy) {
      for (CUstream_st* other : state().streams)
        if (blocking(other)) before.emplace_back(other, other->enqueued.load());
    } else if (blocking(s) && state().legacy) {
      before.emplace_back(state().legacy, state().legacy->enqueued.load());
    }
  }
  std::lock_guard lock(s->mu);
  s->enqueued.fetch_add(1);
  s->ops.push_back([before = std::move(before), op = std::move(op)] {
    for (auto [other, count] : before)
      wait_until([other, count] { return other->completed.load() >= count; },
                 "the legacy default stream's implicit synchronisation");
    op();
  });
  s->cv.notify_one();
}

void synchronize(CUstream_st* s, const char* what) {
  const std::uint64_t target = s->enqueued.load();
  wait_until([s, target] { return s->completed.load() >= target; }, what);
}

// Waits for every stream: what cudaDeviceSynchronize does, and what the implicitly
// synchronising calls may do.
void synchronize_device(const char* what) {
  std::vector<CUstream_st*> all;
  {
    std::lock_guard lock(state().mu);
    all.assign(state().streams.begin(), state().streams.end());
  }
  for (CUstream_st* s : all) synchronize(s, what);
}

const Allocation* find(const void* p, std::uintptr_t* base = nullptr) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto& allocs = state().allocations;
  auto it = allocs.upper_bound(a);
  if (it == allocs.begin()) return nullptr;
  --it;
  if (a >= it->first + it->second.bytes) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

bool device_accessible(const void* p, std::size_t bytes) {
  if (bytes == 0) return true;
  std::lock_guard lock(state().mu);
  std::uintptr_t base = 0;
  const Allocation* a = find(p, &base);
  return a && reinterpret_cast<std::uintptr_t>(p) + bytes <= base + a->bytes;
}

bool pageable(const void* p) {
  std::lock_guard lock(state().mu);
  return find(p) == nullptr;
}

std::string segment_name(const char* kind) {
  static std::atomic<unsigned> counter{0};
  return "/loom-emu-" + std::string(kind) + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter.fetch_add(1));
}

void* map_segment(const std::string& name, std::size_t bytes, bool create) {
  const int fd = ::shm_open(name.c_str(), create ? (O_CREAT | O_EXCL | O_RDWR) : O_RDWR, 0600);
  if (fd < 0) return nullptr;
  if (create && ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  return p == MAP_FAILED ? nullptr : p;
}

void unlink_owned_segments() {
  std::lock_guard lock(state().mu);
  for (const auto& name : state().owned_segments) ::shm_unlink(name.c_str());
}

void own_segment(const std::string& name) {
  static const bool registered = [] { return std::atexit(unlink_owned_segments) == 0; }();
  (void)registered;
  std::lock_guard lock(state().mu);
  state().owned_segments.insert(name);
}

void disown_segment(const std::string& name) {
  std::lock_guard lock(state().mu);
  state().owned_segments.erase(name);
  ::shm_unlink(name.c_str());
}

// IPC handles: "LEMU", the segment's name, its size.
struct HandleBytes {
  char magic[4];
  char name[44];
  std::uint64_t bytes;
  std::uint64_t id;
};
static_assert(sizeof(HandleBytes) <= CUDA_IPC_HANDLE_SIZE);

CUresult address_range(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  std::lock_guard lock(state().mu);
  std::uintptr_t b = 0;
  const Allocation* a = find(reinterpret_cast<const void*>(p), &b);
  if (!a || (a->kind != Memory::device && a->kind != Memory::device_ipc))
    return CUDA_ERROR_NOT_FOUND;
  if (base) *base = b;
  if (size) *size = a->bytes;
  return CUDA_SUCCESS;
}

CUresult pointer_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr p) {
  std::lock_guard lock(state().mu);
  const Allocation* a = find(reinterpret_cast<const void*>(p));
  if (!a) return CUDA_ERROR_INVALID_VALUE;
  if (attribute != CU_POINTER_ATTRIBUTE_BUFFER_ID) return CUDA_ERROR_NOT_SUPPORTED;
  *static_cast<unsigned long long*>(data) = a->id;
  return CUDA_SUCCESS;
}

void count(std::uint64_t Counts::*which) {
  std::lock_guard lock(state().mu);
  ++(state().counts.*which);
}

}  // namespace

Counts counts() {
  std::lock_guard lock(state().mu);
  return state().counts;
}

cudaError_t launch(cudaStream_t stream, std::initializer_list<Access> accesses,
                   std::function<void()> body) {
  if (int s = state().sticky.load(); s != 0) return fail(static_cast<cudaError_t>(s));
  for (const Access& a : accesses) {
    if (a.pointer != nullptr && !device_accessible(a.pointer, a.bytes)) {
      std::fprintf(stderr,
                   "loom CUDA emulation: a kernel accesses %zu bytes at %p, which are not device "
                   "memory nor pinned host memory (an illegal address on a GPU)\n",
                   a.bytes, a.pointer);
      state().sticky.store(cudaErrorIllegalAddress);
      return fail(cudaErrorIllegalAddress);
    }
  }
  count(&Counts::kernels);
  enqueue(stream, std::move(body));
  return cudaSuccess;
}

}  // namespace loom::cuda_emulation

using namespace loom::cuda_emulation;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return device_count() > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "Loom emulated GPU");
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 8;
  prop->totalGlobalMem = std::size_t{16} << 30;
  prop->unifiedAddressing = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = 8;
      break;
    case cudaDevAttrCanUseHostPointerForRegisteredMem:
    case cudaDevAttrUnifiedAddressing:
      *value = 1;
      break;
    default:
      *value = 0;
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  *can = device != peer && device < device_count() && peer < device_count();
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return state().sticky.load() != 0 ? static_cast<cudaError_t>(state().sticky.load()) : e;
}
cudaError_t cudaPeekAtLastError(void) {
  return state().sticky.load() != 0 ? static_cast<cudaError_t>(state().sticky.load()) : last_error;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorHostMemoryAlreadyRegistered:
      return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered:
      return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    default:
      return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorNotReady:
      return "device not ready";
    default:
      return cudaGetErrorName(e);
  }
}

// ---- memory

cudaError_t cudaMalloc(void** p, size_t bytes) {
  synchronize_device("cudaMalloc");
  const std::string name = segment_name("mem");
  void* m = map_segment(name, std::max<std::size_t>(bytes, 1), true);
  if (!m) return fail(cudaErrorMemoryAllocation);
  own_segment(name);
  std::lock_guard lock(state().mu);
  state().allocations[reinterpret_cast<std::uintptr_t>(m)] =
      Allocation{std::max<std::size_t>(bytes, 1), Memory::device, name, state().next_id++};
  *p = m;
  return sticky_or(cudaSuccess);
}

// Pool memory: device memory like cudaMalloc's, without an IPC handle; ordered on the stream.
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
  const cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) return e;
  {
    std::lock_guard lock(state().mu);
    state().allocations[reinterpret_cast<std::uintptr_t>(*p)].exportable = false;
  }
  return cudaStreamSynchronize(stream);
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  const cudaError_t e = cudaStreamSynchronize(stream);
  return e != cudaSuccess ? e : cudaFree(p);
}

cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  synchronize_device("cudaFree");
  Allocation a;
  {
    std::lock_guard lock(state().mu);
    auto it = state().allocations.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == state().allocations.end() || it->second.kind != Memory::device)
      return fail(cudaErrorInvalidValue);
    a = it->second;
    state().allocations.erase(it);
  }
  ::munmap(p, a.bytes);
  disown_segment(a.shm_name);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  synchronize_device("cudaHostAlloc");
  void* m = std::aligned_alloc(4096, (std::max<std::size_t>(bytes, 1) + 4095) / 4096 * 4096);
  if (!m) return fail(cudaErrorMemoryAllocation);
  std::lock_guard lock(state().mu);
  state().allocations[reinterpret_cast<std::uintptr_t>(m)] =
      Allocation{std::max<std::size_t>(bytes, 1), Memory::host_pinned, {}, state().next_id++};
  *p = m;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return cudaHostAlloc(p, bytes, 0);
}
cudaError_t cudaFreeHost(void* p) {
  if (p == nullptr) return cudaSuccess;
  synchronize_device("cudaFreeHost");
  {
    std::lock_guard lock(state().mu);
    auto it = state().allocations.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == state().allocations.end() || it->second.kind != Memory::host_pinned)
      return fail(cudaErrorInvalidValue);
    state().allocations.erase(it);
  }
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned int) {
  synchronize_device("cudaHostRegister");
  std::lock_guard lock(state().mu);
  if (find(p) != nullptr || find(static_cast<char*>(p) + bytes - 1) != nullptr)
    return fail(cudaErrorHostMemoryAlreadyRegistered);
  state().allocations[reinterpret_cast<std::uintptr_t>(p)] =
      Allocation{bytes, Memory::host_registered, {}, state().next_id++};
  ++state().counts.host_registrations;
  return cudaSuccess;
}
cudaError_t cudaHostUnregister(void* p) {
  synchronize_device("cudaHostUnregister");
  std::lock_guard lock(state().mu);
  auto it = state().allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == state().allocations.end() || it->second.kind != Memory::host_registered)
    return fail(cudaErrorHostMemoryNotRegistered);
  state().allocations.erase(it);
  return cudaSuccess;
}
cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned int) {
  std::lock_guard lock(state().mu);
  const Allocation* a = find(host);
  if (!a || (a->kind != Memory::host_pinned && a->kind != Memory::host_registered))
    return fail(cudaErrorInvalidValue);
  *device = host;  // unified addressing
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p) {
  std::memset(attr, 0, sizeof(*attr));
  std::lock_guard lock(state().mu);
  const Allocation* a = find(p);
  if (!a) {
    attr->type = cudaMemoryTypeUnregistered;
    attr->device = -2;
    return cudaSuccess;
  }
  const bool device = a->kind == Memory::device || a->kind == Memory::device_ipc;
  attr->type = device ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
  attr->device = 0;
  attr->devicePointer = const_cast<void*>(p);
  attr->hostPointer = device ? nullptr : const_cast<void*>(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t stream) {
  if (int s = state().sticky.load(); s != 0) return fail(static_cast<cudaError_t>(s));
  if (bytes == 0) return cudaSuccess;
  for (const void* p : {static_cast<const void*>(dst), src}) {
    std::lock_guard lock(state().mu);
    std::uintptr_t base = 0;
    const Allocation* a = find(p, &base);
    if (a && reinterpret_cast<std::uintptr_t>(p) + bytes > base + a->bytes)
      return fail(cudaErrorInvalidValue);  // runs past the allocation
  }
  count(&Counts::copies);
  enqueue(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
  // Pageable host memory: the copy is synchronous, as CUDA's is.
  if (pageable(dst) || pageable(src)) synchronize(resolve(stream), "a copy with pageable memory");
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  if (e != cudaSuccess) return e;
  synchronize(legacy_stream(), "cudaMemcpy");
  return sticky_or(cudaSuccess);
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  if (!device_accessible(p, bytes)) return fail(cudaErrorInvalidValue);
  enqueue(stream, [p, value, bytes] { std::memset(p, value, bytes); });
  return sticky_or(cudaSuccess);
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(p, value, bytes, nullptr);
  if (e != cudaSuccess) return e;
  synchronize(legacy_stream(), "cudaMemset");
  return cudaSuccess;
}

// ---- streams

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  *s = new_stream(flags, false);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int) {
  return cudaStreamCreateWithFlags(s, flags);
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return fail(cudaErrorInvalidResourceHandle);
  // Like CUDA: work already queued completes; the handle is gone at once.
  std::thread([stream] {
    synchronize(stream, "a destroyed stream's queued work");
    {
      std::lock_guard lock(state().mu);
      state().streams.erase(stream);
    }
    {
      std::lock_guard lock(stream->mu);
      stream->stopping = true;
      stream->cv.notify_one();
    }
    stream->worker.join();
    delete stream;
  }).detach();
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  synchronize(resolve(stream), "cudaStreamSynchronize");
  return sticky_or(cudaSuccess);
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  return s->completed.load() >= s->enqueued.load() ? sticky_or(cudaSuccess) : cudaErrorNotReady;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  synchronize_device("cudaDeviceSynchronize");
  return sticky_or(cudaSuccess);
}
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  enqueue(stream, [fn, data] { fn(data); });
  return cudaSuccess;
}

// ---- events

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  auto* ev = new CUevent_st();
  ev->flags = flags;
  if (flags & cudaEventInterprocess) {
    if (!(flags & cudaEventDisableTiming)) {
      delete ev;
      return fail(cudaErrorInvalidValue);
    }
    ev->shm_name = segment_name("event");
    void* page = map_segment(ev->shm_name, sizeof(EventState), true);
    if (!page) {
      delete ev;
      return fail(cudaErrorMemoryAllocation);
    }
    own_segment(ev->shm_name);
    ev->state = new (page) EventState{};
  } else {
    ev->state = new EventState{};
  }
  *e = ev;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  return cudaEventCreateWithFlags(e, cudaEventDefault);
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  // Records still queued keep using the state: it is released once they complete.
  std::thread([e] {
    const std::uint64_t target = e->state->recorded.load();
    wait_until([e, target] { return e->state->completed.load() >= target; },
               "a destroyed event's pending record");
    if (!e->shm_name.empty()) {
      ::munmap(e->state, sizeof(EventState));
      if (e->owner) disown_segment(e->shm_name);
    } else {
      delete e->state;
    }
    delete e;
  }).detach();
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  const std::uint64_t n = e->state->recorded.fetch_add(1) + 1;
  EventState* st = e->state;
  enqueue(stream, [st, n] {
    st->time_ns.store(now_ns());
    std::uint64_t seen = st->completed.load();
    while (seen < n && !st->completed.compare_exchange_weak(seen, n)) {
    }
  });
  return sticky_or(cudaSuccess);
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  return e->state->completed.load() >= e->state->recorded.load() ? sticky_or(cudaSuccess)
                                                                 : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  const std::uint64_t target = e->state->recorded.load();
  wait_until([e, target] { return e->state->completed.load() >= target; }, "cudaEventSynchronize");
  return sticky_or(cudaSuccess);
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = static_cast<float>(end->state->time_ns.load() - start->state->time_ns.load()) / 1e6f;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned int) {
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  const std::uint64_t target = e->state->recorded.load();  // the latest record, as of now
  if (target == 0) return cudaSuccess;
  EventState* st = e->state;
  enqueue(stream, [st, target] {
    wait_until([st, target] { return st->completed.load() >= target; },
               "cudaStreamWaitEvent on a stream");
  });
  return sticky_or(cudaSuccess);
}

// ---- IPC

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* p) {
  std::lock_guard lock(state().mu);
  auto it = state().allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == state().allocations.end() || it->second.kind != Memory::device ||
      !it->second.exportable)
    return fail(cudaErrorInvalidValue);  // the base of a cudaMalloc allocation, nothing else
  HandleBytes h{};
  std::memcpy(h.magic, "LEMU", 4);
  std::snprintf(h.name, sizeof(h.name), "%s", it->second.shm_name.c_str());
  h.bytes = it->second.bytes;
  h.id = it->second.id;
  std::memset(handle, 0, sizeof(*handle));
  std::memcpy(handle, &h, sizeof(h));
  return cudaSuccess;
}
cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t handle, unsigned int) {
  synchronize_device("cudaIpcOpenMemHandle");
  HandleBytes h{};
  std::memcpy(&h, &handle, sizeof(h));
  if (std::memcmp(h.magic, "LEMU", 4) != 0) return fail(cudaErrorInvalidValue);
  {
    std::lock_guard lock(state().mu);
    for (const auto& [base, a] : state().allocations)
      if (a.kind == Memory::device && a.shm_name == h.name)
        return fail(cudaErrorDeviceUninitialized);  // a process cannot open its own allocation
  }
  void* m = map_segment(h.name, h.bytes, false);
  if (!m) return fail(cudaErrorInvalidValue);
  std::lock_guard lock(state().mu);
  state().allocations[reinterpret_cast<std::uintptr_t>(m)] =
      Allocation{h.bytes, Memory::device_ipc, h.name, state().next_id++};
  ++state().counts.ipc_memory_opens;
  *p = m;
  return cudaSuccess;
}
cudaError_t cudaIpcCloseMemHandle(void* p) {
  synchronize_device("cudaIpcCloseMemHandle");
  std::size_t bytes = 0;
  {
    std::lock_guard lock(state().mu);
    auto it = state().allocations.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == state().allocations.end() || it->second.kind != Memory::device_ipc)
      return fail(cudaErrorInvalidValue);
    bytes = it->second.bytes;
    state().allocations.erase(it);
  }
  ::munmap(p, bytes);
  return cudaSuccess;
}
cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t* handle, cudaEvent_t e) {
  if (!e || e->shm_name.empty()) return fail(cudaErrorInvalidResourceHandle);
  std::memset(handle, 0, sizeof(*handle));
  std::snprintf(handle->reserved, sizeof(handle->reserved), "%s", e->shm_name.c_str());
  return cudaSuccess;
}
cudaError_t cudaIpcOpenEventHandle(cudaEvent_t* e, cudaIpcEventHandle_t handle) {
  std::string name(handle.reserved, strnlen(handle.reserved, sizeof(handle.reserved)));
  void* page = map_segment(name, sizeof(EventState), false);
  if (!page) return fail(cudaErrorInvalidValue);
  auto* ev = new CUevent_st();
  ev->flags = cudaEventInterprocess | cudaEventDisableTiming;
  ev->state = static_cast<EventState*>(page);
  ev->shm_name = name;
  ev->owner = false;
  count(&Counts::ipc_event_opens);
  *e = ev;
  return cudaSuccess;
}

// ---- driver entry points: the address range and the buffer id of an allocation

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int,
                                             unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  *fn = nullptr;
  if (std::strcmp(symbol, "cuMemGetAddressRange") == 0)
    *fn = reinterpret_cast<void*>(&address_range);
  else if (std::strcmp(symbol, "cuPointerGetAttribute") == 0)
    *fn = reinterpret_cast<void*>(&pointer_attribute);
  if (status) *status = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return *fn ? cudaSuccess : fail(cudaErrorSymbolNotFound);
}

}  // extern "C"
