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

}  // namespace loom::core
