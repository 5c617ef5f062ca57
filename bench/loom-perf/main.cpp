// loom-perf: collective bandwidth and latency over a size sweep, in the manner of nccl-tests.
// Launch one process per rank (loomrun). Rank 0 prints one row per size.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.hpp"
#include "buffers.hpp"
#include "device.hpp"
#include "loom/loom.hpp"
#include "report.hpp"
#include "sweep.hpp"

namespace perf {
namespace {

// The sweep on this job's ranks; the exit code: 0, 2 for a call the job cannot make, 3 when
// --check found wrong elements.
int run(const Args& a) {
  loom::Communicator comm = loom::init();
  const int n = comm.size(), rank = comm.rank();
  if (rooted(a.op) && (a.root < 0 || a.root >= n)) {
    std::fprintf(stderr, "loom-perf: root %d outside [0, %d)\n", a.root, n);
    return 2;
  }
  if (auto why = a.cuda ? device_unavailable() : std::string(); !why.empty()) {
    std::fprintf(stderr, "loom-perf: --device cuda: %s\n", why.c_str());
    return 2;
  }
  const std::size_t elem = loom::size_of(a.dtype);
  std::vector<std::size_t> sizes =
      sweep_sizes(a, elem * (blocked(a.op) ? static_cast<std::size_t>(n) : 1));
  Buffers buffers(a, comm, sizes.empty() ? 0 : sizes.back());
  if (rank == 0) print_header(a, comm, buffers.description());
  std::fflush(stdout);

  Sweep sweep(a, comm, buffers, std::move(sizes));
  std::vector<Row> rows;
  for (int round = 0; round < a.rounds; ++round)
    for (std::size_t k = 0; k < sweep.sizes().size(); ++k) {
      sweep.time_turn(k, round);
      if (a.rounds == 1) rows.push_back(sweep.finish(k));
    }
  if (a.rounds > 1)
    for (std::size_t k = 0; k < sweep.sizes().size(); ++k) rows.push_back(sweep.finish(k));
  long long wrong = 0;
  for (const Row& r : rows) wrong += r.wrong > 0 ? r.wrong : 0;
  if (rank == 0) {
    print_summary(a, rows);
    if (!a.json.empty()) write_json(a, n, rows);
  }
  buffers.release_windows(comm);
  comm.destroy();
  buffers.release_device();
  return wrong == 0 ? 0 : 3;
}

}  // namespace
}  // namespace perf

int main(int argc, char** argv) {
  const perf::Args a = perf::parse(argc, argv);
  try {
    return perf::run(a);
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "loom-perf: %s\n", e.what());
    return 1;
  } catch (const std::runtime_error& e) {  // the device helpers
    std::fprintf(stderr, "loom-perf: %s\n", e.what());
    return 1;
  }
}
