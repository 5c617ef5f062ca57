// Deterministic inputs and their expected collective results, shared by loom-perf --check and
// the tests. Inputs are small integers, so every sum, product and average of them is exact (or
// rounded once) in every dtype whatever the order in which ranks are combined: results can be
// compared bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "loom/loom.hpp"

namespace loom::verify {

// Writes rank's input for elements [first, first + count) to p.
void fill(void* p, std::size_t count, int rank, DataType dtype, ReduceOp op, std::size_t first = 0);
// The reduction over ranks 0..nranks-1 of their inputs for elements [first, first + count).
std::vector<std::byte> expected_reduction(std::size_t first, std::size_t count, int nranks,
                                          DataType dtype, ReduceOp op);
// Elements whose bytes differ.
std::uint64_t count_wrong(const void* got, const void* want, std::size_t count, DataType dtype);

}  // namespace loom::verify
