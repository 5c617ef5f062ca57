// loom-train's command line: what it accepts, and the parsing of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/ddp/ddp.hpp"

namespace loom_train {

struct Args {
  std::vector<std::size_t> layers{784, 1024, 1024, 1024, 10};
  std::size_t batch_size = 64;
  std::size_t epochs = 3;
  std::size_t max_steps = 0;  // 0: whole epochs
  std::optional<double> lr;   // unset: fitted to the batch (schedule.hpp)
  bool lr_scale_on_shrink = true;
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::string optimizer = "sgd";
  double bucket_cap_mb = 25.0;
  double first_bucket_mb = 1.0;
  loom::ddp::CommHook hook = loom::ddp::CommHook::none;
  bool shared_buckets = true;
  bool ddp = true;
  std::size_t accumulate = 1;
  std::string snapshot;
  std::size_t save_every = 0;
  std::string data = "synthetic";
  std::size_t samples = 16384;
  std::uint64_t seed = 1;
  std::size_t calibrate_steps = 10;
  std::size_t warmup_steps = 2;
  std::string save_params;
  std::size_t eval_every = 0;  // 0: no validation
  double eval_fraction = 0.1;
  bool shrink_on_failure = false;  // else a lost rank ends the run (for loomrun to restart)
  double shrink_timeout_s = 30;
};

// The arguments; --help prints the help and exits 0, anything it does not accept exits 2 naming
// the option and why (tools/cli/cli.hpp).
Args parse(int argc, char** argv);

}  // namespace loom_train
