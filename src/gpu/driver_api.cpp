#include "gpu/driver_api.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace loom::gpu::driver {
namespace {

using AddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
using PointerAttribute = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);

template <typename Fn>
Fn entry_point(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status) !=
          cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

std::optional<Allocation> allocation_of(const void* p) {
  static const AddressRange address_range = entry_point<AddressRange>("cuMemGetAddressRange");
  static const PointerAttribute attribute = entry_point<PointerAttribute>("cuPointerGetAttribute");
  if (address_range == nullptr || p == nullptr) return std::nullopt;
  CUdeviceptr base = 0;
  size_t bytes = 0;
  if (address_range(&base, &bytes, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
    return std::nullopt;
  unsigned long long id = 0;
  if (attribute == nullptr || attribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                        reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
    id = 0;
  return Allocation{reinterpret_cast<void*>(base), bytes, id};
}

}  // namespace loom::gpu::driver
