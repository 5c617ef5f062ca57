// The emulated runtime's state and helpers (runtime_internal.hpp).
#include "runtime_internal.hpp"

namespace loom::cuda_emulation {

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

State& state() {
  static State* s = new State();  // never destroyed: stream threads may outlive static teardown
  return *s;
}

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

// A pinned stream outlives a cudaStreamDestroy until every waiter holding it unpins it.
void unpin(CUstream_st* s) {
  std::lock_guard lock(state().mu);
  if (--s->pins == 0) state().unpinned.notify_all();
}

// What cudaStreamDestroy leaves to a thread of its own: the stream's queued work completes,
// its handle leaves the device's set, its worker ends, and it is freed once no waiter holds it.
void retire(CUstream_st* s) {
  synchronize(s, "a destroyed stream's queued work");
  {
    std::lock_guard lock(state().mu);
    state().streams.erase(s);
  }
  {
    std::lock_guard lock(s->mu);
    s->stopping = true;
    s->cv.notify_one();
  }
  s->worker.join();
  {
    std::unique_lock lock(state().mu);
    state().unpinned.wait(lock, [s] { return s->pins == 0; });
  }
  delete s;
}

namespace {
struct Pinned {
  CUstream_st* stream;
  std::uint64_t count;
};
void wait_and_unpin(const std::vector<Pinned>& streams, const char* what) {
  for (const Pinned& p : streams) {
    wait_until([p] { return p.stream->completed.load() >= p.count; }, what);
    unpin(p.stream);
  }
}
}  // namespace

// Queues op on stream in order, with the legacy stream's implicit synchronisation.
void enqueue(cudaStream_t stream, std::function<void()> op) {
  CUstream_st* s = resolve(stream);
  std::vector<Pinned> before;
  {
    std::lock_guard lock(state().mu);
    if (s->legacy) {
      for (CUstream_st* other : state().streams)
        if (blocking(other)) before.push_back({other, other->enqueued.load()});
    } else if (blocking(s) && state().legacy) {
      before.push_back({state().legacy, state().legacy->enqueued.load()});
    }
    for (const Pinned& p : before) ++p.stream->pins;
  }
  std::lock_guard lock(s->mu);
  s->enqueued.fetch_add(1);
  s->ops.push_back([before = std::move(before), op = std::move(op)] {
    wait_and_unpin(before, "the legacy default stream's implicit synchronisation");
    op();
  });
  s->cv.notify_one();
}

void synchronize(CUstream_st* s, const char* what) {
  const std::uint64_t target = s->enqueued.load();
  wait_until([s, target] { return s->completed.load() >= target; }, what);
}

// Waits for every stream: what cudaDeviceSynchronize does, and what the implicitly
// synchronising calls may do. A stream destroyed meanwhile stays until this is done with it.
void synchronize_device(const char* what) {
  std::vector<Pinned> all;
  {
    std::lock_guard lock(state().mu);
    for (CUstream_st* s : state().streams) {
      all.push_back({s, s->enqueued.load()});
      ++s->pins;
    }
  }
  wait_and_unpin(all, what);
}

const Allocation* find(const void* p, std::uintptr_t* base) {
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
