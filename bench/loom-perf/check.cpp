#include "check.hpp"

#include <vector>

#include "verify/patterns.hpp"

namespace perf {
namespace {

using loom::verify::count_wrong;
using loom::verify::expected_reduction;
using loom::verify::fill;

// Wrong elements among `blocks` consecutive blocks of got, block b holding source(b)'s pattern for
// elements [first(b), first(b) + count).
template <typename Source, typename First>
std::uint64_t wrong_blocks(const char* got, int blocks, std::size_t count, const Args& a,
                           Source source, First first) {
  const std::size_t bytes = count * loom::size_of(a.dtype);
  std::vector<std::byte> want(bytes);
  std::uint64_t wrong = 0;
  for (int b = 0; b < blocks; ++b) {
    fill(want.data(), count, source(b), a.dtype, a.redop, first(b));
    wrong += count_wrong(got + static_cast<std::size_t>(b) * bytes, want.data(), count, a.dtype);
  }
  return wrong;
}

}  // namespace

std::uint64_t wrong_elements(const Args& a, int rank, int ranks, char* in, char* out,
                             std::size_t count, const CheckIo& io) {
  const std::size_t total = count * static_cast<std::size_t>(ranks);
  const std::size_t mine = static_cast<std::size_t>(rank) * count;
  auto same = [](int b) { return b; };
  auto block_start = [count](int b) { return static_cast<std::size_t>(b) * count; };
  switch (a.op) {
    case Op::allreduce: {
      io.fill(in, count, rank, 0);
      io.run_once();
      auto want = expected_reduction(0, count, ranks, a.dtype, a.redop);
      return count_wrong(io.output(out, count), want.data(), count, a.dtype);
    }
    case Op::reducescatter: {
      io.fill(in, total, rank, 0);
      io.run_once();
      auto want = expected_reduction(mine, count, ranks, a.dtype, a.redop);
      return count_wrong(io.output(out, count), want.data(), count, a.dtype);
    }
    case Op::allgather:  // rank r contributes its pattern for the elements of block r
      io.fill(in, count, rank, mine);
      io.run_once();
      return wrong_blocks(io.output(out, total), ranks, count, a, same, block_start);
    case Op::gather:
      io.fill(in, count, rank, mine);
      io.run_once();
      if (rank != a.root) return 0;
      return wrong_blocks(io.output(out, total), ranks, count, a, same, block_start);
    case Op::broadcast: {
      io.fill(in, count, rank, 0);
      io.run_once();
      return wrong_blocks(
          io.output(out, count), 1, count, a, [&](int) { return a.root; },
          [](int) { return std::size_t{0}; });
    }
    case Op::scatter:  // every rank fills its input: only the root's may reach the outputs
      io.fill(in, total, rank, 0);
      io.run_once();
      return wrong_blocks(
          io.output(out, count), 1, count, a, [&](int) { return a.root; },
          [&](int) { return mine; });
    case Op::alltoall:  // block r of this rank's output is block `rank` of rank r's input
      io.fill(in, total, rank, 0);
      io.run_once();
      return wrong_blocks(io.output(out, total), ranks, count, a, same, [&](int) { return mine; });
    case Op::reduce: {
      io.fill(in, count, rank, 0);
      io.run_once();
      if (rank != a.root) return 0;
      auto want = expected_reduction(0, count, ranks, a.dtype, a.redop);
      return count_wrong(io.output(out, count), want.data(), count, a.dtype);
    }
  }
  return 0;
}

}  // namespace perf
