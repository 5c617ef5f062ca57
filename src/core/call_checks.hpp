// A call's arguments, checked before anything is queued: plain functions of the call and the
// communicator's shape. What is refused raises InvalidArgument naming the call and the rank, and
// leaves the communicator as it was.
#pragma once

#include <cstddef>

#include "algorithms/collective.hpp"

namespace loom::core {

// How many bytes of 'in' this rank reads and of 'out' it writes (0 for a buffer it does not
// touch): the root alone reads broadcast's and scatter's input, and writes reduce's and gather's
// output.
struct CallBytes {
  std::size_t read = 0;
  std::size_t written = 0;
};

// Data type, reduction, counts (and the uneven calls' counts and displacements) that fit the
// address space, root or peer in range, null buffers where bytes move, all-to-all not in place;
// returns the bytes the call moves on this rank.
CallBytes check_call(const algorithms::Collective& c, int rank, int size);

}  // namespace loom::core
