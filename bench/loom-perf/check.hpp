// loom-perf --check: one call on verifiable inputs, its output compared element by element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "args.hpp"

namespace perf {

// What a check needs of the benchmark's buffers (host memory, or staged through the device).
struct CheckIo {
  // Writes pattern_rank's inputs for elements [first, first + elems) to the call's buffer dst.
  std::function<void(char* dst, std::size_t elems, int pattern_rank, std::size_t first)> fill;
  std::function<void()> run_once;
  // The call's output at src, elems elements, as host memory.
  std::function<const char*(const char* src, std::size_t elems)> output;
};

// This rank's wrong output elements of one call with `count` elements per block (the call's count
// argument) between the buffers in and out.
std::uint64_t wrong_elements(const Args& a, int rank, int ranks, char* in, char* out,
                             std::size_t count, const CheckIo& io);

}  // namespace perf
