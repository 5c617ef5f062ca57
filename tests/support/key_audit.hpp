// Runs a job whose every rank records the keys it sets, then checks on rank 0 that no key was set
// twice in the whole job (two components, or two ranks, producing one key), except the progress
// reports the health monitor rewrites by design.
#pragma once

#include <functional>

#include "ranks.hpp"

namespace loom::testing {

// body gets a communicator built on the recording store; run_options as for run_ranks_raw.
// Returns on every rank; the check fails the test on rank 0.
void audit_keys(int world, const std::function<void(Communicator&)>& body, RunOptions opts = {});

}  // namespace loom::testing
