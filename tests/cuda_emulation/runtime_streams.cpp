// The emulated CUDA runtime: streams, events, IPC and the driver entry points.
#include "runtime_internal.hpp"

using namespace loom::cuda_emulation;

extern "C" {

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
  std::thread(retire, stream).detach();
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
