// Each of the first calls at a size, one by one: the slowest rank's time and what the ranks paid
// in page faults and context switches during the call. Where the median hides the first calls
// (warm-up), this shows them.
//   loomrun --nproc-per-node 4 build/bench/first_calls [calls] [sizes in KiB a rank's block...]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <loom/loom.hpp>

namespace {

using Clock = std::chrono::steady_clock;

struct CallCost {
  double us = 0;
  double minor_faults = 0;
  double switches = 0;  // voluntary and involuntary
};

rusage usage() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u;
}

std::vector<CallCost> time_calls(loom::Communicator& comm, std::size_t block_bytes, int calls) {
  const auto n = static_cast<std::size_t>(comm.size());
  std::vector<unsigned char> in(block_bytes * n, static_cast<unsigned char>(comm.rank()));
  std::vector<unsigned char> out(block_bytes * n);
  std::vector<CallCost> cost(static_cast<std::size_t>(calls));
  for (CallCost& c : cost) {
    const rusage u0 = usage();
    const auto t0 = Clock::now();
    comm.all_to_all(in.data(), out.data(), block_bytes, loom::DataType::u8);
    c.us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    const rusage u1 = usage();
    c.minor_faults = static_cast<double>(u1.ru_minflt - u0.ru_minflt);
    c.switches = static_cast<double>(u1.ru_nvcsw - u0.ru_nvcsw + u1.ru_nivcsw - u0.ru_nivcsw);
  }
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t i = 0; i < block_bytes; i += 4096)
      if (out[r * block_bytes + i] != r) {
        std::fprintf(stderr, "rank %d: wrong byte from rank %zu\n", comm.rank(), r);
        std::exit(1);
      }
  return cost;
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::max(1, std::atoi(argv[1])) : 30;
  std::vector<std::size_t> kib;
  for (int i = 2; i < argc; ++i) kib.push_back(std::strtoull(argv[i], nullptr, 10));
  if (kib.empty()) kib = {1024, 2048, 16384};
  loom::Communicator comm = loom::init();
  for (const std::size_t k : kib) {
    std::vector<CallCost> c = time_calls(comm, k << 10, calls);
    std::vector<double> us(c.size()), faults(c.size()), switches(c.size());
    for (std::size_t i = 0; i < c.size(); ++i) {
      us[i] = c[i].us;
      faults[i] = c[i].minor_faults;
      switches[i] = c[i].switches;
    }
    comm.all_reduce(us.data(), us.size(), loom::DataType::f64, loom::ReduceOp::max);
    comm.all_reduce(faults.data(), faults.size(), loom::DataType::f64, loom::ReduceOp::sum);
    comm.all_reduce(switches.data(), switches.size(), loom::DataType::f64, loom::ReduceOp::sum);
    if (comm.rank() != 0) continue;
    std::printf(
        "all_to_all, %zu KiB a block, %d ranks: call, slowest rank's us, minor faults "
        "and context switches of all ranks\n",
        k, comm.size());
    for (std::size_t i = 0; i < c.size(); ++i)
      std::printf("  %3zu %10.0f %8.0f %8.0f\n", i, us[i], faults[i], switches[i]);
  }
  return 0;
}
