// Starts one node's workers, forwards their output line by line with the rank in front, and
// stops them all when one fails, when loomrun is signalled, or when asked to.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace loomrun {

struct WorkerSpec {
  int rank;
  std::vector<std::string> env;  // the worker's whole environment, NAME=VALUE
  std::vector<int> cpus;         // the CPUs it is bound to; empty: loomrun's own
};

struct Outcome {
  int code;          // the first failing worker's exit code, 0 if none failed
  int failed_rank;   // its rank, -1 if none failed
  bool interrupted;  // a signal to loomrun ended the run
  bool stopped;      // should_stop asked for the end
};

// Catches SIGINT, SIGTERM and SIGHUP (they stop the workers) and ignores SIGPIPE.
void install_signal_handlers();
// The stop signal loomrun received, 0 if none.
int received_signal();

// Runs `command` once per spec and supervises the workers until all have exited. should_stop
// is called every loop (50 ms); when it returns true the workers are stopped as after a failure.
// A worker that fails stops the others, unless others_go_on (--on-failure shrink): then the
// outcome is that of the last worker to end, and a worker the others' shrink left out is
// stopped if it still runs `grace_s` later: one this node's survivors name (LOOM_LEFT_OUT_DIR),
// or one whose rank left_out_in_store names (called every loop: the ranks named so far).
using LeftOutLookup = std::function<std::vector<int>()>;
Outcome run_workers(const std::vector<std::string>& command, const std::vector<WorkerSpec>& specs,
                    double grace_s, bool prefix, const std::function<bool()>& should_stop,
                    bool others_go_on = false, const LeftOutLookup& left_out_in_store = {});

}  // namespace loomrun
