// What differs between the PyTorch versions the backend builds with: 1.13 (Debian) and 2.x.
#pragma once

#include <torch/version.h>

#define LOOM_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||       \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if LOOM_TORCH_AT_LEAST(2, 0)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace loom_torch {

// 1.13: a backend is a ProcessGroup; 2.x: a Backend that torch's ProcessGroup dispatches to.
#if LOOM_TORCH_AT_LEAST(2, 0)
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

}  // namespace loom_torch

// c10d::Store::clone(), which PyTorch 2.5 added, pure virtual.
#define LOOM_TORCH_STORE_CLONE LOOM_TORCH_AT_LEAST(2, 5)
// The Backend API of PyTorch 2.15 (built and tested with it): options, split and shrink, abort
// and shutdown, timeouts and errors, coalescing, the *_single calls, tensors from the backend's
// memory. Older 2.x releases get the collectives without these.
#define LOOM_TORCH_BACKEND_API LOOM_TORCH_AT_LEAST(2, 15)
