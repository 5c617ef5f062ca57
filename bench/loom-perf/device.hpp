// Device buffers for loom-perf --device cuda, behind plain functions so that the tool itself
// needs no CUDA headers (device_none.cpp in builds without CUDA).
#pragma once

#include <cstddef>
#include <string>

#include "loom/loom.hpp"

namespace perf {

// Empty when device buffers can be used here, else why not.
std::string device_unavailable();
// The GPU of this local rank (LOCAL_RANK modulo the visible devices), made current.
int select_device(int local_rank);
void* device_alloc(std::size_t bytes);
void device_free(void* p);
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);
loom::CudaStream stream_create();
void stream_sync(loom::CudaStream stream);
void stream_destroy(loom::CudaStream stream);
std::string device_name(int device);

}  // namespace perf
