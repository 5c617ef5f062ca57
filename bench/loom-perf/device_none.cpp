#include <stdexcept>

#include "device.hpp"

namespace perf {

std::string device_unavailable() {
  return "this build of loom-perf has no CUDA support";
}
int select_device(int) {
  throw std::logic_error("no CUDA support");
}
void* device_alloc(std::size_t) {
  throw std::logic_error("no CUDA support");
}
void device_free(void*) {}
void copy_to_device(void*, const void*, std::size_t) {
  throw std::logic_error("no CUDA support");
}
void copy_to_host(void*, const void*, std::size_t) {
  throw std::logic_error("no CUDA support");
}
loom::CudaStream stream_create() {
  return nullptr;
}
void stream_sync(loom::CudaStream) {}
void stream_destroy(loom::CudaStream) {}
std::string device_name(int) {
  return "?";
}

}  // namespace perf
