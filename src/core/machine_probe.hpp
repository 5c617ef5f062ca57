// The init probe: a few milliseconds of measurement of this host (copy and reduction rates, the
// cost of handing a slot over with and without a wake-up, TCP loopback), so that the cost model
// runs on this machine's figures instead of constants tuned on another.
#pragma once

#include <chrono>

#include "algorithms/selection.hpp"

namespace loom::core {

// Measures this host within about `budget` (each part stops at its share of it). A part that
// cannot be measured (no loopback socket, a thread that cannot start) is left 0, and the model
// keeps its default for it.
algorithms::MachineRates probe_machine(std::chrono::microseconds budget, bool tcp_loopback);

// Two threads exchanging 1 MiB through a FIFO of slots in slices of 16 and 256 KiB, each copying
// its slices in and reducing the other's, as the shared-memory ring does at 2 ranks; the best time
// of each size fitted to slices * slice_us + bytes / rate. The two threads are pinned to two CPUs
// for the probe (where the thread may use two). Trials run for `budget`, and on for up to `grace`
// while a slice costs more than `disturbed_us` (the threads then shared a core) or the fit is not
// above 0 (noise). Both figures 0 where a thread could not start, a trial did not finish, or the
// fit was still disturbed or not above 0 when the grace ran out. The best trial of each size is
// kept either way, for the log and for a test's message.
struct SlicePipe {
  double slice_us = 0;
  double gbps = 0;
  double small_best_us = 0, large_best_us = 0;
};
SlicePipe slice_pipe(std::chrono::microseconds budget, std::chrono::microseconds grace,
                     double disturbed_us);

}  // namespace loom::core
