// The driver functions the runtime API lacks, reached through the runtime's entry-point query
// (nothing links libcuda): which allocation a pointer is in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace loom::gpu::driver {

struct Allocation {
  void* base;
  std::size_t bytes;
  std::uint64_t id;  // unique per allocation in this process (0 when the driver cannot say)
};

// The device allocation containing p; nullopt when p is not in one, or the driver cannot say.
std::optional<Allocation> allocation_of(const void* p);

}  // namespace loom::gpu::driver
