// How long Communicator::split and shrink take once the parent exists: each rank times every
// call, a call's time is the slowest rank's, the figure is the median over calls.
//   loomrun --nproc-per-node 8 build/bench/split_time [reps]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <loom/loom.hpp>

namespace {

using Clock = std::chrono::steady_clock;

// The slowest rank's time per call, in ms, sorted; on rank 0 only.
std::vector<double> slowest(loom::Communicator& comm, std::vector<double> mine) {
  comm.all_reduce(mine.data(), mine.size(), loom::DataType::f64, loom::ReduceOp::max);
  std::sort(mine.begin(), mine.end());
  return mine;
}

void report(const char* what, const std::vector<double>& ms, int rank) {
  if (rank != 0) return;
  std::printf("%-28s median %.2f ms  min %.2f  max %.2f  (%zu calls)\n", what, ms[ms.size() / 2],
              ms.front(), ms.back(), ms.size());
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  loom::Communicator comm = loom::init();
  const int half = comm.size() / 2;
  std::vector<double> split_ms, first_call_ms, shrink_ms;
  for (int i = 0; i < reps; ++i) {
    comm.barrier();
    const auto t0 = Clock::now();
    auto child = comm.split(comm.rank() < half ? 0 : 1, comm.rank());
    const auto t1 = Clock::now();
    child->barrier();  // the child's connections are up and used once
    const auto t2 = Clock::now();
    split_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    first_call_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
    child->destroy();
  }
  for (int i = 0; i < reps; ++i) {
    comm.barrier();
    const auto t0 = Clock::now();
    loom::Communicator copy = comm.shrink();
    shrink_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    copy.destroy();
  }
  if (comm.rank() == 0)
    std::printf("%d ranks, split into %d + %d\n", comm.size(), half, comm.size() - half);
  report("split", slowest(comm, split_ms), comm.rank());
  report("split + first barrier", slowest(comm, first_call_ms), comm.rank());
  report("shrink (no failure)", slowest(comm, shrink_ms), comm.rank());
  comm.destroy();
}
