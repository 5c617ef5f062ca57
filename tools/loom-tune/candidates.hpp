// What loom-tune times: the cost model's own choice, and each algorithm of the table (with each
// slice, where a rule may set it), each on a child communicator split with its LOOM_ALGO rule.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "args.hpp"
#include "loom/loom.hpp"

namespace tune {

// "256K", "64M", or bytes.
std::string size_text(std::size_t bytes);

struct Candidate {
  std::string algorithm;  // empty: the cost model
  std::size_t slice = 0;  // 0: the algorithm's own
  // The LOOM_ALGO rule that forces it (empty: none).
  std::string rule(Kind k) const;
  std::string name() const;
};

// The model first, then the algorithms of `k` that run on plain host buffers, with each slice
// for those whose slice is free: powers of two from 16 KiB to the slot.
std::vector<Candidate> candidates_of(Kind k, std::size_t slot_bytes);

loom::Operation operation_of(Kind k);

// Times calls as every comparison in bench/compare does: each rank times every call, a call's
// time is its slowest rank's, the median over calls.
class Timer {
 public:
  Timer(loom::Communicator& base, const Args& args) : base_(base), args_(args) {}

  // The median over calls of each call's slowest rank, in microseconds; nullopt when `comm`'s
  // rule does not take the call (the model would run it).
  std::optional<double> time(loom::Communicator& comm, const Candidate& c, Kind k,
                             std::size_t bytes);

 private:
  loom::Communicator& base_;
  const Args& args_;
  std::vector<float> in_, out_;
};

}  // namespace tune
