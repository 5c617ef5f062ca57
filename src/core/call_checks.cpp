#include "core/call_checks.hpp"

#include <cstdint>

#include <fmt/format.h>

#include "loom/loom.hpp"

namespace loom::core {

using algorithms::Collective;
using algorithms::Kind;

namespace {

// The uneven calls' counts and displacements: one per rank, and every block addressable.
template <typename Bad>
void check_layout(const Collective& c, int size, const Bad& bad) {
  const algorithms::Layout& l = *c.layout;
  const auto n = static_cast<std::size_t>(size);
  const std::size_t limit = (SIZE_MAX / 4) / size_of(c.dtype);
  auto check = [&](const std::vector<std::size_t>& counts, const std::vector<std::size_t>& displs,
                   const char* what) {
    if (counts.size() != n || displs.size() != n)
      throw bad(fmt::format("{}counts and {}displs need {} entries (one per rank), not {} and {}",
                            what, what, size, counts.size(), displs.size()));
    std::size_t sum = 0;  // the whole of an all_gather_v's output, a reduce_scatter_v's input
    for (std::size_t r = 0; r < n; ++r) {
      if (counts[r] > limit || displs[r] > limit - counts[r])
        throw bad(fmt::format("{}counts[{}] = {} at {}displs[{}] = {} overflows the address space",
                              what, r, counts[r], what, r, displs[r]));
      sum += counts[r];  // each below limit, a quarter of the range: no wrap before the check
      if (sum > limit)
        throw bad(fmt::format(
            "the sum of {}counts (up to [{}]: {} ...) overflows the address space", what, r, sum));
    }
  };
  if (c.kind == Kind::all_to_all_v) check(l.send_counts, l.send_displs, "send_");
  check(l.counts, l.displs, c.kind == Kind::all_to_all_v ? "recv_" : "");
}

// How many bytes of 'in' this rank reads and of 'out' it writes: the root alone reads
// broadcast's and scatter's input, and writes reduce's and gather's output.
std::size_t bytes_read(const Collective& c, int rank, int size) {
  const std::size_t elem = size_of(c.dtype);
  const auto n = static_cast<std::size_t>(size);
  const bool root = c.root == rank;
  switch (c.kind) {
    case Kind::recv:
    case Kind::barrier:
      return 0;
    case Kind::broadcast:
      return root ? c.count * elem : 0;
    case Kind::scatter:
      return root ? n * c.count * elem : 0;
    case Kind::reduce_scatter:
    case Kind::all_to_all:
      return n * c.count * elem;
    case Kind::all_to_all_v:
      return c.bytes();
    case Kind::all_gather_v:
      return c.layout->counts[static_cast<std::size_t>(rank)] * elem;
    default:
      return c.count * elem;
  }
}
std::size_t bytes_written(const Collective& c, int rank, int size) {
  const std::size_t elem = size_of(c.dtype);
  const auto n = static_cast<std::size_t>(size);
  const bool root = c.root == rank;
  switch (c.kind) {
    case Kind::send:
    case Kind::barrier:
      return 0;
    case Kind::reduce:
      return root ? c.count * elem : 0;
    case Kind::gather:
      return root ? n * c.count * elem : 0;
    case Kind::all_gather:
    case Kind::all_to_all:
      return n * c.count * elem;
    case Kind::all_to_all_v: {
      std::size_t total = 0;
      for (std::size_t k : c.layout->counts) total += k;
      return total * elem;
    }
    case Kind::reduce_scatter_v:
      return c.layout->counts[static_cast<std::size_t>(rank)] * elem;
    default:
      return c.count * elem;
  }
}

}  // namespace

CallBytes check_call(const Collective& c, int rank, int size) {
  const std::string_view op = algorithms::to_string(c.kind);
  auto bad = [&](const std::string& why) {
    return InvalidArgument(fmt::format("{}: rank {}: {}", op, rank, why));
  };
  if (size_of(c.dtype) == 0)
    throw bad(fmt::format("unknown data type {}", static_cast<int>(c.dtype)));
  if (static_cast<int>(c.op) > static_cast<int>(ReduceOp::avg))
    throw bad(fmt::format("unknown reduce op {}", static_cast<int>(c.op)));
  const std::size_t elem = size_of(c.dtype);
  const auto n = static_cast<std::size_t>(size);
  // Every byte a call addresses must fit the address space (a quarter of it, for the slots'
  // arithmetic): count for the whole-buffer calls, size() blocks of it for the others.
  const std::size_t limit = (SIZE_MAX / 4) / elem;
  const bool blocks = c.kind == Kind::all_gather || c.kind == Kind::reduce_scatter ||
                      c.kind == Kind::gather || c.kind == Kind::scatter ||
                      c.kind == Kind::all_to_all;
  if (c.count > limit / (blocks ? n : 1))
    throw bad(fmt::format("count {} x {} bytes{} overflows the address space", c.count, elem,
                          blocks ? fmt::format(" x {} ranks", size) : ""));
  if (c.layout) check_layout(c, size, bad);
  const bool rooted = c.kind == Kind::broadcast || c.kind == Kind::reduce ||
                      c.kind == Kind::gather || c.kind == Kind::scatter;
  const bool p2p = algorithms::is_point_to_point(c.kind);
  if ((rooted || p2p) && (c.root < 0 || c.root >= size))
    throw bad(fmt::format("{} {} is outside [0, {})", p2p ? "peer" : "root", c.root, size));
  if (p2p && c.root == rank) throw bad(fmt::format("peer {} is this rank itself", c.root));
  if ((c.kind == Kind::all_to_all || c.kind == Kind::all_to_all_v) && c.in != nullptr &&
      c.in == c.out)
    throw bad("'in' and 'out' are the same buffer: all-to-all is not in place");
  // Counted once the layout is known to be whole (the uneven calls' counts are read).
  const CallBytes moved{bytes_read(c, rank, size), bytes_written(c, rank, size)};
  if (moved.read > 0 && c.in == nullptr)
    throw bad(fmt::format("argument 'in' is null with {} elements to send", moved.read / elem));
  if (moved.written > 0 && c.out == nullptr)
    throw bad(
        fmt::format("argument 'out' is null with {} elements to receive", moved.written / elem));
  return moved;
}

}  // namespace loom::core
