// The rules that name an algorithm instead of the cost model: the user's (LOOM_ALGO) and the
// tuning table's (loom-tune), in one form: "[operation:]algorithm[@slice][:from-to]", separated
// by commas. An operation left out is the previous rule's (all-reduce for the first); sizes take
// K, M, G; either end of a range may be left open. "ring" alone forces the ring all-reduce at
// every size; "ring@256K" in slices of 256 KiB; "allgather:bruck:-64K" Bruck's below 64 KiB.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "algorithms/collective.hpp"

namespace loom::algorithms {

struct Algorithm;

// The algorithm for calls of one operation whose sizes are in [from, to).
struct Rule {
  Kind collective;
  const Algorithm* algorithm;
  std::size_t from;   // bytes, inclusive
  std::size_t to;     // bytes, exclusive
  std::size_t slice;  // 0: the algorithm's own
};

// The rules of `text`: InvalidArgument naming `source` (where the text came from) and the rule.
std::vector<Rule> parse_rules(std::string_view text, std::string_view source);

// "allreduce", "reducescatter", ...: the names rules give the operations.
std::string_view rule_name(Kind kind);

}  // namespace loom::algorithms
