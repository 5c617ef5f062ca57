// One all-to-all checked element by element, for the multi-process tests.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "loom/loom.hpp"
#include "verify/patterns.hpp"

namespace loom::testing {

// An all-to-all of `count` elements a block (asynchronous and waited for, or not), every block
// checked: rank r's block for rank j is r's pattern from element j * count, what j keeps as its
// block r.
inline void check_all_to_all(Communicator& comm, DataType t, std::size_t count, bool async) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t elem = size_of(t), total = count * static_cast<std::size_t>(n);
  std::vector<std::byte> in(total * elem + 1), out(total * elem + 1), want(count * elem + 1);
  for (int j = 0; j < n; ++j)
    verify::fill(in.data() + static_cast<std::size_t>(j) * count * elem, count, r, t, ReduceOp::sum,
                 static_cast<std::size_t>(j) * count);
  if (async)
    comm.all_to_all_async(in.data(), out.data(), count, t).wait();
  else
    comm.all_to_all(in.data(), out.data(), count, t);
  for (int j = 0; j < n; ++j) {
    verify::fill(want.data(), count, j, t, ReduceOp::sum, static_cast<std::size_t>(r) * count);
    EXPECT_EQ(verify::count_wrong(out.data() + static_cast<std::size_t>(j) * count * elem,
                                  want.data(), count, t),
              0u)
        << "block from rank " << j;
  }
}

}  // namespace loom::testing
