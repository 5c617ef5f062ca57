// What the communicator tells the tracer: the rank names the trace file and the process.
#pragma once

#include <string>

namespace loom::base {
void set_trace_rank(int rank, int size);
// Starts recording into a new trace written to `path` (tests; programs use LOOM_TRACE).
void start_trace(const std::string& path);
}  // namespace loom::base
