// The emulated CUDA runtime (see emulation.hpp for what it models and what it does not): devices,
// errors and memory. Streams, events and IPC are in runtime_streams.cpp.
#include "runtime_internal.hpp"

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

}  // extern "C"
