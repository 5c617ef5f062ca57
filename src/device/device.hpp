// Which memory a pointer is: host memory, or memory of one of the visible GPUs. Nothing here
// needs CUDA headers; a build without CUDA (or a machine without a device) sees host memory only.
#pragma once

#include <string>

namespace loom::device {

// Whether this build has CUDA support.
bool built();
// Visible devices: 0 without CUDA support or a driver (cached after the first call).
int count();
// Device or managed memory: its device's ordinal; host memory: -1. Free without devices.
int of(const void* p);
// For logs: "CUDA runtime 13.0, 1 device(s): NVIDIA H100 (sm_90)", or why there is none.
std::string describe();

}  // namespace loom::device
