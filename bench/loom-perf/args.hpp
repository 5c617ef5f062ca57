// loom-perf's command line: the operation, the size sweep and how each size is timed.
#pragma once

#include <cstddef>
#include <string>

#include "loom/loom.hpp"

namespace perf {

enum class Op { allreduce, reducescatter, allgather, broadcast, reduce, gather, scatter, alltoall };

// How a size's figure is made from its timed calls.
enum class Timing {
  per_op,  // each rank times every call; a call's time is its slowest rank's; median over calls
  mean,    // a barrier, then the slowest rank's mean over the calls
};

struct Args {
  Op op = Op::allreduce;
  std::string op_name = "allreduce";
  loom::DataType dtype = loom::DataType::f32;
  loom::ReduceOp redop = loom::ReduceOp::sum;
  std::size_t min_bytes = 8, max_bytes = 64u << 20;
  double factor = 2;
  std::size_t increment = 0;
  int iters = 20, warmup = 5, root = 0;
  std::size_t iter_bytes = 0;  // --iter-bytes: iterations shrink with the size (0: -n and -w)
  int rounds = 1;  // --rounds: each size's calls in this many turns, interleaved with the others'
  Timing timing = Timing::per_op;
  bool check = false, csv = false, in_place = false;
  bool fresh_inputs = false;  // rewrite the input's cache lines before every call, untimed
  int page_offset = -1;       // host buffers this many bytes past a page start; -1: as allocated
  bool cuda = false;          // --device cuda
  bool shared = false;        // --device shared
  std::string json;
};

Args parse(int argc, char** argv);

// Timed and warm-up calls at one size (--iter-bytes, or -n and -w).
struct Iterations {
  int timed, warmup;
};
Iterations iterations_for(const Args& a, std::size_t bytes);
// The share of `runs` that turn `round` of a.rounds makes: the timed calls split as evenly as
// they go (a later turn may make none), and a warm-up call at least in every turn after the
// first (the other sizes have run in between).
Iterations iterations_in_round(const Args& a, const Iterations& runs, int round);

// The call takes a root (-R).
bool rooted(Op op);
// The size is the whole buffer of size() blocks (the call's count is one block).
bool blocked(Op op);
// nccl-tests' bus bandwidth factor: all-reduce 2(n-1)/n, block-wise ops (n-1)/n, rooted 1.
double bus_factor(Op op, int ranks);

}  // namespace perf
