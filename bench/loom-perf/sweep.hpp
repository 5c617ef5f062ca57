// loom-perf's sweep: the sizes, each size's call on the buffers, its timed calls in turns
// (--rounds), and each size's figure, check and row.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "args.hpp"
#include "buffers.hpp"
#include "check.hpp"
#include "loom/loom.hpp"
#include "report.hpp"

namespace perf {

// The sizes from -b to -e, by -f or -i, each a whole number of `unit` bytes.
std::vector<std::size_t> sweep_sizes(const Args& a, std::size_t unit);

class Sweep {
 public:
  Sweep(const Args& a, loom::Communicator& comm, Buffers& buffers, std::vector<std::size_t> sizes);
  const std::vector<std::size_t>& sizes() const { return sizes_; }
  // Size k's share of turn `round`: its warm-up and timed calls (per-op: each call's time kept;
  // --mean: the slowest rank's mean of the turn).
  void time_turn(std::size_t k, int round);
  // Size k's figure from its calls, its check (--check) and its row, printed on rank 0.
  Row finish(std::size_t k);

 private:
  // One size's call: its buffers and counts.
  struct Plan {
    std::size_t bytes, total, count;  // total: elements in the whole buffer; count: the call's
    char* in;
    char* out;
    std::size_t input_bytes;  // what this rank's call reads of `in` (--fresh-inputs rewrites)
  };
  Plan plan_of(std::size_t bytes) const;
  std::function<void()> call_of(const Plan& p) const;
  // Before a call, untimed: --fresh-inputs rewrites the input this rank's call reads.
  void rewrite_input(const Plan& p) const;

  const Args& a_;
  loom::Communicator& comm_;
  Buffers& buffers_;
  const std::vector<std::size_t> sizes_;
  const std::size_t elem_;
  const bool blocked_;
  CheckIo io_;
  std::vector<std::vector<double>> call_us_;  // each size's timed calls on this rank (per-op)
  std::vector<double> mean_of_;               // each size's slowest rank's mean (--mean)
};

}  // namespace perf
